/* draw.c - random cases of the invariant suite and their documents (inv.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inv.h"
#include "models/generators.h"
#include "sim/core/json.h"
#include "topologies/presets.h"

#ifndef PSIM_SOURCE_ROOT
#define PSIM_SOURCE_ROOT "."
#endif

static const char *const inv_types[] = {"a100-80g", "v100", "h100", "p100"};

uint64_t inv_rng(uint64_t *state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

int inv_pick(uint64_t *state, int n) {
  return (int)(inv_rng(state) % (uint64_t)n);
}

static int pick_of(uint64_t *r, const int *v, int n) {
  return v[inv_pick(r, n)];
}

static void draw_model(uint64_t *r, inv_case *k) {
  static const int hid[] = {64, 128, 256}, heads[] = {2, 4, 8}, seq[] = {64, 128, 256};
  static const int batch[] = {4, 8, 16, 32};
  /* generated transformers most often: they have every dim a strategy splits */
  static const int kinds[] = {INV_M_GPT,      INV_M_GPT,          INV_M_LLAMA,       INV_M_BERT,
                              INV_M_MOE,      INV_M_MLP,          INV_M_RESNET,      INV_M_DLRM,
                              INV_M_FILE_MLP, INV_M_FILE_ALEXNET, INV_M_FILE_GPT13B, INV_M_GPT};
  k->model = kinds[inv_pick(r, (int)(sizeof kinds / sizeof kinds[0]))];
  k->layers = 1 + inv_pick(r, 4);
  k->hidden = pick_of(r, hid, 3);
  k->heads = pick_of(r, heads, 3);
  k->seq = pick_of(r, seq, 3);
  k->vocab = 512 + 512 * inv_pick(r, 2);
  k->batch = pick_of(r, batch, 4);
  k->experts = 2 << inv_pick(r, 2);
  k->top_k = 1 + inv_pick(r, 2);
  k->flash = inv_pick(r, 3) == 0;
  if (k->model == INV_M_MLP || k->model == INV_M_DLRM || k->model == INV_M_FILE_MLP)
    k->batch *= 4;
  if (k->model == INV_M_RESNET)
    k->batch = 4 << inv_pick(r, 2);
}

static void draw_cluster(uint64_t *r, inv_case *k) {
  int n_presets = 0;
  while (psim_preset_names()[n_presets])
    n_presets++;
  k->cluster = inv_pick(r, 5) < 3 ? INV_C_PRESET : 1 + inv_pick(r, 2);
  k->preset = inv_pick(r, n_presets);
  k->nodes = 1 + inv_pick(r, 4);
  k->nics = inv_pick(r, 3) == 0 ? 1 + inv_pick(r, 4) : 0;
  k->oversub = inv_pick(r, 3) == 0 ? 2 + 2 * inv_pick(r, 2) : 1;
  k->per_node = 2 + inv_pick(r, 7);
  k->link_gbs = 10.0 * (1 + inv_pick(r, 30));
  k->dev_type = inv_pick(r, (int)(sizeof inv_types / sizeof inv_types[0]));
}

static void draw_strategy(uint64_t *r, inv_case *k) {
  static const int kinds[] = {INV_S_MEGATRON, INV_S_MEGATRON, INV_S_MEGATRON, INV_S_DP,
                              INV_S_ZERO,     INV_S_EXPLICIT, INV_S_EXPLICIT};
  k->strat = kinds[inv_pick(r, 7)];
  k->tp = 1 << inv_pick(r, 4);
  k->pp = 1 << inv_pick(r, 3);
  k->dp = 1 << inv_pick(r, 4);
  k->mb = 1 << inv_pick(r, 3);
  k->vs = inv_pick(r, 4) == 0 ? 2 : 1;
  k->recompute = inv_pick(r, 3);
  k->zero = inv_pick(r, 4);
  k->allreduce = inv_pick(r, 5);
  k->micro_batches = 1 << inv_pick(r, 3);
  k->sp = k->tp > 1 && inv_pick(r, 2);
  k->overlap = inv_pick(r, 2);
  k->split_seed = inv_rng(r);
}

void inv_draw(uint64_t seed, inv_case *k) {
  uint64_t r = seed * 0x2545F4914F6CDD1Dull + 1;
  memset(k, 0, sizeof *k);
  draw_model(&r, k);
  draw_cluster(&r, k);
  draw_strategy(&r, k);
}

static cJSON *gen_tf(const inv_case *k) {
  psim_gen_tf_opts o;
  psim_status (*fn)(const psim_gen_tf_opts *, cJSON **) = psim_gen_gpt;
  if (k->model == INV_M_LLAMA) {
    psim_gen_llama_opts_init(&o);
    fn = psim_gen_llama;
  } else if (k->model == INV_M_BERT) {
    psim_gen_bert_opts_init(&o);
    fn = psim_gen_bert;
  } else if (k->model == INV_M_MOE) {
    psim_gen_moe_opts_init(&o);
    o.experts = k->experts;
    o.top_k = k->top_k;
    fn = psim_gen_moe;
  } else {
    psim_gen_gpt_opts_init(&o);
  }
  o.layers = k->layers;
  o.hidden = k->hidden;
  o.heads = k->heads;
  o.kv_heads = 0;
  o.seq = k->seq;
  o.vocab = k->vocab;
  o.batch = k->batch;
  o.ffn = k->model == INV_M_LLAMA ? 3 * k->hidden : 0;
  o.flash = k->flash && k->model != INV_M_BERT;
  cJSON *j = NULL;
  return fn(&o, &j) == PSIM_OK ? j : NULL;
}

static cJSON *gen_net(const inv_case *k) {
  psim_gen_net_opts o;
  cJSON *j = NULL;
  psim_status st;
  if (k->model == INV_M_MLP) {
    psim_gen_net_opts_init(&o, "mlp");
    o.layers = k->layers;
    o.hidden = k->hidden * 2;
    o.batch = k->batch;
    st = psim_gen_mlp(&o, &j);
  } else if (k->model == INV_M_RESNET) {
    psim_gen_net_opts_init(&o, "resnet");
    o.batch = k->batch;
    o.classes = 100;
    st = psim_gen_resnet(&o, &j);
  } else {
    psim_gen_net_opts_init(&o, "dlrm");
    o.batch = k->batch;
    o.tables = 2 + k->layers;
    o.rows = 1000 * k->hidden;
    o.emb_dim = k->hidden / 4;
    st = psim_gen_dlrm(&o, &j);
  }
  return st == PSIM_OK ? j : NULL;
}

/* A shipped model with its batch-role dim set to k->batch and, for blocks, repeat to layers. */
static cJSON *file_model(const inv_case *k) {
  const char *f = k->model == INV_M_FILE_MLP       ? "mlp.json"
                  : k->model == INV_M_FILE_ALEXNET ? "alexnet.json"
                                                   : "gpt-1.3b.json";
  char path[512];
  snprintf(path, sizeof path, "%s/models/%s", PSIM_SOURCE_ROOT, f);
  cJSON *j = NULL;
  if (psim_json_load_file(path, &j) != PSIM_OK)
    return NULL;
  cJSON *d;
  cJSON_ArrayForEach(d, cJSON_GetObjectItem(j, "dims")) {
    cJSON *role = cJSON_GetObjectItem(d, "role");
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "batch"))
      cJSON_ReplaceItemInObject(d, "size", cJSON_CreateNumber(k->batch));
  }
  cJSON *op;
  cJSON_ArrayForEach(op, cJSON_GetObjectItem(j, "ops")) {
    cJSON *rep = cJSON_GetObjectItem(op, "repeat");
    if (rep && k->model == INV_M_FILE_GPT13B)
      cJSON_ReplaceItemInObject(op, "repeat", cJSON_CreateNumber(k->layers));
  }
  return j;
}

cJSON *inv_model_json(const inv_case *k) {
  if (k->model <= INV_M_MOE)
    return gen_tf(k);
  if (k->model <= INV_M_DLRM)
    return gen_net(k);
  return file_model(k);
}

static cJSON *explicit_cluster(const inv_case *k) {
  char buf[64];
  cJSON *j = cJSON_CreateObject();
  cJSON_AddStringToObject(j, "format", "plansim.cluster/1");
  cJSON_AddStringToObject(j, "name", k->cluster == INV_C_RING ? "inv-ring" : "inv-star");
  cJSON *devs = cJSON_AddArrayToObject(j, "devices");
  cJSON *sw = cJSON_AddArrayToObject(j, "switches");
  cJSON *links = cJSON_AddArrayToObject(j, "links");
  cJSON_AddItemToArray(sw, cJSON_CreateString("sw"));
  int n = k->per_node;
  for (int i = 0; i < n; i++) {
    cJSON *d = cJSON_CreateObject();
    snprintf(buf, sizeof buf, "d%d", i);
    cJSON_AddStringToObject(d, "name", buf);
    cJSON_AddStringToObject(d, "type", inv_types[k->dev_type]);
    cJSON_AddNumberToObject(d, "node", 0);
    cJSON_AddItemToArray(devs, d);
    for (int l = 0; l < (k->cluster == INV_C_RING ? 2 : 1); l++) {
      cJSON *o = cJSON_CreateObject();
      char b2[16];
      snprintf(b2, sizeof b2, "d%d", (i + 1) % n);
      cJSON_AddStringToObject(o, "a", buf);
      cJSON_AddStringToObject(o, "b", l == 0 && k->cluster == INV_C_RING ? b2 : "sw");
      cJSON_AddNumberToObject(o, "bandwidth", (l == 0 ? k->link_gbs : 12.0) * 1e9);
      cJSON_AddNumberToObject(o, "latency", l == 0 ? 0.6e-6 : 2e-6);
      cJSON_AddStringToObject(o, "kind", l == 0 && k->cluster == INV_C_RING ? "nvlink" : "pcie");
      if (k->cluster == INV_C_RING && n == 2 && l == 0 && i == 1)
        cJSON_Delete(o); /* two devices: one ring link */
      else
        cJSON_AddItemToArray(links, o);
    }
  }
  return j;
}

cJSON *inv_cluster_json(const inv_case *k) {
  if (k->cluster != INV_C_PRESET)
    return explicit_cluster(k);
  psim_preset_opts o;
  psim_preset_opts_init(&o);
  o.preset = psim_preset_names()[k->preset];
  o.nodes = k->nodes;
  o.nics_per_node = k->nics;
  o.oversubscription = k->oversub;
  o.nodes_per_rack = k->nodes > 2 && k->oversub > 1 ? 2 : 0;
  cJSON *j = NULL;
  return psim_preset_cluster(&o, &j) == PSIM_OK ? j : NULL;
}
