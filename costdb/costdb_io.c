/* costdb_io.c - reading, checking and crash-safe saving of plansim.costdb/1. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

#include "costdb/costdb.h"
#include "sim/core/alloc.h"
#include "sim/core/json.h"

#define FORMAT "plansim.costdb/1"
/* Largest shape extent accepted in a file (2^50): beyond any real kernel. */
#define MAX_EXTENT ((int64_t)1 << 50)

static const char *const coll_names[PSIM_COLL_KIND_COUNT] = {
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all",
    "broadcast",  "reduce",     "gather",         "scatter"};

/* ---- reading ---------------------------------------------------------- */

static psim_status copy_str(psim_jctx *c, const cJSON *o, const char *key, char *dst, size_t n) {
  const char *s = NULL;
  PSIM_CHECK(psim_json_string(c, o, key, false, &s));
  if (s && strlen(s) >= n) {
    size_t sv = psim_jctx_key(c, key);
    psim_status st = psim_jerr(c, "string longer than %zu characters", n - 1);
    psim_jctx_pop(c, sv);
    return st;
  }
  if (s)
    snprintf(dst, n, "%s", s);
  return PSIM_OK;
}

static psim_status read_fingerprint(psim_jctx *c, const cJSON *o, psim_costdb_fingerprint *fp) {
  static const char *const keys[] = {"device", "name", "cores", "threads", "library", NULL};
  PSIM_CHECK(psim_json_check_keys(c, o, keys));
  PSIM_CHECK(copy_str(c, o, "device", fp->device, sizeof fp->device));
  if (fp->device[0] && strcmp(fp->device, "cpu") != 0 && strcmp(fp->device, "cuda") != 0) {
    size_t sv = psim_jctx_key(c, "device");
    psim_status s = psim_jerr(c, "expected \"cpu\" or \"cuda\", found '%s'", fp->device);
    psim_jctx_pop(c, sv);
    return s;
  }
  PSIM_CHECK(copy_str(c, o, "name", fp->name, sizeof fp->name));
  PSIM_CHECK(copy_str(c, o, "library", fp->library, sizeof fp->library));
  int64_t v = 0;
  PSIM_CHECK(psim_json_int(c, o, "cores", false, 0, 1 << 20, &v));
  fp->cores = (int32_t)v;
  v = 0;
  PSIM_CHECK(psim_json_int(c, o, "threads", false, 0, 1 << 20, &v));
  fp->threads = (int32_t)v;
  return PSIM_OK;
}

static psim_status read_key_names(psim_jctx *c, const cJSON *o, psim_cost_key *k) {
  const char *kind = NULL, *dtype = NULL, *pass = NULL;
  PSIM_CHECK(psim_json_string(c, o, "kind", true, &kind));
  PSIM_CHECK(psim_json_string(c, o, "dtype", true, &dtype));
  PSIM_CHECK(psim_json_string(c, o, "pass", true, &pass));
  PSIM_CHECK(copy_str(c, o, "fn", k->fn, sizeof k->fn));
  if (psim_costdb_kind_parse(kind, &k->kind) != PSIM_OK)
    return psim_jerr(c, "kind: unknown kind '%.40s'", kind);
  if (psim_costdb_dtype_parse(dtype, &k->dtype) != PSIM_OK)
    return psim_jerr(c, "dtype: unknown dtype '%.40s'", dtype);
  if (strcmp(pass, "fwd") != 0 && strcmp(pass, "bwd") != 0)
    return psim_jerr(c, "pass: expected \"fwd\" or \"bwd\", found '%.40s'", pass);
  k->pass = pass[0] == 'f' ? PSIM_PASS_FWD : PSIM_PASS_BWD;
  return PSIM_OK;
}

static psim_status read_shape(psim_jctx *c, const cJSON *o, psim_cost_key *k) {
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(o, "shape");
  if (!shape)
    return psim_jerr(c, "missing required key 'shape'");
  size_t sv = psim_jctx_key(c, "shape");
  const char *sig = psim_costdb_signature(k->kind);
  if (!sig) /* every kind has a signature; this guards the format below */
    sig = "";
  psim_status s = psim_json_expect_array(c, shape);
  if (s == PSIM_OK && cJSON_GetArraySize(shape) != (int)strlen(sig))
    s = psim_jerr(c, "expected %zu extents (%s) for kind %s, found %d", strlen(sig), sig,
                  psim_costdb_kind_name(k->kind), cJSON_GetArraySize(shape));
  k->n = (int32_t)strlen(sig);
  int32_t i = 0;
  for (const cJSON *v = s == PSIM_OK ? shape->child : NULL; v && s == PSIM_OK; v = v->next, i++) {
    size_t si = psim_jctx_index(c, (size_t)i);
    s = psim_json_value_int(c, v, 0, MAX_EXTENT, &k->shape[i]);
    psim_jctx_pop(c, si);
  }
  psim_jctx_pop(c, sv);
  return s;
}

static psim_status read_times(psim_jctx *c, const cJSON *o, psim_cost_entry *e) {
  e->scale = 1;
  e->count = 1;
  PSIM_CHECK(psim_json_number(c, o, "median", true, 1e-12, 1e6, &e->median_s));
  e->min_s = e->median_s;
  PSIM_CHECK(psim_json_number(c, o, "iqr", false, 0, 1e6, &e->iqr_s));
  PSIM_CHECK(psim_json_number(c, o, "min", false, 1e-12, 1e6, &e->min_s));
  PSIM_CHECK(psim_json_int(c, o, "count", false, 1, INT64_MAX / 2, &e->count));
  PSIM_CHECK(psim_json_number(c, o, "scale", false, 1, 1e12, &e->scale));
  if (e->min_s > e->median_s * (1 + 1e-9))
    return psim_jerr(c, "min %g s is larger than median %g s", e->min_s, e->median_s);
  return PSIM_OK;
}

static psim_status read_entry(psim_jctx *c, const cJSON *o, psim_costdb *db) {
  static const char *const keys[] = {"kind", "fn",  "dtype", "pass",  "shape", "median",
                                     "iqr",  "min", "count", "scale", NULL};
  psim_cost_entry e;
  memset(&e, 0, sizeof e);
  PSIM_CHECK(psim_json_check_keys(c, o, keys));
  PSIM_CHECK(read_key_names(c, o, &e.key));
  PSIM_CHECK(read_shape(c, o, &e.key));
  PSIM_CHECK(read_times(c, o, &e));
  const psim_cost_entry *dup = psim_costdb_find(db, &e.key);
  if (dup)
    return psim_jerr(c, "duplicate entry: same key as entries[%zu]", (size_t)(dup - db->entries));
  return psim_costdb_add(db, &e, PSIM_MERGE_REPLACE);
}

static psim_status read_points(psim_jctx *c, const cJSON *pts, psim_coll_table *t) {
  PSIM_CHECK(psim_json_expect_array(c, pts));
  int n = cJSON_GetArraySize(pts);
  if (n < 1)
    return psim_jerr(c, "expected at least one [bytes, busbw] point");
  t->bytes = psim_calloc((size_t)n, sizeof(double));
  t->busbw = psim_calloc((size_t)n, sizeof(double));
  if (!t->bytes || !t->busbw)
    return psim_error(PSIM_ENOMEM, "out of memory reading a collective table");
  int i = 0;
  for (const cJSON *p = pts->child; p; p = p->next, i++) {
    size_t sv = psim_jctx_index(c, (size_t)i);
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) != 2)
      return psim_jerr(c, "expected a [bytes, bus bandwidth] pair");
    PSIM_CHECK(psim_json_value_quantity(c, p->child, PSIM_UNIT_BYTES, &t->bytes[i]));
    PSIM_CHECK(psim_json_value_quantity(c, p->child->next, PSIM_UNIT_BANDWIDTH, &t->busbw[i]));
    if (t->busbw[i] <= 0 || (i > 0 && t->bytes[i] <= t->bytes[i - 1]))
      return psim_jerr(c, "expected a positive bandwidth and increasing message sizes");
    psim_jctx_pop(c, sv);
  }
  t->n_points = n;
  return PSIM_OK;
}

static psim_status read_coll_head(psim_jctx *c, const cJSON *o, psim_coll_table *t) {
  static const char *const keys[] = {"op", "group_size", "scope", "points", NULL};
  const char *op = NULL, *scope = "intra_node";
  int64_t g = 0;
  PSIM_CHECK(psim_json_check_keys(c, o, keys));
  PSIM_CHECK(psim_json_string(c, o, "op", true, &op));
  PSIM_CHECK(psim_json_int(c, o, "group_size", true, 2, 1 << 24, &g));
  PSIM_CHECK(psim_json_string(c, o, "scope", false, &scope));
  t->group_size = (int32_t)g;
  t->kind = PSIM_COLL_KIND_COUNT;
  for (int k = 0; k < PSIM_COLL_KIND_COUNT; k++)
    if (strcmp(op, coll_names[k]) == 0)
      t->kind = (psim_coll_kind)k;
  if (t->kind == PSIM_COLL_KIND_COUNT)
    return psim_jerr(c, "op: unknown collective '%.40s'", op);
  if (strcmp(scope, "intra_node") != 0 && strcmp(scope, "inter_node") != 0)
    return psim_jerr(c, "scope: expected \"intra_node\" or \"inter_node\"");
  t->intra_node = scope[1] == 'n' && scope[2] == 't' && scope[3] == 'r';
  return PSIM_OK;
}

static psim_status read_coll(psim_jctx *c, const cJSON *o, psim_costdb *db) {
  psim_coll_table t;
  memset(&t, 0, sizeof t);
  psim_status s = read_coll_head(c, o, &t);
  if (s == PSIM_OK) {
    size_t sv = psim_jctx_key(c, "points");
    s = read_points(c, cJSON_GetObjectItemCaseSensitive(o, "points"), &t);
    psim_jctx_pop(c, sv);
  }
  if (s == PSIM_OK)
    s = psim_costdb_add_coll(db, &t);
  psim_free(t.bytes);
  psim_free(t.busbw);
  return s;
}

typedef psim_status (*item_fn)(psim_jctx *c, const cJSON *o, psim_costdb *db);

static psim_status read_list(psim_jctx *c, const cJSON *root, const char *key, item_fn fn,
                             psim_costdb *db) {
  const cJSON *arr = cJSON_GetObjectItemCaseSensitive(root, key);
  if (!arr)
    return PSIM_OK;
  size_t sv = psim_jctx_key(c, key);
  PSIM_CHECK(psim_json_expect_array(c, arr));
  size_t i = 0;
  for (const cJSON *v = arr->child; v; v = v->next, i++) {
    size_t si = psim_jctx_index(c, i);
    PSIM_CHECK(fn(c, v, db));
    psim_jctx_pop(c, si);
  }
  psim_jctx_pop(c, sv);
  return PSIM_OK;
}

static psim_status from_json(psim_jctx *c, const cJSON *root, psim_costdb *db) {
  static const char *const keys[] = {"format", "fingerprint", "entries", "collectives", NULL};
  const char *format = NULL;
  PSIM_CHECK(psim_json_check_keys(c, root, keys));
  PSIM_CHECK(psim_json_string(c, root, "format", true, &format));
  if (strcmp(format, FORMAT) != 0)
    return psim_jerr(c, "format: expected \"%s\", found '%.60s'", FORMAT, format);
  const cJSON *fp = cJSON_GetObjectItemCaseSensitive(root, "fingerprint");
  if (fp) {
    size_t sv = psim_jctx_key(c, "fingerprint");
    PSIM_CHECK(read_fingerprint(c, fp, &db->fp));
    psim_jctx_pop(c, sv);
  }
  PSIM_CHECK(read_list(c, root, "entries", read_entry, db));
  return read_list(c, root, "collectives", read_coll, db);
}

psim_status psim_costdb_from_json(const char *file, const cJSON *root, psim_costdb *db) {
  psim_jctx c;
  psim_jctx_init(&c, file);
  psim_status s = from_json(&c, root, db);
  if (s != PSIM_OK)
    psim_costdb_destroy(db);
  return s;
}

psim_status psim_costdb_load(const char *file, psim_costdb *db) {
  cJSON *root = NULL;
  PSIM_CHECK(psim_json_load_file(file, &root));
  psim_status s = psim_costdb_from_json(file, root, db);
  cJSON_Delete(root);
  return s;
}

psim_status psim_costdb_check_file(const char *file) {
  psim_costdb db;
  psim_costdb_init(&db);
  psim_status s = psim_costdb_load(file, &db);
  psim_costdb_destroy(&db);
  return s;
}

/* ---- writing ---------------------------------------------------------- */

static psim_status entry_json(const psim_cost_entry *e, cJSON **out) {
  cJSON *o = cJSON_CreateObject(), *shape = NULL;
  *out = o;
  if (!o)
    return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  PSIM_CHECK(psim_json_add_string(o, "kind", psim_costdb_kind_name(e->key.kind)));
  if (e->key.fn[0])
    PSIM_CHECK(psim_json_add_string(o, "fn", e->key.fn));
  PSIM_CHECK(psim_json_add_string(o, "dtype", psim_costdb_dtype_name(e->key.dtype)));
  PSIM_CHECK(psim_json_add_string(o, "pass", e->key.pass == PSIM_PASS_FWD ? "fwd" : "bwd"));
  PSIM_CHECK(psim_json_add_array(o, "shape", &shape));
  for (int32_t i = 0; i < e->key.n; i++) {
    cJSON *n = cJSON_CreateNumber((double)e->key.shape[i]);
    if (!n || !cJSON_AddItemToArray(shape, n))
      return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  }
  PSIM_CHECK(psim_json_add_number(o, "median", e->median_s));
  PSIM_CHECK(psim_json_add_number(o, "iqr", e->iqr_s));
  PSIM_CHECK(psim_json_add_number(o, "min", e->min_s));
  PSIM_CHECK(psim_json_add_number(o, "count", (double)e->count));
  if (e->scale > 1)
    PSIM_CHECK(psim_json_add_number(o, "scale", e->scale));
  return PSIM_OK;
}

static psim_status coll_json(const psim_coll_table *t, cJSON **out) {
  cJSON *o = cJSON_CreateObject(), *pts = NULL;
  *out = o;
  if (!o)
    return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  PSIM_CHECK(psim_json_add_string(o, "op", coll_names[t->kind]));
  PSIM_CHECK(psim_json_add_number(o, "group_size", t->group_size));
  PSIM_CHECK(psim_json_add_string(o, "scope", t->intra_node ? "intra_node" : "inter_node"));
  PSIM_CHECK(psim_json_add_array(o, "points", &pts));
  for (int32_t i = 0; i < t->n_points; i++) {
    double pair[2] = {t->bytes[i], t->busbw[i]};
    cJSON *p = cJSON_CreateDoubleArray(pair, 2);
    if (!p || !cJSON_AddItemToArray(pts, p))
      return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  }
  return PSIM_OK;
}

static psim_status fp_json(const psim_costdb_fingerprint *fp, cJSON *root) {
  cJSON *o = NULL;
  PSIM_CHECK(psim_json_add_object(root, "fingerprint", &o));
  PSIM_CHECK(psim_json_add_string(o, "device", fp->device));
  PSIM_CHECK(psim_json_add_string(o, "name", fp->name));
  PSIM_CHECK(psim_json_add_number(o, "cores", fp->cores));
  PSIM_CHECK(psim_json_add_number(o, "threads", fp->threads));
  return psim_json_add_string(o, "library", fp->library);
}

static psim_status fill_json(const psim_costdb *db, cJSON *root) {
  cJSON *arr = NULL, *item = NULL;
  PSIM_CHECK(psim_json_add_string(root, "format", FORMAT));
  PSIM_CHECK(fp_json(&db->fp, root));
  PSIM_CHECK(psim_json_add_array(root, "entries", &arr));
  for (size_t i = 0; i < db->n_entries; i++) {
    psim_status s = entry_json(&db->entries[i], &item);
    if (item)
      cJSON_AddItemToArray(arr, item);
    PSIM_CHECK(s);
  }
  PSIM_CHECK(psim_json_add_array(root, "collectives", &arr));
  for (int32_t i = 0; i < db->n_colls; i++) {
    psim_status s = coll_json(&db->colls[i], &item);
    if (item)
      cJSON_AddItemToArray(arr, item);
    PSIM_CHECK(s);
  }
  return PSIM_OK;
}

psim_status psim_costdb_to_json(const psim_costdb *db, cJSON **out) {
  psim_json_init_hooks();
  cJSON *root = cJSON_CreateObject();
  if (!root)
    return psim_error(PSIM_ENOMEM, "out of memory building JSON");
  psim_status s = fill_json(db, root);
  if (s != PSIM_OK) {
    cJSON_Delete(root);
    return s;
  }
  *out = root;
  return PSIM_OK;
}

/* One entry per line keeps files of thousands of entries readable and small. */
static psim_status print_compact(const cJSON *root, char **text) {
  size_t cap = 0, len = 0;
  char *buf = NULL;
  for (const cJSON *it = root->child; it; it = it->next) {
    bool list = cJSON_IsArray(it) && it->child;
    char *head = list ? NULL : cJSON_PrintUnformatted(it);
    size_t need = len + strlen(it->string) + (head ? strlen(head) : 0) + 32;
    if (psim_grow((void **)&buf, &cap, need, 1) != PSIM_OK || (!list && !head)) {
      cJSON_free(head);
      psim_free(buf);
      return psim_error(PSIM_ENOMEM, "out of memory printing the cost database");
    }
    len += (size_t)sprintf(buf + len, "%s\"%s\": %s", len ? ",\n  " : "{\n  ", it->string,
                           list ? "[" : head);
    cJSON_free(head);
    for (const cJSON *e = list ? it->child : NULL; e; e = e->next) {
      char *line = cJSON_PrintUnformatted(e);
      if (!line || psim_grow((void **)&buf, &cap, len + strlen(line) + 16, 1) != PSIM_OK) {
        cJSON_free(line);
        psim_free(buf);
        return psim_error(PSIM_ENOMEM, "out of memory printing the cost database");
      }
      len += (size_t)sprintf(buf + len, "\n    %s%s", line, e->next ? "," : "\n  ]");
      cJSON_free(line);
    }
  }
  if (psim_grow((void **)&buf, &cap, len + 4, 1) != PSIM_OK) {
    psim_free(buf);
    return psim_error(PSIM_ENOMEM, "out of memory printing the cost database");
  }
  strcpy(buf + len, "\n}\n");
  *text = buf;
  return PSIM_OK;
}

static psim_status write_db(const psim_costdb *db, const char *file) {
  cJSON *root = NULL;
  char *text = NULL;
  PSIM_CHECK(psim_costdb_to_json(db, &root));
  psim_status s = print_compact(root, &text);
  cJSON_Delete(root);
  if (s == PSIM_OK)
    s = psim_file_write_atomic(file, text, strlen(text));
  psim_free(text);
  return s;
}

static bool fp_compatible(const psim_costdb_fingerprint *a, const psim_costdb_fingerprint *b) {
  if (!a->device[0] || !b->device[0])
    return true;
  return strcmp(a->device, b->device) == 0 && strcmp(a->name, b->name) == 0;
}

/* Merges db into the file's current contents; the caller holds the lock. */
static psim_status merge_locked(const psim_costdb *db, const char *file) {
  psim_costdb cur;
  psim_costdb_init(&cur);
  psim_status s = PSIM_OK;
  if (access(file, F_OK) == 0)
    s = psim_costdb_load(file, &cur);
  if (s == PSIM_OK && !fp_compatible(&cur.fp, &db->fp))
    s = psim_error(PSIM_EINPUT, "%s: holds measurements of %s '%s', not of this %s '%s'", file,
                   cur.fp.device, cur.fp.name, db->fp.device, db->fp.name);
  if (s == PSIM_OK)
    s = psim_costdb_merge(&cur, db, PSIM_MERGE_REPLACE);
  if (s == PSIM_OK && db->fp.device[0])
    cur.fp = db->fp;
  if (s == PSIM_OK)
    s = write_db(&cur, file);
  psim_costdb_destroy(&cur);
  return s;
}

psim_status psim_costdb_save(const psim_costdb *db, const char *file) {
  size_t n = strlen(file) + 8;
  char *lock = psim_malloc(n);
  if (!lock)
    return psim_error(PSIM_ENOMEM, "out of memory");
  snprintf(lock, n, "%s.lock", file);
  int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  psim_status s = PSIM_OK;
  if (fd < 0)
    s = psim_error(PSIM_EIO, "%s: cannot open the lock file: %s", lock, strerror(errno));
  int r = -1;
  while (fd >= 0 && (r = flock(fd, LOCK_EX)) != 0 && errno == EINTR)
    ;
  if (fd >= 0 && r != 0)
    s = psim_error(PSIM_EIO, "%s: cannot lock: %s", lock, strerror(errno));
  if (s == PSIM_OK)
    s = merge_locked(db, file);
  if (fd >= 0)
    close(fd); /* releases the lock */
  psim_free(lock);
  return s;
}
