/* gen_dlrm.c - DLRM. */
#include "models/generators.h"

#include <assert.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/gen_impl.h"
#include "sim/core/json.h"
#include "sim/ir/model.h"

/* ---- DLRM (Naumov et al. 2019; MLPerf widths: bottom 13-512-256-E, top
 * 1024-1024-512-256-1), one id per sample per table (no multi-hot pooling). */

static void mlp_chain(psim_cnn *k, const int64_t *w, int n, bool last_relu) {
  for (int i = 0; i < n; i++) {
    psim_cnn_fc(k, w[i], i < n - 1 || last_relu, false);
    k->layer++;
  }
}

/* Concatenates the [batch one E] pieces in into out (<= 8 at a time). */
static void dlrm_concat(psim_gb *g, char (*in)[64], int n, const char *out, const char *fdim) {
  char list[600] = "", dims[96];
  for (int i = 0; i < n; i++)
    psim_gb_append(list, sizeof list, in[i]);
  snprintf(dims, sizeof dims, "batch %s emb", fdim);
  psim_gb_tensor(g, g->tensors, out, dims, NULL);
  psim_gb_str(g, psim_gb_op(g, g->ops, out, "concat", list, out), "axis", fdim);
}

/* Builds the interaction features [batch feat emb] from the bottom output
 * and the tables, concatenating in groups of at most 8. */
static void dlrm_features(psim_gb *g, const char *bottom, int64_t tables) {
  char pieces[8][64], group[8][64], fdim[32];
  int np = 0, ng = 0;
  int64_t total = tables + 1, gsize = 0;
  snprintf(pieces[np++], 64, "%s", bottom);
  for (int64_t t = 0; t <= tables; t++) {
    if (np == 8 || (t == tables && np)) {
      snprintf(fdim, sizeof fdim, "f%d", np);
      psim_gb_dim(g, fdim, np, NULL);
      assert(ng < 8); /* tables <= 56: at most 8 groups of 8 pieces */
      snprintf(group[ng], 64, "group%d", ng);
      dlrm_concat(g, pieces, np, group[ng++], fdim);
      gsize += np;
      np = 0;
    }
    if (t == tables)
      break;
    snprintf(pieces[np++], 64, "emb%lld", (long long)t);
  }
  snprintf(fdim, sizeof fdim, "f%lld", (long long)total);
  psim_gb_dim(g, fdim, total, NULL);
  dlrm_concat(g, group, ng, "features", fdim);
  (void)gsize;
}

/* The bottom MLP over the dense features, its last layer mapped onto the
 * embedding width and viewed as one feature "bot" [batch one emb]. */
static void dlrm_bottom(psim_gb *g, psim_cnn *k) {
  psim_gb_tensor(g, g->inputs, "dense_x", "batch dense", NULL);
  psim_cnn_at(k, "dense_x", "dense", 13, "", 1, "");
  const int64_t bottom[] = {512, 256};
  mlp_chain(k, bottom, 2, true);
  char in[160];
  psim_gb_tensor(g, g->weights, "w_bot", "c256 emb", NULL);
  psim_gb_tensor(g, g->tensors, "bot", "batch one emb", NULL);
  psim_gb_tensor(g, g->tensors, "bot_flat", "batch emb", NULL);
  snprintf(in, sizeof in, "%s w_bot", k->x);
  psim_gb_op(g, g->ops, "bottom_out", "matmul", in, "bot_flat");
  psim_gb_op(g, g->ops, "bottom_view", "reshape", "bot_flat", "bot");
}

/* One embedding lookup per table: emb<t> [batch one emb]. */
static void dlrm_tables(psim_gb *g, int64_t tables) {
  for (int64_t t = 0; t < tables; t++) {
    char ids[32], tab[32], e[32], in[80];
    snprintf(ids, sizeof ids, "ids%lld", (long long)t);
    snprintf(tab, sizeof tab, "table%lld", (long long)t);
    snprintf(e, sizeof e, "emb%lld", (long long)t);
    psim_gb_tensor(g, g->inputs, ids, "batch one", "int32");
    psim_gb_tensor(g, g->weights, tab, "rows emb", NULL);
    psim_gb_tensor(g, g->tensors, e, "batch one emb", NULL);
    snprintf(in, sizeof in, "%s %s", ids, tab);
    psim_gb_op(g, g->ops, e, "embedding", in, e);
  }
}

/* Pairwise dot products Z = F F^T (Naumov et al. 2019, "dot" interaction),
 * flattened and concatenated with the bottom output into "top_in"; td gets
 * the name of its width dim (nz + emb). */
static void dlrm_interact(psim_gb *g, int64_t tables, int64_t emb_dim, char td[32]) {
  char fd[32], fd2[32], dims[96], zd[32];
  snprintf(fd, sizeof fd, "f%lld", (long long)(tables + 1));
  snprintf(fd2, sizeof fd2, "g%lld", (long long)(tables + 1));
  psim_gb_dim(g, fd2, tables + 1, NULL);
  snprintf(dims, sizeof dims, "batch %s emb", fd2);
  psim_gb_tensor(g, g->tensors, "features_t", dims, NULL);
  psim_gb_op(g, g->ops, "features_view", "reshape", "features", "features_t");
  snprintf(dims, sizeof dims, "batch %s %s", fd, fd2);
  psim_gb_tensor(g, g->tensors, "interact", dims, NULL);
  psim_gb_op(g, g->ops, "interact", "matmul", "features features_t", "interact");
  int64_t nz = (tables + 1) * (tables + 1);
  snprintf(zd, sizeof zd, "z%lld", (long long)nz);
  snprintf(td, 32, "top%lld", (long long)(nz + emb_dim));
  psim_gb_dim(g, zd, nz, NULL);
  psim_gb_dim(g, td, nz + emb_dim, "hidden");
  snprintf(dims, sizeof dims, "batch %s", zd);
  psim_gb_tensor(g, g->tensors, "interact_flat", dims, NULL);
  psim_gb_op(g, g->ops, "interact_view", "reshape", "interact", "interact_flat");
  snprintf(dims, sizeof dims, "batch %s", td);
  psim_gb_dim(g, "one_e", 1, NULL);
  psim_gb_tensor(g, g->tensors, "top_in", dims, NULL);
  psim_gb_tensor(g, g->tensors, "bot_e", "batch emb", NULL);
  psim_gb_op(g, g->ops, "bottom_copy", "reshape", "bot", "bot_e");
  psim_gb_str(g, psim_gb_op(g, g->ops, "top_in", "concat", "interact_flat bot_e", "top_in"), "axis",
              td);
}

/* The top MLP from "top_in" (width dim td of size width) to one logit, and the loss. */
static void dlrm_top(psim_gb *g, psim_cnn *k, const char *td, int64_t width) {
  psim_cnn_at(k, "top_in", td, width, "", 1, "");
  k->n = 100;
  const int64_t top[] = {1024, 1024, 512, 256};
  mlp_chain(k, top, 4, true);
  psim_cnn_fc(k, 1, false, false);
  char in[160];
  psim_gb_tensor(g, g->inputs, "labels", "batch", "int32");
  psim_gb_tensor(g, g->tensors, "loss", "batch", NULL);
  snprintf(in, sizeof in, "%s labels", k->x);
  psim_gb_op(g, g->ops, "loss", "cross_entropy", in, "loss");
}

psim_status psim_gen_dlrm(const psim_gen_net_opts *o, struct cJSON **out) {
  PSIM_CHECK(psim_gen_net_check(o));
  PSIM_CHECK(psim_gb_positive("tables", o->tables, 56)); /* 7 groups of 8 in one concat */
  PSIM_CHECK(psim_gb_positive("rows", o->rows, (int64_t)1 << 40));
  PSIM_CHECK(psim_gb_positive("emb-dim", o->emb_dim, 1 << 20));
  psim_gb g;
  psim_cnn k;
  psim_gb_start(&g, o->name ? o->name : "dlrm", o->dtype);
  psim_gb_dim(&g, "batch", o->batch, "batch");
  psim_gb_dim(&g, "one", 1, NULL);
  psim_gb_dim(&g, "dense", 13, "hidden");
  psim_gb_dim(&g, "emb", o->emb_dim, "hidden");
  psim_gb_dim(&g, "rows", o->rows, "vocab");
  memset(&k, 0, sizeof k);
  k.g = &g, k.ws = g.weights, k.ts = g.tensors, k.ops = g.ops;
  dlrm_bottom(&g, &k);
  dlrm_tables(&g, o->tables);
  dlrm_features(&g, "bot", o->tables);
  char td[32];
  dlrm_interact(&g, o->tables, o->emb_dim, td);
  int64_t nz = (o->tables + 1) * (o->tables + 1);
  dlrm_top(&g, &k, td, nz + o->emb_dim);
  return psim_gb_finish(&g, out);
}
