/* export_facts.c - what a plan says, read once for every exporter (export_facts.h). */
#include "search/plan/export_facts.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "sim/builder/memory.h"

psim_status psim_export_refuse(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  psim_status st = psim_verror(PSIM_EFAILED, fmt, ap);
  va_end(ap);
  return st;
}

psim_status psim_export_need_layout(const psim_export_facts *f, const char *runtime) {
  if (!f->megatron)
    return psim_export_refuse("%s", f->megatron_why);
  if (f->s->sync == PSIM_SYNC_PS)
    return psim_export_refuse("the plan synchronises gradients with parameter servers; %s "
                              "all-reduces them",
                              runtime);
  return PSIM_OK;
}

int32_t psim_export_etp(const psim_export_facts *f) {
  return f->lay.etp > 0 ? f->lay.etp : f->lay.tp;
}

int32_t psim_export_world(const psim_export_facts *f) {
  return f->lay.tp * (f->lay.cp > 0 ? f->lay.cp : 1) * f->lay.pp * f->lay.dp;
}

psim_status psim_export_no_ep_cp(const psim_export_facts *f, const char *runtime, const char *how) {
  if (f->lay.ep > 1)
    return psim_export_refuse("expert parallelism %d: %s has no expert-parallel degree (%s)",
                              f->lay.ep, runtime, how);
  if (f->lay.cp > 1)
    return psim_export_refuse("context parallelism %d: %s has no context-parallel degree (%s)",
                              f->lay.cp, runtime, how);
  if (f->experts > 0 && psim_export_etp(f) != f->lay.tp)
    return psim_export_refuse("expert tensor parallelism %d beside tensor parallelism %d: %s "
                              "splits the experts as the dense layers (%s)",
                              psim_export_etp(f), f->lay.tp, runtime, how);
  return PSIM_OK;
}

static int64_t role_size(const psim_model *m, psim_role r) {
  return m->role_dim[r] >= 0 ? m->dims[m->role_dim[r]].size : 0;
}

/* The first layer of a block with its own loss (a multi-token prediction module,
 * models/gen_decoder.c mtp()), or -1. */
static int32_t mtp_first_layer(const psim_model *m) {
  int32_t first = -1;
  for (int32_t o = 0; o < m->n_ops; o++)
    if (m->ops[o].block >= 0 && m->ops[o].kind == PSIM_OP_CROSS_ENTROPY &&
        (first < 0 || m->ops[o].layer < first))
      first = m->ops[o].layer;
  return first;
}

/* The transformer layers of the repeated blocks, [*lo, *hi] (the multi-token prediction
 * modules after them excluded); *lo > *hi when there are none. */
static void block_range(const psim_model *m, int32_t *lo, int32_t *hi) {
  *lo = -1, *hi = -2;
  for (int32_t o = 0; o < m->n_ops; o++)
    if (m->ops[o].block >= 0) {
      if (*lo < 0 || m->ops[o].layer < *lo)
        *lo = m->ops[o].layer;
      if (m->ops[o].layer > *hi)
        *hi = m->ops[o].layer;
    }
  int32_t mtp = mtp_first_layer(m);
  if (mtp >= 0 && mtp <= *hi)
    *hi = mtp - 1;
}

static int32_t weight_inputs(const psim_model *m, const psim_op *op) {
  int32_t n = 0;
  for (int32_t i = 0; i < op->n_in; i++)
    n += m->tensors[op->in[i]].kind == PSIM_TENSOR_WEIGHT;
  return n;
}

static bool tensor_has_role(const psim_model *m, int32_t t, psim_role r) {
  for (int32_t k = 0; k < m->tensors[t].rank; k++)
    if (m->dims[m->tensors[t].dims[k]].role == r)
      return true;
  return false;
}

/* The embedding table, or -1. */
static int32_t embedding_table(const psim_model *m) {
  for (int32_t o = 0; o < m->n_ops; o++)
    if (m->ops[o].kind == PSIM_OP_EMBEDDING)
      for (int32_t i = 0; i < m->ops[o].n_in; i++)
        if (m->tensors[m->ops[o].in[i]].kind == PSIM_TENSOR_WEIGHT)
          return m->ops[o].in[i];
  return -1;
}

static void dropout_fact(double p, double *slot, bool *seen, bool *mixed) {
  if (*seen && *slot != p)
    *mixed = true;
  *slot = p, *seen = true;
}

/* Ops outside the blocks: positions, embedding norm, LM-head transform, tied logits. Ops
 * outside the blocks share the layer of their neighbours (the loader's rule), so before and
 * after are told by op order. */
static void outer_facts(const psim_model *m, psim_export_facts *f) {
  int32_t table = embedding_table(m), lo = m->n_ops, hi = -1;
  for (int32_t o = 0; o < m->n_ops; o++)
    if (m->ops[o].block >= 0) {
      lo = o < lo ? o : lo;
      hi = o;
    }
  for (int32_t o = 0; o < m->n_ops; o++) {
    const psim_op *op = &m->ops[o];
    if (op->block >= 0)
      continue;
    bool norm = op->kind == PSIM_OP_LAYERNORM || op->kind == PSIM_OP_RMSNORM;
    if (op->kind == PSIM_OP_ELEMENTWISE && op->fn && strcmp(op->fn, "add") == 0)
      for (int32_t i = 0; i < op->n_in; i++)
        if (m->tensors[op->in[i]].kind == PSIM_TENSOR_WEIGHT &&
            tensor_has_role(m, op->in[i], PSIM_ROLE_SEQUENCE))
          f->learned_positions = true;
    if (norm && o < lo)
      f->embedding_norm = true;
    if (op->kind == PSIM_OP_MATMUL && o > hi && !tensor_has_role(m, op->out[0], PSIM_ROLE_VOCAB))
      f->encoder = true;
    if (op->kind == PSIM_OP_MATMUL)
      for (int32_t i = 0; i < op->n_in; i++)
        f->tied_embeddings = f->tied_embeddings || (table >= 0 && op->in[i] == table);
  }
}

/* Ops of the blocks: biases, dropout, MoE routing. */
static void block_facts(const psim_model *m, psim_export_facts *f) {
  bool seen[2] = {false, false};
  for (int32_t o = 0; o < m->n_ops; o++) {
    const psim_op *op = &m->ops[o];
    if (op->kind == PSIM_OP_MATMUL && weight_inputs(m, op) >= 2)
      f->bias_linear = true;
    if (op->kind == PSIM_OP_DROPOUT) {
      bool attn = op->tag && strcmp(op->tag, "attn_core") == 0;
      dropout_fact(op->attrs.dropout_p, attn ? &f->attention_dropout : &f->hidden_dropout,
                   &seen[attn], &f->dropout_mixed);
    }
    if ((op->kind == PSIM_OP_LAYERNORM || op->kind == PSIM_OP_RMSNORM) &&
        tensor_has_role(m, op->out[0], PSIM_ROLE_HEADS))
      f->qk_norm = true;
    if (op->kind == PSIM_OP_MATMUL && op->block >= 0 && f->experts > 0 &&
        tensor_has_role(m, op->out[0], PSIM_ROLE_FFN) &&
        !tensor_has_role(m, op->out[0], PSIM_ROLE_EXPERT))
      f->moe_dense_ffn = true;
    if (op->kind == PSIM_OP_DISPATCH && f->experts > 0) {
      f->moe_layers += op->block >= 0;
      f->top_k = op->attrs.top_k;
      f->dropless = op->attrs.dropless;
      const psim_tensor *t = &m->tensors[op->out[0]];
      for (int32_t k = 0; !f->dropless && k < t->rank; k++) /* [batch, expert, capacity, hidden] */
        if (m->dims[t->dims[k]].role == PSIM_ROLE_NONE && f->top_k > 0 && f->seq > 0)
          f->capacity_factor =
              (double)m->dims[t->dims[k]].size * f->experts / ((double)f->top_k * (double)f->seq);
    }
  }
}

static int64_t dim_of_role(const psim_model *m, int32_t t, psim_role r) {
  for (int32_t k = 0; k < m->tensors[t].rank; k++)
    if (m->dims[m->tensors[t].dims[k]].role == r)
      return m->dims[m->tensors[t].dims[k]].size;
  return 0;
}

static int64_t dim_named(const psim_model *m, const char *name) {
  int32_t d = psim_model_find_dim(m, name);
  return d >= 0 ? m->dims[d].size : 0;
}

/* One transformer layer's MoE facts, folded into f when the layer ends: a layer with a
 * dispatch is MoE (an FFN beside its experts is the shared expert), else dense. */
typedef struct layer_acc {
  int32_t layer;
  bool dispatch;
  int64_t dense_w; /* ffn-role width of an FFN matmul outside the experts */
  bool seen_moe;
} layer_acc;

static void layer_end(layer_acc *a, psim_export_facts *f) {
  if (a->layer < 0)
    return;
  if (a->dispatch && a->dense_w > 0)
    f->shared_ffn = a->dense_w;
  if (!a->dispatch && a->seen_moe)
    f->moe_irregular = true;
  else if (!a->dispatch)
    f->dense_first++;
  a->seen_moe = a->seen_moe || a->dispatch;
  a->dispatch = false, a->dense_w = 0;
}

/* MoE facts by layer: leading dense layers, shared experts, expert width, router. */
static void moe_layer_facts(const psim_model *m, psim_export_facts *f) {
  int32_t lo, hi;
  block_range(m, &lo, &hi);
  layer_acc a = {.layer = -1};
  for (int32_t o = 0; o < m->n_ops; o++) {
    const psim_op *op = &m->ops[o];
    if (op->block < 0 || op->layer < lo || op->layer > hi)
      continue;
    if (op->layer != a.layer)
      layer_end(&a, f), a.layer = op->layer;
    int32_t y = op->out[0];
    bool expert = tensor_has_role(m, y, PSIM_ROLE_EXPERT);
    a.dispatch = a.dispatch || op->kind == PSIM_OP_DISPATCH;
    if (op->kind == PSIM_OP_MATMUL && dim_of_role(m, y, PSIM_ROLE_FFN) > 0) {
      if (expert)
        f->moe_ffn = dim_of_role(m, y, PSIM_ROLE_FFN);
      else
        a.dense_w = dim_of_role(m, y, PSIM_ROLE_FFN);
    }
    if (op->kind == PSIM_OP_ELEMENTWISE && expert && op->fn && strcmp(op->fn, "sigmoid") == 0)
      f->sigmoid_router = true;
  }
  layer_end(&a, f);
}

/* Multi-head latent attention and multi-token prediction (export_facts.h). */
static void mla_mtp_facts(const psim_model *m, psim_export_facts *f) {
  f->kv_lora = dim_named(m, "kv_lora");
  f->mla = f->kv_lora > 0;
  if (f->mla) {
    f->q_lora = dim_named(m, "q_lora");
    f->qk_head = dim_named(m, "nope");
    f->qk_rope = dim_named(m, "rope");
    f->v_head = dim_named(m, "kv_b") - f->qk_head;
  }
  int32_t mtp = mtp_first_layer(m), last = -1;
  for (int32_t o = 0; mtp >= 0 && o < m->n_ops; o++)
    if (m->ops[o].block >= 0 && m->ops[o].layer > last)
      last = m->ops[o].layer;
  f->mtp_layers = mtp >= 0 ? last - mtp + 1 : 0;
}

static void model_facts(const psim_model *m, psim_export_facts *f) {
  f->transformer = m->role_dim[PSIM_ROLE_HEADS] >= 0 && m->role_dim[PSIM_ROLE_HIDDEN] >= 0;
  int32_t lo, hi;
  block_range(m, &lo, &hi);
  f->layers = hi >= lo ? hi - lo + 1 : 0;
  f->first_block_layer = lo;
  f->hidden = role_size(m, PSIM_ROLE_HIDDEN);
  f->heads = f->kv_heads = role_size(m, PSIM_ROLE_HEADS);
  for (int32_t d = 0; d < m->n_dims; d++)
    if (m->dims[d].role == PSIM_ROLE_HEADS && m->dims[d].size != f->heads)
      f->kv_heads = m->dims[d].size;
  f->ffn = role_size(m, PSIM_ROLE_FFN);
  f->head_dim = role_size(m, PSIM_ROLE_HEAD_DIM);
  f->seq = role_size(m, PSIM_ROLE_SEQUENCE);
  f->vocab = role_size(m, PSIM_ROLE_VOCAB);
  f->batch = role_size(m, PSIM_ROLE_BATCH);
  f->experts = (int32_t)role_size(m, PSIM_ROLE_EXPERT);
  for (int32_t o = 0; o < m->n_ops; o++) {
    f->rmsnorm = f->rmsnorm || m->ops[o].kind == PSIM_OP_RMSNORM;
    f->swiglu = f->swiglu || (m->ops[o].kind == PSIM_OP_ELEMENTWISE && m->ops[o].fn &&
                              strcmp(m->ops[o].fn, "swiglu") == 0);
  }
  outer_facts(m, f);
  block_facts(m, f);
  mla_mtp_facts(m, f);
  if (f->experts > 0)
    moe_layer_facts(m, f);
  f->dtype = m->dtype;
  double pb[3];
  psim_memory_param_bytes(m->dtype, pb);
  f->grad_bytes = pb[1];
}

/* Transformer layers per pipeline chunk: first, middle (when all equal), last. */
static void stage_facts(const psim_model *m, const psim_strategy *s, psim_export_facts *f) {
  int32_t lo, hi, n = s->n_stages * s->virtual_stages;
  block_range(m, &lo, &hi);
  for (int32_t c = 0; c < n; c++) {
    int32_t a = s->stages[c].first_layer > lo ? s->stages[c].first_layer : lo;
    int32_t b = s->stages[c].last_layer < hi ? s->stages[c].last_layer : hi;
    int32_t k = b >= a ? b - a + 1 : 0;
    if (c == 0)
      f->stage_layers_first = k;
    if (c == n - 1) {
      f->stage_layers_last = k;
      int32_t mtp = mtp_first_layer(m);
      f->mtp_split = mtp >= 0 && s->stages[c].first_layer > mtp;
    }
    if (c > 0 && c < n - 1) {
      if (f->stage_layers_mid > 0 && f->stage_layers_mid != k)
        f->stages_uneven = true;
      f->stage_layers_mid = k;
    }
  }
}

void psim_export_uneven_stages(const psim_model *m, const psim_strategy *s, psim_megatron_opts *o) {
  o->first_stage_layers = o->last_stage_layers = 0;
  if (s->n_stages < 2 || s->virtual_stages != 1 || !s->stages)
    return;
  psim_export_facts t = {0};
  stage_facts(m, s, &t);
  int32_t lo, hi, n = s->n_stages;
  block_range(m, &lo, &hi);
  int32_t layers = hi >= lo ? hi - lo + 1 : 0;
  if (layers % n == 0 && t.stage_layers_first == layers / n && t.stage_layers_last == layers / n)
    return; /* the even split */
  if (n == 2 || t.stage_layers_first != t.stage_layers_mid)
    o->first_stage_layers = t.stage_layers_first;
  if (n > 2 && t.stage_layers_last != t.stage_layers_mid)
    o->last_stage_layers = t.stage_layers_last;
}

psim_status psim_export_facts_of(const psim_plan_doc *d, psim_export_facts *f) {
  memset(f, 0, sizeof *f);
  model_facts(&d->model, f);
  f->s = &d->strategy;
  f->n_micro = d->strategy.n_micro;
  f->param_gather_overlap = psim_strategy_param_gather_overlapped(&d->strategy);
  f->fp8 = f->dtype == PSIM_DTYPE_FP8 ||
           (d->strategy.n_ops == d->model.n_ops && psim_strategy_any_fp8(&d->strategy, &d->model));
  if (d->strategy.n_stages > 0 && d->strategy.stages)
    stage_facts(&d->model, &d->strategy, f);
  psim_status st =
      psim_export_match_megatron(&d->model, (psim_cluster *)&d->cluster, &d->strategy, &f->lay);
  if (st == PSIM_ENOMEM)
    return st;
  f->megatron = st == PSIM_OK;
  if (!f->megatron)
    snprintf(f->megatron_why, sizeof f->megatron_why, "%s", psim_error_message());
  psim_error_clear();
  return PSIM_OK;
}
