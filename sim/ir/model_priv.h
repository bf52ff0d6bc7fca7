/* model_priv.h - internals shared by model.c, model_load.c and opkind.c.
 *
 * opkind.c owns everything that depends on an op's kind: its JSON keys, the
 * validation of its tensors' dims, its iteration space and its work terms.
 * model_load.c owns names, scopes, blocks, ordering and the tensor rules. */
#ifndef PSIM_MODEL_PRIV_H
#define PSIM_MODEL_PRIV_H

#include "sim/core/json.h"
#include "sim/ir/model.h"

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

#endif
