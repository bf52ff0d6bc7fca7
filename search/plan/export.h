/* export.h - plans into the configuration formats of training runtimes
 * (`plansim export`, docs/export.md).
 *
 * A plan (plansim.plan/1) holds the explicit strategy; exporters turn it into
 *   plansim    the plan itself (validated against docs/plan.schema.json);
 *   megatron   Megatron-LM command-line arguments;
 *   megatron-bridge  a Megatron-Bridge recipe override file (YAML);
 *   deepspeed  a DeepSpeed config JSON (deepspeed-pipeline: PipelineModule's arguments);
 *   gspmd      JAX-style PartitionSpecs per tensor over a named mesh (the
 *              plan's, or one inferred from a strategy given per op);
 *   torchtitan a torchtitan (v0.2.2) job config TOML;
 *   flexflow   always refused: no current FlexFlow release reads a strategy file.
 * An exporter never approximates: a plan the target cannot express (per-op
 * placements for Megatron, a GPT for torchtitan, ...) or a model the runtime
 * would build differently is refused with PSIM_EFAILED and a message naming the
 * op, option or model fact and why (export_facts.h). */
#ifndef PSIM_EXPORT_H
#define PSIM_EXPORT_H

#include <stddef.h>

#include "sim/core/strbuf.h"
#include "sim/ir/cluster.h"
#include "sim/ir/model.h"
#include "sim/strategy/strategy.h"

struct cJSON;

typedef enum psim_export_format {
  PSIM_EXPORT_PLANSIM = 0,
  PSIM_EXPORT_MEGATRON,
  PSIM_EXPORT_DEEPSPEED,
  PSIM_EXPORT_DEEPSPEED_PIPELINE, /* PipelineModule's arguments (a Python snippet) */
  PSIM_EXPORT_GSPMD,
  PSIM_EXPORT_TORCHTITAN,
  PSIM_EXPORT_FLEXFLOW, /* refused: nothing current reads a FlexFlow strategy (docs/export.md) */
  PSIM_EXPORT_MEGATRON_BRIDGE, /* a Megatron-Bridge recipe override file (YAML) */
  PSIM_EXPORT_COUNT
} psim_export_format;

/* "plansim", "megatron", ...; PSIM_EINPUT listing the names when unknown. */
psim_status psim_export_format_parse(const char *name, psim_export_format *out);
const char *psim_export_format_name(psim_export_format f);

/* A plan loaded with the model and cluster it was made for. */
typedef struct psim_plan_doc {
  struct cJSON *root; /* the plan document */
  psim_model model;
  psim_cluster cluster;
  psim_strategy strategy;          /* the plan's strategy expanded against model and cluster */
  char *model_file, *cluster_file; /* the files used (owned) */
} psim_plan_doc;

void psim_plan_doc_init(psim_plan_doc *d);
void psim_plan_doc_destroy(psim_plan_doc *d);
/* Loads plan_file and its model and cluster: model_file / cluster_file when
 * not NULL, else the plan's "model_file" / "cluster_file" keys (tried as
 * written, then relative to the plan's folder). PSIM_EINPUT when neither is
 * given or a file does not load; errors name the file. */
psim_status psim_plan_doc_load(const char *plan_file, const char *model_file,
                               const char *cluster_file, psim_plan_doc *d);

/* Exports the plan in format f. *text is NUL-terminated, owned by the caller
 * (psim_free), *len its length. PSIM_EFAILED with the reason when the format
 * cannot express the plan. O(ops * devices); gspmd of a strategy given per op
 * O(ops * devices * log devices) per candidate mesh, of which it tries a few
 * thousand at most (docs/export.md). */
psim_status psim_export(const psim_plan_doc *d, psim_export_format f, char **text, size_t *len);

/* The format an exported file's text shows (MEGATRON_ARGS, the Bridge header, [parallelism],
 * PipelineModule, partition_specs, train_batch_size, a plan); PSIM_EINPUT when none. O(length). */
psim_status psim_export_detect(const char *text, psim_export_format *f);
/* `export PLAN --check FILE`: reads text, a file exported in format f, into the settings its
 * runtime reads (flags, keys, arguments; comments and layout are not settings) and compares
 * them with those of d's own export in f. *report (owned, psim_free) lists the file's settings
 * and every difference (a setting missing, different or extra); *differences counts them. The
 * export's refusal (PSIM_EFAILED) when f cannot express the plan; PSIM_EINPUT when text is not
 * of format f. O(settings^2 + export). */
psim_status psim_export_check(const psim_plan_doc *d, psim_export_format f, const char *text,
                              char **report, size_t *len, int32_t *differences);

/* The Megatron-LM parameters a strategy equals, if any: tp, pp, dp,
 * micro_batch (per data-parallel rank) and virtual_stages in o. The strategy
 * must equal psim_strategy_megatron of those parameters op for op (splits,
 * replicas, devices, stages). PSIM_EFAILED with the first difference
 * otherwise. O(candidates * ops * devices). */
psim_status psim_export_match_megatron(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                                       psim_megatron_opts *o);

/* ---- names in the target languages (export_text.c) ---- */

/* PSIM_EINPUT (exit 2) when name is not valid UTF-8 or holds a control
 * character (U+0000-U+001F, U+007F): no exporter can write it safely (a
 * newline would end a comment of the Megatron script and start a command).
 * The message names what ("model name") and shows the name escaped. O(length). */
psim_status psim_export_check_name(const char *what, const char *name);
/* psim_export_check_name of every name an exporter may write (model, cluster,
 * device types, dims, tensors, ops). O(total name length). */
psim_status psim_export_check_names(const psim_model *m, const psim_cluster *c);
/* s for messages and terminals: control bytes and backslashes as \xNN, cut
 * to fit size (>= 8) bytes with its NUL. */
void psim_export_printable(const char *s, char *out, size_t size);
/* Appends s as one POSIX shell word: as is when it holds only
 * [A-Za-z0-9._+-/:@%=,], else in single quotes with each ' written '\''. */
void psim_export_shell_quote(psim_sb *b, const char *s);
/* Appends s as a protobuf text-format string literal: in double quotes, " and
 * \ escaped with a backslash, control bytes as octal \NNN. No exporter writes protobuf text
 * since the FlexFlow exporter was dropped; kept for tests/fuzz/fuzz_export.c. */
void psim_export_proto_quote(psim_sb *b, const char *s);
/* Appends s as a TOML 1.0 basic string: in double quotes, " and \ escaped with a backslash,
 * control bytes as \u00XX. */
void psim_export_toml_quote(psim_sb *b, const char *s);

#endif
