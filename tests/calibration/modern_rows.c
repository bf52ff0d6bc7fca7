/* modern_rows.c - the four modern sources read into modern_row, one reader per
 * source. Every field comes from the row (or from the source's header, cited
 * in the comment); nothing is fitted here. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "modern.h"

static int64_t geti(const modern_csv *c, const char *k, int64_t dflt) {
  const char *v = modern_csv_get(c, k);
  char *end;
  long long x = strtoll(v, &end, 10);
  return end != v ? (int64_t)x : dflt;
}

static double getd(const modern_csv *c, const char *k) {
  const char *v = modern_csv_get(c, k);
  char *end;
  double x = strtod(v, &end);
  return end != v ? x : 0;
}

static bool has(const char *hay, const char *needle) {
  size_t n = strlen(needle);
  for (const char *p = hay; *p; p++)
    if (strncasecmp(p, needle, n) == 0)
      return true;
  return false;
}

static void copy(char *dst, size_t cap, const char *src) {
  snprintf(dst, cap, "%s", src);
}

static modern_row *push(modern_rows *rows) {
  if (rows->n == rows->cap) {
    int cap = rows->cap ? 2 * rows->cap : 256;
    modern_row *v = realloc(rows->v, (size_t)cap * sizeof *v);
    if (!v) {
      fprintf(stderr, "psim-calibrate-modern: out of memory\n");
      exit(2);
    }
    rows->v = v;
    rows->cap = cap;
  }
  modern_row *r = &rows->v[rows->n++];
  memset(r, 0, sizeof *r);
  r->tp = r->pp = r->vp = r->cp = 1;
  return r;
}

/* Columns every source shares: model, gpus, architecture, seq, parallel degrees. */
static void common(const modern_csv *c, modern_row *r) {
  copy(r->model, sizeof r->model, modern_csv_get(c, "model"));
  copy(r->gpu, sizeof r->gpu, modern_csv_get(c, "gpu"));
  r->gpus = (int32_t)geti(c, "gpus", 0);
  r->layers = geti(c, "layers", 0);
  r->hidden = geti(c, "hidden", 0);
  r->heads = geti(c, "heads", 0);
  r->kv_heads = geti(c, "kv_heads", r->heads);
  r->ffn = geti(c, "ffn_hidden", 0);
  r->vocab = geti(c, "vocab", 0);
  r->seq = geti(c, "seq", 0);
  r->batch = geti(c, "global_batch", 0);
  r->tp = (int32_t)geti(c, "tp", 1);
  r->pp = (int32_t)geti(c, "pp", 1);
  r->cp = (int32_t)geti(c, "cp", 1);
  r->vp = (int32_t)geti(c, "vp", 1); /* "n/a" and empty: no interleaving */
  r->micro_batch = (int32_t)geti(c, "micro_batch", 0);
  r->measured = getd(c, "tokens_per_s_per_gpu");
  int64_t per = (int64_t)r->tp * r->pp * r->cp;
  r->dp = per > 0 ? (int32_t)(r->gpus / per) : 0;
}

/* llm-foundry: MPT through Composer's PyTorch FSDP; FULL_SHARD = ZeRO-3,
 * SHARD_GRAD_OP = ZeRO-2; recompute full or none; amp_fp8 = TE FP8 linears. */
static void read_foundry(const modern_csv *c, modern_row *r) {
  common(c, r);
  r->family = MF_MPT;
  r->zero = has(modern_csv_get(c, "fsdp"), "SHARD_GRAD_OP") ? 2 : 3;
  r->recompute = strcmp(modern_csv_get(c, "recompute"), "full") == 0 ? PSIM_RECOMPUTE_FULL
                                                                     : PSIM_RECOMPUTE_NONE;
  copy(r->precision, sizeof r->precision, modern_csv_get(c, "precision"));
  r->fp8 = has(r->precision, "fp8");
  copy(r->note, sizeof r->note, modern_csv_get(c, "source_table"));
}

/* torchtitan: FSDP2 (ZeRO-3) over dp, TP, PP (#microbatches = #stages, the
 * torchtitan default at the benchmark commits), CP; Float8 linears. */
static void read_titan(const modern_csv *c, modern_row *r) {
  common(c, r);
  r->family = MF_LLAMA;
  r->zero = 3;
  const char *rc = modern_csv_get(c, "recompute");
  /* selective "op" (the 8B tomls' selective_ac_option) is torchtitan's op-level
   * policy (PSIM_RECOMPUTE_OP); selective "layer" is its layer-level one, every
   * selective_ac_option-th block fully checkpointed, "2" by default
   * (torchtitan/config_manager.py at 157a12c56, the legacy rows' commit) */
  bool layer = has(rc, "selective") && has(rc, "layer");
  r->recompute = has(rc, "full") || layer                ? PSIM_RECOMPUTE_FULL
                 : has(rc, "selective") && has(rc, "op") ? PSIM_RECOMPUTE_OP
                 : has(rc, "selective")                  ? PSIM_RECOMPUTE_SELECTIVE
                                                         : PSIM_RECOMPUTE_NONE;
  r->recompute_every = layer ? 2 : 0;
  int64_t local = geti(c, "local_batch", 0);
  /* multi-stage (interleaved) schedules: 2 stages per rank unless split points are
   * given, and #microbatches = #stages in all (torchtitan's generate_split_points and
   * build_pipeline_schedule, torchtitan/parallelisms/pipelining_utils.py at 9dec370) */
  if (r->pp > 1 && has(modern_csv_get(c, "pp_schedule"), "interleaved"))
    r->vp = 2;
  int64_t n_micro = r->pp > 1 ? (int64_t)r->pp * r->vp : 1;
  r->micro_batch = (int32_t)(local / n_micro);
  r->dp = (int32_t)geti(c, "dp", r->dp);
  r->sp = r->tp > 1; /* torchtitan's TP plan shards norms on the sequence */
  copy(r->precision, sizeof r->precision, modern_csv_get(c, "precision"));
  r->fp8 = has(r->precision, "float8");
  r->hbm2e_96g = strncmp(r->gpu, "H100", 4) == 0;
  /* torch_compile empty (the 2024-08 rows): the toml of that commit compiles */
  r->eager = strcmp(modern_csv_get(c, "torch_compile"), "no") == 0;
  r->async_tp = strcmp(modern_csv_get(c, "async_tp"), "yes") == 0;
  r->fp8_rowwise = r->fp8 && has(r->precision, "rowwise");
  /* FSDP float8 all-gather: stated (the H200 rows), or the 405B rows' toml at their
   * commits (train_configs/llama3_405b.toml [float8] enable_fsdp_float8_all_gather = true
   * at 3faaa1a0d and 9dec370, beside the rows' batch 2, TP 8, full AC, async TP) */
  r->fp8_all_gather = r->fp8 && (has(r->precision, "float8 all-gather") || has(r->model, "405B"));
  snprintf(r->note, sizeof r->note, "%s%s%s", modern_csv_get(c, "table"),
           strcmp(modern_csv_get(c, "torch_compile"), "yes") == 0 ? ", compile" : "",
           strcmp(modern_csv_get(c, "async_tp"), "yes") == 0 ? ", async TP" : "");
}

/* Megatron-Bridge: Megatron-Core; fsdp > 0 = Megatron-FSDP (ZeRO-3), else the
 * distributed optimizer (ZeRO-1); sequence parallelism with TP (the perf
 * recipes); recompute is not given by the tables (none assumed). */
static void read_bridge(const modern_csv *c, modern_row *r) {
  common(c, r);
  r->family = MF_LLAMA;
  r->zero = geti(c, "fsdp", 0) > 0 ? 3 : 1;
  r->sp = r->tp > 1;
  copy(r->precision, sizeof r->precision, modern_csv_get(c, "precision"));
  r->fp8 = has(r->precision, "FP8");
  snprintf(r->note, sizeof r->note, "%s", modern_csv_get(c, "release"));
  const char *ov = modern_csv_get(c, "recipe_preset_overrides");
  if (strcmp(modern_csv_get(c, "task"), "Pre-Training") != 0)
    snprintf(r->unsupported, sizeof r->unsupported, "fine-tuning task (%s)",
             modern_csv_get(c, "task"));
  else if (geti(c, "num_experts", 0) > 0)
    modern_moe_read(c, r); /* issue 21: its own source, megatron-bridge-moe */
  else if (has(r->precision, "FP4"))
    snprintf(r->unsupported, sizeof r->unsupported, "fp4 dtype (%s) in the model IR", r->precision);
  else if (has(ov, "cpu_offloading"))
    snprintf(r->unsupported, sizeof r->unsupported, "activation CPU offloading");
}

/* MLPerf GPT-3 175B: NeMo / Megatron-Core, distributed optimizer (ZeRO-1),
 * sequence parallelism, FP8 (TE), no recompute (header of the CSV). The
 * vocabulary is not stated: 51200 assumed (GPT-2's 50257 padded as Megatron). */
static void read_mlperf(const modern_csv *c, modern_row *r) {
  common(c, r);
  copy(r->gpu, sizeof r->gpu, modern_csv_get(c, "accelerator"));
  r->family = MF_GPT;
  r->vocab = r->vocab ? r->vocab : 51200;
  r->zero = 1;
  r->sp = true;
  r->fp8 = true;
  copy(r->precision, sizeof r->precision, "FP8 (TE hybrid)");
  snprintf(r->note, sizeof r->note, "%s %s %s", modern_csv_get(c, "version"),
           modern_csv_get(c, "submitter"), modern_csv_get(c, "system_dir"));
  r->duplicate = *modern_csv_get(c, "duplicate_of") != '\0';
  if (!*modern_csv_get(c, "tp"))
    snprintf(r->unsupported, sizeof r->unsupported, "parallel layout not published");
}

typedef struct source {
  const char *file, *name, *stack;
  void (*read)(const modern_csv *, modern_row *);
} source;

static const source sources[] = {
    {"llm_foundry_mpt_benchmarks.csv", "llm-foundry", "llm-foundry-fsdp", read_foundry},
    {"torchtitan_benchmarks.csv", "torchtitan", "pytorch-fsdp2", read_titan},
    {"megatron_bridge_perf_summary.csv", "megatron-bridge", "megatron-core", read_bridge},
    {"mlperf_gpt3_175b.csv", "mlperf-gpt3", "megatron-core", read_mlperf},
    {NULL, NULL, NULL, NULL}};

int modern_read_all(const char *dir, modern_rows *rows) {
  int missing = 0;
  for (const source *s = sources; s->file; s++) {
    modern_csv c;
    if (!modern_csv_open(&c, dir, s->file)) {
      missing++;
      continue;
    }
    for (int line = 1; modern_csv_next(&c); line++) {
      modern_row *r = push(rows);
      r->source = s->name;
      r->stack = s->stack;
      r->line = line;
      r->heldout = line % 4 == 0; /* every fourth row of each source: never fitted on */
      s->read(&c, r);
    }
    modern_csv_close(&c);
  }
  return missing;
}

void modern_rows_destroy(modern_rows *rows) {
  free(rows->v);
  rows->v = NULL;
  rows->n = rows->cap = 0;
}

/* GPU strings of the sources -> cluster presets (topologies/presets.c). */
static const struct {
  const char *prefix, *preset, *generation;
} gpu_map[] = {
    {"h100", "dgx-h100", "Hopper"},        {"NVIDIA H100", "dgx-h100", "Hopper"},
    {"h200", "dgx-h200", "Hopper"},        {"a100_80", "dgx-a100-80g", "Ampere"},
    {"A100 80", "dgx-a100-80g", "Ampere"}, {"a100_40", "dgx-a100-40g", "Ampere"},
    {"b200", "dgx-b200", "Blackwell"},     {"NVIDIA Blackwell GPU (B200", "dgx-b200", "Blackwell"},
    {"gb200", "gb200-nvl72", "Blackwell"}, {"gb300", "gb300-nvl72", "Blackwell"},
    {"b300", "dgx-b300", "Blackwell"},     {NULL, NULL, NULL}};

static int find_gpu(const char *gpu) {
  for (int i = 0; gpu_map[i].prefix; i++)
    if (strncasecmp(gpu, gpu_map[i].prefix, strlen(gpu_map[i].prefix)) == 0)
      return i;
  return -1;
}

const char *modern_preset_of(const char *gpu) {
  int i = find_gpu(gpu);
  return i < 0 ? NULL : gpu_map[i].preset;
}

const char *modern_generation(const char *gpu) {
  int i = find_gpu(gpu);
  return i < 0 ? "other" : gpu_map[i].generation;
}
