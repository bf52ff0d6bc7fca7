/* model_load_checks.c - after parsing: topological order (one iterative
 * depth-first search), layers, the tensor rules, and each op's work. */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/ir/model_load_impl.h"

/* --------------------------------------------------- order, layers, checks */

/* Depth-first post-order over producers: file order when the file is already
 * in order. Reports a cycle with the ops on it. */
static psim_status topo_order(psim_model_loader *L, int32_t *order) {
  psim_model *m = L->m;
  int32_t n = m->n_ops, done = 0;
  uint8_t *state = psim_calloc((size_t)n, 1);
  int32_t *stack = psim_malloc(sizeof *stack * (size_t)n * 2 + 1);
  if (!state || !stack) {
    psim_free(state);
    psim_free(stack);
    return psim_error(PSIM_ENOMEM, "out of memory ordering ops");
  }
  psim_status s = PSIM_OK;
  for (int32_t r = 0; r < n && s == PSIM_OK; r++) {
    if (state[r])
      continue;
    int32_t sp = 0;
    stack[sp++] = r;
    stack[sp++] = 0;
    state[r] = 1;
    while (sp && s == PSIM_OK) {
      int32_t u = stack[sp - 2], k = stack[sp - 1]++;
      if (k >= m->ops[u].n_in) {
        state[u] = 2;
        order[done++] = u;
        sp -= 2;
        continue;
      }
      int32_t p = m->tensors[m->ops[u].in[k]].producer;
      if (p < 0 || state[p] == 2)
        continue;
      if (state[p] == 1) {
        char msg[900];
        snprintf(msg, sizeof msg,
                 "the ops form a cycle: '%.200s' needs '%.200s' of '%.200s', "
                 "which depends on '%.200s'",
                 m->ops[u].name, m->tensors[m->ops[u].in[k]].name, m->ops[p].name, m->ops[u].name);
        s = psim_mload_def_err(L, L->opx[u].def, msg);
        break;
      }
      state[p] = 1;
      stack[sp++] = p;
      stack[sp++] = 0;
    }
  }
  psim_free(state);
  psim_free(stack);
  assert(s != PSIM_OK || done == n); /* every op ordered exactly once */
  return s;
}

/* Reorders ops (and their loader records) into order. */
static psim_status apply_order(psim_model_loader *L, const int32_t *order) {
  psim_model *m = L->m;
  int32_t n = m->n_ops;
  psim_op *ops = psim_malloc(sizeof *ops * (size_t)n + 1);
  psim_model_opx *ox = psim_malloc(sizeof *ox * (size_t)n + 1);
  int32_t *inv = psim_malloc(sizeof *inv * (size_t)n + 1);
  if (!ops || !ox || !inv) {
    psim_free(ops);
    psim_free(ox);
    psim_free(inv);
    return psim_error(PSIM_ENOMEM, "out of memory ordering ops");
  }
  for (int32_t i = 0; i < n; i++) {
    ops[i] = m->ops[order[i]];
    ox[i] = L->opx[order[i]];
    inv[order[i]] = i;
  }
  for (int32_t i = 0; i < n; i++)
    ops[i].proto = inv[ops[i].proto];
  for (int32_t t = 0; t < m->n_tensors; t++)
    if (m->tensors[t].producer >= 0)
      m->tensors[t].producer = inv[m->tensors[t].producer];
  psim_free(m->ops);
  psim_free(L->opx);
  psim_free(inv);
  m->ops = ops;
  L->opx = ox;
  L->cap_ops = L->cap_opx = (size_t)n;
  return PSIM_OK;
}

static psim_status assign_layers(psim_model_loader *L) {
  psim_model *m = L->m;
  m->n_layers = 0;
  for (int32_t i = 0; i < m->n_ops; i++) {
    psim_op *op = &m->ops[i];
    int32_t lmax = 0;
    for (int k = 0; k < op->n_in; k++) {
      int32_t p = m->tensors[op->in[k]].producer;
      if (p >= 0 && m->ops[p].layer > lmax)
        lmax = m->ops[p].layer;
    }
    op->layer = L->opx[i].given >= 0 ? L->opx[i].given : lmax;
    if (op->layer < lmax) {
      char msg[600];
      snprintf(msg, sizeof msg,
               "op '%.200s' is in layer %d but reads the output of layer %d; "
               "layers must not decrease along the data flow",
               op->name, op->layer, lmax);
      return psim_mload_def_err(L, L->opx[i].def, msg);
    }
    if (op->layer + 1 > m->n_layers)
      m->n_layers = op->layer + 1;
  }
  return PSIM_OK;
}

/* Layers of tensors, gradients, and the never-produced / never-used rules. */
static psim_status check_tensors(psim_model_loader *L) {
  psim_model *m = L->m;
  for (int32_t i = 0; i < m->n_ops; i++) {
    psim_op *op = &m->ops[i];
    bool grad = false;
    for (int k = 0; k < op->n_in; k++) {
      psim_tensor *t = &m->tensors[op->in[k]];
      if (t->producer < 0 && t->kind == PSIM_TENSOR_ACTIVATION) {
        char msg[600];
        snprintf(msg, sizeof msg, "op '%.200s' reads '%.200s', which no op produces", op->name,
                 t->name);
        return psim_mload_def_err(L, L->opx[i].def, msg);
      }
      if (t->layer < 0)
        t->layer = op->layer;
      t->requires_grad |= t->kind == PSIM_TENSOR_WEIGHT;
      grad |= t->requires_grad;
    }
    for (int k = 0; k < op->n_out; k++) {
      m->tensors[op->out[k]].layer = op->layer;
      m->tensors[op->out[k]].requires_grad = grad;
    }
  }
  for (int32_t t = 0; t < m->n_tensors; t++) {
    const psim_tensor *x = &m->tensors[t];
    char msg[600];
    snprintf(msg, sizeof msg, "%s '%.200s' is %s",
             x->kind == PSIM_TENSOR_WEIGHT ? "weight" : "activation", x->name,
             x->kind == PSIM_TENSOR_WEIGHT ? "never used" : "declared but never produced");
    if ((x->kind == PSIM_TENSOR_WEIGHT && x->layer < 0) ||
        (x->kind == PSIM_TENSOR_ACTIVATION && x->producer < 0))
      return psim_mload_def_err(L, L->tdef[t], msg);
  }
  return PSIM_OK;
}

psim_status psim_mload_finish(psim_model_loader *L) {
  psim_model *m = L->m;
  int32_t *order = psim_malloc(sizeof *order * (size_t)m->n_ops + 1);
  if (!order)
    return psim_error(PSIM_ENOMEM, "out of memory ordering ops");
  psim_status s = topo_order(L, order);
  if (s == PSIM_OK)
    s = apply_order(L, order);
  psim_free(order);
  PSIM_CHECK(s);
  PSIM_CHECK(assign_layers(L));
  PSIM_CHECK(check_tensors(L));
  size_t cap = 0;
  for (int32_t i = 0; i < m->n_ops; i++)
    PSIM_CHECK(psim_opkind_work(m, &m->ops[i], &cap));
  for (int32_t d = m->n_dims - 1; d >= 0; d--)
    m->role_dim[m->dims[d].role] = d;
  m->role_dim[PSIM_ROLE_NONE] = -1;
  m->n_params = 0;
  for (int32_t t = 0; t < m->n_tensors; t++)
    if (m->tensors[t].kind == PSIM_TENSOR_WEIGHT)
      m->n_params += psim_tensor_elems(m, &m->tensors[t]);
  return PSIM_OK;
}
