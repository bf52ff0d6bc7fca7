/* gen_impl.h - private to models/: the document builder the generators share
 * (gen_build.c: a sticky status, lists of names as space-separated strings),
 * the common checks of the network families and the convolutional cursor
 * (gen_cnn.c). */
#ifndef PSIM_GEN_IMPL_H
#define PSIM_GEN_IMPL_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>

#include "models/generators.h"

typedef struct psim_gb {
  cJSON *root, *dims, *ops;
  cJSON *inputs, *weights, *tensors;
  psim_status st;
} psim_gb;

typedef struct psim_gb_blk {
  cJSON *weights, *tensors, *ops;
} psim_gb_blk;

/* Appends a space (unless buf is empty) and word to buf of capacity cap. */
void psim_gb_append(char *buf, size_t cap, const char *word);

void psim_gb_nomem(psim_gb *g);

cJSON *psim_gb_obj(psim_gb *g, cJSON *parent, const char *key, bool array);

void psim_gb_str(psim_gb *g, cJSON *o, const char *k, const char *v);

void psim_gb_num(psim_gb *g, cJSON *o, const char *k, double v);

void psim_gb_bool(psim_gb *g, cJSON *o, const char *k, bool v);

/* Array of the space-separated names in list. */
cJSON *psim_gb_names(psim_gb *g, cJSON *o, const char *key, const char *list);

void psim_gb_pair(psim_gb *g, cJSON *o, const char *key, int64_t h, int64_t w);

/* Declares dim name (once). */
void psim_gb_dim(psim_gb *g, const char *name, int64_t size, const char *role);

void psim_gb_tensor(psim_gb *g, cJSON *group, const char *name, const char *dims,
                    const char *dtype);

cJSON *psim_gb_op(psim_gb *g, cJSON *ops, const char *name, const char *kind, const char *in,
                  const char *out);

cJSON *psim_gb_ew(psim_gb *g, cJSON *ops, const char *name, const char *fn, const char *in,
                  const char *out);

/* Linear layer NAME in block b: y [ydims] = x w_NAME [wdims] (+ b_NAME [bdims] when bdims is
 * not NULL); y gets dtype ydtype (NULL: the model's), but "fp8" makes an FP8 GEMM ("fp8": true)
 * whose y keeps the model's dtype. */
void psim_gb_linear(psim_gb *g, const psim_gb_blk *b, const char *name, const char *x,
                    const char *wdims, const char *bdims, const char *y, const char *ydims,
                    const char *ydtype);

psim_gb_blk psim_gb_block(psim_gb *g, const char *name, int64_t repeat, const char *inputs,
                          const char *outputs, const char *in, const char *out);

void psim_gb_start(psim_gb *g, const char *name, const char *dtype);

/* Hands the document out only when the model loader takes it: options each
 * in range can still combine into a model it refuses (a tensor of more than
 * 2^64 elements), and a generator must not write a file `check` rejects. */
psim_status psim_gb_finish(psim_gb *g, struct cJSON **out);

psim_status psim_gb_check_dtype(const char *dt);

psim_status psim_gb_positive(const char *flag, int64_t v, int64_t max);

/* ---- networks */

psim_status psim_gen_net_check(const psim_gen_net_opts *o);

/* ---- convolutional networks: a cursor over the current activation */

typedef struct psim_cnn {
  psim_gb *g;
  cJSON *ws, *ts, *ops;     /* where declarations go (top level or a block) */
  char x[64];               /* current activation */
  char c[32], h[32], w[32]; /* its channel and spatial dim names */
  int64_t cs, hs, ws_;      /* their sizes */
  int n;                    /* op counter for unique names */
  int layer;                /* explicit layer for top-level ops; -1 = none */
} psim_cnn;

void psim_cnn_at(psim_cnn *k, const char *x, const char *c, int64_t cs, const char *h, int64_t hs,
                 const char *w);

/* Channel dim of size n distinct from avoid. */
void psim_cnn_chan(psim_cnn *k, int64_t n, const char *avoid, char *out);

cJSON *psim_cnn_op(psim_cnn *k, const char *kind, const char *in, const char *out);

/* New activation named after the op counter with the given dims. */
void psim_cnn_new(psim_cnn *k, char *name, const char *dims);

/* conv kh x kw (stride s, pad ph/pw) to cout channels, then relu (BatchNorm
 * folded into the conv: its 2 parameters per channel are omitted). */
void psim_cnn_conv(psim_cnn *k, int64_t cout, int64_t kh, int64_t kw, int64_t s, int64_t ph,
                   int64_t pw, bool relu);

void psim_cnn_pool(psim_cnn *k, const char *fn, int64_t kk, int64_t s, int64_t p);

/* Flatten [batch c h w] to [batch feat] (a view). */
void psim_cnn_flatten(psim_cnn *k);

/* Fully connected layer from the current [batch feat] to n (bias, optional relu, dropout). */
void psim_cnn_fc(psim_cnn *k, int64_t n, bool relu, bool drop);

void psim_cnn_input(psim_cnn *k, psim_gb *g, int64_t size);

/* Starts a CNN generator: the model (o->name, else default_name; o->dtype), the batch dim
 * (o->batch) and the size x size RGB input (psim_cnn_input). */
void psim_cnn_start(psim_cnn *k, psim_gb *g, const psim_gen_net_opts *o, const char *default_name,
                    int64_t size);

void psim_cnn_loss(psim_cnn *k, int64_t classes);

#endif
