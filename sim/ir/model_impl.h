/* model_impl.h - private to the model module of sim/ir: the kind table
 * (opkind.c) and the rules it points at (opkind_space.c, opkind_work.c), the
 * elementwise functions (model_names.c), and what the loader (model_load*.c)
 * and the writer (model_json.c) ask of them.
 *
 * Dependencies go one way: model_load*.c and model_json.c -> opkind.c ->
 * opkind_space.c, opkind_work.c -> model.c, model_names.c. */
#ifndef PSIM_MODEL_IMPL_H
#define PSIM_MODEL_IMPL_H

#include <stddef.h>

#include "sim/core/json.h"
#include "sim/ir/model.h"

/* ---- the kind table (opkind.c) ---- */

/* Parses the kind-specific keys of op JSON j (already holding in/out tensor
 * indices and kind), checks the dims of its tensors and fills op->dims and
 * op->attrs. c points at the op. The model's dims and tensors must be loaded. */
psim_status psim_opkind_analyse(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j);

/* Keys an op of kind k accepts besides name, kind, in, out, layer, tag
 * (NULL-terminated). */
const char *const *psim_opkind_keys(psim_op_kind k);

/* Bounds on the number of inputs and outputs of kind k. */
void psim_opkind_arity(psim_op_kind k, int *min_in, int *max_in, int *min_out, int *max_out);

/* Appends op's work terms to m->terms (tensors' requires_grad must be set)
 * and fills op->term0, n_terms, flops[] and bytes[]. *cap is the capacity of
 * m->terms. */
psim_status psim_opkind_work(psim_model *m, psim_op *op, size_t *cap);

/* Writes the kind-specific keys of op into JSON object o (inverse of analyse). */
psim_status psim_opkind_to_json(const psim_model *m, const psim_op *op, cJSON *o);

/* ---- elementwise functions (model_names.c) ---- */

typedef struct psim_ew_fn {
  const char *name;
  int min_in, max_in;
  double fwd, bwd; /* FLOPs per output element (operation count of the expression) */
} psim_ew_fn;

/* The elementwise function called name, NULL when there is none. */
const psim_ew_fn *psim_ew_find(const char *name);
/* The names of the elementwise functions, ", "-separated, into buf (cut at size). */
void psim_ew_list(char *buf, size_t size);

/* ---- iteration-space rules (opkind_space.c) ---- */

/* Fills op->dims and op->attrs for one kind, checking its tensors' dims and
 * reading its keys from j; errors name the JSON path of c. */
typedef psim_status (*psim_opspace_fn)(psim_jctx *c, const psim_model *m, psim_op *op,
                                       const cJSON *j);
psim_status psim_opspace_matmul(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j);
psim_status psim_opspace_elementwise(psim_jctx *c, const psim_model *m, psim_op *op,
                                     const cJSON *j);
psim_status psim_opspace_dropout(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j);
psim_status psim_opspace_norm(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j);
psim_status psim_opspace_attention(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j);
psim_status psim_opspace_embedding(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j);
psim_status psim_opspace_cross_entropy(psim_jctx *c, const psim_model *m, psim_op *op,
                                       const cJSON *j);
psim_status psim_opspace_conv2d(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j);
psim_status psim_opspace_pool2d(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j);
psim_status psim_opspace_concat_split(psim_jctx *c, const psim_model *m, psim_op *op,
                                      const cJSON *j);
psim_status psim_opspace_reshape(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j);
psim_status psim_opspace_transpose(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j);
psim_status psim_opspace_moe(psim_jctx *c, const psim_model *m, psim_op *op, const cJSON *j);
/* Marks the op dims that index a weight input (after the kind's rule). */
void psim_opspace_mark_weight_dims(const psim_model *m, psim_op *op);

/* ---- work rules (opkind_work.c) ---- */

/* The op whose work terms are being appended (defined in opkind_work.c). */
typedef struct psim_opwork psim_opwork;
typedef psim_status (*psim_opwork_fn)(psim_opwork *w);
/* Runs rule fn for op (see psim_opkind_work). */
psim_status psim_opwork_run(psim_model *m, psim_op *op, size_t *cap, psim_opwork_fn fn);
psim_status psim_opwork_matmul(psim_opwork *w);
psim_status psim_opwork_elementwise(psim_opwork *w);
psim_status psim_opwork_dropout(psim_opwork *w);
psim_status psim_opwork_norm(psim_opwork *w);
psim_status psim_opwork_attention(psim_opwork *w);
psim_status psim_opwork_embedding(psim_opwork *w);
psim_status psim_opwork_cross_entropy(psim_opwork *w);
psim_status psim_opwork_conv2d(psim_opwork *w);
psim_status psim_opwork_pool2d(psim_opwork *w);
psim_status psim_opwork_copy(psim_opwork *w);
psim_status psim_opwork_reshape(psim_opwork *w);
psim_status psim_opwork_moe(psim_opwork *w);

#endif
