/* export_impl.h - what the exporters share (private to search/export*.c). */
#ifndef PSIM_EXPORT_IMPL_H
#define PSIM_EXPORT_IMPL_H

#include <stdbool.h>
#include <stddef.h>

#include "search/plan/export.h"

struct cJSON;

/* A JSON document as formatted text ending in a newline (2-space indent via
 * cJSON's tabs); *text is owned by the caller. */
psim_status psim_export_json_text(const struct cJSON *root, char **text, size_t *len);

/* "split f:2, 1 replicas, devices 0.." for messages. */
void psim_export_fmt_config(const psim_model *m, int32_t o, const psim_op_config *c, char *buf,
                            size_t size);
/* Same degrees, replicas, stage and devices (in order). */
bool psim_export_config_equal(const psim_op_config *a, const psim_op_config *b);

/* The GSPMD exporter (export_gspmd.c): a mesh and PartitionSpecs. */
psim_status psim_export_gspmd(const psim_plan_doc *d, char **text, size_t *len);

struct psim_export_facts;
/* Megatron-LM arguments (export_megatron.c) and a torchtitan job config (export_torchtitan.c),
 * from the plan's facts (export_facts.h). */
psim_status psim_export_megatron(const psim_plan_doc *d, const struct psim_export_facts *f,
                                 char **text, size_t *len);
psim_status psim_export_torchtitan(const psim_plan_doc *d, const struct psim_export_facts *f,
                                   char **text, size_t *len);
/* Megatron-Core's refusals, shared by Megatron-LM and Megatron-Bridge (export_megatron.c): the
 * plan's (ZeRO 2-3, GPipe, all-reduce algorithms, uneven middle stages) and the model's
 * (mixed dropout, a GPT embedding norm, MoE with tp and no sequence parallelism or biases). */
psim_status psim_export_megatron_plan_refusals(const struct psim_export_facts *f);
psim_status psim_export_megatron_model_refusals(const struct psim_export_facts *f);
/* A Megatron-Bridge recipe override file (YAML) (export_bridge.c). */
psim_status psim_export_bridge(const psim_plan_doc *d, const struct psim_export_facts *f,
                               char **text, size_t *len);
psim_status psim_export_deepspeed(const psim_plan_doc *d, const struct psim_export_facts *f,
                                  char **text, size_t *len);
psim_status psim_export_deepspeed_pipeline(const psim_plan_doc *d,
                                           const struct psim_export_facts *f, char **text,
                                           size_t *len);

#endif
