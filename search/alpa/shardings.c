/* shardings.c - per-op sharding strategies on a 1-D/2-D logical mesh and
 * their costs (Alpa, section 4.2): compute time of the shard (costdb/cost.h),
 * the strategy's own collectives (partial sums -> all-reduce in forward, a
 * replicated input consumed by split shards -> all-reduce of its gradient in
 * backward), weight-gradient synchronisation, and the GSPMD/Alpa resharding
 * table on every producer -> consumer edge:
 *   same spec -> free; replicated -> sharded -> free slice;
 *   sharded -> replicated -> all-gather; one dim -> another -> all-to-all;
 * charged in forward and, reversed, for the gradient in backward.
 * Trivial ops (elementwise, normalisation, dropout, views) are merged into the
 * operand whose producer comes last and follow its strategy. An op with
 * partial sums has a second variant that reduce-scatters them along the
 * sequence (psim_sh_strat.rs): its merged ops then run on sequence shards,
 * as in Megatron-LM's sequence parallelism. */
#include <math.h>
#include <string.h>

#include "costdb/cost.h"
#include "search/alpa/alpa_impl.h"
#include "sim/builder/memory.h"
#include "sim/core/alloc.h"
#include "sim/engine/collective.h"
#include "sim/simulate.h"

/* ---- mesh and collectives ---- */

/* Whether the n devices lie on several nodes with more than one on the first. */
static bool spans_nodes(const psim_cluster *c, const int32_t *dev, int32_t n) {
  int32_t k = 0;
  for (int32_t r = 0; r < n; r++)
    k += c->devices[dev[r]].node == c->devices[dev[0]].node;
  return k > 1 && k < n;
}

static psim_status fit_axis(psim_cluster *c, int32_t first, psim_sh_mesh *mesh, int axis) {
  int32_t a0 = mesh->shape[0], a1 = mesh->shape[1], n = mesh->shape[axis];
  static const psim_coll_kind kinds[PSIM_SH_NCOLL] = {PSIM_COLL_ALL_REDUCE, PSIM_COLL_ALL_GATHER,
                                                      PSIM_COLL_ALL_TO_ALL};
  for (int32_t r = 0; r < n && r < PSIM_SH_MAX_AXIS; r++)
    mesh->devices[axis][r] = first + (axis == 1 ? r : r * a1);
  /* All-to-all has a one-ring all-gather's alpha-beta form ((p-1) alpha + (p-1)/p n/B,
   * collective.h) but costs p^2 routes to evaluate: it reuses that fit, except over several
   * nodes of k > 1 ranks, where the all-gather runs k channel rings, one per NIC (collective.c
   * plan_ring_channels), and the all-to-all's own cost is measured. */
  int kinds_fit = spans_nodes(c, mesh->devices[axis], n) ? PSIM_SH_NCOLL : PSIM_SH_A2A;
  for (int k = 0; k < kinds_fit; k++) {
    if (n <= 1) {
      mesh->alpha[axis][k] = mesh->beta[axis][k] = 0;
      continue;
    }
    psim_coll_desc d;
    psim_coll_desc_init(&d);
    d.kind = kinds[k];
    d.devices = mesh->devices[axis];
    d.n = n;
    /* Groups along axis 1 are contiguous: only those inside the same node
     * share its links (others run on disjoint links of the node's fabric). */
    int32_t dpn = c->devices_per_node > 0 ? c->devices_per_node : c->n_devices;
    d.concurrent_groups = axis == 1 ? (a1 >= dpn ? 1 : (a0 < dpn / a1 ? a0 : dpn / a1)) : a1;
    d.group_stride = axis == 1 ? a1 : 1;
    double t1, t2, b1 = 1 << 20, b2 = 64.0 * (1 << 20);
    d.bytes = b1;
    PSIM_CHECK(psim_coll_time(c, &d, &t1));
    d.bytes = b2;
    PSIM_CHECK(psim_coll_time(c, &d, &t2));
    mesh->beta[axis][k] = fmax(0, (t2 - t1) / (b2 - b1));
    mesh->alpha[axis][k] = fmax(0, t1 - mesh->beta[axis][k] * b1);
  }
  if (kinds_fit == PSIM_SH_A2A) {
    mesh->alpha[axis][PSIM_SH_A2A] = mesh->alpha[axis][PSIM_SH_AG];
    mesh->beta[axis][PSIM_SH_A2A] = mesh->beta[axis][PSIM_SH_AG];
  }
  return PSIM_OK;
}

psim_status psim_sh_mesh_init(psim_cluster *c, int32_t first, int32_t a0, int32_t a1,
                              psim_sh_mesh *mesh) {
  memset(mesh, 0, sizeof *mesh);
  if (a0 < 1 || a1 < 1 || a0 > PSIM_SH_MAX_AXIS || a1 > PSIM_SH_MAX_AXIS ||
      first + a0 * a1 > c->n_devices)
    return psim_error(PSIM_EINPUT, "logical mesh %dx%d does not fit the cluster", (int)a0, (int)a1);
  mesh->shape[0] = a0;
  mesh->shape[1] = a1;
  PSIM_CHECK(fit_axis(c, first, mesh, 0));
  return fit_axis(c, first, mesh, 1);
}

double psim_sh_coll(const psim_sh_mesh *mesh, int axis, int kind, double bytes) {
  if (mesh->shape[axis] <= 1 || bytes <= 0)
    return 0;
  return mesh->alpha[axis][kind] + mesh->beta[axis][kind] * bytes;
}

/* ---- strategies ---- */

int32_t psim_sh_model_dim(const psim_op *op, psim_sh_strat s, int a) {
  return s.dim[a] >= 0 ? op->dims[s.dim[a]].dim : -1;
}

static int64_t op_extent(const psim_model *m, const psim_op *op, int32_t i, int64_t mb) {
  const psim_dim *d = &m->dims[op->dims[i].dim];
  return d->role == PSIM_ROLE_BATCH ? mb : d->size;
}

static bool splittable(const psim_model *m, const psim_op *op, int32_t i, int64_t mb, int32_t n) {
  psim_dim_use u = op->dims[i].use;
  if (u != PSIM_USE_OUTPUT && u != PSIM_USE_CONTRACTED)
    return false;
  psim_role r = m->dims[op->dims[i].dim].role;
  /* In models with roles, the named parallel dims (Alpa's space; head_dim and
   * role-less helper dims such as qkv or seq_kv are left whole). */
  if (r == PSIM_ROLE_HEAD_DIM || (r == PSIM_ROLE_NONE && m->role_dim[PSIM_ROLE_HIDDEN] >= 0))
    return false;
  int64_t e = op_extent(m, op, i, mb);
  return e >= n && e % n == 0;
}

psim_sh_strat psim_sh_op_strat(const psim_sh_layer *L, const psim_sh_mesh *mesh, int64_t mb,
                               const int32_t *choice, int32_t i) {
  if (L->parent[i] < 0) {
    int32_t g = L->group_of[i];
    return L->strats[g][choice[g]];
  }
  psim_sh_strat ps = psim_sh_op_strat(L, mesh, mb, choice, L->parent[i]);
  const psim_op *pop = &L->m->ops[L->ops[L->parent[i]]], *op = &L->m->ops[L->ops[i]];
  psim_sh_strat s = {{-1, -1}, -1};
  for (int a = 0; a < 2; a++) {
    int32_t md = psim_sh_model_dim(pop, ps, a);
    if (ps.rs == a) /* partial sums reduce-scattered: sequence shards */
      md = L->m->role_dim[PSIM_ROLE_SEQUENCE];
    else if (md >= 0 && pop->dims[ps.dim[a]].use == PSIM_USE_CONTRACTED)
      continue;
    if (md < 0)
      continue;
    int32_t k = psim_op_dim_index(op, md);
    if (k >= 0 && op->dims[k].use == PSIM_USE_OUTPUT && splittable(L->m, op, k, mb, mesh->shape[a]))
      s.dim[a] = (int8_t)k;
  }
  return s;
}

/* Index in op of the model's sequence dim as an output dim, or -1. */
static int32_t seq_out_dim(const psim_model *m, const psim_op *op) {
  int32_t sd = m->role_dim[PSIM_ROLE_SEQUENCE];
  int32_t k = sd >= 0 ? psim_op_dim_index(op, sd) : -1;
  return k >= 0 && op->dims[k].use == PSIM_USE_OUTPUT ? k : -1;
}

/* Whether strategy st of op may reduce-scatter its partial sums along axis a
 * over the sequence: it splits a contracted dim along a, its output has the
 * sequence dim, which divides evenly and is not split along the other axis. */
static bool can_reduce_scatter(const psim_model *m, const psim_op *op, const psim_sh_mesh *mesh,
                               int64_t mb, psim_sh_strat st, int a) {
  int32_t k = seq_out_dim(m, op);
  return st.dim[a] >= 0 && op->dims[st.dim[a]].use == PSIM_USE_CONTRACTED && k >= 0 &&
         st.dim[1 - a] != k && splittable(m, op, k, mb, mesh->shape[a]);
}

/* Every assignment of splittable dims to the mesh axes of size > 1, and the
 * sequence-parallel variant of those with partial sums. */
static psim_status enumerate(const psim_model *m, const psim_op *op, const psim_sh_mesh *mesh,
                             int64_t mb, psim_sh_strat **out, int32_t *n_out) {
  int32_t cand[2][PSIM_MAX_OP_DIMS + 1], nc[2] = {0, 0};
  for (int a = 0; a < 2; a++) {
    cand[a][nc[a]++] = -1;
    for (int32_t i = 0; mesh->shape[a] > 1 && i < op->n_dims; i++)
      if (splittable(m, op, i, mb, mesh->shape[a]))
        cand[a][nc[a]++] = i;
  }
  *out = psim_malloc((size_t)(3 * nc[0] * nc[1]) * sizeof **out);
  if (!*out)
    return psim_error(PSIM_ENOMEM, "out of memory (sharding strategies)");
  *n_out = 0;
  for (int32_t i = 0; i < nc[0]; i++)
    for (int32_t j = 0; j < nc[1]; j++) {
      if (cand[0][i] >= 0 && cand[0][i] == cand[1][j])
        continue;
      psim_sh_strat st = {{(int8_t)cand[0][i], (int8_t)cand[1][j]}, -1};
      (*out)[(*n_out)++] = st;
      for (int8_t a = 0; a < 2; a++) /* sequence-parallel variants (after the plain one) */
        if (can_reduce_scatter(m, op, mesh, mb, st, a)) {
          st.rs = a;
          (*out)[(*n_out)++] = st;
          st.rs = -1;
        }
    }
  return PSIM_OK;
}

/* ---- tensor specs and costs ---- */

static bool tensor_has(const psim_tensor *t, int32_t model_dim) {
  for (int32_t j = 0; j < t->rank; j++)
    if (t->dims[j] == model_dim)
      return true;
  return false;
}

/* spec[a]: model dim of tensor t split along axis a by op's strategy, or -1. */
static void tensor_spec(const psim_model *m, const psim_op *op, psim_sh_strat s, int32_t t,
                        int32_t spec[2]) {
  const psim_tensor *ten = &m->tensors[t];
  bool out = false;
  for (int32_t k = 0; k < op->n_out; k++)
    out = out || op->out[k] == t;
  for (int a = 0; a < 2; a++) {
    int32_t md = psim_sh_model_dim(op, s, a);
    if (out && s.rs == a) /* reduce-scattered output: sequence shards */
      md = m->role_dim[PSIM_ROLE_SEQUENCE];
    spec[a] = -1;
    for (int32_t j = 0; md >= 0 && j < ten->rank; j++)
      if (ten->dims[j] == md)
        spec[a] = md;
  }
}

static double tensor_bytes(const psim_model *m, int32_t t, int64_t mb) {
  const psim_tensor *ten = &m->tensors[t];
  double v = (double)psim_dtype_bytes(ten->dtype);
  for (int32_t j = 0; j < ten->rank; j++) {
    const psim_dim *d = &m->dims[ten->dims[j]];
    v *= d->role == PSIM_ROLE_BATCH ? (double)mb : (double)d->size;
  }
  return v;
}

static double spec_factor(const psim_sh_mesh *mesh, const int32_t spec[2]) {
  return (spec[0] >= 0 ? mesh->shape[0] : 1) * (double)(spec[1] >= 0 ? mesh->shape[1] : 1);
}

/* Resharding from spec p to spec q of a tensor of full size bytes. */
static double reshard(const psim_sh_mesh *mesh, const int32_t p[2], const int32_t q[2],
                      double bytes) {
  double t = 0;
  for (int a = 0; a < 2; a++) {
    if (p[a] == q[a] || p[a] < 0 || mesh->shape[a] <= 1)
      continue;
    int o = 1 - a;
    double other = (p[o] >= 0 || q[o] >= 0) ? mesh->shape[o] : 1;
    if (q[a] < 0)
      t += psim_sh_coll(mesh, a, PSIM_SH_AG, bytes / other);
    else
      t += psim_sh_coll(mesh, a, PSIM_SH_A2A, bytes / other / mesh->shape[a]);
  }
  return t;
}

static double edge_cost(const psim_model *m, const psim_sh_mesh *mesh, int64_t mb, int32_t t,
                        const int32_t p[2], const int32_t q[2]) {
  double b = tensor_bytes(m, t, mb);
  double c = reshard(mesh, p, q, b);
  if (m->tensors[t].requires_grad)
    c += reshard(mesh, q, p, b);
  return c;
}

static double shard_bytes(const psim_model *m, const psim_sh_mesh *mesh, const psim_op *op,
                          psim_sh_strat s, int32_t t, int64_t mb) {
  int32_t spec[2];
  tensor_spec(m, op, s, t, spec);
  return tensor_bytes(m, t, mb) / spec_factor(mesh, spec);
}

static double act_bytes(const psim_model *m, const psim_sh_mesh *mesh, const psim_op *op,
                        psim_sh_strat s, int64_t mb) {
  double v = 0;
  if (op->kind == PSIM_OP_DROPOUT) /* a 1-byte mask per element */
    return shard_bytes(m, mesh, op, s, op->out[0], mb) /
           (double)psim_dtype_bytes(m->tensors[op->out[0]].dtype);
  if (op->kind == PSIM_OP_SOFTMAX)
    return shard_bytes(m, mesh, op, s, op->out[0], mb);
  if (!psim_memory_saves_inputs(op))
    return 0;
  for (int32_t k = 0; k < op->n_in; k++)
    if (m->tensors[op->in[k]].kind != PSIM_TENSOR_WEIGHT)
      v += shard_bytes(m, mesh, op, s, op->in[k], mb);
  return v;
}

/* Weights of op: memory (psim_memory_param_bytes: weights, gradients and
 * optimizer state per parameter, sim/builder/memory.c) and the
 * synchronisation of their gradients along the axes that replicate them:
 * an all-reduce of the gradients (accumulated in fp32 for 16-bit models,
 * as sim/builder/gradsync.c sends them), or under ZeRO 1 and 2 (Megatron-LM's
 * distributed optimizer) a reduce-scatter of the gradients and an
 * all-gather of the updated weights (gradsync.c; the reduce-scatter costed
 * with the all-gather's alpha-beta form); ZeRO 3 reduce-scatters the
 * gradients only and all-gathers the weights before each pass of every
 * micro-batch instead (sim/builder/zero.c). The state each stage shards is
 * divided by the data-parallel degree dp, the degree of the op dims the
 * weight lacks (memory.c's weight_dp): optimizer state (ZeRO 1), gradients
 * too (2), weights too (3). Each includes the optimizer step on the state
 * the device holds (the simulator's update task, gradsync.c:
 * psim_cost_optimizer, less its per-iteration constant), which ZeRO divides
 * by dp. */
static void weight_costs(const psim_model *m, psim_cluster *cl, const psim_sh_mesh *mesh,
                         const psim_sh_params *p, const psim_op *op, psim_sh_strat s,
                         psim_sh_cost *c) {
  double pb[3];
  int32_t dev = mesh->devices[0][0];
  double step0 = psim_cost_optimizer(cl, dev, 0, p->costdb);
  psim_memory_param_bytes(m->dtype, pb);
  for (int32_t k = 0; k < op->n_in; k++) {
    const psim_tensor *t = &m->tensors[op->in[k]];
    if (t->kind != PSIM_TENSOR_WEIGHT)
      continue;
    int32_t spec[2];
    tensor_spec(m, op, s, op->in[k], spec);
    double elems = psim_tensor_elems(m, t) / spec_factor(mesh, spec), dp = 1, rs = 0, ag = 0;
    double ag3 = 0; /* ZeRO 3 gathers over the axes that split the op only */
    for (int a = 0; a < 2; a++) {
      if (spec[a] >= 0)
        continue;
      dp *= s.dim[a] >= 0 ? mesh->shape[a] : 1;
      c->sync += psim_sh_coll(mesh, a, PSIM_SH_AR, elems * pb[1]);
      rs += psim_sh_coll(mesh, a, PSIM_SH_AG, elems * pb[1]);
      ag += psim_sh_coll(mesh, a, PSIM_SH_AG, elems * pb[0]);
      ag3 += s.dim[a] >= 0 ? psim_sh_coll(mesh, a, PSIM_SH_AG, elems * pb[0]) : 0;
    }
    double step = psim_cost_optimizer(cl, dev, elems / dp, p->costdb) - step0;
    c->sync += psim_cost_optimizer(cl, dev, elems, p->costdb) - step0;
    c->sync_z1 += rs + ag + step;
    c->sync_z3 += rs + step;
    c->gather_z3 += ag3;
    c->gbytes_z3 += dp > 1 ? elems * pb[0] : 0;
    c->wmem += elems * (pb[0] + pb[1] + pb[2]);
    c->wmem_z1 += elems * (pb[0] + pb[1] + pb[2] / dp);
    c->wmem_z2 += elems * (pb[0] + (pb[1] + pb[2]) / dp);
    c->wmem_z3 += elems * (pb[0] + pb[1] + pb[2]) / dp;
  }
}

static void comm_costs(const psim_model *m, const psim_sh_mesh *mesh, const psim_op *op,
                       psim_sh_strat s, int64_t mb, psim_sh_cost *c) {
  for (int a = 0; a < 2; a++) {
    if (s.dim[a] < 0)
      continue;
    if (op->dims[s.dim[a]].use == PSIM_USE_CONTRACTED) { /* partial sums */
      /* Sizes before any reduce-scatter: the spec without it. */
      psim_sh_strat plain = s;
      plain.rs = -1;
      for (int32_t k = 0; k < op->n_out; k++) {
        double bytes = shard_bytes(m, mesh, op, plain, op->out[k], mb);
        /* Forward reduce-scatter + backward all-gather of the gradient (each
         * the all-gather's alpha-beta form), or one forward all-reduce. */
        c->comm += s.rs == a ? 2 * psim_sh_coll(mesh, a, PSIM_SH_AG, bytes)
                             : psim_sh_coll(mesh, a, PSIM_SH_AR, bytes);
      }
    }
    int32_t md = psim_sh_model_dim(op, s, a);
    for (int32_t k = 0; k < op->n_in; k++) { /* partial input gradients */
      const psim_tensor *t = &m->tensors[op->in[k]];
      if (!tensor_has(t, md) && t->kind != PSIM_TENSOR_WEIGHT && t->requires_grad)
        c->comm += psim_sh_coll(mesh, a, PSIM_SH_AR, shard_bytes(m, mesh, op, s, op->in[k], mb));
    }
  }
}

static void op_cost(const psim_model *m, psim_cluster *c, const psim_sh_mesh *mesh,
                    const psim_sh_params *p, const psim_op *op, psim_sh_strat s,
                    psim_sh_cost *out) {
  int64_t ext[PSIM_MAX_OP_DIMS];
  for (int32_t i = 0; i < op->n_dims; i++) {
    ext[i] = op_extent(m, op, i, p->micro_batch);
    for (int a = 0; a < 2; a++)
      if (s.dim[a] == i)
        ext[i] = (ext[i] + mesh->shape[a] - 1) / mesh->shape[a];
  }
  int32_t dev = mesh->devices[0][0];
  psim_cost_origin origin;
  double f = psim_cost_compute(c, dev, m, op, ext, PSIM_PASS_FWD, p->costdb, &origin);
  out->fwd += f;
  if (op->flops[PSIM_PASS_BWD] > 0 || op->bytes[PSIM_PASS_BWD] > 0)
    out->bwd += psim_cost_compute(c, dev, m, op, ext, PSIM_PASS_BWD, p->costdb, &origin);
  bool attn = op->tag && strcmp(op->tag, "attn_core") == 0;
  if (attn)
    out->fwd_attn += f;
  double act = act_bytes(m, mesh, op, s, p->micro_batch);
  out->act += act;
  if (!attn)
    out->act_sel += act;
  comm_costs(m, mesh, op, s, p->micro_batch, out);
  weight_costs(m, c, mesh, p, op, s, out);
}

/* ---- grouping ---- */

static bool trivial(const psim_op *op) {
  switch (op->kind) {
  case PSIM_OP_ELEMENTWISE:
  case PSIM_OP_DROPOUT:
  case PSIM_OP_SOFTMAX:
  case PSIM_OP_LAYERNORM:
  case PSIM_OP_RMSNORM:
  case PSIM_OP_RESHAPE:
  case PSIM_OP_TRANSPOSE:
  case PSIM_OP_SPLIT:
  case PSIM_OP_CONCAT: return true;
  default: return false;
  }
}

/* Local index of the op producing tensor t inside the layer, or -1. */
static int32_t local_producer(const psim_sh_layer *L, int32_t t) {
  int32_t p = L->m->tensors[t].producer;
  if (p < 0 || L->n_ops == 0 || p < L->ops[0] || p > L->ops[L->n_ops - 1])
    return -1;
  for (int32_t i = 0; i < L->n_ops; i++)
    if (L->ops[i] == p)
      return i;
  return -1;
}

static void group_ops(psim_sh_layer *L) {
  L->n_groups = 0;
  for (int32_t i = 0; i < L->n_ops; i++) {
    const psim_op *op = &L->m->ops[L->ops[i]];
    int32_t parent = -1;
    for (int32_t k = 0; trivial(op) && k < op->n_in; k++) {
      int32_t p = local_producer(L, op->in[k]);
      if (p > parent)
        parent = p;
    }
    L->parent[i] = parent;
    if (parent >= 0) {
      L->group_of[i] = L->group_of[parent];
    } else {
      L->root[L->n_groups] = i;
      L->group_of[i] = L->n_groups++;
    }
  }
}

static psim_status collect_ops(const psim_model *m, int32_t layer, psim_sh_layer *L) {
  int32_t n = 0;
  for (int32_t i = 0; i < m->n_ops; i++)
    n += m->ops[i].layer == layer;
  if (n == 0)
    return psim_error(PSIM_EINPUT, "layer %d of %s has no ops", (int)layer, m->name);
  L->ops = psim_malloc((size_t)n * sizeof *L->ops);
  L->group_of = psim_malloc((size_t)n * sizeof *L->group_of);
  L->parent = psim_malloc((size_t)n * sizeof *L->parent);
  L->root = psim_malloc((size_t)n * sizeof *L->root);
  if (!L->ops || !L->group_of || !L->parent || !L->root)
    return psim_error(PSIM_ENOMEM, "out of memory (sharding problem)");
  for (int32_t i = 0; i < m->n_ops; i++)
    if (m->ops[i].layer == layer)
      L->ops[L->n_ops++] = i;
  group_ops(L);
  return PSIM_OK;
}

static psim_status alloc_groups(psim_sh_layer *L) {
  size_t g = (size_t)L->n_groups;
  L->n_strats = psim_calloc(g, sizeof *L->n_strats);
  L->strats = psim_calloc(g, sizeof *L->strats);
  L->costs = psim_calloc(g, sizeof *L->costs);
  L->obj = psim_calloc(g, sizeof *L->obj);
  L->mem = psim_calloc(g, sizeof *L->mem);
  L->allowed = psim_calloc(g, sizeof *L->allowed);
  if (!L->n_strats || !L->strats || !L->costs || !L->obj || !L->mem || !L->allowed)
    return psim_error(PSIM_ENOMEM, "out of memory (sharding problem)");
  return PSIM_OK;
}

static psim_status group_strategies(psim_sh_layer *L, const psim_sh_mesh *mesh, int64_t mb) {
  for (int32_t g = 0; g < L->n_groups; g++) {
    const psim_op *op = &L->m->ops[L->ops[L->root[g]]];
    PSIM_CHECK(enumerate(L->m, op, mesh, mb, &L->strats[g], &L->n_strats[g]));
    size_t n = (size_t)L->n_strats[g];
    L->costs[g] = psim_calloc(n, sizeof **L->costs);
    L->obj[g] = psim_calloc(n, sizeof **L->obj);
    L->mem[g] = psim_calloc(n, sizeof **L->mem);
    L->allowed[g] = psim_malloc(n);
    if (!L->costs[g] || !L->obj[g] || !L->mem[g] || !L->allowed[g])
      return psim_error(PSIM_ENOMEM, "out of memory (sharding problem)");
    memset(L->allowed[g], 1, n);
  }
  return PSIM_OK;
}

/* ---- edges ---- */

typedef struct edge_ctx {
  psim_sh_layer *L;
  const psim_sh_mesh *mesh;
  int64_t mb;
  double mem_weight; /* s per byte (psim_sh_params) */
  int32_t *choice;   /* scratch: group choices */
} edge_ctx;

static psim_status find_edge(psim_sh_layer *L, int32_t a, int32_t b, psim_ilp_edge **out) {
  for (int32_t e = 0; e < L->n_edges; e++)
    if (L->edges[e].a == a && L->edges[e].b == b) {
      *out = &L->edges[e];
      return PSIM_OK;
    }
  size_t n = (size_t)L->n_strats[a] * (size_t)L->n_strats[b], k = (size_t)L->n_edges + 1;
  double *cost = psim_calloc(n, sizeof *cost), *all = psim_calloc(n, sizeof *all),
         *sel = psim_calloc(n, sizeof *sel);
  psim_ilp_edge *grown = psim_realloc(L->edges, k * sizeof *L->edges);
  if (grown)
    L->edges = grown;
  psim_sh_edge_act *ga = grown ? psim_realloc(L->edge_act, k * sizeof *ga) : NULL;
  if (ga)
    L->edge_act = ga;
  if (!cost || !all || !sel || !ga) {
    psim_free(cost);
    psim_free(all);
    psim_free(sel);
    return psim_error(PSIM_ENOMEM, "out of memory (sharding edges)");
  }
  L->edges[L->n_edges] = (psim_ilp_edge){a, b, cost};
  L->edge_act[L->n_edges] = (psim_sh_edge_act){all, sel};
  *out = &L->edges[L->n_edges++];
  return PSIM_OK;
}

/* A sequence-sharded tensor (spec sp) consumed replicated (sq) by an op
 * split along the same axis: comm_costs charged the consumer an all-reduce
 * of this input's gradient, but its partial sums need only be
 * reduce-scattered back to the producer's sequence shards (Megatron-LM's
 * sequence parallelism: all-gather forward, reduce-scatter backward). The
 * difference, s (<= 0). */
static double rs_instead_of_ar(const psim_model *m, const psim_sh_mesh *mesh, const psim_op *qop,
                               psim_sh_strat qs, int32_t tc, const int32_t sp[2],
                               const int32_t sq[2], int64_t mb) {
  int32_t seq = m->role_dim[PSIM_ROLE_SEQUENCE];
  const psim_tensor *t = &m->tensors[tc];
  double d = 0;
  for (int a = 0; a < 2; a++) {
    if (seq < 0 || sp[a] != seq || sq[a] >= 0 || qs.dim[a] < 0 || !t->requires_grad)
      continue;
    int32_t md = psim_sh_model_dim(qop, qs, a);
    if (tensor_has(t, md))
      continue;
    double bytes = shard_bytes(m, mesh, qop, qs, tc, mb);
    d += psim_sh_coll(mesh, a, PSIM_SH_AG, bytes) - psim_sh_coll(mesh, a, PSIM_SH_AR, bytes);
  }
  return d;
}

/* Bytes (<= 0) by which act_bytes overcounts tensor tc saved by consumer
 * qop: a saved input that arrives gathered from smaller producer shards
 * (spec sp) is kept as the producer's shard and gathered again in backward
 * (Megatron-LM's sequence parallelism; sim/builder/memory.c counts it so). */
static double gathered_again(const psim_model *m, const psim_sh_mesh *mesh, const psim_op *qop,
                             psim_sh_strat qs, int32_t tc, const int32_t sp[2], int64_t mb) {
  if (!psim_memory_saves_inputs(qop) || m->tensors[tc].kind != PSIM_TENSOR_ACTIVATION)
    return 0;
  double q = shard_bytes(m, mesh, qop, qs, tc, mb);
  double p = tensor_bytes(m, tc, mb) / spec_factor(mesh, sp);
  return p < q ? p - q : 0;
}

/* Adds the resharding of tensor (tp produced by local op p, as tc consumed
 * by local op q) to the group costs or to the edge between their groups. */
static psim_status add_tensor_edge(edge_ctx *x, int32_t p, int32_t tp, int32_t q, int32_t tc) {
  psim_sh_layer *L = x->L;
  const psim_model *m = L->m;
  int32_t ga = L->group_of[p], gb = L->group_of[q];
  const psim_op *pop = &m->ops[L->ops[p]], *qop = &m->ops[L->ops[q]];
  psim_ilp_edge *e = NULL;
  if (ga != gb)
    PSIM_CHECK(find_edge(L, ga, gb, &e));
  for (int32_t i = 0; i < L->n_strats[ga]; i++)
    for (int32_t j = 0; j < (ga == gb ? 1 : L->n_strats[gb]); j++) {
      x->choice[ga] = i;
      x->choice[gb] = ga == gb ? i : j;
      int32_t sp[2], sq[2];
      psim_sh_strat qs = psim_sh_op_strat(L, x->mesh, x->mb, x->choice, q);
      tensor_spec(m, pop, psim_sh_op_strat(L, x->mesh, x->mb, x->choice, p), tp, sp);
      tensor_spec(m, qop, qs, tc, sq);
      double c = edge_cost(m, x->mesh, x->mb, tc, sp, sq);
      c = fmax(0, c + rs_instead_of_ar(m, x->mesh, qop, qs, tc, sp, sq, x->mb));
      double saved = gathered_again(m, x->mesh, qop, qs, tc, sp, x->mb);
      bool attn = qop->tag && strcmp(qop->tag, "attn_core") == 0;
      if (e) { /* the edge's arrays are owned by L (allocated in find_edge) */
        size_t at = (size_t)i * (size_t)L->n_strats[gb] + (size_t)j;
        ((double *)e->cost)[at] += c + x->mem_weight * saved;
        L->edge_act[e - L->edges].all[at] += saved;
        L->edge_act[e - L->edges].sel[at] += attn ? 0 : saved;
      } else {
        psim_sh_cost *gc = &L->costs[ga][i];
        gc->comm += c;
        gc->act += saved;
        gc->act_sel += attn ? 0 : saved;
        L->obj[ga][i] += c + x->mem_weight * saved;
        L->mem[ga][i] += saved;
      }
    }
  return PSIM_OK;
}

/* The producer of a layer input inside this layer under the periodic
 * boundary of repeated blocks: the op of this layer with the same proto as
 * the input's producer (whose output k it is), or -1. */
static int32_t periodic_producer(const psim_sh_layer *L, int32_t t, int32_t *tp) {
  const psim_model *m = L->m;
  int32_t p = m->tensors[t].producer;
  if (p < 0 || m->ops[p].block < 0)
    return -1;
  for (int32_t k = 0; k < m->ops[p].n_out; k++)
    if (m->ops[p].out[k] == t)
      for (int32_t i = 0; i < L->n_ops; i++)
        if (m->ops[L->ops[i]].proto == m->ops[p].proto && m->ops[L->ops[i]].block >= 0) {
          *tp = m->ops[L->ops[i]].out[k];
          return i;
        }
  return -1;
}

static psim_status build_edges(edge_ctx *x) {
  psim_sh_layer *L = x->L;
  const psim_model *m = L->m;
  for (int32_t q = 0; q < L->n_ops; q++) {
    const psim_op *op = &m->ops[L->ops[q]];
    for (int32_t k = 0; k < op->n_in; k++) {
      int32_t t = op->in[k], tp = t;
      if (m->tensors[t].kind == PSIM_TENSOR_WEIGHT)
        continue;
      int32_t p = local_producer(L, t);
      if (p < 0)
        p = periodic_producer(L, t, &tp);
      if (p >= 0 && p != q)
        PSIM_CHECK(add_tensor_edge(x, p, tp, q, t));
    }
  }
  return PSIM_OK;
}

/* ---- costs of group strategies ---- */

static void group_costs(psim_sh_layer *L, psim_cluster *c, const psim_sh_mesh *mesh,
                        const psim_sh_params *p, int32_t *choice) {
  for (int32_t g = 0; g < L->n_groups; g++)
    for (int32_t i = 0; i < L->n_strats[g]; i++) {
      choice[g] = i;
      psim_sh_cost *cost = &L->costs[g][i];
      for (int32_t o = 0; o < L->n_ops; o++)
        if (L->group_of[o] == g)
          op_cost(L->m, c, mesh, p, &L->m->ops[L->ops[o]],
                  psim_sh_op_strat(L, mesh, p->micro_batch, choice, o), cost);
      L->obj[g][i] = cost->fwd + cost->bwd + cost->comm + cost->sync / p->n_micro +
                     p->mem_weight * (cost->wmem + cost->act);
      L->mem[g][i] = cost->wmem + cost->act;
    }
}

/* Activation bytes per device a layer keeps under full recomputation: its
 * inputs from other layers, each once, as its first consumer shards it. */
double psim_sh_input_bytes(const psim_sh_layer *L, const psim_sh_mesh *mesh, int64_t mb,
                           const int32_t *choice) {
  double v = 0;
  for (int32_t q = 0; q < L->n_ops; q++) {
    const psim_op *op = &L->m->ops[L->ops[q]];
    for (int32_t k = 0; k < op->n_in; k++) {
      int32_t t = op->in[k];
      if (L->m->tensors[t].kind != PSIM_TENSOR_ACTIVATION || local_producer(L, t) >= 0)
        continue;
      bool seen = false;
      for (int32_t p = 0; p < q && !seen; p++)
        for (int32_t j = 0; j < L->m->ops[L->ops[p]].n_in; j++)
          seen = seen || L->m->ops[L->ops[p]].in[j] == t;
      for (int32_t j = 0; j < k; j++)
        seen = seen || op->in[j] == t;
      if (!seen)
        v += shard_bytes(L->m, mesh, op, psim_sh_op_strat(L, mesh, mb, choice, q), t, mb);
    }
  }
  return v;
}

psim_status psim_sh_layer_build(const psim_model *m, psim_cluster *c, int32_t layer,
                                const psim_sh_mesh *mesh, const psim_sh_params *p,
                                psim_sh_layer *L) {
  memset(L, 0, sizeof *L);
  L->m = m;
  PSIM_CHECK(collect_ops(m, layer, L));
  PSIM_CHECK(alloc_groups(L));
  PSIM_CHECK(group_strategies(L, mesh, p->micro_batch));
  int32_t *choice = psim_calloc((size_t)L->n_groups, sizeof *choice);
  if (!choice)
    return psim_error(PSIM_ENOMEM, "out of memory (sharding problem)");
  group_costs(L, c, mesh, p, choice);
  edge_ctx x = {L, mesh, p->micro_batch, p->mem_weight, choice};
  psim_status st = build_edges(&x);
  psim_free(choice);
  return st;
}

void psim_sh_layer_destroy(psim_sh_layer *L) {
  for (int32_t g = 0; L->n_strats && g < L->n_groups; g++) {
    psim_free(L->strats[g]);
    psim_free(L->costs[g]);
    psim_free(L->obj[g]);
    psim_free(L->mem[g]);
    psim_free(L->allowed[g]);
  }
  for (int32_t e = 0; e < L->n_edges; e++) {
    psim_free((void *)L->edges[e].cost);
    psim_free(L->edge_act[e].all);
    psim_free(L->edge_act[e].sel);
  }
  psim_free(L->edges);
  psim_free(L->edge_act);
  psim_free(L->n_strats);
  psim_free(L->strats);
  psim_free(L->costs);
  psim_free(L->obj);
  psim_free(L->mem);
  psim_free(L->allowed);
  psim_free(L->ops);
  psim_free(L->group_of);
  psim_free(L->parent);
  psim_free(L->root);
  memset(L, 0, sizeof *L);
}

void psim_sh_layer_problem(const psim_sh_layer *L, psim_ilp_problem *p) {
  memset(p, 0, sizeof *p);
  p->n_groups = L->n_groups;
  p->n_choices = L->n_strats;
  p->cost = (const double *const *)L->obj;
  p->mem = (const double *const *)L->mem;
  p->mem_limit = INFINITY;
  p->n_edges = L->n_edges;
  p->edges = L->edges;
  p->allowed = (const uint8_t *const *)L->allowed;
}
