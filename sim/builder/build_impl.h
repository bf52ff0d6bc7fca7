/* build_impl.h - the task-graph builder's internals, private to sim/builder/.
 *
 * The builder is split by concern: build.c (entry points, the order of the
 * phases, the rules in its opening comment), locals.c (simulated devices and
 * shards), kernels.c (compute tasks, pipeline issue order), comm.c
 * (communication from layouts), colls.c (costed collective templates),
 * gradsync.c (gradient buckets, optimizer), reuse.c (incremental builds),
 * cache.c (the hash maps), memory.c (memory model), ps.c (parameter
 * servers). Everything here is shared between those files; the rest of the
 * simulator sees sim/builder/build.h. */
#ifndef PSIM_BUILD_IMPL_H
#define PSIM_BUILD_IMPL_H

#include <stdbool.h>
#include <stdint.h>

#include "costdb/cost.h"
#include "sim/builder/build.h"
#include "sim/builder/routing.h"
#include "sim/core/hashmap.h"
#include "sim/engine/collective.h"
#include "sim/engine/simulation.h"

/* The pass a task belongs to (index of a shard's cost: [local * 3 + dir]). Under a schedule
 * that splits the backward (psim_schedule_splits_backward) PSIM_DIR_BWD is the input-gradient
 * kernel and PSIM_DIR_WGT the weight-gradient one, both costed from the backward's cost
 * (psim_build_wgrad_share); WGT has no cost slot of its own. */
enum { PSIM_DIR_FWD = 0, PSIM_DIR_BWD = 1, PSIM_DIR_REC = 2, PSIM_DIR_WGT = 3 };

/* A simulated instance of an op: its shard on one device. */
typedef struct psim_op_local {
  int32_t device;
  int32_t shard;
  int32_t replica;
} psim_op_local;

/* A change of a device's activation memory at the end of a task. */
typedef struct psim_mem_event {
  int32_t task;
  int32_t device;
  double bytes; /* + allocate, - free */
} psim_mem_event;

/* Cost of one shard's pass (the same for every micro-batch). */
typedef struct psim_task_cost {
  double duration_s;
  double flops;
  double mem_bytes;       /* change of saved activations at the task's end */
  uint8_t origin;         /* psim_cost_origin */
  uint8_t host_calls;     /* kernels and communication calls the host issues */
  uint8_t valid;          /* psim_cost_state */
  uint16_t host_launches; /* kernels launched from a C++ loop inside those calls (kernels.c
                             expert_host_work) */
} psim_task_cost;

typedef enum psim_cost_state {
  PSIM_COST_NONE = 0,     /* not computed */
  PSIM_COST_VALID = 1,    /* every field */
  PSIM_COST_MEM_STALE = 2 /* all but mem_bytes (taken from the last build; a producer changed) */
} psim_cost_state;

/* The static bytes one op's weight shard adds on one device (memory.c). */
typedef struct psim_weight_share {
  int32_t device;
  int32_t tensor;
  double bytes[3]; /* weights, gradients, optimizer state */
} psim_weight_share;

/* ---- the communication cache (cache.c): (key1, key2) -> task -------------- */

typedef struct psim_region psim_region;

/* A point-to-point transfer of a connect edge, added to the graph once all
 * the edge's gathers are known (comm.c: in pairwise-exchange rounds). */
typedef struct psim_pending_xfer {
  double bytes;
  int32_t x, from, src, dst, mu, arrived; /* producer op, its task on src, the barrier */
  int32_t round, seq;                     /* (dst - src) mod devices, creation order */
  /* a MoE layer's routed tokens (moe_a2a.c): the tensor, the experts [elo, ehi) the
   * transfer carries, and which end holds them (PSIM_A2A_*) */
  int32_t tensor, elo, ehi;
  int32_t side;
} psim_pending_xfer;

/* Which end of a MoE all-to-all transfer holds the experts (moe_a2a.c). */
enum { PSIM_A2A_NONE = 0, PSIM_A2A_TO_EXPERTS = 1, PSIM_A2A_FROM_EXPERTS = 2 };

/* The map, plus scratch that comm.c keeps with the per-micro-batch cache. */
typedef struct psim_comm_cache {
  psim_hmap map;   /* (key1, key2) -> task or decision; all-zero = empty (psim_hmap_init) */
  uint8_t *served; /* scratch for gather_region, one byte per shard */
  size_t cap_served;
  /* the regions of tensor t held by every shard of op x, and their
   * region_id, for the last (x, t) asked (shard_regions) */
  int32_t reg_x, reg_t;
  psim_region *regs;
  int32_t *reg_ids;
  size_t cap_regs;
  psim_pending_xfer *pend; /* transfers of the current connect edge (comm.c) */
  size_t n_pend, cap_pend;
} psim_comm_cache;

/* A communication-cache entry as a connect segment added it (incremental
 * builds replay them, reuse.c). */
typedef struct psim_put_record {
  uint64_t k1, k2;
  int32_t value; /* a task of the segment, or (memo) an edge decision */
  uint8_t memo;  /* 1: b->memo, 0: b->cache */
} psim_put_record;

/* ---- shards, regions and groups -------------------------------------------- */

/* A box of a tensor: [lo, hi) per dim, in elements. */
struct psim_region {
  int64_t lo[PSIM_MAX_RANK], hi[PSIM_MAX_RANK];
};

/* The devices of one collective (comm.c's partial-sum groups, gradsync.c's
 * buckets), any number of them (issue 19: no 4,096-device limit); made by
 * psim_build_group_new with room for every device of the cluster. */
typedef struct psim_group {
  int32_t *devices; /* in the group's allocation */
  int32_t *entries; /* each member's entry in the op's device list */
  int32_t n;
  int32_t wanted; /* members the layout asks for (> n: over the limit) */
  int32_t stride; /* device offset of the next concurrent group, 0 = unknown */
  int32_t n_groups;
  int32_t index; /* this group's place among the concurrent ones (psim_coll_desc.group_index) */
} psim_group;

/* Slots of the partial-group memo: the gradient sync asks for the same few groups in every
 * layer of a stage (every weight, then every bucket's flush; 2,048 or 16,384 members each
 * at 131,072 GPUs, GPT-175B tp 8 pp 8): about 12 distinct ones a layer, which 8 slots
 * thrashed (1,336 misses of 11,385 calls) and 16 hold (593 misses, one per group and stage). */
#define PSIM_GROUP_MEMO_SLOTS 16
/* Smaller groups are made, not looked up: a lookup scans the slots (about 80 instructions)
 * and a miss copies the group in, where making one costs 10 to 40 instructions a member
 * (callgrind, 1,024 GPUs: with every group memoised the build took 0.005e9 more). */
#define PSIM_GROUP_MEMO_MIN 64

/* One group psim_build_partial_group made, with everything it read: the op config's
 * device list (by address: lists are read-only while a build holds its strategy), its
 * size, replicas and degrees, the mask and the entry. */
typedef struct psim_group_memo_slot {
  const int32_t *list;
  int32_t n_devices, replicas, n_dims, e;
  uint32_t mask;
  int32_t degree[PSIM_MAX_OP_DIMS];
  int32_t n, cap; /* members held; room in devices and entries */
  int32_t *devices, *entries;
} psim_group_memo_slot;

typedef struct psim_group_memo {
  psim_group_memo_slot slot[PSIM_GROUP_MEMO_SLOTS];
  int32_t next;         /* the slot a miss fills (round robin) */
  int64_t hits, misses; /* for tests */
} psim_group_memo;

/* ---- the build ------------------------------------------------------------- */

typedef struct psim_coll_cache psim_coll_cache; /* colls.c */
typedef struct psim_ps_state psim_ps_state;     /* ps.c */

/* Incremental builds (psim_build_graph_reusing, reuse.c). A connect segment
 * is what psim_build_connect_inputs + _grads of one (micro-batch mu, op y)
 * added: tasks seg_task[i] .. seg_task[i + 1], edges and cache entries
 * likewise, for i = mu * n_ops + y. Recorded only when `record`. */
typedef struct psim_build_reuse {
  bool record;
  int32_t *seg_task;          /* n_micro * n_ops + 1 */
  size_t *seg_edge, *seg_put; /* n_micro * n_ops + 1 */
  uint8_t *seg_fixed;         /* 1: names a stream successor (pipeline send): never copied */
  psim_put_record *puts;      /* communication-cache entries, in insertion order */
  size_t n_puts, cap_puts;
  size_t cur_seg;
  /* only while a reusing build runs */
  struct psim_build *prev;
  uint8_t *seg_dirty;     /* per op: its segments must be rebuilt */
  uint8_t *key_read;      /* per op: a built segment reads cache entries keyed by it */
  const uint8_t *changed; /* per op: its configuration is not prev's (the caller's flags) */
  size_t micro_put0;      /* first put record of the current micro-batch */
  int32_t *old2new;       /* per task of prev: the same task in this graph, or -1 */
  int64_t segments_copied, segments_built;
} psim_build_reuse;

struct psim_build {
  const psim_model *m;
  psim_cluster *c;
  const psim_strategy *s;
  const psim_sim_options *o;
  psim_taskgraph g;
  bool folded;
  bool fold_broken;   /* folded, and a check found peers that are not symmetric: rebuilt unfolded */
  uint8_t *simulated; /* per device */
  int32_t *rep_of;    /* per device: the simulated device standing for it (folded), or itself */
  int32_t *dev_twin;  /* per op, folding on: the first op of its stage with its device list */
  int32_t *fold_pos;  /* folded: per device, its position in its stage (locals.c), or NULL */
  int32_t *fold_owner; /* folded: per link, the position whose pipeline transfers hold it, or -1 */
  int32_t *fold_role;  /* folded: per owned link, which of that position's route links it is */
  int32_t
      *fold_pairs; /* folded: (L, L') per link pair the schedule must keep apart (fold_links.c) */
  size_t n_fold_pairs, cap_fold_pairs;
  const uint64_t *fold_taint; /* per position or NULL: columns of unequal taint are not one class
                                 (psim_build_fold_taint), the caller's */
  int32_t fold_fam[8][2];     /* folded: (position stride, groups) of the concurrent peer groups of
                                 collectives that hold pipeline-route links (fold_links.c) */
  int32_t n_fold_fam;
  bool fold_by_key;   /* folded: routes searched once per route key (large clusters, locals.c) */
  int32_t fold_block; /* folded: positions per exchange block (fold_blocks.c), 1 without */
  uint32_t fold_fam_used;   /* bit f: a task of family f is in fold_pairs */
  psim_hmap *fold_task_fam; /* task -> family index, for those collectives' tasks; NULL none */
  int32_t n_simulated;
  /* the copies of a collective template are added without their resource lists, each task's
   * template kept instead (task_tmpl), and psim_build_merge_links writes the lists merged:
   * the lists of 64 pieces x 2,048 ring members never exist (issue 19). Where the graph is
   * kept (traces, reports) or reused (incremental builds), off. */
  bool res_deferred;
  int32_t *task_tmpl; /* per task below n_task_tmpl: its template (colls.c), or -1 */
  int32_t n_task_tmpl;
  size_t cap_task_tmpl;
  psim_sim_options *nofold_opts; /* the unfolded rebuild's options (o points to them), owned */
  psim_model *own_model;         /* the run's FP8 linears (precision.c): m points to it, owned; its
                                    ops array is own_ops, the rest the caller's model's */
  psim_op *own_ops;
  psim_op_local *locals; /* grouped per op */
  int32_t *loc_first;    /* n_ops + 1 */
  int32_t n_micro;
  int32_t *fwd, *bwd, *rec; /* task per (local, micro): [(loc_first[o] + k) * n_micro + mu] */
  int32_t *wgt; /* ... weight-gradient kernels, where the schedule splits the backward; or NULL */
  psim_task_cost *costs; /* per (local, pass): [(loc_first[o] + k) * 3 + pass] */
  int32_t *last_task;    /* per device: last compute task issued (stream order) */
  int32_t *last_bwd;     /* per device: last backward task issued */
  uint8_t *need_sync;    /* per device: the next kernel drains the stream (kernels.c take_sync) */
  int32_t *next_compute; /* per task: the next compute task on its device, or -1 */
  size_t cap_next;
  double compute_by_origin[PSIM_ORIGIN_COUNT]; /* compute seconds by cost source */
  double hardware_flops;                       /* FLOPs of the simulated compute tasks */
  double dp_bytes;     /* bytes the ranks send in data-parallel collectives (zero.h) */
  psim_mem_event *mem; /* activation memory events */
  size_t n_mem, cap_mem;
  double *static_mem;         /* per device: weights, gradients, optimizer bytes (3 per device) */
  psim_weight_share *wshares; /* what each (op, weight, device) adds to static_mem;
                                 kept only where an incremental build may copy them */
  size_t n_wshares, cap_wshares;
  size_t *wshare_first; /* n_ops + 1: op o's shares are [wshare_first[o], ...[o + 1]) */
  uint32_t *save_slots; /* per op: bit i set when the op saves input i for backward */
  int32_t *rc_unit;     /* partial full recomputation (psim_strategy_partial_recompute): per layer,
                           its checkpoint unit (the first layer of its group), -1 when the layer
                           keeps its activations; NULL otherwise (every block layer its own unit) */
  psim_comm_cache *cache;    /* communication of the current micro-batch (comm.c) */
  psim_comm_cache *memo;     /* per-edge decisions kept for every micro-batch (comm.c) */
  psim_comm_cache *where;    /* (op, device) -> entry / simulated shard, wide ops (locals.c) */
  psim_coll_cache *colls;    /* costed collective templates (colls.c) */
  psim_group_memo *groups;   /* recent partial groups (colls.c); NULL: none kept */
  int32_t direct_local;      /* scratch: connect() found a local dependency on this shard */
  bool reduce_local;         /* scratch: ... or a reduction whose result stays local */
  int32_t reduce_leader;     /* scratch: first device of the last reduction's group */
  psim_ps_state *ps;         /* issue 8: parameter-server tasks (ps.c), NULL unless sync == ps */
  psim_sim_options *ps_opts; /* backup rebuilds (ps.c): the options o points to, owned */
  uint8_t *ps_dropped;       /* ... and their ps_dropped, owned */
  psim_build_reuse inc;      /* incremental builds (reuse.c) */
};

/* Ops spread over more devices than this find a device's entry or shard by
 * hash (built once in psim_build_make_locals) rather than by a scan. */
#define PSIM_BUILD_SCAN_DEVICES 64

/* Route searches (sources x (vertices + links), sim/ir/route.c: one breadth-first search per
 * source) above which folding's route checks are made once per hierarchy key (locals.c
 * route_key) or skipped (fold_checks.c peers_alike): about 0.3 s on the development VM. */
#define PSIM_FOLD_ROUTE_BUDGET 5e7

/* The value under (k1, k2), or -1. */
static inline int32_t psim_bcache_get(const psim_comm_cache *h, uint64_t k1, uint64_t k2) {
  int32_t v;
  return psim_hmap_find(&h->map, (psim_hmap_key){k1, k2}, &v) ? v : -1;
}

/* The op a communication-cache key belongs to (key1's op field). */
static inline int32_t psim_build_key_op(uint64_t k1) {
  return (int32_t)((k1 >> 28) & 0x7fffffff);
}

/* A communication-cache key: (kind, op, output slot, micro-batch, direction). */
static inline uint64_t psim_build_key1(int kind, int32_t op, int32_t slot, int32_t micro, int dir) {
  return ((uint64_t)kind << 60) | ((uint64_t)(uint32_t)op << 28) | ((uint64_t)slot << 24) |
         ((uint64_t)(micro & 0x3fffff) << 2) | (uint64_t)dir;
}

/* Size of model dim d within one micro-batch (the batch dim is sliced). */
static inline int64_t psim_build_dim_size(const psim_build *b, int32_t d) {
  int64_t n = b->m->dims[d].size;
  if (b->m->dims[d].role == PSIM_ROLE_BATCH && b->n_micro > 1)
    n = n / b->n_micro;
  return n > 0 ? n : 1;
}

/* Coordinates of shard `shard` of op (row-major over its degrees). */
static inline void psim_build_shard_coords(const psim_op *op, const psim_op_config *cfg,
                                           int32_t shard, int32_t *coord) {
  for (int32_t i = op->n_dims - 1; i >= 0; i--) {
    coord[i] = shard % cfg->degree[i];
    shard /= cfg->degree[i];
  }
}

/* The shard at coordinates coord (psim_build_shard_coords' inverse). */
static inline int32_t psim_build_shard_index(const psim_op *op, const psim_op_config *cfg,
                                             const int32_t *coord) {
  int32_t s = 0;
  for (int32_t i = 0; i < op->n_dims; i++)
    s = s * cfg->degree[i] + coord[i];
  return s;
}

/* First index of part j when n splits into d near-equal parts. */
static inline int64_t psim_build_shard_offset(int64_t n, int32_t d, int32_t j) {
  int64_t base = n / d, rem = n % d;
  return j * base + (j < rem ? j : rem);
}

/* Extents of op's iteration dims in shard `shard` (per micro-batch). */
static inline void psim_build_shard_extents(const psim_build *b, int32_t o, int32_t shard,
                                            int64_t *ext) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  int32_t coord[PSIM_MAX_OP_DIMS];
  psim_build_shard_coords(op, cfg, shard, coord);
  for (int32_t i = 0; i < op->n_dims; i++)
    ext[i] = psim_shard_size(psim_build_dim_size(b, op->dims[i].dim), cfg->degree[i], coord[i]);
}

/* Grouped-query attention (context.c): the index of attention op o's query
 * heads dim when its split selects the key/value heads that tensor t (its K
 * or V) is read at; else -1. */
int32_t psim_build_gqa_heads(const psim_build *b, int32_t o, int32_t t);
/* Narrows region r of t to the key/value heads shard coord's query heads read. */
void psim_build_gqa_region(const psim_build *b, int32_t o, const int32_t *coord, int32_t t,
                           psim_region *r);

/* Region of tensor t held (or needed) by shard `shard` of op o. */
static inline void psim_build_tensor_region(const psim_build *b, int32_t o, int32_t shard,
                                            int32_t t, psim_region *r) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  const psim_tensor *ten = &b->m->tensors[t];
  int32_t coord[PSIM_MAX_OP_DIMS];
  psim_build_shard_coords(op, cfg, shard, coord);
  for (int32_t j = 0; j < ten->rank; j++) {
    int64_t n = psim_build_dim_size(b, ten->dims[j]);
    int32_t i = psim_op_dim_index(op, ten->dims[j]);
    if (i < 0 || cfg->degree[i] == 1) {
      r->lo[j] = 0;
      r->hi[j] = n;
    } else {
      r->lo[j] = psim_build_shard_offset(n, cfg->degree[i], coord[i]);
      r->hi[j] = r->lo[j] + psim_shard_size(n, cfg->degree[i], coord[i]);
    }
  }
  if (op->kind == PSIM_OP_DISPATCH || op->kind == PSIM_OP_COMBINE) /* MoE: a token split */
    psim_routing_token_region(b, o, coord, t, r);
  if (op->kind == PSIM_OP_ATTENTION) /* GQA: the query heads select the kv heads */
    psim_build_gqa_region(b, o, coord, t, r);
}

/* Elements of the intersection of two regions of a tensor of rank n. */
static inline double psim_build_overlap(const psim_region *a, const psim_region *c, int32_t rank) {
  double v = 1;
  for (int32_t j = 0; j < rank; j++) {
    int64_t lo = a->lo[j] > c->lo[j] ? a->lo[j] : c->lo[j];
    int64_t hi = a->hi[j] < c->hi[j] ? a->hi[j] : c->hi[j];
    if (hi <= lo)
      return 0;
    v *= (double)(hi - lo);
  }
  return v;
}

/* Elements of a region of a tensor of rank n. */
static inline double psim_build_region_elems(const psim_region *a, int32_t rank) {
  return psim_build_overlap(a, a, rank);
}

/* psim_build_overlap(a, c, rank) == psim_build_region_elems(c, rank) without the products:
 * an empty c is covered by anything, else every dim of c lies in a's. The same answer for
 * regions of under 2^53 elements (where the doubles' products are exact). */
static inline bool psim_build_covers(const psim_region *a, const psim_region *c, int32_t rank) {
  bool inside = true;
  for (int32_t j = 0; j < rank; j++) {
    if (c->hi[j] <= c->lo[j])
      return true;
    inside = inside && a->lo[j] <= c->lo[j] && c->hi[j] <= a->hi[j];
  }
  return inside;
}

/* What psim_build_tensor_region reads of op o and tensor t that does not depend on
 * the shard, read once for the thousands of shards of a stage at scale (issue 19). A
 * region is a product of one interval per dim of t, each fixed by one coordinate of the
 * shard: the intervals are tabled per dim and coordinate (degree entries, 2,048 for a
 * data-parallel dim at 131,072 GPUs), so a shard's region is a lookup per dim instead of
 * psim_build_shard_offset and psim_shard_size per dim and shard (16,384 shards of 40
 * layout pairs, 0.15e9 instructions at 131,072 GPUs before). */
typedef struct psim_region_plan {
  const psim_op *op;
  const psim_op_config *cfg;
  int32_t rank;
  bool general;                 /* MoE token split or GQA: psim_build_tensor_region itself */
  int64_t n[PSIM_MAX_RANK];     /* t's extent per dim (per micro-batch) */
  int32_t i[PSIM_MAX_RANK];     /* the op dim splitting it, or -1 */
  int32_t below[PSIM_MAX_RANK]; /* shards per step of coordinate i: the degrees after i */
  int64_t *lo[PSIM_MAX_RANK];   /* per coordinate of dim i[j]: the interval; NULL: none */
  int64_t *hi[PSIM_MAX_RANK];
  int64_t *table; /* lo and hi's block (NULL when out of memory: computed per shard) */
} psim_region_plan;

/* The plan of op o's regions of tensor t (regions.c); psim_build_region_plan_free frees it. */
void psim_build_region_plan_init(const psim_build *b, int32_t o, int32_t t, psim_region_plan *p);
void psim_build_region_plan_free(psim_region_plan *p);
/* Sets the dims of r that no op dim of p splits (alike in every shard's region). */
static inline void psim_build_plan_fixed(const psim_region_plan *p, psim_region *r) {
  for (int32_t j = 0; j < p->rank; j++)
    if (p->i[j] < 0) {
      r->lo[j] = 0;
      r->hi[j] = p->n[j];
    }
}

/* psim_build_tensor_region(b, o, shard, t, r) from o's plan, r's other dims set by
 * psim_build_plan_fixed: the same intervals (coordinate i of a shard is shard / below % degree,
 * psim_build_shard_coords' digits). */
static inline void psim_build_plan_region(const psim_build *b, const psim_region_plan *p, int32_t o,
                                          int32_t shard, int32_t t, psim_region *r) {
  if (p->general) {
    psim_build_tensor_region(b, o, shard, t, r);
    return;
  }
  for (int32_t j = 0; j < p->rank; j++) {
    int32_t i = p->i[j];
    if (i < 0)
      continue;
    int32_t deg = p->cfg->degree[i], c = shard / p->below[j] % deg;
    if (p->table) {
      r->lo[j] = p->lo[j][c];
      r->hi[j] = p->hi[j][c];
    } else {
      r->lo[j] = psim_build_shard_offset(p->n[j], deg, c);
      r->hi[j] = r->lo[j] + psim_shard_size(p->n[j], deg, c);
    }
  }
}

/* Entry index (shard * replicas + replica) of op o on device d, or -1. */
static inline int32_t psim_build_entry_on(const psim_build *b, int32_t o, int32_t d) {
  const psim_op_config *cfg = &b->s->ops[o];
  if (cfg->n_devices > PSIM_BUILD_SCAN_DEVICES)
    return psim_bcache_get(b->where, (uint64_t)(uint32_t)o, (uint64_t)(uint32_t)d);
  for (int32_t e = 0; e < cfg->n_devices; e++)
    if (cfg->devices[e] == d)
      return e;
  return -1;
}

/* Local index (within op o's locals) on device d, or -1. */
static inline int32_t psim_build_local_on(const psim_build *b, int32_t o, int32_t d) {
  if (b->loc_first[o + 1] - b->loc_first[o] > PSIM_BUILD_SCAN_DEVICES)
    return psim_bcache_get(b->where, (uint64_t)(uint32_t)o | 1ull << 62, (uint64_t)(uint32_t)d);
  for (int32_t k = b->loc_first[o]; k < b->loc_first[o + 1]; k++)
    if (b->locals[k].device == d)
      return k - b->loc_first[o];
  return -1;
}

/* The task of (op o, its local k, micro-batch mu) in a pass's array. */
static inline int32_t *psim_build_task_slot(const psim_build *b, int32_t *arr, int32_t o, int32_t k,
                                            int32_t mu) {
  return &arr[((size_t)b->loc_first[o] + (size_t)k) * (size_t)b->n_micro + (size_t)mu];
}

/* The task array (fwd, bwd, rec) of a pass in build x. */
static inline int32_t *psim_build_pass_tasks(const psim_build *x, int pass_kind) {
  return pass_kind == PSIM_DIR_FWD   ? x->fwd
         : pass_kind == PSIM_DIR_BWD ? x->bwd
         : pass_kind == PSIM_DIR_WGT ? x->wgt
                                     : x->rec;
}

/* The part of op o's backward that computes weight gradients, which a schedule that splits
 * the backward runs as a kernel of its own (kernels.c); 0 otherwise. */
double psim_build_wgrad_share(const psim_build *b, int32_t o);
/* The weight gradient's share of op o's backward however it is issued (0.5 for a matmul or
 * convolution with weights, 1 for an embedding, else 0). */
double psim_build_weight_share(const psim_build *b, int32_t o);

/* The task array holding the last kernel of op o's backward that its gradient sync waits for:
 * its weight-gradient kernels where the schedule splits them off, else its backward. */
static inline int32_t *psim_build_grad_tasks(const psim_build *b, int32_t o) {
  return b->wgt && psim_build_wgrad_share(b, o) > 0 ? b->wgt : b->bwd;
}

/* Whether model dim d is one of tensor t's. */
static inline bool psim_build_dim_in_tensor(const psim_tensor *t, int32_t d) {
  for (int32_t j = 0; j < t->rank; j++)
    if (t->dims[j] == d)
      return true;
  return false;
}

/* Mask of op dims whose split makes op's view of tensor t a partial sum. */
static inline uint32_t psim_build_partial_mask(const psim_build *b, int32_t o, int32_t t, int dir) {
  const psim_op *op = &b->m->ops[o];
  const psim_op_config *cfg = &b->s->ops[o];
  uint32_t mask = 0;
  for (int32_t i = 0; i < op->n_dims; i++) {
    if (cfg->degree[i] == 1 || psim_build_dim_in_tensor(&b->m->tensors[t], op->dims[i].dim))
      continue;
    if ((op->kind == PSIM_OP_DISPATCH || op->kind == PSIM_OP_COMBINE) &&
        psim_routing_token_dim(b->m, op, t, op->dims[i].dim))
      continue; /* MoE: a token shard's slice of the capacity dim, no partial sum */
    if (op->kind == PSIM_OP_ATTENTION && psim_build_gqa_heads(b, o, t) == i)
      continue; /* GQA: a query-heads shard holds its own kv heads' gradient */
    if (dir == PSIM_DIR_BWD || op->dims[i].use == PSIM_USE_CONTRACTED)
      mask |= 1u << i;
  }
  return mask;
}

/* ---- shared between the builder's files ----------------------------------- */

/* Builds into b (zeroed here) in place: psim_build_graph without the
 * allocation (ps.c rebuilds a build this way). */
psim_status psim_build_fill(psim_build *b, const psim_model *m, psim_cluster *c,
                            const psim_strategy *s, const psim_sim_options *o, psim_build *prev,
                            const uint8_t *changed, psim_taskgraph *spare);
/* Frees what b holds and zeroes it (not b itself). */
void psim_build_destroy(psim_build *b);
/* Whether op o is recomputed in backward under the strategy's recompute mode. */
bool psim_build_recomputed(const psim_build *b, int32_t o);
/* The checkpoint unit of op o: ops of one unit are recomputed together before their
 * backward, and a recomputed op keeps only inputs from another unit. Its layer, or under
 * uniform groups of N > 1 layers the group's first layer. */
static inline int32_t psim_build_rc_unit(const psim_build *b, int32_t o) {
  int32_t l = b->m->ops[o].layer;
  return b->rc_unit && b->rc_unit[l] >= 0 ? b->rc_unit[l] : l;
}
/* Points b->m at a copy of the model with the strategy's FP8 linears where psim_strategy.fp8
 * changes any op's flag (precision.c); otherwise leaves it. */
psim_status psim_build_apply_precision(psim_build *b);
/* The first recomputed op of x's checkpoint unit on x's stage, at or before x (the first
 * kernel of the backward slot x's gradient starts), or -1 (schedules.c). */
int32_t psim_build_first_recomputed(const psim_build *b, int32_t x);
/* Copies the pipeline edges e0.. into x's backward kernel k to the recompute kernel of op r
 * on the same device: a slot's recompute waits for the next stage's gradient (schedules.c). */
psim_status psim_build_gate_recompute(psim_build *b, int32_t x, int32_t k, int32_t r, int32_t mu,
                                      size_t e0);
/* b->rc_unit from the strategy's recompute method and layer count (kernels.c). */
psim_status psim_build_recompute_units(psim_build *b);

psim_status psim_bcache_put(psim_comm_cache *h, uint64_t k1, uint64_t k2, int32_t v);
void psim_bcache_reset(psim_comm_cache *h);
psim_status psim_build_record_put(psim_build *b, uint64_t k1, uint64_t k2, int32_t v, bool memo);
psim_status psim_build_keep(psim_build *b, psim_comm_cache *h, uint64_t k1, uint64_t k2, int32_t v);
psim_status psim_build_add_collective(psim_build *b, const psim_coll_desc *d,
                                      const psim_task_info *info, int32_t *entry, int32_t *exit);
void psim_build_colls_free(psim_coll_cache *cc);
psim_coll_cache *psim_build_colls_new(void);
void psim_bcache_free(psim_comm_cache *h);
psim_status psim_build_index_devices(psim_build *b);
/* Drops from every task the links held by exactly the tasks that hold a lower-numbered link:
 * the same schedule and breakdown, fewer resource entries (links_merge.c). Not for graphs
 * kept for traces and reports, nor incremental builds. O(distinct lists' entries + tasks)
 * besides the merged lists written. */
psim_status psim_build_merge_links(psim_build *b);
/* Whether tasks a and t hold the same resources, in the same order (psim_build_task_res). */
bool psim_build_same_res(const psim_build *b, int32_t a, int32_t t);
/* The resources task t holds: its list in the graph, or under res_deferred its template's
 * (valid until the next collective is added). */
void psim_build_task_res(const psim_build *b, int32_t t, const int32_t **res, int32_t *n);
/* The collective templates costed so far: task_tmpl's entries are below it (colls.c). */
int32_t psim_build_n_templates(const psim_build *b);
/* Folding's checks during a folded build (locals.c; docs/simulator.md, "Folding symmetric
 * devices"): a collective whose concurrent peer groups change its time (they share a link
 * with it), or a point-to-point transfer inside a stage (its sender also serves folded-away
 * peers), breaks the symmetry: the build is then redone unfolded. with_peers_s: d's time with
 * its peers when the caller has it (psim_coll_add_timed), else NULL. */
psim_status psim_build_fold_check_coll(psim_build *b, const psim_coll_desc *d,
                                       const double *with_peers_s);
/* A transfer src -> d: inside a stage, it keeps folding only between two devices of one
 * exchange block (fold_block > 1, fold_blocks.c). */
void psim_build_fold_check_transfer(psim_build *b, int pipeline, int32_t src, int32_t d);
/* comm.c: one point-to-point transfer of op x's data from src to d after task from (-1:
 * none), completing task arrived. */
psim_status psim_build_add_transfer_after(psim_build *b, int32_t x, int32_t from, int32_t src,
                                          int32_t d, double bytes, int32_t mu, int pipeline,
                                          int32_t arrived);
/* moe_a2a.c: the end of a MoE all-to-all transfer that holds the experts and the experts it
 * carries (src, dst: the regions of tensor t that the source holds and the consumer needs). */
struct psim_region;
void psim_moe_a2a_classify(const psim_build *b, int32_t t, const struct psim_region *src,
                           const struct psim_region *dst, psim_pending_xfer *p);
/* moe_a2a.c: adds the pending transfers of a MoE all-to-all (sorted into rounds) as the
 * stack's dispatcher sends them: one copy per (token, expert) for alltoall; once per
 * destination rank and once per destination node, forwarded over NVLink, for DeepEP and
 * HybridEP. */
psim_status psim_moe_a2a_flush(psim_build *b);
/* moe_a2a.c: the share of an NVLink route's bandwidth that dispatcher d's kernels reach on
 * side (PSIM_A2A_TO_EXPERTS: dispatch, PSIM_A2A_FROM_EXPERTS: combine); 1 for alltoall and
 * DeepEP (not measured for them), HybridEP's published figures for it. A routed-token
 * transfer inside a node takes latency + (its time at the link's rate - latency) / share. */
double psim_moe_a2a_nvl_share(psim_moe_dispatcher d, int side);
/* Exchange blocks (locals.c): d's group has one member in every block of its stage, all at one
 * offset, and its concurrent groups partition the stage, so each of them has a member in every
 * simulated block and is built itself: d is then costed alone, as unfolded. */
bool psim_build_fold_peers_built(const psim_build *b, const psim_coll_desc *d);
/* Whether some op splits an expert-role dim (fold_blocks.c): its all-to-all crosses the
 * positions of a stage, so folding takes whole exchange blocks. */
bool psim_build_fold_needs_blocks(const psim_build *b);
/* The exchange block (fold_blocks.c): *g > 0 consecutive positions of n_pos such that every
 * transfer inside a stage stays in its block, the blocks alike (sources, elements, experts);
 * *src (g x g, owned by the caller): member i receives from member j. *g = 0: none. */
psim_status psim_build_fold_blocks(const psim_build *b, const int32_t *pos, int32_t n_pos,
                                   int32_t *g, uint8_t **src);
/* After a folded build (fold_links.c): every task that holds a link L of a folded-away
 * column's pipeline routes but not the same link L' of its class's simulated column is
 * recorded as the pair (L, L') in fold_pairs (build.c then folds less: psim_build_fold_taint);
 * fold_broken when a pair cannot be formed. */
void psim_build_fold_check_graph(psim_build *b);
/* Mixes into taint (per position of a stage) the roles of the links of the columns in
 * fold_pairs, alike over each family of concurrent peer groups (fold_fam): a rebuild with
 * b->fold_taint = taint splits them from their classes. */
bool psim_build_fold_taint(const psim_build *b, uint64_t *taint); /* false: no family known */
/* After psim_coll_add added tasks [t0, n_tasks) for d: remembers d's concurrent peer groups
 * for those tasks when they hold links of the columns' pipeline routes (fold_links.c). */
psim_status psim_build_fold_note_coll(psim_build *b, const psim_coll_desc *d, int32_t t0);
psim_status psim_build_choose_simulated(psim_build *b);
psim_status psim_build_make_locals(psim_build *b);
/* The kernel that waits for an async pipeline send issued after kernel from (schedules.c). */
int32_t psim_build_send_waiter(const psim_build *b, int32_t from);
/* Issues every stage's kernels in its pipeline schedule's order (schedules.c). */
psim_status psim_build_issue_compute(psim_build *b);
/* Issues the kernels of virtual stage vs for micro-batch mu and a pass (kernels.c): a forward,
 * the recompute and backward unit by unit, or the weight gradients (PSIM_DIR_WGT). */
psim_status psim_build_issue_slot(psim_build *b, int32_t vs, int32_t mu, int pass_kind);
psim_status psim_build_issue_merged(psim_build *b, int32_t vs, int32_t mu_f, int32_t mu_b);
/* The group of the devices holding the partial sums entry e of op o reduces with over the
 * dims in mask (comm.c), from b->groups when it holds the same request. */
void psim_build_partial_group(const psim_build *b, int32_t o, int32_t e, uint32_t mask,
                              psim_group *g);
psim_group_memo *psim_build_group_memo_new(void);
void psim_build_group_memo_free(psim_group_memo *gm);
/* Copies the group of (o, e, mask) from gm into g; false when gm does not hold it. */
bool psim_build_group_memo_get(psim_group_memo *gm, const psim_build *b, int32_t o, int32_t e,
                               uint32_t mask, psim_group *g);
/* Keeps g, the group of (o, e, mask), in gm (nothing when out of memory: a later miss). */
void psim_build_group_memo_put(psim_group_memo *gm, const psim_build *b, int32_t o, int32_t e,
                               uint32_t mask, const psim_group *g);
psim_status psim_build_group_fits(const psim_group *g);
/* A group with room for every device of the cluster (a member is a device), in
 * one block: psim_free frees it. NULL when out of memory (colls.c). */
psim_group *psim_build_group_new(const psim_build *b);
/* Sets g's stride and index: folded, the representative's peers (index 0); unfolded, g's
 * place in its family of n_groups concurrent groups g->devices + j * stride, each checked to be
 * the group of op o's entry there (else stride 0: none, as for groups that shift unalike). */
void psim_build_group_stride(const psim_build *b, int32_t o, int32_t e, uint32_t mask,
                             psim_group *g);
/* Sets the stride and index of g, the replicas of shard `shard` of op config cy (the
 * all-gather among receiving replicas, comm.c): the groups of consecutive shards when they
 * shift alike (folded: to the next shard; unfolded: every shard, g's index its shard). */
void psim_build_replica_family(const psim_build *b, const psim_op_config *cy, int32_t shard,
                               psim_group *g);
/* The concurrent groups a collective of g is costed with: folded, every group it stands for;
 * unfolded, its family when known (each group a task of its own, the family's bytes sharing
 * their links: docs/simulator.md, "Concurrent groups"), else 1. */
static inline int32_t psim_build_family(const psim_build *b, const psim_group *g) {
  return b->folded || g->stride != 0 ? g->n_groups : 1;
}
/* The descriptor of a collective of `kind` over group g, bytes per rank (all-gather: the
 * gathered size), with the strategy's all-reduce algorithm, g's family (psim_build_family),
 * stride and index; own_stream as psim_coll_desc says. No route cache, every piece holding its
 * list. */
static inline psim_coll_desc psim_build_group_coll(const psim_build *b, const psim_group *g,
                                                   psim_coll_kind kind, double bytes,
                                                   bool own_stream) {
  return (psim_coll_desc){.kind = kind,
                          .algo = b->s->allreduce,
                          .devices = g->devices,
                          .n = g->n,
                          .bytes = bytes,
                          .concurrent_groups = psim_build_family(b, g),
                          .group_stride = g->stride,
                          .own_stream = own_stream,
                          .routes = NULL,
                          .group_index = g->index,
                          .list_first_piece = false};
}
/* The groups a collective's bytes count for (dp_bytes): the folded representative stands for
 * all of its concurrent groups; an unfolded group for itself. */
static inline int32_t psim_build_counted_groups(const psim_build *b, const psim_coll_desc *d) {
  return b->folded ? d->concurrent_groups : 1;
}
int32_t psim_build_src_task(const psim_build *b, int32_t *arr, int32_t o, int32_t d, int32_t mu);
psim_status psim_build_connect_inputs(psim_build *b, int32_t y, int32_t mu);
psim_status psim_build_connect_grads(psim_build *b, int32_t y, int32_t mu);
psim_status psim_build_connect_all(psim_build *b);
bool psim_build_can_reuse(const psim_build *b, const psim_build *p);
psim_status psim_build_reuse_costs(psim_build *b, psim_build *p, const uint8_t *changed);
psim_status psim_build_map_compute_tasks(psim_build *b, const uint8_t *changed);
psim_status psim_build_alloc_segments(psim_build *b);
psim_status psim_build_optimizer(psim_build *b);

/* Context parallelism (context.c). Whether op is a view (reshape, split:
 * no kernel, no data movement). */
bool psim_build_is_view(const psim_op *op);
/* The ring steps of op o's attention: the degree of its query sequence dim
 * when its keys have their own, unsplit sequence dim; else 1. */
int32_t psim_build_cp_steps(const psim_build *b, int32_t o);
/* Async tensor parallelism (stack tp_overlap with sequence parallelism): the
 * shards n of matmul o's input that an all-gather brings to its local k
 * (fused_all_gather_matmul), and the ranks n its output is reduce-scattered
 * over (fused_matmul_reduce_scatter); 1 when not pipelined. */
int32_t psim_build_tp_gather_chunks(const psim_build *b, int32_t o, int32_t k);
/* Whether async tensor parallelism is on: the strategy's async_tp, else the stack's tp_overlap. */
static inline bool psim_build_async_tp(const psim_build *b) {
  return b->s->async_tp != PSIM_ASYNC_TP_STACK ? b->s->async_tp == PSIM_ASYNC_TP_ON
                                               : b->c->stack.tp_overlap;
}
int32_t psim_build_tp_scatter_chunks(const psim_build *b, int32_t o);
/* Whether Transformer Engine's backward TP overlap is on (context.c): async TP, the
 * stack's tp_overlap_bwd and sequence parallelism. */
static inline bool psim_build_tp_bwd_overlap(const psim_build *b) {
  return psim_build_async_tp(b) && b->c->stack.tp_overlap_bwd && b->s->sequence_parallel;
}
/* The time of one of the n chunks (1/n of the rows) of shard k of matmul o's
 * pass, from the cost model; whole_s / n when the rows do not split. */
double psim_build_tp_chunk_s(const psim_build *b, int32_t o, int32_t k, int pass_kind, int32_t n,
                             double whole_s);
/* Transformer Engine's backward TP overlap of shard k of matmul o (context.c): kernel
 * times of the dgrad before the output gradient's gather ends (0: none), the dgrad's
 * rest, the wgrad; extra_s the chunked GEMMs' cost over the unsplit dgrad. False when
 * no pair applies (then the plan is unset). */
typedef struct psim_tp_bwd_plan {
  double early_s, dgrad_s, wgrad_s, extra_s;
} psim_tp_bwd_plan;
bool psim_build_tp_bwd_plan(const psim_build *b, int32_t o, int32_t k, double duration_s,
                            psim_tp_bwd_plan *p);
/* Compute slowdown on device dev while a reduce-scatter holds the stack's
 * comm_sms SMs: n_sms / (n_sms - comm_sms), 1 when not set. */
double psim_build_comm_sm_slowdown(const psim_build *b, int32_t dev);

/* Memory (memory.c): static per-device bytes and which inputs ops save. */
psim_status psim_memory_static(psim_build *b);
/* Bytes an op's shard keeps for its backward, per micro-batch. When
 * `recomputed`, only what the recompute needs (inputs from another layer). */
/* Elements of tensor t in one shard of its producer p (through views), per micro-batch. */
double psim_memory_producer_shard_elems(const psim_build *b, int32_t p, int32_t t);

/* The part of an FP8 matmul shard's cast time (costdb/cost.c) that torchao's
 * tensorwise tensor parallelism does not spend (kernels.c), in s. */
double psim_build_fp8_cast_saving_s(const psim_build *b, int32_t o, int32_t dev, const int64_t *ext,
                                    int pass_kind);

double psim_memory_saved_bytes(const psim_build *b, int32_t op, const int64_t *shard,
                               bool recomputed);

/* Parameter servers (ps.c): pushes, server updates and pulls instead of
 * grad_sync; no worker update. */
psim_status psim_build_ps_sync(psim_build *b, int32_t *sync_done);
/* False when folding would hide differences: parameter servers, or devices of
 * a stage with different types or slowdowns (stragglers). */
bool psim_build_may_fold(const psim_build *b);
void psim_build_ps_free(psim_build *b);

#endif
