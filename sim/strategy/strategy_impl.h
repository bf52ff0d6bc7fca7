/* strategy_impl.h - internals of the plansim.strategy/1 reader shared by
 * strategy_read.c (structure), strategy_devices.c (device lists),
 * overrides.c (per-op overrides) and strategy_load.c (expansion). */
#ifndef PSIM_STRATEGY_IMPL_H
#define PSIM_STRATEGY_IMPL_H

#include <cjson/cJSON.h>

#include "sim/core/json.h"
#include "sim/strategy/constraints.h"
#include "sim/strategy/strategy.h"

#define FORMAT      "plansim.strategy/1"
#define MAX_DEVICES (1 << 24) /* longest device list accepted */
#define MAX_DEGREE  (1 << 24)

typedef enum psim_strategy_form {
  FORM_EXPLICIT = 0,
  FORM_MEGATRON,
  FORM_DATA_PARALLEL,
  FORM_ZERO
} psim_strategy_form;

/* What a document says, before any model or cluster is known. */
typedef struct psim_strategy_spec {
  psim_strategy_form form;
  psim_megatron_opts mo; /* megatron; dp == 0 means "fill the cluster" */
  bool schedule_given;
  int32_t dp_n;          /* data_parallel / zero: 0 = all devices */
  int32_t micro_batches; /* data_parallel / zero / explicit pipeline */
  int32_t zero_stage;
  int32_t dp_shard;     /* templates' "dp_shard" (0: dp) */
  int32_t dp_replicate; /* the explicit form's "dp_replicate" (1: none) */
  int8_t async_tp;      /* "async_tp": PSIM_ASYNC_TP_STACK when not given */
  int8_t fp8;           /* "fp8": PSIM_FP8_MODEL when not given */
  psim_recompute recompute;
  int32_t recompute_every; /* psim_strategy's */
  psim_recompute_method recompute_method;
  int32_t recompute_layers;
  bool sequence_parallel, overlap_grad_reduce, overlap_param_gather;
  double bucket_bytes;
  bool bucket_given;
  double zero_prefetch; /* parameters */
  psim_allreduce_algo allreduce;
  psim_grad_sync sync;
  psim_ps_mode ps_mode;
  int32_t ps_backup_k, ps_replicas;
  psim_schedule schedule;
  int32_t virtual_stages;
  psim_mesh mesh;
  psim_template_info tmpl;
  const cJSON *mesh_devices, *layout, *stages, *ps_servers;
  const cJSON *layer_starts;  /* pipeline.layer_starts (the per-op layer override), or NULL */
  psim_constraints overrides; /* "ops": per-op overrides (constraints.h) */
  psim_checkpoint checkpoint;
} psim_strategy_spec;

/* Reads a device list: an array of indices or names, or a range object
 * {"first", "count", "stride"}. With cl == NULL only the syntax is checked
 * and *out is left NULL. Every device must be distinct. */
psim_status psim_strategy_read_devices(psim_jctx *c, const cJSON *v, const psim_cluster *cl,
                                       int32_t **out, int32_t *n);
/* Checks the syntax of the device list obj[key] when present (*out: it). */
psim_status psim_strategy_check_devices_key(psim_jctx *c, const cJSON *obj, const char *key,
                                            const cJSON **out);
/* An optional or required integer key in [min, max] into an int32_t. */
psim_status psim_strategy_int32_key(psim_jctx *c, const cJSON *obj, const char *key, bool required,
                                    int64_t min, int64_t max, int32_t *out);
/* What a document says (no model needed); psim_strategy_spec_destroy after. */
psim_status psim_strategy_read_spec(psim_jctx *c, const cJSON *root, psim_strategy_spec *sp);
void psim_strategy_spec_destroy(psim_strategy_spec *sp);
/* pipeline.layer_starts resolved against m's ops into s->op_layer (strategy_read.c). */
psim_status psim_strategy_apply_layer_starts(psim_jctx *c, const psim_strategy_spec *sp,
                                             const psim_model *m, psim_strategy *s);
/* The structure of root's "ops" into sp->overrides. */
psim_status psim_strategy_read_overrides(psim_jctx *c, const cJSON *root, psim_strategy_spec *sp);
/* The overrides applied to s over m's ops (after the mesh and layout). */
psim_status psim_strategy_apply_overrides(psim_jctx *c, const psim_strategy_spec *sp,
                                          psim_strategy *s, const psim_model *m, psim_cluster *cl);

#endif
