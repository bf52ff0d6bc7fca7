/* stack.c - software stack profiles: the built-in table (docs/stacks.md gives
 * each value's source) and the plansim.stack/1 reader. */
#include "sim/ir/stack.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "sim/core/json.h"

#define FORMAT "plansim.stack/1"

/* ---- the built-in profiles -------------------------------------------------
 * megatron-lm-2021: the zero value (the calibrated stack, unchanged).
 * megatron-core: Megatron-Core + Transformer Engine as Megatron-Bridge and NeMo
 *   run it: cuDNN fused attention on Hopper (TE selects FusedAttention, the
 *   FlashAttention-3-class kernel; FlashAttention-2 on Ampere), LayerNormLinear and
 *   bias-SwiGLU fusion, FP8 through TE's fused cast-transpose (read 2 B, write the
 *   FP8 copy and its transpose: 4 B per element; amax/scale updates fused into one
 *   kernel per step, so no per-GEMM scaling time), the distributed optimizer's fused
 *   Adam, overlap of DP reduce-scatter/all-gather, TP communication overlap, P2P
 *   overlap and CUDA graphs (Megatron-Bridge recipes' comm_overlap settings).
 * pytorch-fsdp2: torchtitan: SDPA's flash backend (FlashAttention-2 kernels in
 *   PyTorch 2.x), torch.compile fusing RMSNorm and SwiGLU (its Python RMSNorm and
 *   SwiGLU run eager, op by op, without compile: costdb/cost.c), torchao Float8Linear with
 *   dynamic tensorwise scaling (an amax pass and a cast pass: read 2 + read 2 +
 *   write 1 = 5 B per element), torch fused AdamW, FSDP2 prefetch overlap; with
 *   tensor parallelism torchao's Float8ColwiseParallel / PrepareFloat8ModuleInput
 *   cast a tensorwise Float8 linear's input to FP8 before its all-gather
 *   (fp8_tp_all_gather; torchtitan applies them whenever Float8 is on with TP at
 *   3faaa1a0d, 9dec370 and 820504e, the benchmark commits, and for tensorwise
 *   recipes only at v0.2.2: models/llama3/infra/parallelize.py).
 * llm-foundry-fsdp: MPT on composer FSDP: FlashAttention-2 (attn_impl flash), eager
 *   low-precision LayerNorm and GELU (no fused kernels), FP8 through TE linears
 *   (cast-transpose, 4 B) and composer's DecoupledAdamW (a per-tensor loop of torch
 *   ops, the foreach traffic), FSDP prefetch overlap.
 * deepspeed: ZeRO with overlap_comm, DeepSpeed FusedAdam (multi-tensor, fp32
 *   master weights: the Megatron traffic), FlashAttention-2 through the model code.
 * FITTED (launch_s per stack; gemm_scale / attn_scale per stack and device type, the
 *   stack's own for device types with fewer than 4 fitted rows) by
 *   tests/calibration/fit_modern.py on the modern public rows that are not held out
 *   (every fourth row of each source is; MLPerf rows left out, their error being
 *   the network model's), docs/accuracy-modern.md: megatron-core 5 us per kernel
 *   (CUDA graphs remove most launch gaps: below the 21.56 us of eager Megatron-LM);
 *   llm-foundry-fsdp 95 us (eager PyTorch with FSDP hooks, host-bound on small
 *   kernels); pytorch-fsdp2 5 us, the grid's floor, once its eager RMSNorm / SwiGLU
 *   kernels are counted one by one (costdb/cost.c). deepspeed has no public rows
 *   here: nothing fitted. */
static const psim_stack builtin[] = {
    {.name = "megatron-lm-2021"},
    {.name = "megatron-core",
     .launch_s = 5e-6,
     .flash_version = 3,
     .attn_scale = 0.40,
     .gemm_scale = 1.06,
     .fused_norm = true,
     .fused_act = true,
     .fp8_cast_bytes = 4,
     .optimizer = PSIM_OPTIM_FUSED,
     .dp_bucket = PSIM_BUCKET_MCORE,
     .wave_quant = true,
     .dp_overlap = true,
     /* TE userbuffers (tp_comm_overlap): every Megatron-Bridge Llama-3-70B recipe and every
      * MLPerf GPT-3 config runs it (docs/stacks.md tp_overlap); 16 SMs: TE's default num_sm for
      * the pipelined reduce-scatter (base.py initialize_ub get_default_config @ d0067d0d) */
     .tp_overlap = true,
     .tp_overlap_bwd = true, /* TE's backward pairs (docs/stacks.md tp_overlap_bwd) */
     .comm_sms = 16,
     .pp_overlap = true,
     .cuda_graphs = true,
     .moe_dispatch_sync = true,      /* token_dispatcher.py, fused_a2a.py (docs/stacks.md) */
     .moe_grouped_host_calls = true, /* TE grouped_linear.py (docs/stacks.md) */
     .moe_multihot_sync = true,      /* token_dispatcher.py _DeepepManager (docs/stacks.md) */
     /* refit with tp_overlap on (session 22) and its backward pairs (session 23,
      * docs/accuracy.md): the h100 rows cannot tell attention from GEMM time (one layout),
      * so attention stays at the published FA3 rate */
     .fit = {{"h100", 1.00, 1.02}, {"gb200", 0.425, 0.94}, {"gb300", 0.425, 1.28}},
     .n_fit = 3},
    {.name = "pytorch-fsdp2",
     .launch_s = 5e-6,
     .flash_version = 2,
     .attn_scale = 0.675,
     .gemm_scale = 0.96,
     .fp8_cast_bytes = 5,
     .fp8_tp_all_gather = true,
     .optimizer = PSIM_OPTIM_TORCH_FUSED,
     .wave_quant = true,
     .dp_overlap = true,
     .compile = true,
     .fit = {{"a100-80g", 1.30, 0.92}, {"h100", 0.675, 0.92}},
     .n_fit = 2},
    {.name = "llm-foundry-fsdp",
     .launch_s = 95e-6,
     .flash_version = 2,
     .attn_scale = 0.60,
     .gemm_scale = 0.94,
     .fp8_cast_bytes = 4,
     .optimizer = PSIM_OPTIM_FOREACH,
     .wave_quant = true,
     .dp_overlap = true,
     .fit = {{"h100", 0.625, 0.92}},
     .n_fit = 1},
    {.name = "deepspeed",
     .flash_version = 2,
     .fp8_cast_bytes = 4,
     .optimizer = PSIM_OPTIM_FUSED,
     .wave_quant = true,
     .dp_overlap = true},
};
enum { N_BUILTIN = sizeof builtin / sizeof builtin[0] };

const char *const *psim_stack_builtin_names(void) {
  static const char *names[N_BUILTIN + 1];
  for (int i = 0; i < N_BUILTIN; i++)
    names[i] = builtin[i].name;
  return names;
}

psim_status psim_stack_builtin(const char *name, psim_stack *s) {
  for (int i = 0; i < N_BUILTIN; i++)
    if (strcmp(builtin[i].name, name) == 0) {
      *s = builtin[i];
      return PSIM_OK;
    }
  return psim_error(PSIM_EINPUT,
                    "unknown software stack '%.80s' (built-in: megatron-lm-2021, megatron-core, "
                    "pytorch-fsdp2, llm-foundry-fsdp, deepspeed; or a plansim.stack/1 file)",
                    name);
}

const char *psim_stack_name(const psim_stack *s) {
  return s->name[0] ? s->name : "megatron-lm-2021";
}

static const char *const optim_names[] = {"fused", "torch-fused", "foreach"};

const char *psim_optim_impl_name(psim_optim_impl o) {
  return (unsigned)o < 3 ? optim_names[o] : "?";
}

double psim_stack_bucket_params(const psim_stack *s, int32_t dp) {
  /* Megatron-Core DistributedDataParallel: bucket_size = max(40000000, 1000000 * dp)
   * parameters when the config gives none (distributed_data_parallel.py, core_r0.8.0 and
   * later; distributed_data_parallel_config.py documents it) */
  return s->dp_bucket == PSIM_BUCKET_MCORE ? fmax(4e7, 1e6 * (double)dp) : 0;
}

void psim_stack_scales(const psim_stack *s, const char *type, double *attn, double *gemm) {
  *attn = s->attn_scale > 0 ? s->attn_scale : 1.0;
  *gemm = s->gemm_scale > 0 ? s->gemm_scale : 1.0;
  for (int32_t i = 0; type && i < s->n_fit; i++)
    if (strcmp(s->fit[i].type, type) == 0) {
      *attn = s->fit[i].attn_scale > 0 ? s->fit[i].attn_scale : *attn;
      *gemm = s->fit[i].gemm_scale > 0 ? s->fit[i].gemm_scale : *gemm;
    }
}

/* ---- plansim.stack/1 ------------------------------------------------------- */

static psim_status read_fit(psim_jctx *j, const cJSON *o, psim_stack *s) {
  const cJSON *fit = cJSON_GetObjectItemCaseSensitive(o, "fit");
  if (!fit)
    return PSIM_OK;
  size_t sv = psim_jctx_key(j, "fit");
  PSIM_CHECK(psim_json_expect_object(j, fit));
  static const char *const keys[] = {"attn_scale", "gemm_scale", NULL};
  s->n_fit = 0;
  for (const cJSON *e = fit->child; e; e = e->next) {
    size_t se = psim_jctx_key(j, e->string);
    if (s->n_fit == PSIM_STACK_FIT_MAX || strlen(e->string) >= sizeof s->fit[0].type)
      return psim_jerr(j, "at most %d device types of at most %zu characters", PSIM_STACK_FIT_MAX,
                       sizeof s->fit[0].type - 1);
    struct psim_stack_fit *f = &s->fit[s->n_fit];
    memset(f, 0, sizeof *f);
    snprintf(f->type, sizeof f->type, "%s", e->string);
    PSIM_CHECK(psim_json_check_keys(j, e, keys));
    PSIM_CHECK(psim_json_number(j, e, "attn_scale", false, 0.01, 10, &f->attn_scale));
    PSIM_CHECK(psim_json_number(j, e, "gemm_scale", false, 0.01, 10, &f->gemm_scale));
    s->n_fit++;
    psim_jctx_pop(j, se);
  }
  psim_jctx_pop(j, sv);
  return PSIM_OK;
}

/* The MoE token dispatcher (docs/stacks.md, "moe_dispatcher"). */
static psim_status read_dispatcher(psim_jctx *j, const cJSON *o, psim_stack *s) {
  static const char *const names[] = {"alltoall", "deepep", "hybridep"};
  const char *d = NULL;
  PSIM_CHECK(psim_json_string(j, o, "moe_dispatcher", false, &d));
  if (!d)
    return PSIM_OK;
  for (int i = 0; i < 3; i++)
    if (strcmp(d, names[i]) == 0) {
      s->moe_dispatcher = (psim_moe_dispatcher)i;
      return PSIM_OK;
    }
  psim_jctx_key(j, "moe_dispatcher");
  return psim_jerr(j, "expected \"alltoall\", \"deepep\" or \"hybridep\", found \"%.40s\"", d);
}

/* The optimizer's implementation and the default gradient bucket rule. */
static psim_status read_optimizer(psim_jctx *j, const cJSON *o, psim_stack *s) {
  const char *opt = NULL;
  const char *rule = NULL;
  PSIM_CHECK(psim_json_string(j, o, "dp_bucket_rule", false, &rule));
  if (rule && (strcmp(rule, "ddp") == 0 || strcmp(rule, "megatron-core") == 0))
    s->dp_bucket = strcmp(rule, "ddp") == 0 ? PSIM_BUCKET_DDP : PSIM_BUCKET_MCORE;
  else if (rule) {
    psim_jctx_key(j, "dp_bucket_rule");
    return psim_jerr(j, "expected \"ddp\" or \"megatron-core\", found \"%.40s\"", rule);
  }
  PSIM_CHECK(read_dispatcher(j, o, s));
  PSIM_CHECK(psim_json_string(j, o, "optimizer", false, &opt));
  if (!opt)
    return PSIM_OK;
  for (int i = 0; i < 3; i++)
    if (strcmp(opt, optim_names[i]) == 0) {
      s->optimizer = (psim_optim_impl)i;
      return PSIM_OK;
    }
  psim_jctx_key(j, "optimizer");
  return psim_jerr(j, "expected \"fused\", \"torch-fused\" or \"foreach\", found \"%.40s\"", opt);
}

static psim_status read_flags(psim_jctx *j, const cJSON *o, psim_stack *s) {
  PSIM_CHECK(psim_json_bool(j, o, "fused_norm", false, &s->fused_norm));
  PSIM_CHECK(psim_json_bool(j, o, "fused_act", false, &s->fused_act));
  PSIM_CHECK(psim_json_bool(j, o, "wave_quantisation", false, &s->wave_quant));
  PSIM_CHECK(psim_json_bool(j, o, "dp_overlap", false, &s->dp_overlap));
  PSIM_CHECK(psim_json_bool(j, o, "tp_overlap", false, &s->tp_overlap));
  PSIM_CHECK(psim_json_bool(j, o, "tp_overlap_bwd", false, &s->tp_overlap_bwd));
  PSIM_CHECK(psim_json_bool(j, o, "pp_overlap", false, &s->pp_overlap));
  PSIM_CHECK(psim_json_bool(j, o, "cuda_graphs", false, &s->cuda_graphs));
  PSIM_CHECK(psim_json_bool(j, o, "compile", false, &s->compile));
  PSIM_CHECK(psim_json_bool(j, o, "fp8_all_gather", false, &s->fp8_all_gather));
  PSIM_CHECK(psim_json_bool(j, o, "grad_reduce_bf16", false, &s->grad_reduce_bf16));
  PSIM_CHECK(psim_json_bool(j, o, "fp8_tp_all_gather", false, &s->fp8_tp_all_gather));
  PSIM_CHECK(psim_json_bool(j, o, "moe_dispatch_sync", false, &s->moe_dispatch_sync));
  PSIM_CHECK(psim_json_bool(j, o, "moe_grouped_host_calls", false, &s->moe_grouped_host_calls));
  PSIM_CHECK(psim_json_bool(j, o, "moe_multihot_sync", false, &s->moe_multihot_sync));
  PSIM_CHECK(psim_json_bool(j, o, "moe_a2a_overlap", false, &s->moe_a2a_overlap));
  const char *scaling = NULL;
  PSIM_CHECK(psim_json_string(j, o, "fp8_scaling", false, &scaling));
  if (scaling && strcmp(scaling, "rowwise") != 0 && strcmp(scaling, "tensorwise") != 0) {
    psim_jctx_key(j, "fp8_scaling");
    return psim_jerr(j, "expected \"tensorwise\" or \"rowwise\", found \"%.40s\"", scaling);
  }
  if (scaling)
    s->fp8_rowwise = strcmp(scaling, "rowwise") == 0;
  int64_t v = s->comm_sms;
  PSIM_CHECK(psim_json_int(j, o, "comm_sms", false, 0, 1024, &v));
  s->comm_sms = (int32_t)v;
  v = s->flash_version;
  PSIM_CHECK(psim_json_int(j, o, "flash_attention", false, 0, 3, &v));
  if (v == 1) {
    psim_jctx_key(j, "flash_attention");
    return psim_jerr(j, "expected 0 (GEMM curve), 2 or 3");
  }
  s->flash_version = (int32_t)v;
  return PSIM_OK;
}

static psim_status read_numbers(psim_jctx *j, const cJSON *o, psim_stack *s) {
  PSIM_CHECK(psim_json_quantity(j, o, "launch_overhead", false, PSIM_UNIT_TIME, &s->launch_s));
  PSIM_CHECK(psim_json_quantity(j, o, "fp8_scale_time", false, PSIM_UNIT_TIME, &s->fp8_scale_s));
  PSIM_CHECK(psim_json_number(j, o, "fp8_cast_bytes", false, 0, 64, &s->fp8_cast_bytes));
  PSIM_CHECK(psim_json_number(j, o, "attn_scale", false, 0.01, 10, &s->attn_scale));
  PSIM_CHECK(psim_json_number(j, o, "gemm_scale", false, 0.01, 10, &s->gemm_scale));
  if (s->launch_s < 0 || s->launch_s > 1e-2 || s->fp8_scale_s < 0 || s->fp8_scale_s > 1e-2)
    return psim_jerr(j, "launch_overhead and fp8_scale_time must be in [0, 10 ms]");
  return PSIM_OK;
}

static psim_status from_json(psim_jctx *j, const cJSON *o, psim_stack *s) {
  static const char *const keys[] = {"format",
                                     "name",
                                     "base",
                                     "description",
                                     "sources",
                                     "fused_norm",
                                     "fused_act",
                                     "wave_quantisation",
                                     "dp_overlap",
                                     "tp_overlap",
                                     "tp_overlap_bwd",
                                     "pp_overlap",
                                     "cuda_graphs",
                                     "compile",
                                     "fp8_scaling",
                                     "fp8_all_gather",
                                     "grad_reduce_bf16",
                                     "fp8_tp_all_gather",
                                     "moe_dispatch_sync",
                                     "moe_grouped_host_calls",
                                     "moe_multihot_sync",
                                     "moe_a2a_overlap",
                                     "moe_dispatcher",
                                     "comm_sms",
                                     "flash_attention",
                                     "launch_overhead",
                                     "fp8_scale_time",
                                     "fp8_cast_bytes",
                                     "attn_scale",
                                     "gemm_scale",
                                     "optimizer",
                                     "dp_bucket_rule",
                                     "fit",
                                     NULL};
  PSIM_CHECK(psim_json_check_keys(j, o, keys));
  const char *format = NULL, *name = NULL, *base = "megatron-lm-2021";
  PSIM_CHECK(psim_json_string(j, o, "format", true, &format));
  if (strcmp(format, FORMAT) != 0) {
    psim_jctx_key(j, "format");
    return psim_jerr(j, "expected \"" FORMAT "\", found \"%.80s\"", format);
  }
  PSIM_CHECK(psim_json_string(j, o, "base", false, &base));
  if (psim_stack_builtin(base, s) != PSIM_OK) {
    psim_jctx_key(j, "base");
    return psim_jerr(j, "unknown built-in stack \"%.80s\"", base);
  }
  PSIM_CHECK(psim_json_string(j, o, "name", true, &name));
  snprintf(s->name, sizeof s->name, "%s", name);
  PSIM_CHECK(read_flags(j, o, s));
  PSIM_CHECK(read_numbers(j, o, s));
  PSIM_CHECK(read_optimizer(j, o, s));
  return read_fit(j, o, s);
}

psim_status psim_stack_from_json(const char *file, const cJSON *root, psim_stack *s) {
  psim_jctx j;
  psim_jctx_init(&j, file);
  PSIM_CHECK(psim_json_expect_object(&j, root));
  psim_stack tmp;
  memset(&tmp, 0, sizeof tmp);
  PSIM_CHECK(from_json(&j, root, &tmp));
  *s = tmp;
  return PSIM_OK;
}

psim_status psim_stack_from_value(struct psim_jctx *j, const cJSON *v, psim_stack *s) {
  if (cJSON_IsString(v)) {
    const char *n = v->valuestring;
    if (strchr(n, '/') || strstr(n, ".json"))
      return psim_stack_select(n, s); /* the file's own errors name it */
    for (int i = 0; i < N_BUILTIN; i++)
      if (strcmp(builtin[i].name, n) == 0) {
        *s = builtin[i];
        return PSIM_OK;
      }
    return psim_jerr(j, "unknown software stack \"%.80s\" (docs/stacks.md)", n);
  }
  if (!cJSON_IsObject(v))
    return psim_jerr(j, "expected a stack name, a plansim.stack/1 file or a profile object");
  psim_stack tmp;
  memset(&tmp, 0, sizeof tmp);
  PSIM_CHECK(from_json(j, v, &tmp));
  *s = tmp;
  return PSIM_OK;
}

psim_status psim_stack_from_key(struct psim_jctx *j, const cJSON *obj, psim_stack *s) {
  const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "stack");
  if (!v)
    return PSIM_OK;
  size_t sv = psim_jctx_key(j, "stack");
  PSIM_CHECK(psim_stack_from_value(j, v, s));
  psim_jctx_pop(j, sv);
  return PSIM_OK;
}

psim_status psim_stack_select(const char *name_or_file, psim_stack *s) {
  if (!strchr(name_or_file, '/') && !strstr(name_or_file, ".json"))
    return psim_stack_builtin(name_or_file, s);
  cJSON *root = NULL;
  PSIM_CHECK(psim_json_load_file(name_or_file, &root));
  psim_status st = psim_stack_from_json(name_or_file, root, s);
  cJSON_Delete(root);
  return st;
}
