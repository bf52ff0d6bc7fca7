/* model.h - the model IR (plansim.model/1): named dims, tensors, ops, layers.
 *
 * The loader expands blocks with "repeat" into a flat, topologically ordered
 * op list; every op carries its layer index and, for ops inside a repeated
 * block, the index of the same op in the first repeat ("proto"), so searchers
 * can memoise identical layers. Everything is validated at load time, so the
 * simulator and searchers may assume a well-formed model.
 *
 * Iteration space. Each op has an iteration space: the model dims it loops
 * over (op->dims), each with a "use" that says what splitting it costs:
 *   OUTPUT      the dim is in the op's output; a split shards the output (and
 *               every input carrying the dim) with no communication;
 *   CONTRACTED  reduced over (matmul k, embedding vocab); a split leaves
 *               partial sums that need an all-reduce / reduce-scatter;
 *   NORMALIZED  reduced inside a normalisation (softmax/layernorm axis); a split
 *               needs a small all-reduce of statistics (not allowed by default);
 *   WINDOW      spatial dim under a conv/pool window; a split needs a halo
 *               exchange of (kernel - 1) / 2 rows per neighbour;
 *   FIXED       cannot be split (kernel window dims, ...).
 * A dim carried by a weight tensor is a Parameter dim in SOAP terms; the
 * batch-role dim is the Sample dim; other output dims are Attribute dims. */
#ifndef PSIM_MODEL_H
#define PSIM_MODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sim/core/status.h"

#define PSIM_MAX_RANK    8  /* dims per tensor */
#define PSIM_MAX_OP_DIMS 12 /* dims in an op's iteration space */
#define PSIM_MAX_OP_IO   8  /* inputs, or outputs, of one op */

typedef enum psim_role {
  PSIM_ROLE_NONE = 0,
  PSIM_ROLE_BATCH,
  PSIM_ROLE_SEQUENCE,
  PSIM_ROLE_HIDDEN,
  PSIM_ROLE_HEADS,
  PSIM_ROLE_HEAD_DIM,
  PSIM_ROLE_FFN,
  PSIM_ROLE_VOCAB,
  PSIM_ROLE_EXPERT,
  PSIM_ROLE_CHANNEL,
  PSIM_ROLE_SPATIAL,
  PSIM_ROLE_COUNT
} psim_role;

typedef enum psim_dtype {
  PSIM_DTYPE_FP32 = 0,
  PSIM_DTYPE_FP16,
  PSIM_DTYPE_BF16,
  PSIM_DTYPE_FP8,
  PSIM_DTYPE_FP64,
  PSIM_DTYPE_INT32,
  PSIM_DTYPE_INT64,
  PSIM_DTYPE_BOOL,
  PSIM_DTYPE_COUNT
} psim_dtype;

typedef enum psim_tensor_kind {
  PSIM_TENSOR_INPUT = 0, /* fed by the data loader each micro-batch */
  PSIM_TENSOR_WEIGHT,    /* trainable parameter */
  PSIM_TENSOR_ACTIVATION /* produced by exactly one op */
} psim_tensor_kind;

typedef enum psim_op_kind {
  PSIM_OP_MATMUL = 0,  /* contraction written with dim names; "einsum" is an alias */
  PSIM_OP_ELEMENTWISE, /* unary or binary with broadcasting; "fn" names it (add, mul, gelu, relu,
                          silu, swiglu, ...) */
  PSIM_OP_DROPOUT,
  PSIM_OP_SOFTMAX, /* normalising reduction over "axis" dims */
  PSIM_OP_LAYERNORM,
  PSIM_OP_RMSNORM,
  PSIM_OP_ATTENTION, /* fused attention: q, k, v -> o; optional "flash", "causal" */
  PSIM_OP_EMBEDDING, /* ids [..], table [vocab, hidden] -> [.., hidden] */
  PSIM_OP_CROSS_ENTROPY,
  PSIM_OP_CONV2D,
  PSIM_OP_POOL2D,
  PSIM_OP_CONCAT,
  PSIM_OP_SPLIT,
  PSIM_OP_RESHAPE,
  PSIM_OP_TRANSPOSE,
  PSIM_OP_DISPATCH, /* MoE: tokens -> experts (all-to-all along the expert dim) */
  PSIM_OP_COMBINE,  /* MoE: experts -> tokens */
  PSIM_OP_KIND_COUNT
} psim_op_kind;

typedef enum psim_pass { PSIM_PASS_FWD = 0, PSIM_PASS_BWD, PSIM_PASS_COUNT } psim_pass;

typedef enum psim_dim_use {
  PSIM_USE_OUTPUT = 0,
  PSIM_USE_CONTRACTED,
  PSIM_USE_NORMALIZED,
  PSIM_USE_WINDOW,
  PSIM_USE_FIXED
} psim_dim_use;

typedef struct psim_dim {
  char *name;
  int64_t size; /* > 0 */
  psim_role role;
} psim_dim;

typedef struct psim_tensor {
  char *name;
  psim_tensor_kind kind;
  psim_dtype dtype;
  int32_t rank;
  int32_t dims[PSIM_MAX_RANK]; /* model dim indices, in memory-layout order */
  int32_t producer;            /* op index; -1 for inputs and weights */
  int32_t layer;               /* producer's layer; for weights the first consumer's */
  bool requires_grad;          /* weight, or an activation computed from one (backward exists) */
} psim_tensor;

typedef struct psim_op_dim {
  int32_t dim; /* model dim index */
  psim_dim_use use;
  bool in_weight; /* carried by a weight input: splitting shards that weight */
} psim_op_dim;

typedef struct psim_op_attrs {
  int64_t kernel[2], stride[2], pad[2]; /* conv2d / pool2d (h, w) */
  double dropout_p;                     /* dropout probability */
  bool causal, flash;                   /* attention */
  bool fp8;       /* matmul: an FP8 GEMM (inputs cast to FP8, output in its tensor's dtype: torchao
                     Float8Linear, Transformer Engine's FP8 linears); "fp8": true */
  int64_t window; /* attention: causal sliding window, keys per query (GPT-OSS's sliding_window,
                    Mistral's); 0 = every earlier key */
  int32_t top_k;  /* MoE dispatch/combine: experts per token */
  bool dropless;  /* MoE dispatch/combine: tokens are never dropped (Megatron-Core
                     --moe-token-dispatcher-type alltoall without capacity; torchtitan);
                     the capacity dim then holds the mean routed tokens per expert */
  int32_t axis_dims[PSIM_MAX_RANK]; /* softmax/norm reduce dims; concat/split axis */
  int32_t n_axis_dims;
  int32_t window_in[2]; /* conv2d/pool2d: input spatial dims (h, w) that map onto the output's
                           window dims when they are distinct model dims; -1 otherwise */
} psim_op_attrs;

/* One term of an op's work: value[pass] at full size, scaled in a shard by the
 * product of shard/full extents over the op dims whose bits are set in mask
 * (bit i = op->dims[i]). psim_op_shard_work sums these terms. */
typedef struct psim_op_term {
  uint16_t mask;
  bool is_flops; /* FLOPs term, else bytes */
  double value[PSIM_PASS_COUNT];
} psim_op_term;

typedef struct psim_op {
  char *name;
  psim_op_kind kind;
  char *fn;             /* elementwise function name, NULL otherwise */
  int32_t layer;        /* pipeline partitioning unit, 0-based */
  int32_t block;        /* index of the block it was expanded from, -1 if none */
  int32_t repeat_index; /* which repeat of its block, 0 if none */
  int32_t proto;        /* same op in the block's first repeat (itself when none) */
  int32_t n_in, n_out;
  int32_t in[PSIM_MAX_OP_IO], out[PSIM_MAX_OP_IO]; /* tensor indices */
  int32_t n_dims;
  psim_op_dim dims[PSIM_MAX_OP_DIMS]; /* iteration space */
  psim_op_attrs attrs;
  /* Whole op (unsharded, one full batch): FLOPs and bytes moved to/from
   * device memory, per pass. Backward covers input and weight gradients. */
  double flops[PSIM_PASS_COUNT];
  double bytes[PSIM_PASS_COUNT];
  char *tag;     /* optional free-form tag from the file ("attn_core": the attention core that
                    selective recomputation recomputes); NULL when absent */
  int64_t term0; /* first of this op's work terms in psim_model.terms */
  int32_t n_terms;
} psim_op;

typedef struct psim_model {
  char *name;
  char *file;       /* the file it was loaded from, for messages; may be NULL */
  psim_dtype dtype; /* default dtype of tensors */
  psim_dim *dims;
  int32_t n_dims;
  psim_tensor *tensors;
  int32_t n_tensors;
  psim_op *ops; /* topological order */
  int32_t n_ops;
  int32_t n_layers;
  int32_t n_blocks;
  int32_t role_dim[PSIM_ROLE_COUNT]; /* first dim with each role, -1 if none */
  double n_params;                   /* sum of weight tensor elements */
  psim_op_term *terms;               /* work terms of all ops (see psim_op_term) */
  int64_t n_terms;
} psim_model;

/* Limits of the loader (refused with a message naming the limit). The fuzz build lowers
 * them (tests/fuzz/meson.build) so that each input takes milliseconds; the checks run the
 * same way at any value. */
#ifndef PSIM_MODEL_MAX_OPS
#define PSIM_MODEL_MAX_OPS 10000000LL /* ops after block expansion */
#endif
#ifndef PSIM_MODEL_MAX_BYTES
#define PSIM_MODEL_MAX_BYTES 2e9 /* estimated memory of the expanded model (issue 24 item 9) */
#endif
/* Memory per expanded op and per tensor, for the PSIM_MODEL_MAX_BYTES estimate before
 * expansion: the slope of plansim check's peak RSS over models of 0.5 to 2 million ops
 * (blocks of 12 elementwise ops, with 12 or 23 tensors, names like "layer.41666.t3";
 * 15.2 kB and 16.7 kB per repeat), psim_op, psim_tensor, names, name maps and the
 * loader's tables together, growth by doubling included. */
#define PSIM_MODEL_BYTES_PER_OP     1130.0
#define PSIM_MODEL_BYTES_PER_TENSOR 140.0
#ifndef PSIM_MODEL_MAX_REPEAT
#define PSIM_MODEL_MAX_REPEAT 1000000LL /* "repeat" of one block */
#endif

/* Loads and validates a model file. On error returns PSIM_EINPUT with the
 * file and JSON path in the message; *m is then left empty (destroyable). */
psim_status psim_model_load(const char *file, psim_model *m);
/* Same from a parsed JSON document (file is used in messages). */
struct cJSON;
psim_status psim_model_from_json(const char *file, const struct cJSON *root, psim_model *m);
/* Writes the model back as plansim.model/1 JSON (flat: blocks expanded). */
psim_status psim_model_to_json(const psim_model *m, struct cJSON **out);
void psim_model_init(psim_model *m);
void psim_model_destroy(psim_model *m);

/* Lookups by name; -1 when absent. O(n). */
int32_t psim_model_find_dim(const psim_model *m, const char *name);
int32_t psim_model_find_tensor(const psim_model *m, const char *name);
int32_t psim_model_find_op(const psim_model *m, const char *name);
/* Whether op is a linear layer of a repeated block: a matmul with a weight input, expanded
 * from a block (block >= 0). These are the GEMMs a generator's linear_dtype "fp8" marks
 * (models/gen_build.c psim_gb_linear) and a strategy's "fp8" switches (psim_strategy.fp8);
 * the LM head and embeddings outside the blocks are not. */
bool psim_op_is_block_linear(const psim_model *m, const psim_op *op);

/* Index in op->dims of model dim d, or -1. */
int32_t psim_op_dim_index(const psim_op *op, int32_t d);

/* Work of one shard of op. shard_sizes[i] is the extent of op->dims[i] in the
 * shard (the full size when unsplit). Outputs FLOPs and bytes of device
 * memory traffic for the pass. Exact for the kinds' formulas in docs/model.md. */
void psim_op_shard_work(const psim_model *m, const psim_op *op, const int64_t *shard_sizes,
                        psim_pass pass, double *flops, double *bytes);

/* Elements and bytes of a tensor (whole, unsharded). */
double psim_tensor_elems(const psim_model *m, const psim_tensor *t);
double psim_tensor_bytes(const psim_model *m, const psim_tensor *t);

size_t psim_dtype_bytes(psim_dtype t);
const char *psim_dtype_name(psim_dtype t);
psim_status psim_dtype_parse(const char *s,
                             psim_dtype *out); /* fp32 fp16 bf16 fp8 fp64 int32 int64 bool */
const char *psim_role_name(psim_role r);
psim_status psim_role_parse(const char *s, psim_role *out);
const char *psim_op_kind_name(psim_op_kind k);
psim_status psim_op_kind_parse(const char *s, psim_op_kind *out);

#endif
