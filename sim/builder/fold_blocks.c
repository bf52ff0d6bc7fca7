/* fold_blocks.c - folding whole exchange groups (docs/simulator.md, "Folding symmetric
 * devices", exchange blocks).
 *
 * A mixture-of-experts layer split over its experts exchanges tokens between the devices of a
 * stage (the dispatch's and the combine's all-to-all, point-to-point transfers): a column
 * (one position of every stage) is then not closed, its sender also serves other positions.
 * Megatron-Core's expert groups (etp x ep, inside one expert-data-parallel rank) are blocks of
 * consecutive positions of a stage (sim/strategy/templates.c: rank = etp_i + etp (ep_i + ep
 * edp_i)), and every transfer of the exchange stays inside its block. Folding then simulates
 * whole blocks: the unit of a column becomes a block of g consecutive positions, each block of
 * one class standing for the others at the same offset (position p for p + k g).
 *
 * This file finds g from the layouts before the build and checks what makes the blocks
 * symmetric: for every edge inside a stage (both ways; reductions are collectives and are
 * left to their own checks), every consumer's sources (a local copy, or the position of the
 * shard it gathers from, the elements and the routed tokens' scale) lie in its own block and
 * are those of the consumer at the same offset of block 0 moved by whole blocks; and every
 * op's shard at position p holds the experts of position p mod g (routed loads follow the
 * experts: sim/builder/routing.c). The build then checks each transfer it emits (a sender in
 * another block declines: psim_build_fold_check_transfer), locals.c adds the exchange routes
 * to the blocks' signatures and held links. */
#include "sim/builder/build_impl.h"
#include "sim/builder/routing.h"

#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"

/* Largest block folded (positions); beyond, folding is declined. */
#define PSIM_FOLD_MAX_BLOCK 256

bool psim_build_fold_needs_blocks(const psim_build *b) {
  for (int32_t o = 0; o < b->m->n_ops; o++) {
    const psim_op *op = &b->m->ops[o];
    for (int32_t i = 0; i < op->n_dims; i++)
      if (b->m->dims[op->dims[i].dim].role == PSIM_ROLE_EXPERT && b->s->ops[o].degree[i] > 1)
        return true;
  }
  return false;
}

/* Canonical shard of sh for tensor t: its coordinates on t's dims, 0 elsewhere (as comm.c's
 * gather picks its source: the first replica of that shard). */
static int32_t canonical_shard(const psim_build *b, int32_t x, int32_t sh, int32_t t) {
  const psim_op *op = &b->m->ops[x];
  const int32_t *deg = b->s->ops[x].degree;
  int32_t out = 0, mul = 1, gqa = psim_build_gqa_heads(b, x, t);
  for (int32_t i = op->n_dims - 1; i >= 0; mul *= deg[i], sh /= deg[i], i--)
    if (i == gqa || psim_build_dim_in_tensor(&b->m->tensors[t], op->dims[i].dim))
      out += sh % deg[i] * mul;
  return out;
}

typedef struct blk_scan {
  const psim_build *b;
  const int32_t *pos; /* per device: position in its stage */
  int32_t n_pos, g;   /* g: the block tried; 0 in the first pass */
  int32_t need;       /* first pass: smallest block every pair fits so far (a divisor) */
  bool ok;
  uint64_t *h;    /* second pass: per position, the hash of its sources */
  uint8_t *src;   /* second pass: g x g, member i receives from member j */
  int32_t *ent;   /* per device: the producer's entry there, or -1 (scratch) */
  int32_t *pairs; /* first pass: (consumer, source) positions seen */
  size_t n_pairs, cap_pairs;
} blk_scan;

static psim_status note_source(blk_scan *s, int32_t pd, int32_t ps, double elems, double scale) {
  if (s->g == 0) {
    if (ps < 0 || ps == pd)
      return PSIM_OK;
    PSIM_CHECK(PSIM_VEC_RESERVE(s->pairs, s->cap_pairs, 2 * s->n_pairs + 2));
    s->pairs[2 * s->n_pairs] = pd;
    s->pairs[2 * s->n_pairs + 1] = ps;
    s->n_pairs++;
    return PSIM_OK;
  }
  int32_t base = pd / s->g * s->g;
  if (ps >= 0 && ps / s->g != pd / s->g) {
    s->ok = false;
    return PSIM_OK;
  }
  uint64_t rel = ps < 0 ? 0 : (uint64_t)(uint32_t)(ps - base) + 1, e, c;
  memcpy(&e, &elems, sizeof e);
  memcpy(&c, &scale, sizeof c);
  s->h[pd] += psim_hmap_mix64(psim_hmap_mix64(rel ^ e << 1) ^ c);
  if (ps >= 0 && ps != pd)
    s->src[(size_t)(pd - base) * (size_t)s->g + (size_t)(ps - base)] = 1;
  return PSIM_OK;
}

/* The sources of every consumer of tensor t: op `to` reads its region from op from's
 * shards (comm.c's gather: a local copy, else the first replica of the shard). */
static psim_status scan_edge(blk_scan *s, int32_t from, int32_t to, int32_t t, int dir) {
  const psim_build *b = s->b;
  const psim_op_config *cf = &b->s->ops[from], *ct = &b->s->ops[to];
  if (psim_build_partial_mask(b, from, t, dir))
    return PSIM_OK; /* a reduction: a collective of symmetric groups (locals.c) */
  const psim_tensor *ten = &b->m->tensors[t];
  int32_t n_shards = cf->n_devices / cf->replicas;
  for (int32_t e = 0; e < cf->n_devices; e++)
    s->ent[cf->devices[e]] = e;
  psim_status st = PSIM_OK;
  for (int32_t e = 0; e < ct->n_devices && st == PSIM_OK && s->ok; e++) {
    int32_t d = ct->devices[e], mine = s->ent[d];
    int32_t local = mine < 0 ? -1 : canonical_shard(b, from, mine / cf->replicas, t);
    psim_region rt, rf;
    psim_build_tensor_region(b, to, e / ct->replicas, t, &rt);
    for (int32_t sh = 0; sh < n_shards && st == PSIM_OK; sh++) {
      if (canonical_shard(b, from, sh, t) != sh)
        continue;
      psim_build_tensor_region(b, from, sh, t, &rf);
      double elems = psim_build_overlap(&rf, &rt, ten->rank);
      if (elems <= 0)
        continue;
      int32_t ps = sh == local ? -1 : s->pos[cf->devices[sh * cf->replicas]];
      st = note_source(s, s->pos[d], ps, elems, psim_routing_bytes_scale(b, t, &rf, &rt));
    }
  }
  for (int32_t e = 0; e < cf->n_devices; e++)
    s->ent[cf->devices[e]] = -1;
  return st;
}

/* A hash of what an edge's scan reads: the tensor's dims, both ops' dims (and their use),
 * degrees, replicas and devices. */
static uint64_t edge_key(const psim_build *b, int32_t x, int32_t y, int32_t t) {
  const psim_tensor *ten = &b->m->tensors[t];
  uint64_t h = psim_hmap_mix64((uint64_t)(uint32_t)ten->rank);
  for (int32_t j = 0; j < ten->rank; j++)
    h = psim_hmap_mix64(h ^ (uint64_t)(uint32_t)ten->dims[j]);
  for (int k = 0; k < 2; k++) {
    int32_t o = k ? y : x;
    const psim_op_config *cfg = &b->s->ops[o];
    const psim_op *op = &b->m->ops[o];
    h = psim_hmap_mix64(h ^ (uint64_t)(uint32_t)cfg->replicas << 32 ^ (uint64_t)op->n_dims);
    for (int32_t i = 0; i < op->n_dims; i++)
      h = psim_hmap_mix64(h ^ (uint64_t)(uint32_t)op->dims[i].dim << 32 ^
                          (uint64_t)(uint32_t)op->dims[i].use << 24 ^
                          (uint64_t)(uint32_t)cfg->degree[i]);
    for (int32_t e = 0; e < cfg->n_devices; e++)
      h = psim_hmap_mix64(h ^ (uint64_t)(uint32_t)cfg->devices[e]);
  }
  return h;
}

/* Every edge inside a stage, both ways, once per distinct layout pair (each layer repeats a
 * few; the key holds the tensor's dims, hence its extents, and the producer's kind decides
 * the routed tokens' scale). */
static psim_status scan_stage_edges(blk_scan *s) {
  const psim_build *b = s->b;
  psim_hmap seen;
  psim_hmap_init(&seen);
  psim_status st = PSIM_OK;
  for (int32_t y = 0; st == PSIM_OK && y < b->m->n_ops && s->ok; y++)
    for (int32_t i = 0; st == PSIM_OK && i < b->m->ops[y].n_in && s->ok; i++) {
      int32_t t = b->m->ops[y].in[i], x = b->m->tensors[t].producer, v;
      if (x < 0 || b->s->ops[x].stage != b->s->ops[y].stage)
        continue;
      psim_hmap_key k = {edge_key(b, x, y, t), (uint64_t)(uint32_t)b->m->ops[x].kind};
      if (psim_hmap_find(&seen, k, &v))
        continue;
      st = psim_hmap_put(&seen, k, 1);
      if (st == PSIM_OK)
        st = scan_edge(s, x, y, t, PSIM_DIR_FWD);
      if (st == PSIM_OK)
        st = scan_edge(s, y, x, t, PSIM_DIR_BWD);
    }
  psim_hmap_destroy(&seen);
  return st;
}

/* The smallest divisor of n_pos that keeps every pair in one block. */
static int32_t smallest_block(const blk_scan *s) {
  for (int32_t g = 1; g <= s->n_pos; g++) {
    if (s->n_pos % g != 0)
      continue;
    bool fits = true;
    for (size_t i = 0; i < s->n_pairs && fits; i++)
      fits = s->pairs[2 * i] / g == s->pairs[2 * i + 1] / g;
    if (fits)
      return g;
  }
  return s->n_pos;
}

/* Every op's shard at position p holds the experts of position p mod g. */
static bool experts_alike(const psim_build *b, const int32_t *pos, int32_t g) {
  for (int32_t o = 0; o < b->m->n_ops; o++) {
    const psim_op *op = &b->m->ops[o];
    const psim_op_config *cfg = &b->s->ops[o];
    int32_t at[PSIM_FOLD_MAX_BLOCK], coord[PSIM_MAX_OP_DIMS];
    for (int32_t i = 0; i < op->n_dims; i++) {
      if (b->m->dims[op->dims[i].dim].role != PSIM_ROLE_EXPERT || cfg->degree[i] == 1)
        continue;
      for (int32_t e = 0; e < cfg->n_devices; e++) {
        psim_build_shard_coords(op, cfg, e / cfg->replicas, coord);
        if (pos[cfg->devices[e]] < g)
          at[pos[cfg->devices[e]]] = coord[i];
      }
      for (int32_t e = 0; e < cfg->n_devices; e++) {
        psim_build_shard_coords(op, cfg, e / cfg->replicas, coord);
        if (at[pos[cfg->devices[e]] % g] != coord[i])
          return false;
      }
    }
  }
  return true;
}

psim_status psim_build_fold_blocks(const psim_build *b, const int32_t *pos, int32_t n_pos,
                                   int32_t *g, uint8_t **src) {
  blk_scan s = {.b = b, .pos = pos, .n_pos = n_pos, .ok = true};
  *g = 0;
  *src = NULL;
  s.ent = psim_malloc(((size_t)b->c->n_devices + 1) * sizeof *s.ent);
  s.h = psim_calloc((size_t)n_pos + 1, sizeof *s.h);
  psim_status st = s.ent && s.h ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory for folding");
  for (int32_t d = 0; st == PSIM_OK && d < b->c->n_devices; d++)
    s.ent[d] = -1;
  if (st == PSIM_OK)
    st = scan_stage_edges(&s);
  int32_t need = st == PSIM_OK ? smallest_block(&s) : n_pos;
  if (need < n_pos && need <= PSIM_FOLD_MAX_BLOCK && experts_alike(b, pos, need)) {
    s.g = need;
    s.src = psim_calloc((size_t)need * (size_t)need, 1);
    st = s.src ? scan_stage_edges(&s) : psim_error(PSIM_ENOMEM, "out of memory for folding");
    for (int32_t p = 0; st == PSIM_OK && s.ok && p < n_pos; p++)
      s.ok = s.h[p] == s.h[p % need];
    if (st == PSIM_OK && s.ok) {
      *g = need;
      *src = s.src;
      s.src = NULL;
    }
  }
  psim_free(s.src);
  psim_free(s.ent);
  psim_free(s.h);
  psim_free(s.pairs);
  return st;
}
