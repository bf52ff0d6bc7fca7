/* gen_cnn.c - the network families' options and the convolutional cursor
 * (conv, pool, fc, ...) that alexnet, resnet, inception and dlrm build with. */
#include "models/generators.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/gen_impl.h"
#include "sim/core/json.h"
#include "sim/ir/model.h"

/* ================================================================ networks */

void psim_gen_net_opts_init(psim_gen_net_opts *o, const char *family) {
  memset(o, 0, sizeof *o);
  o->dtype = "fp32";
  o->classes = 1000;
  o->batch = 256;
  o->depth = 50;
  o->layers = 4;
  o->hidden = 1024;
  o->tables = 26;
  o->rows = 1000000;
  o->emb_dim = 128;
  if (family && strcmp(family, "mlp") == 0) {
    o->batch = 64;
    o->classes = 10;
  } else if (family && strcmp(family, "alexnet") == 0) {
    o->batch = 128;
  } else if (family && strcmp(family, "dlrm") == 0) {
    o->batch = 2048;
  }
}

psim_status psim_gen_net_check(const psim_gen_net_opts *o) {
  const int64_t big = (int64_t)1 << 40;
  PSIM_CHECK(psim_gb_positive("batch", o->batch, big));
  PSIM_CHECK(psim_gb_positive("classes", o->classes, big));
  return psim_gb_check_dtype(o->dtype);
}

/* ---- convolutional networks: a cursor over the current activation */

void psim_cnn_at(psim_cnn *k, const char *x, const char *c, int64_t cs, const char *h, int64_t hs,
                 const char *w) {
  snprintf(k->x, sizeof k->x, "%s", x);
  snprintf(k->c, sizeof k->c, "%s", c);
  snprintf(k->h, sizeof k->h, "%s", h);
  snprintf(k->w, sizeof k->w, "%s", w);
  k->cs = cs;
  k->hs = k->ws_ = hs;
}

/* Channel dim of size n distinct from avoid. */
void psim_cnn_chan(psim_cnn *k, int64_t n, const char *avoid, char *out) {
  snprintf(out, 32, "c%lld", (long long)n);
  if (strcmp(out, avoid) == 0)
    snprintf(out, 32, "c%lld_b", (long long)n);
  psim_gb_dim(k->g, out, n, "channel");
}

cJSON *psim_cnn_op(psim_cnn *k, const char *kind, const char *in, const char *out) {
  char name[48];
  snprintf(name, sizeof name, "%s%d", kind, ++k->n);
  cJSON *o = psim_gb_op(k->g, k->ops, name, kind, in, out);
  if (k->layer >= 0)
    psim_gb_num(k->g, o, "layer", k->layer);
  return o;
}

/* New activation named after the op counter with the given dims. */
void psim_cnn_new(psim_cnn *k, char *name, const char *dims) {
  snprintf(name, 64, "t%d", k->n + 1);
  psim_gb_tensor(k->g, k->ts, name, dims, NULL);
}

/* conv kh x kw (stride s, pad ph/pw) to cout channels, then relu (BatchNorm
 * folded into the conv: its 2 parameters per channel are omitted). */
void psim_cnn_conv(psim_cnn *k, int64_t cout, int64_t kh, int64_t kw, int64_t s, int64_t ph,
                   int64_t pw, bool relu) {
  psim_gb *g = k->g;
  char c2[32], hd[32], wd[32], khd[32], kwd[32], wt[64], y[64], dims[160], in[160];
  psim_cnn_chan(k, cout, k->c, c2);
  int64_t h2 = (k->hs + 2 * ph - kh) / s + 1, w2 = (k->ws_ + 2 * pw - kw) / s + 1;
  snprintf(hd, sizeof hd, "h%lld", (long long)h2);
  snprintf(wd, sizeof wd, "w%lld", (long long)w2);
  snprintf(khd, sizeof khd, "kh%lld", (long long)kh);
  snprintf(kwd, sizeof kwd, "kw%lld", (long long)kw);
  psim_gb_dim(g, hd, h2, "spatial");
  psim_gb_dim(g, wd, w2, "spatial");
  psim_gb_dim(g, khd, kh, NULL);
  psim_gb_dim(g, kwd, kw, NULL);
  snprintf(wt, sizeof wt, "w%d", k->n + 1);
  snprintf(dims, sizeof dims, "%s %s %s %s", c2, k->c, khd, kwd);
  psim_gb_tensor(g, k->ws, wt, dims, NULL);
  snprintf(dims, sizeof dims, "batch %s %s %s", c2, hd, wd);
  psim_cnn_new(k, y, dims);
  snprintf(in, sizeof in, "%s %s", k->x, wt);
  cJSON *o = psim_cnn_op(k, "conv2d", in, y);
  psim_gb_pair(g, o, "stride", s, s);
  psim_gb_pair(g, o, "pad", ph, pw);
  psim_cnn_at(k, y, c2, cout, hd, h2, wd);
  k->ws_ = w2;
  if (relu) {
    psim_cnn_new(k, y, dims);
    psim_gb_str(g, psim_cnn_op(k, "elementwise", k->x, y), "fn", "relu");
    snprintf(k->x, sizeof k->x, "%s", y);
  }
}

void psim_cnn_pool(psim_cnn *k, const char *fn, int64_t kk, int64_t s, int64_t p) {
  psim_gb *g = k->g;
  char hd[32], wd[32], y[64], dims[160];
  int64_t h2 = (k->hs + 2 * p - kk) / s + 1, w2 = (k->ws_ + 2 * p - kk) / s + 1;
  snprintf(hd, sizeof hd, "h%lld", (long long)h2);
  snprintf(wd, sizeof wd, "w%lld", (long long)w2);
  psim_gb_dim(g, hd, h2, "spatial");
  psim_gb_dim(g, wd, w2, "spatial");
  snprintf(dims, sizeof dims, "batch %s %s %s", k->c, hd, wd);
  psim_cnn_new(k, y, dims);
  cJSON *o = psim_cnn_op(k, "pool2d", k->x, y);
  psim_gb_str(g, o, "fn", fn);
  psim_gb_pair(g, o, "kernel", kk, kk);
  psim_gb_pair(g, o, "stride", s, s);
  psim_gb_pair(g, o, "pad", p, p);
  snprintf(k->x, sizeof k->x, "%s", y);
  snprintf(k->h, sizeof k->h, "%s", hd);
  snprintf(k->w, sizeof k->w, "%s", wd);
  k->hs = h2;
  k->ws_ = w2;
}

/* Flatten [batch c h w] to [batch feat] (a view). */
void psim_cnn_flatten(psim_cnn *k) {
  char f[32], y[64], dims[96];
  int64_t n = k->cs * k->hs * k->ws_;
  snprintf(f, sizeof f, "f%lld", (long long)n);
  psim_gb_dim(k->g, f, n, "hidden");
  snprintf(dims, sizeof dims, "batch %s", f);
  psim_cnn_new(k, y, dims);
  psim_cnn_op(k, "reshape", k->x, y);
  psim_cnn_at(k, y, f, n, "", 1, "");
}

/* Fully connected layer from the current [batch feat] to n (bias, optional relu, dropout). */
void psim_cnn_fc(psim_cnn *k, int64_t n, bool relu, bool drop) {
  psim_gb *g = k->g;
  char f[32], wt[64], bt[64], y[64], dims[96], in[192];
  psim_cnn_chan(k, n, k->c, f);
  snprintf(wt, sizeof wt, "w%d", k->n + 1);
  snprintf(bt, sizeof bt, "b%d", k->n + 1);
  snprintf(dims, sizeof dims, "%s %s", k->c, f);
  psim_gb_tensor(g, k->ws, wt, dims, NULL);
  psim_gb_tensor(g, k->ws, bt, f, NULL);
  snprintf(dims, sizeof dims, "batch %s", f);
  psim_cnn_new(k, y, dims);
  snprintf(in, sizeof in, "%s %s %s", k->x, wt, bt);
  psim_cnn_op(k, "matmul", in, y);
  psim_cnn_at(k, y, f, n, "", 1, "");
  if (relu) {
    psim_cnn_new(k, y, dims);
    psim_gb_str(g, psim_cnn_op(k, "elementwise", k->x, y), "fn", "relu");
    snprintf(k->x, sizeof k->x, "%s", y);
  }
  if (drop) {
    psim_cnn_new(k, y, dims);
    psim_cnn_op(k, "dropout", k->x, y);
    snprintf(k->x, sizeof k->x, "%s", y);
  }
}

void psim_cnn_input(psim_cnn *k, psim_gb *g, int64_t size) {
  memset(k, 0, sizeof *k);
  k->g = g;
  k->ws = g->weights;
  k->ts = g->tensors;
  k->ops = g->ops;
  k->layer = 0;
  char hd[32], wd[32], dims[128];
  snprintf(hd, sizeof hd, "h%lld", (long long)size);
  snprintf(wd, sizeof wd, "w%lld", (long long)size);
  psim_gb_dim(g, "c3", 3, "channel");
  psim_gb_dim(g, hd, size, "spatial");
  psim_gb_dim(g, wd, size, "spatial");
  snprintf(dims, sizeof dims, "batch c3 %s %s", hd, wd);
  psim_gb_tensor(g, g->inputs, "image", dims, NULL);
  psim_cnn_at(k, "image", "c3", 3, hd, size, wd);
}

void psim_cnn_start(psim_cnn *k, psim_gb *g, const psim_gen_net_opts *o, const char *default_name,
                    int64_t size) {
  psim_gb_start(g, o->name ? o->name : default_name, o->dtype);
  psim_gb_dim(g, "batch", o->batch, "batch");
  psim_cnn_input(k, g, size);
}

void psim_cnn_loss(psim_cnn *k, int64_t classes) {
  psim_gb *g = k->g;
  char in[96];
  psim_cnn_fc(k, classes, false, false);
  psim_gb_tensor(g, g->inputs, "labels", "batch", "int32");
  psim_gb_tensor(g, g->tensors, "loss", "batch", NULL);
  snprintf(in, sizeof in, "%s labels", k->x);
  cJSON *o = psim_gb_op(g, g->ops, "loss", "cross_entropy", in, "loss");
  if (k->layer >= 0)
    psim_gb_num(g, o, "layer", k->layer);
}

/* AlexNet as in torchvision (Krizhevsky 2014, "one weird trick": 64-192-384-256-256). */
