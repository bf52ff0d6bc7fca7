/* links_merge.c - links that the same tasks hold, held as one (issue 19).
 *
 * The engine (sim/engine/engine.c) starts a task at the latest of its predecessors' ends and
 * its resources' free times, and sets the free time of each resource it holds to its end. Two
 * links held by exactly the same tasks therefore have the same free time whenever a task
 * that holds them looks: dropping one of them from every task changes no start or end. The
 * time breakdown (sim/breakdown.c) reads, per task, the last task before it on each of its
 * resources: the same for both links, so the same figures too. A folded build holds many
 * such links: a data-parallel bucket's collective over 2,048 replicas holds the NICs of
 * every member of its ring, and each of its up to 64 pieces lists them again (171 M resource
 * entries at 65,536 GPUs), while no other task but the same group's buckets holds them.
 *
 * Links are grouped by a 64-bit polynomial hash of the sequence of holders and their count;
 * every grouping is then checked exactly (each holder of a link holds its group's first link,
 * and both have as many holders: the same sets), and a link that fails the check keeps its own
 * entries. The holders are counted in distinct lists, not in tasks: the tasks are split into
 * runs of consecutive equal lists (a collective's pieces) and the runs into classes of equal
 * lists (a template's copies, one per layer and micro-batch: 13.5 M run entries but 1.19 M
 * distinct at 131,072 GPUs). Each task is in exactly one class and every class has a task, so
 * two links have the same holding tasks if and only if they are in the same classes' lists: the
 * passes read each distinct list once, and the groups are those of a pass over every task.
 * O(distinct entries + tasks) time besides the output, O(resources + tasks) memory. */
#include "sim/builder/build_impl.h"

#include <string.h>

#include "sim/core/alloc.h"
#include "sim/core/hashmap.h"

/* Averaged resource entries per task below which the merge is not worth its pass (a graph
 * of compute tasks and transfers holds 1 to 4). */
#define PSIM_MERGE_MIN_ENTRIES_PER_TASK 8
/* Entries from which a list that is no template's is looked up among the lists seen (a
 * shorter one, a kernel's or a transfer's, is its own class: hashing it costs what the
 * passes save). Any split into classes of equal lists gives the same groups. */
#define PSIM_MERGE_DEDUPE_MIN_ENTRIES 16

typedef struct merge_state {
  int32_t lo, hi; /* the link resources: [lo, hi) */
  uint64_t *h;    /* per link: hash of its holders */
  int32_t *cnt;   /* per link: its holders */
  int32_t *rep;   /* per link: the first link held by the same tasks (itself: kept) */
  int32_t *run;   /* the tasks in runs of equal resource lists: run r is [run[r], run[r + 1]) */
  int32_t n_runs;
  int32_t *run_class;  /* per run: its class of equal lists */
  int32_t *class_run;  /* per class: its first run (whose list is read) */
  int32_t *class_kept; /* per class: the entries its merged list keeps */
  int32_t *class_at;   /* per class: where compact wrote its merged list first, or -1 */
  int32_t n_classes;
} merge_state;

/* Whether two resource lists are equal (an empty one may have no array: colls.c). */
static bool same_list(const int32_t *ra, int32_t na, const int32_t *rt, int32_t nt) {
  return na == nt && (ra == rt || na == 0 || memcmp(ra, rt, (size_t)na * sizeof *ra) == 0);
}

bool psim_build_same_res(const psim_build *b, int32_t a, int32_t t) {
  const int32_t *ra, *rt;
  int32_t na, nt;
  psim_build_task_res(b, a, &ra, &na);
  psim_build_task_res(b, t, &rt, &nt);
  return same_list(ra, na, rt, nt);
}

/* The runs of consecutive tasks with equal lists (the pieces of a collective, its copies):
 * a link's holders are whole runs. */
static void find_runs(const psim_build *b, merge_state *s) {
  s->n_runs = 0;
  for (int32_t t = 0; t < b->g.n_tasks; t++)
    if (t == 0 || !psim_build_same_res(b, s->run[s->n_runs - 1], t))
      s->run[s->n_runs++] = t;
  s->run[s->n_runs] = b->g.n_tasks;
}

/* The list of class c. */
static void class_res(const psim_build *b, const merge_state *s, int32_t c, const int32_t **res,
                      int32_t *n) {
  psim_build_task_res(b, s->run[s->class_run[c]], res, n);
}

/* What psim_hmap_find_eq compares a class with: a list. */
typedef struct list_probe {
  const psim_build *b;
  const merge_state *s;
  const int32_t *res;
  int32_t n;
} list_probe;

static bool class_is_list(const void *ctx, int32_t c) {
  const list_probe *p = ctx;
  const int32_t *res;
  int32_t n;
  class_res(p->b, p->s, c, &res, &n);
  return same_list(res, n, p->res, p->n);
}

/* The class of run u: its template's (tmpl: template -> class), else a class of a long list
 * equal to its own (by_list: content hash -> class), else a new one. */
static psim_status class_of_run(const psim_build *b, merge_state *s, psim_hmap *tmpl,
                                psim_hmap *by_list, int32_t u) {
  int32_t t = s->run[u], i = t < b->n_task_tmpl ? b->task_tmpl[t] : -1, c;
  psim_hmap_key key = {(uint64_t)(uint32_t)i, 0};
  if (i >= 0 && psim_hmap_find(tmpl, key, &c)) {
    s->run_class[u] = c;
    return PSIM_OK;
  }
  list_probe p = {b, s, NULL, 0};
  psim_build_task_res(b, t, &p.res, &p.n);
  bool lookup = i >= 0 || p.n >= PSIM_MERGE_DEDUPE_MIN_ENTRIES;
  /* an empty list may have no array (a template's, colls.c): hashed as no bytes */
  uint64_t h = lookup && p.n > 0 ? psim_hmap_hash_bytes(p.res, (size_t)p.n * sizeof *p.res, 0) : 0;
  if (!lookup || !psim_hmap_find_eq(by_list, h, class_is_list, &p, &c)) {
    c = s->n_classes++;
    s->class_run[c] = u;
    if (lookup)
      PSIM_CHECK(psim_hmap_add(by_list, h, c));
  }
  s->run_class[u] = c;
  return i >= 0 ? psim_hmap_put(tmpl, key, c) : PSIM_OK;
}

static psim_status find_classes(const psim_build *b, merge_state *s) {
  psim_hmap tmpl, by_list;
  psim_hmap_init(&tmpl);
  psim_hmap_init(&by_list);
  s->n_classes = 0;
  psim_status st = PSIM_OK;
  for (int32_t u = 0; u < s->n_runs && st == PSIM_OK; u++)
    st = class_of_run(b, s, &tmpl, &by_list, u);
  psim_hmap_destroy(&tmpl);
  psim_hmap_destroy(&by_list);
  return st;
}

static bool is_link(const merge_state *s, int32_t r) {
  return r >= s->lo && r < s->hi;
}

/* h and cnt of every link from the classes that hold it, in order. */
static void hash_holders(const psim_build *b, merge_state *s) {
  for (int32_t c = 0; c < s->n_classes; c++) {
    int32_t n;
    const int32_t *res;
    class_res(b, s, c, &res, &n);
    for (int32_t k = 0; k < n; k++) {
      int32_t r = res[k] - s->lo;
      if (!is_link(s, res[k]))
        continue;
      /* a polynomial in the holding classes (the 64-bit golden-ratio constant): cheap, and a
       * collision costs a merge, never a wrong one (check_groups) */
      s->h[r] = s->h[r] * 0x9E3779B97F4A7C15u + (uint64_t)(uint32_t)c + 1;
      s->cnt[r]++;
    }
  }
}

/* rep of every held link: the first link of equal (hash, count). */
static psim_status group_links(merge_state *s) {
  psim_hmap first;
  psim_hmap_init(&first);
  psim_status st = PSIM_OK;
  for (int32_t l = 0; l < s->hi - s->lo && st == PSIM_OK; l++) {
    s->rep[l] = l;
    if (s->cnt[l] == 0)
      continue;
    psim_hmap_key key = {s->h[l], (uint64_t)(uint32_t)s->cnt[l]};
    if (!psim_hmap_find(&first, key, &s->rep[l]))
      st = psim_hmap_put(&first, key, l);
  }
  psim_hmap_destroy(&first);
  return st;
}

/* The exact check: a link whose group's first link is missing from one of its classes' lists
 * keeps its own entries (with equal counts, holding the first link in every class means the
 * same holders). stamp: scratch per link. */
static void check_groups(const psim_build *b, merge_state *s, int32_t *stamp) {
  for (int32_t l = 0; l < s->hi - s->lo; l++)
    stamp[l] = -1;
  for (int32_t c = 0; c < s->n_classes; c++) {
    const int32_t *res;
    int32_t n;
    class_res(b, s, c, &res, &n);
    for (int32_t k = 0; k < n; k++)
      if (is_link(s, res[k]))
        stamp[res[k] - s->lo] = c;
    for (int32_t k = 0; k < n; k++) {
      int32_t l = res[k] - s->lo;
      if (is_link(s, res[k]) && s->rep[l] != l && stamp[s->rep[l]] != c)
        s->rep[l] = l;
    }
  }
}

/* Whether entry r of a list stays: not a link, or its group's first. */
static bool kept(const merge_state *s, int32_t r) {
  return !is_link(s, r) || s->rep[r - s->lo] == r - s->lo;
}

/* The merged lists' entries: class_kept of every class, and their total over the tasks. */
static size_t count_kept(const psim_build *b, merge_state *s) {
  for (int32_t c = 0; c < s->n_classes; c++) {
    const int32_t *res;
    int32_t n, m = 0;
    class_res(b, s, c, &res, &n);
    for (int32_t k = 0; k < n; k++)
      m += kept(s, res[k]);
    s->class_kept[c] = m;
    s->class_at[c] = -1;
  }
  size_t total = 0;
  for (int32_t u = 0; u < s->n_runs; u++)
    total += (size_t)s->class_kept[s->run_class[u]] * (size_t)(s->run[u + 1] - s->run[u]);
  return total;
}

/* Every task's list without the links that are not their group's first, into a new array
 * (res_deferred: the template copies' lists are written here, the first time). A class's
 * merged list is filtered once, at its first run (whose list no earlier write has moved: the
 * graph's offsets are rewritten run by run, behind the reads), and copied after. */
static psim_status compact(psim_build *b, merge_state *s) {
  psim_taskgraph *g = &b->g;
  size_t total = count_kept(b, s);
  if (total >= INT32_MAX)
    return psim_error(PSIM_ELIMIT, "over 2^31 resource entries");
  int32_t *out = psim_malloc((total + 1) * sizeof *out), w = 0;
  if (!out)
    return psim_error(PSIM_ENOMEM, "out of memory");
  for (int32_t u = 0; u < s->n_runs; u++) {
    int32_t c = s->run_class[u], m = s->class_kept[c], first = w;
    if (s->class_at[c] < 0) {
      const int32_t *res;
      int32_t n;
      psim_build_task_res(b, s->run[u], &res, &n);
      for (int32_t k = 0; k < n; k++)
        if (kept(s, res[k]))
          out[w++] = res[k];
      s->class_at[c] = first;
    } else {
      memcpy(out + w, out + s->class_at[c], (size_t)m * sizeof *out);
      w += m;
    }
    g->res_first[s->run[u]] = first;
    for (int32_t t = s->run[u] + 1; t < s->run[u + 1]; t++) {
      memcpy(out + w, out + first, (size_t)m * sizeof *out);
      g->res_first[t] = w;
      w += m;
    }
  }
  g->res_first[g->n_tasks] = w;
  psim_free(g->res);
  g->res = out;
  g->n_res = (size_t)w;
  g->cap_res = total + 1;
  b->n_task_tmpl = 0; /* the lists are the graph's now */
  return PSIM_OK;
}

/* The scratch arrays per run and per class (at most one class a run). */
static psim_status alloc_classes(merge_state *s) {
  size_t n = (size_t)s->n_runs + 1;
  s->run_class = psim_malloc(n * sizeof *s->run_class);
  s->class_run = psim_malloc(n * sizeof *s->class_run);
  s->class_kept = psim_malloc(n * sizeof *s->class_kept);
  s->class_at = psim_malloc(n * sizeof *s->class_at);
  return s->run_class && s->class_run && s->class_kept && s->class_at
             ? PSIM_OK
             : psim_error(PSIM_ENOMEM, "out of memory");
}

static void free_state(merge_state *s) {
  psim_free(s->h);
  psim_free(s->cnt);
  psim_free(s->rep);
  psim_free(s->run);
  psim_free(s->run_class);
  psim_free(s->class_run);
  psim_free(s->class_kept);
  psim_free(s->class_at);
}

psim_status psim_build_merge_links(psim_build *b) {
  psim_taskgraph *g = &b->g;
  int32_t nd = b->c->n_devices, nl = b->c->n_links;
  if (!b->res_deferred &&
      (!b->o->merge_links || b->o->keep_graph || b->inc.record || nl < 2 || g->n_tasks < 1 ||
       g->res_first[g->n_tasks] < (int64_t)PSIM_MERGE_MIN_ENTRIES_PER_TASK * g->n_tasks))
    return PSIM_OK; /* traces and reports list links; an incremental build copies tasks */
  merge_state s = {.lo = psim_res_link(nd, 0), .hi = psim_res_link(nd, nl)};
  s.h = psim_calloc((size_t)nl + 1, sizeof *s.h);
  s.cnt = psim_calloc((size_t)nl + 1, sizeof *s.cnt);
  s.rep = psim_malloc(((size_t)nl + 1) * sizeof *s.rep);
  s.run = psim_malloc(((size_t)g->n_tasks + 1) * sizeof *s.run);
  psim_status st =
      s.h && s.cnt && s.rep && s.run ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory");
  if (st == PSIM_OK) {
    find_runs(b, &s);
    st = alloc_classes(&s);
  }
  if (st == PSIM_OK)
    st = find_classes(b, &s);
  if (st == PSIM_OK) {
    hash_holders(b, &s);
    st = group_links(&s);
  }
  if (st == PSIM_OK) {
    check_groups(b, &s, s.cnt); /* the counts are read: their array is the stamps' */
    st = compact(b, &s);
  }
  if (st == PSIM_OK)
    st = psim_tg_finalize_unchecked(g); /* the engine's index of res_first */
  free_state(&s);
  return st;
}
