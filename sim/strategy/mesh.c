/* mesh.c - the Mesh-TensorFlow mesh + layout form: which op dims each mesh axis splits, and
 * the device list an op gets over a stage (psim_mesh_op_config), memoised across the ops and
 * stages of a strategy (psim_mesh_op_config_like). */
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/strategy/strategy.h"

int32_t psim_mesh_size(const psim_mesh *mesh) {
  int32_t n = mesh->n_axes > 0 ? 1 : 0;
  for (int32_t a = 0; a < mesh->n_axes; a++)
    n *= mesh->size[a];
  return n;
}

/* A routed tensor: a dispatch's output, or an expert op's output that keeps
 * an expert-role dim. */
static bool tensor_routed(const psim_model *m, int32_t t) {
  const psim_tensor *x = &m->tensors[t];
  if (x->producer < 0)
    return false;
  const psim_op *p = &m->ops[x->producer];
  if (p->kind == PSIM_OP_DISPATCH)
    return true;
  bool expert_dim = false;
  for (int32_t k = 0; k < x->rank; k++)
    expert_dim = expert_dim || m->dims[x->dims[k]].role == PSIM_ROLE_EXPERT;
  return expert_dim && psim_mesh_expert_op(m, x->producer);
}

bool psim_mesh_expert_op(const psim_model *m, int32_t o) {
  const psim_op *op = &m->ops[o];
  if (op->kind == PSIM_OP_DISPATCH || op->kind == PSIM_OP_COMBINE ||
      m->role_dim[PSIM_ROLE_EXPERT] < 0)
    return false;
  for (int32_t i = 0; i < op->n_in; i++)
    if (tensor_routed(m, op->in[i]))
      return true;
  return false;
}

/* The layout an op uses: the expert layout for expert ops when it has entries. */
typedef struct layout_view {
  const char (*key)[PSIM_MESH_NAME];
  const int32_t *axis;
  int32_t n;
  bool expert_op, fallbacks;
} layout_view;

static layout_view layout_of(const psim_mesh *mesh, const psim_model *m, const psim_op *op) {
  layout_view v = {mesh->layout_key, mesh->layout_axis, mesh->n_layout, false, true};
  v.expert_op = psim_mesh_expert_op(m, (int32_t)(op - m->ops));
  if (v.expert_op && mesh->n_expert_layout > 0) {
    v.key = mesh->expert_layout_key;
    v.axis = mesh->expert_layout_axis;
    v.n = mesh->n_expert_layout;
    v.fallbacks = false;
  }
  return v;
}

static bool dim_matches(const psim_model *m, int32_t dim, const char *key) {
  return strcmp(m->dims[dim].name, key) == 0 ||
         (m->dims[dim].role != PSIM_ROLE_NONE &&
          strcmp(psim_role_name(m->dims[dim].role), key) == 0);
}

/* Op dim i claims the free axes of the layout entries naming its dim (by
 * name; by role when no entry names it). */
static void claim_axes(const psim_mesh *mesh, const layout_view *v, const psim_model *m,
                       const psim_op *op, int32_t i, int32_t *dim_of_axis) {
  int32_t dim = op->dims[i].dim;
  bool by_name = false;
  for (int32_t k = 0; k < v->n && !by_name; k++)
    by_name = strcmp(v->key[k], m->dims[dim].name) == 0;
  for (int32_t k = 0; k < v->n; k++) {
    bool match = by_name ? strcmp(v->key[k], m->dims[dim].name) == 0
                         : m->dims[dim].role != PSIM_ROLE_NONE &&
                               strcmp(v->key[k], psim_role_name(m->dims[dim].role)) == 0;
    int32_t a = v->axis[k];
    if (match && a >= 0 && a < mesh->n_axes && dim_of_axis[a] < 0)
      dim_of_axis[a] = i;
  }
}

/* dim_of_axis[a]: the op dim index (into op->dims) split over axis a, or -1. */
void psim_mesh_map_axes(const psim_mesh *mesh, const psim_model *m, const psim_op *op,
                        int32_t *dim_of_axis) {
  for (int32_t a = 0; a < mesh->n_axes; a++)
    dim_of_axis[a] = -1;
  layout_view v = layout_of(mesh, m, op);
  for (int32_t i = 0; v.expert_op && i < op->n_dims; i++)
    if (m->dims[op->dims[i].dim].role == PSIM_ROLE_EXPERT)
      claim_axes(mesh, &v, m, op, i, dim_of_axis);
  for (int32_t i = 0; i < op->n_dims; i++)
    claim_axes(mesh, &v, m, op, i, dim_of_axis);
  for (int32_t a = 0; v.fallbacks && a < mesh->n_axes; a++) {
    if (dim_of_axis[a] >= 0 || mesh->fallback[a][0] == '\0')
      continue;
    for (int32_t i = 0; i < op->n_dims && dim_of_axis[a] < 0; i++)
      if (dim_matches(m, op->dims[i].dim, mesh->fallback[a]))
        dim_of_axis[a] = i;
  }
}

/* Mesh coordinates of (shard s, replica r) -> linear mesh index. A dim split
 * over several axes takes its coordinate row-major over them (first slowest). */
static int32_t mesh_index(const psim_mesh *mesh, const psim_op_config *cfg, int32_t n_dims,
                          const int32_t *dim_of_axis, int32_t s, int32_t r) {
  int32_t coord_of_dim[PSIM_MAX_OP_DIMS];
  for (int32_t i = n_dims - 1; i >= 0; i--) {
    coord_of_dim[i] = s % cfg->degree[i];
    s /= cfg->degree[i];
  }
  int32_t idx = 0, stride = 1;
  for (int32_t a = mesh->n_axes - 1; a >= 0; a--) {
    int32_t c;
    if (dim_of_axis[a] >= 0) {
      c = coord_of_dim[dim_of_axis[a]] % mesh->size[a];
      coord_of_dim[dim_of_axis[a]] /= mesh->size[a];
    } else {
      c = r % mesh->size[a];
      r /= mesh->size[a];
    }
    idx += c * stride;
    stride *= mesh->size[a];
  }
  return idx;
}

/* Op `op`'s degrees and replicas over a stage of n_stage_devices (cfg zeroed first, no
 * device list) and its dim_of_axis. */
static psim_status mesh_op_shape(const psim_mesh *mesh, const psim_model *m, int32_t op,
                                 int32_t n_stage_devices, psim_op_config *cfg,
                                 int32_t *dim_of_axis) {
  const psim_op *o = &m->ops[op];
  memset(cfg, 0, sizeof *cfg);
  for (int32_t i = 0; i < PSIM_MAX_OP_DIMS; i++)
    cfg->degree[i] = 1;
  cfg->replicas = n_stage_devices;
  if (mesh->n_axes > 0 && psim_mesh_size(mesh) != n_stage_devices)
    return psim_error(PSIM_EINPUT, "the mesh has %d devices but the stage of op '%s' has %d",
                      (int)psim_mesh_size(mesh), o->name, (int)n_stage_devices);
  psim_mesh_map_axes(mesh, m, o, dim_of_axis);
  for (int32_t a = 0; a < mesh->n_axes; a++) {
    if (dim_of_axis[a] < 0)
      continue;
    cfg->degree[dim_of_axis[a]] *= mesh->size[a];
    cfg->replicas /= mesh->size[a];
  }
  return PSIM_OK;
}

/* The split of op `op` (its degrees, replicas and the dim per mesh axis, from
 * mesh_op_shape): what mesh_index reads besides the shard and replica. */
static void split_of(const psim_mesh *mesh, const psim_model *m, int32_t op,
                     const psim_op_config *cfg, const int32_t *dim_of_axis, psim_mesh_split *sp) {
  memset(sp, 0, sizeof *sp);
  sp->n_dims = m->ops[op].n_dims;
  sp->replicas = cfg->replicas;
  for (int32_t i = 0; i < sp->n_dims && i < PSIM_MAX_OP_DIMS; i++)
    sp->degree[i] = cfg->degree[i];
  for (int32_t a = 0; a < mesh->n_axes && a < PSIM_MESH_MAX_AXES; a++)
    sp->dim_of_axis[a] = dim_of_axis[a];
}

/* The position in the stage's list of every entry of the list of an op shaped cfg (mesh_op_shape),
 * or with stage_devices the device there: entry s * replicas + r is shard s's replica r. */
static void mesh_positions(const psim_mesh *mesh, const psim_op_config *cfg, int32_t n_dims,
                           const int32_t *dim_of_axis, const int32_t *stage_devices, int32_t n,
                           int32_t *out) {
  int32_t n_shards = cfg->replicas > 0 ? n / cfg->replicas : 0;
  for (int32_t sh = 0; sh < n_shards; sh++)
    for (int32_t r = 0; r < cfg->replicas; r++) {
      int32_t idx = mesh->n_axes > 0 ? mesh_index(mesh, cfg, n_dims, dim_of_axis, sh, r) : r;
      out[sh * cfg->replicas + r] = stage_devices ? stage_devices[idx] : idx;
    }
}

/* Makes room at the front of a newest-first memo of *n of at most PSIM_MESH_MEMO entries (when
 * full the last is overwritten: the caller releases it first). */
static void memo_front(int32_t *n, psim_mesh_split *split, void *items, size_t item_bytes) {
  int32_t k = *n < PSIM_MESH_MEMO ? (*n)++ : PSIM_MESH_MEMO - 1;
  memmove(&split[1], &split[0], (size_t)k * sizeof split[0]);
  memmove((char *)items + item_bytes, items, (size_t)k * item_bytes);
}

/* The positions of split sp (computed once for every stage of the strategy). */
static psim_status positions_of(psim_mesh_memo *memo, const psim_mesh *mesh,
                                const psim_op_config *cfg, int32_t n_dims, const int32_t *ax,
                                const psim_mesh_split *sp, int32_t n, const int32_t **out) {
  for (int32_t k = 0; k < memo->n_pos; k++)
    if (memcmp(&memo->pos_split[k], sp, sizeof *sp) == 0) {
      *out = memo->pos[k];
      return PSIM_OK;
    }
  int32_t *pos = psim_malloc((size_t)(n > 0 ? n : 1) * sizeof *pos);
  if (!pos)
    return psim_error(PSIM_ENOMEM, "out of memory expanding a strategy");
  mesh_positions(mesh, cfg, n_dims, ax, NULL, n, pos);
  int32_t *dropped = memo->n_pos == PSIM_MESH_MEMO ? memo->pos[PSIM_MESH_MEMO - 1] : NULL;
  memo_front(&memo->n_pos, memo->pos_split, memo->pos, sizeof memo->pos[0]);
  psim_free(dropped);
  memo->pos_split[0] = *sp;
  memo->pos[0] = pos;
  *out = pos;
  return PSIM_OK;
}

/* Remembers list d (one reference taken) as split sp over the stage list stage. */
static void remember_list(psim_mesh_memo *memo, const psim_mesh_split *sp, const int32_t *stage,
                          const int32_t *d) {
  const int32_t *dropped = memo->n == PSIM_MESH_MEMO ? memo->devices[PSIM_MESH_MEMO - 1] : NULL;
  memo_front(&memo->n, memo->split, memo->devices, sizeof memo->devices[0]);
  memmove(&memo->stage[1], &memo->stage[0], (size_t)(memo->n - 1) * sizeof memo->stage[0]);
  psim_devlist_release(dropped);
  memo->split[0] = *sp;
  memo->stage[0] = stage;
  memo->devices[0] = psim_devlist_share(d);
}

/* d (new, n devices over stage), or a list of the memo over stage with d's devices in d's
 * order, shared in its place (d released): splits that differ can order a stage alike
 * (GPT-175B tp 8 pp 8 at 131,072 GPUs: 1,552 ops held a copy equal to an earlier op's, which
 * folding's twins, the validation and devices_used then compared entry by entry). Once per
 * new split and stage. */
static const int32_t *equal_list(const psim_mesh_memo *memo, const int32_t *stage, int32_t *d,
                                 int32_t n) {
  for (int32_t k = 0; k < memo->n; k++)
    if (memo->stage[k] == stage && memcmp(memo->devices[k], d, (size_t)n * sizeof *d) == 0) {
      psim_devlist_release(d);
      return psim_devlist_share(memo->devices[k]);
    }
  return d;
}

psim_status psim_mesh_op_config_like(const psim_mesh *mesh, const psim_model *m, int32_t op,
                                     const int32_t *stage_devices, int32_t n_stage_devices,
                                     psim_mesh_memo *memo, psim_op_config *cfg) {
  int32_t ax[PSIM_MESH_MAX_AXES];
  PSIM_CHECK(mesh_op_shape(mesh, m, op, n_stage_devices, cfg, ax));
  psim_mesh_split sp;
  split_of(mesh, m, op, cfg, ax, &sp);
  cfg->n_devices = n_stage_devices;
  for (int32_t k = 0; k < memo->n; k++)
    if (memo->stage[k] == stage_devices && memcmp(&memo->split[k], &sp, sizeof sp) == 0) {
      cfg->devices = psim_devlist_share(memo->devices[k]); /* the same list, shared */
      return PSIM_OK;
    }
  const int32_t *pos = NULL;
  PSIM_CHECK(positions_of(memo, mesh, cfg, m->ops[op].n_dims, ax, &sp, n_stage_devices, &pos));
  int32_t *d = psim_devlist_new(n_stage_devices);
  if (!d)
    return psim_error(PSIM_ENOMEM, "out of memory expanding a strategy");
  for (int32_t e = 0; e < n_stage_devices; e++) /* another stage's copy: a gather */
    d[e] = stage_devices[pos[e]];
  cfg->devices = equal_list(memo, stage_devices, d, n_stage_devices);
  remember_list(memo, &sp, stage_devices, cfg->devices);
  return PSIM_OK;
}

void psim_mesh_memo_destroy(psim_mesh_memo *memo) {
  for (int32_t k = 0; k < memo->n; k++)
    psim_devlist_release(memo->devices[k]);
  for (int32_t k = 0; k < memo->n_pos; k++)
    psim_free(memo->pos[k]);
  memset(memo, 0, sizeof *memo);
}

psim_status psim_mesh_op_config(const psim_mesh *mesh, const psim_model *m, int32_t op,
                                const int32_t *stage_devices, int32_t n_stage_devices,
                                psim_op_config *cfg) {
  int32_t dim_of_axis[PSIM_MESH_MAX_AXES];
  PSIM_CHECK(mesh_op_shape(mesh, m, op, n_stage_devices, cfg, dim_of_axis));
  int32_t *d = psim_devlist_new(n_stage_devices);
  if (!d)
    return psim_error(PSIM_ENOMEM, "out of memory expanding a strategy");
  cfg->devices = d;
  cfg->n_devices = n_stage_devices;
  mesh_positions(mesh, cfg, m->ops[op].n_dims, dim_of_axis, stage_devices, n_stage_devices, d);
  return PSIM_OK;
}
