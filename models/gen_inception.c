/* gen_inception.c - Inception-v3. */
#include "models/generators.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/gen_impl.h"
#include "sim/core/json.h"
#include "sim/ir/model.h"

/* ---- inception v3 (Szegedy et al. 2016; torchvision layout, no auxiliary head) */

typedef struct branch_end {
  char x[64], c[32];
  int64_t cs;
} branch_end;

/* Runs a chain of convs from the module input; each conv is {cout, kh, kw, stride, pad_h,
 * pad_w}; a chain starting with cout 0 is an avg pool 3x3 s1 p1 (and max pool 3x3 s2 when
 * the pad is -1). */
static void chain(psim_cnn *k, const psim_cnn *start, const int64_t (*convs)[6], int n,
                  branch_end *e) {
  *k = *start;
  for (int i = 0; i < n; i++) {
    const int64_t *c = convs[i];
    if (c[0] == 0 && c[4] < 0)
      psim_cnn_pool(k, "max", 3, 2, 0);
    else if (c[0] == 0)
      psim_cnn_pool(k, "avg", 3, 1, 1);
    else
      psim_cnn_conv(k, c[0], c[1], c[2], c[3], c[4], c[5], true);
  }
  snprintf(e->x, sizeof e->x, "%s", k->x);
  snprintf(e->c, sizeof e->c, "%s", k->c);
  e->cs = k->cs;
}

/* Concatenates branch ends along channels into the cursor. */
static void concat_branches(psim_cnn *k, const branch_end *e, int n) {
  psim_gb *g = k->g;
  int64_t total = 0;
  char in[400] = "", cname[32], y[64], dims[160];
  for (int i = 0; i < n; i++) {
    total += e[i].cs;
    psim_gb_append(in, sizeof in, e[i].x);
  }
  snprintf(cname, sizeof cname, "cat%lld", (long long)total);
  psim_gb_dim(g, cname, total, "channel");
  snprintf(dims, sizeof dims, "batch %s %s %s", cname, k->h, k->w);
  psim_cnn_new(k, y, dims);
  psim_gb_str(g, psim_cnn_op(k, "concat", in, y), "axis", cname);
  snprintf(k->x, sizeof k->x, "%s", y);
  snprintf(k->c, sizeof k->c, "%s", cname);
  k->cs = total;
}

/* Runs nb branches (conv lists in spec, lengths in len) and concatenates them. */
static void module(psim_cnn *k, const int64_t (*spec)[6], const int *len, int nb) {
  psim_cnn start = *k, cur;
  branch_end e[8];
  int off = 0;
  for (int b = 0; b < nb; b++) {
    start.n = k->n;
    chain(&cur, &start, spec + off, len[b], &e[b]);
    k->n = cur.n;
    off += len[b];
  }
  snprintf(k->h, sizeof k->h, "%s", cur.h);
  snprintf(k->w, sizeof k->w, "%s", cur.w);
  k->hs = cur.hs;
  k->ws_ = cur.ws_;
  concat_branches(k, e, nb);
}

static void inception_a(psim_cnn *k, int64_t pool_c) {
  const int64_t s[][6] = {{64, 1, 1, 1, 0, 0}, {48, 1, 1, 1, 0, 0},    {64, 5, 5, 1, 2, 2},
                          {64, 1, 1, 1, 0, 0}, {96, 3, 3, 1, 1, 1},    {96, 3, 3, 1, 1, 1},
                          {0, 3, 3, 1, 1, 1},  {pool_c, 1, 1, 1, 0, 0}};
  static const int len[] = {1, 2, 3, 2};
  module(k, s, len, 4);
}

static void inception_b(psim_cnn *k) {
  const int64_t s[][6] = {{384, 3, 3, 2, 0, 0},
                          {64, 1, 1, 1, 0, 0},
                          {96, 3, 3, 1, 1, 1},
                          {96, 3, 3, 2, 0, 0},
                          {0, 3, 3, 2, -1, 0}};
  static const int len[] = {1, 3, 1};
  module(k, s, len, 3);
}

static void inception_c(psim_cnn *k, int64_t c7) {
  const int64_t s[][6] = {{192, 1, 1, 1, 0, 0}, {c7, 1, 1, 1, 0, 0}, {c7, 1, 7, 1, 0, 3},
                          {192, 7, 1, 1, 3, 0}, {c7, 1, 1, 1, 0, 0}, {c7, 7, 1, 1, 3, 0},
                          {c7, 1, 7, 1, 0, 3},  {c7, 7, 1, 1, 3, 0}, {192, 1, 7, 1, 0, 3},
                          {0, 3, 3, 1, 1, 1},   {192, 1, 1, 1, 0, 0}};
  static const int len[] = {1, 3, 5, 2};
  module(k, s, len, 4);
}

static void inception_d(psim_cnn *k) {
  const int64_t s[][6] = {{192, 1, 1, 1, 0, 0}, {320, 3, 3, 2, 0, 0}, {192, 1, 1, 1, 0, 0},
                          {192, 1, 7, 1, 0, 3}, {192, 7, 1, 1, 3, 0}, {192, 3, 3, 2, 0, 0},
                          {0, 3, 3, 2, -1, 0}};
  static const int len[] = {2, 4, 1};
  module(k, s, len, 3);
}

/* Runs convs from *from into *to, keeping the op counter of k in step. */
static void branch_from(psim_cnn *k, psim_cnn *to, psim_cnn *from, const int64_t (*convs)[6], int n,
                        branch_end *e) {
  from->n = k->n;
  chain(to, from, convs, n, e);
  k->n = to->n;
}

/* InceptionE: the 1x3 and 3x1 convs of branches 2 and 3 both read the
 * branch's shared conv (320 + 2 * 384 + 2 * 384 + 192 = 2048 channels). */
static void inception_e(psim_cnn *k) {
  static const int64_t b1[][6] = {{320, 1, 1, 1, 0, 0}}, s2[][6] = {{384, 1, 1, 1, 0, 0}};
  static const int64_t s3[][6] = {{448, 1, 1, 1, 0, 0}, {384, 3, 3, 1, 1, 1}};
  static const int64_t a[][6] = {{384, 1, 3, 1, 0, 1}}, b[][6] = {{384, 3, 1, 1, 1, 0}};
  static const int64_t p[][6] = {{0, 3, 3, 1, 1, 1}, {192, 1, 1, 1, 0, 0}};
  psim_cnn start = *k, cur, mid;
  branch_end e[6], tmp;
  branch_from(k, &cur, &start, b1, 1, &e[0]);
  branch_from(k, &mid, &start, s2, 1, &tmp);
  branch_from(k, &cur, &mid, a, 1, &e[1]);
  branch_from(k, &cur, &mid, b, 1, &e[2]);
  branch_from(k, &mid, &start, s3, 2, &tmp);
  branch_from(k, &cur, &mid, a, 1, &e[3]);
  branch_from(k, &cur, &mid, b, 1, &e[4]);
  branch_from(k, &cur, &start, p, 2, &e[5]);
  concat_branches(k, e, 6);
}

psim_status psim_gen_inception(const psim_gen_net_opts *o, struct cJSON **out) {
  PSIM_CHECK(psim_gen_net_check(o));
  psim_gb g;
  psim_cnn k;
  psim_cnn_start(&k, &g, o, "inception-v3", 299);
  psim_cnn_conv(&k, 32, 3, 3, 2, 0, 0, true);
  psim_cnn_conv(&k, 32, 3, 3, 1, 0, 0, true);
  psim_cnn_conv(&k, 64, 3, 3, 1, 1, 1, true);
  psim_cnn_pool(&k, "max", 3, 2, 0);
  k.layer++;
  psim_cnn_conv(&k, 80, 1, 1, 1, 0, 0, true);
  psim_cnn_conv(&k, 192, 3, 3, 1, 0, 0, true);
  psim_cnn_pool(&k, "max", 3, 2, 0);
  static const int64_t pa[] = {32, 64, 64}, c7[] = {128, 160, 160, 192};
  for (int i = 0; i < 3; i++, k.layer++)
    inception_a(&k, pa[i]);
  inception_b(&k);
  for (int i = 0; i < 4; i++) {
    k.layer++;
    inception_c(&k, c7[i]);
  }
  k.layer++;
  inception_d(&k);
  for (int i = 0; i < 2; i++) {
    k.layer++;
    inception_e(&k);
  }
  psim_cnn_pool(&k, "avg", k.hs, 1, 0);
  psim_cnn_flatten(&k);
  psim_cnn_loss(&k, o->classes);
  return psim_gb_finish(&g, out);
}
