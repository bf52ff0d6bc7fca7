/* strat.c - the strategy documents of the invariant suite's cases and loading a case. */
#include <stdio.h>
#include <string.h>

#include "inv.h"

static const char *const recompute_names[] = {"none", "selective", "full"};
static const char *const ar_names[] = {"auto", "ring", "tree", "halving_doubling", "hierarchical"};

static void common(const inv_case *k, cJSON *j) {
  cJSON_AddStringToObject(j, "recompute", recompute_names[k->recompute]);
  cJSON_AddBoolToObject(j, "overlap_grad_reduce", k->overlap);
  cJSON_AddStringToObject(j, "allreduce", ar_names[k->allreduce]);
}

static cJSON *megatron(const inv_case *k) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "format", "plansim.strategy/1");
  cJSON_AddStringToObject(j, "template", "megatron");
  cJSON_AddNumberToObject(j, "tp", k->tp);
  cJSON_AddNumberToObject(j, "pp", k->pp);
  cJSON_AddNumberToObject(j, "dp", k->dp);
  cJSON_AddNumberToObject(j, "micro_batch", k->mb);
  cJSON_AddNumberToObject(j, "virtual_stages", k->vs);
  cJSON_AddBoolToObject(j, "sequence_parallel", k->sp);
  cJSON_AddNumberToObject(j, "zero", k->zero);
  common(k, j);
  return j;
}

static cJSON *data_parallel(const inv_case *k) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "format", "plansim.strategy/1");
  cJSON_AddStringToObject(j, "template", k->strat == INV_S_ZERO ? "zero" : "data_parallel");
  cJSON_AddNumberToObject(j, "dp", k->dp);
  if (k->strat == INV_S_ZERO) {
    cJSON_AddNumberToObject(j, "stage", k->zero);
  } else {
    cJSON_AddNumberToObject(j, "micro_batches", k->micro_batches);
    cJSON_AddNumberToObject(j, "zero", k->zero);
  }
  common(k, j);
  return j;
}

/* Per-op overrides: 1-3 ops, each split on one of its dims over the mesh's devices. */
static void op_overrides(const inv_case *k, const psim_model *m, int n_dev, cJSON *ops) {
  uint64_t r = k->split_seed;
  int n = 1 + inv_pick(&r, 3);
  for (int i = 0; i < n; i++) {
    const psim_op *op = &m->ops[inv_pick(&r, m->n_ops)];
    if (cJSON_GetObjectItem(ops, op->name) || op->n_dims == 0)
      continue;
    const psim_dim *d = &m->dims[op->dims[inv_pick(&r, op->n_dims)].dim];
    int64_t extent = d->role == PSIM_ROLE_BATCH ? d->size / k->micro_batches : d->size;
    int deg = 1 << inv_pick(&r, 4);
    while (deg > 1 && (deg > n_dev || n_dev % deg || deg > extent))
      deg /= 2;
    cJSON *o = cJSON_CreateObject();
    cJSON *split = cJSON_AddObjectToObject(o, "split");
    cJSON_AddNumberToObject(split, d->name, deg);
    cJSON_AddNumberToObject(o, "replicas", n_dev / deg);
    cJSON_AddItemToObject(ops, op->name, o);
  }
}

static cJSON *stages(const inv_case *k, const psim_model *m, int per_stage) {
  cJSON *pipe = cJSON_CreateObject();
  cJSON_AddNumberToObject(pipe, "micro_batches", k->micro_batches);
  if (k->pp < 2 || m->n_layers < 2)
    return pipe;
  cJSON *st = cJSON_AddArrayToObject(pipe, "stages");
  int half = m->n_layers / 2;
  for (int i = 0; i < 2; i++) {
    cJSON *o = cJSON_CreateObject(), *dv = cJSON_CreateObject();
    int layers[2] = {i == 0 ? 0 : half, i == 0 ? half - 1 : m->n_layers - 1};
    cJSON_AddItemToObject(o, "layers", cJSON_CreateIntArray(layers, 2));
    cJSON_AddNumberToObject(dv, "first", i * per_stage);
    cJSON_AddNumberToObject(dv, "count", per_stage);
    cJSON_AddItemToObject(o, "devices", dv);
    cJSON_AddItemToArray(st, o);
  }
  return pipe;
}

static cJSON *explicit_form(const inv_case *k, const psim_model *m) {
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "format", "plansim.strategy/1");
  cJSON *mesh = cJSON_AddObjectToObject(j, "mesh"), *ax = cJSON_AddObjectToObject(mesh, "axes");
  cJSON_AddNumberToObject(ax, "dp", k->dp);
  cJSON_AddNumberToObject(ax, "tp", k->tp);
  cJSON *lay = cJSON_AddObjectToObject(j, "layout");
  cJSON_AddStringToObject(lay, "batch", "dp");
  uint64_t r = k->split_seed ^ 0xABCDEFull;
  static const char *const roles[] = {"heads", "ffn", "vocab"};
  for (int i = 0; i < 3; i++)
    if (inv_pick(&r, 2) && m->role_dim[i == 0   ? PSIM_ROLE_HEADS
                                       : i == 1 ? PSIM_ROLE_FFN
                                                : PSIM_ROLE_VOCAB] >= 0)
      cJSON_AddStringToObject(lay, roles[i], "tp");
  cJSON_AddItemToObject(j, "pipeline", stages(k, m, k->dp * k->tp));
  op_overrides(k, m, k->dp * k->tp, cJSON_AddObjectToObject(j, "ops"));
  cJSON_AddNumberToObject(j, "zero", k->zero);
  cJSON_AddStringToObject(j, "recompute", recompute_names[k->recompute]);
  cJSON_AddBoolToObject(j, "overlap_grad_reduce", k->overlap);
  cJSON *gs = cJSON_AddObjectToObject(j, "gradient_sync");
  cJSON_AddStringToObject(gs, "allreduce", ar_names[k->allreduce]);
  return j;
}

cJSON *inv_strategy_json(const inv_case *k, const psim_model *m) {
  switch (k->strat) {
  case INV_S_MEGATRON: return megatron(k);
  case INV_S_DP:
  case INV_S_ZERO: return data_parallel(k);
  default: return explicit_form(k, m);
  }
}

bool inv_cluster_load(const cJSON *j, psim_cluster *c) {
  psim_cluster_init(c);
  if (j && psim_cluster_from_json("cluster", j, c) == PSIM_OK)
    return true;
  psim_cluster_destroy(c);
  psim_cluster_init(c);
  return false;
}

bool inv_inst_make(const inv_case *k, inv_inst *x) {
  memset(x, 0, sizeof *x);
  psim_model_init(&x->m);
  psim_cluster_init(&x->c);
  psim_strategy_init(&x->s);
  x->model_json = inv_model_json(k);
  x->cluster_json = inv_cluster_json(k);
  if (!x->model_json || !x->cluster_json)
    return false;
  if (psim_model_from_json("model", x->model_json, &x->m) != PSIM_OK)
    return false;
  psim_cluster_destroy(&x->c);
  if (!inv_cluster_load(x->cluster_json, &x->c))
    return false;
  x->strategy_json = inv_strategy_json(k, &x->m);
  if (psim_strategy_from_json("strategy", x->strategy_json, &x->m, &x->c, &x->s) != PSIM_OK)
    return false;
  x->loaded = true;
  return true;
}

void inv_inst_destroy(inv_inst *x) {
  cJSON_Delete(x->model_json);
  cJSON_Delete(x->cluster_json);
  cJSON_Delete(x->strategy_json);
  psim_strategy_destroy(&x->s);
  psim_cluster_destroy(&x->c);
  psim_model_destroy(&x->m);
  memset(x, 0, sizeof *x);
}

void inv_case_describe(const inv_case *k, char *buf, size_t n) {
  static const char *const models[] = {"gpt",          "llama",        "bert", "moe",
                                       "mlp",          "resnet",       "dlrm", "file:mlp",
                                       "file:alexnet", "file:gpt-1.3b"};
  static const char *const strats[] = {"megatron", "data_parallel", "zero", "explicit"};
  snprintf(buf, n,
           "model %s layers %d hidden %d heads %d seq %d batch %d; cluster %s nodes %d "
           "devices/star %d; strategy %s tp %d pp %d dp %d mb %d vs %d recompute %s zero %d "
           "sp %d micro_batches %d",
           models[k->model], k->layers, k->hidden, k->heads, k->seq, k->batch,
           k->cluster == INV_C_PRESET ? "preset"
           : k->cluster == INV_C_RING ? "ring"
                                      : "star",
           k->nodes, k->per_node, strats[k->strat], k->tp, k->pp, k->dp, k->mb, k->vs,
           recompute_names[k->recompute], k->zero, k->sp, k->micro_batches);
}
