/* gen_vision.c - mlp, alexnet and resnet. */
#include "models/generators.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "models/gen_impl.h"
#include "sim/core/json.h"
#include "sim/ir/model.h"

/* ---- mlp */

psim_status psim_gen_mlp(const psim_gen_net_opts *o, struct cJSON **out) {
  PSIM_CHECK(psim_gen_net_check(o));
  PSIM_CHECK(psim_gb_positive("layers", o->layers, 1000000));
  PSIM_CHECK(psim_gb_positive("hidden", o->hidden, (int64_t)1 << 40));
  psim_gb g;
  psim_gb_start(&g, o->name ? o->name : "mlp", o->dtype);
  psim_gb_dim(&g, "batch", o->batch, "batch");
  psim_gb_dim(&g, "hidden", o->hidden, "hidden");
  psim_gb_dim(&g, "hidden_out", o->hidden, "ffn");
  psim_gb_dim(&g, "classes", o->classes, NULL);
  psim_gb_tensor(&g, g.inputs, "x", "batch hidden", NULL);
  psim_gb_tensor(&g, g.inputs, "labels", "batch", "int32");
  psim_gb_tensor(&g, g.tensors, "h", "batch hidden", NULL);
  /* Each layer: relu(x W + b); the reshape renames hidden_out back to hidden (a view). */
  psim_gb_blk b = psim_gb_block(&g, "layer", o->layers, "x", "y", "x", "h");
  psim_gb_tensor(&g, b.weights, "w", "hidden hidden_out", NULL);
  psim_gb_tensor(&g, b.weights, "b", "hidden_out", NULL);
  psim_gb_tensor(&g, b.tensors, "z", "batch hidden_out", NULL);
  psim_gb_tensor(&g, b.tensors, "a", "batch hidden_out", NULL);
  psim_gb_tensor(&g, b.tensors, "y", "batch hidden", NULL);
  psim_gb_op(&g, b.ops, "fc", "matmul", "x w b", "z");
  psim_gb_ew(&g, b.ops, "relu", "relu", "z", "a");
  psim_gb_op(&g, b.ops, "view", "reshape", "a", "y");
  psim_gb_tensor(&g, g.weights, "w_cls", "hidden classes", NULL);
  psim_gb_tensor(&g, g.tensors, "logits", "batch classes", NULL);
  psim_gb_tensor(&g, g.tensors, "loss", "batch", NULL);
  psim_gb_op(&g, g.ops, "classifier", "matmul", "h w_cls", "logits");
  psim_gb_op(&g, g.ops, "loss", "cross_entropy", "logits labels", "loss");
  return psim_gb_finish(&g, out);
}

psim_status psim_gen_alexnet(const psim_gen_net_opts *o, struct cJSON **out) {
  PSIM_CHECK(psim_gen_net_check(o));
  psim_gb g;
  psim_cnn k;
  psim_cnn_start(&k, &g, o, "alexnet", 224);
  psim_cnn_conv(&k, 64, 11, 11, 4, 2, 2, true);
  psim_cnn_pool(&k, "max", 3, 2, 0);
  k.layer++;
  psim_cnn_conv(&k, 192, 5, 5, 1, 2, 2, true);
  psim_cnn_pool(&k, "max", 3, 2, 0);
  static const int64_t c3[] = {384, 256, 256};
  for (int i = 0; i < 3; i++) {
    k.layer++;
    psim_cnn_conv(&k, c3[i], 3, 3, 1, 1, 1, true);
  }
  psim_cnn_pool(&k, "max", 3, 2, 0);
  psim_cnn_flatten(&k);
  k.layer++;
  psim_cnn_fc(&k, 4096, true, true);
  k.layer++;
  psim_cnn_fc(&k, 4096, true, true);
  k.layer++;
  psim_cnn_loss(&k, o->classes);
  return psim_gb_finish(&g, out);
}

/* One bottleneck (He et al. 2016; stride on the 3x3 as in torchvision v1.5),
 * written into the block's groups; in and out names are the block's. */
static void bottleneck(psim_cnn *k, int64_t mid, int64_t stride, bool project, const char *yname) {
  psim_gb *g = k->g;
  char x0[64], c0[32], h0[32], w0[32], in[160], dims[160];
  int64_t cs0 = k->cs, hs0 = k->hs;
  snprintf(x0, sizeof x0, "%s", k->x);
  snprintf(c0, sizeof c0, "%s", k->c);
  snprintf(h0, sizeof h0, "%s", k->h);
  snprintf(w0, sizeof w0, "%s", k->w);
  psim_cnn_conv(k, mid, 1, 1, 1, 0, 0, true);
  psim_cnn_conv(k, mid, 3, 3, stride, 1, 1, true);
  psim_cnn_conv(k, 4 * mid, 1, 1, 1, 0, 0, false);
  char main_[64], sc[64];
  snprintf(main_, sizeof main_, "%s", k->x);
  snprintf(sc, sizeof sc, "%s", x0);
  if (project) {
    char c2[32], h2[32], w2[32];
    snprintf(c2, sizeof c2, "%s", k->c);
    snprintf(h2, sizeof h2, "%s", k->h);
    snprintf(w2, sizeof w2, "%s", k->w);
    psim_cnn_at(k, x0, c0, cs0, h0, hs0, w0);
    psim_cnn_conv(k, 4 * mid, 1, 1, stride, 0, 0, false);
    snprintf(sc, sizeof sc, "%s", k->x);
    (void)c2, (void)h2, (void)w2;
  }
  snprintf(dims, sizeof dims, "batch %s %s %s", k->c, k->h, k->w);
  char sum[64];
  psim_cnn_new(k, sum, dims);
  snprintf(in, sizeof in, "%s %s", main_, sc);
  psim_gb_str(g, psim_cnn_op(k, "elementwise", in, sum), "fn", "add");
  psim_gb_tensor(g, k->ts, yname, dims, NULL);
  psim_gb_str(g, psim_cnn_op(k, "elementwise", sum, yname), "fn", "relu");
  snprintf(k->x, sizeof k->x, "%s", yname);
}

/* A stage: its first bottleneck (projection, stride) as a block of repeat 1,
 * the others as one block with repeat n - 1. */
static void res_stage(psim_cnn *k, int si, int64_t mid, int64_t stride, int64_t n) {
  psim_gb *g = k->g;
  char bname[32], outer[64], save_c[32];
  for (int part = 0; part < 2 && (part == 0 || n > 1); part++) {
    snprintf(bname, sizeof bname, "stage%d%s", si, part ? "" : "_first");
    snprintf(outer, sizeof outer, "s%d_%s", si, part ? "out" : "first");
    psim_gb_blk b = psim_gb_block(g, bname, part ? n - 1 : 1, "x", "y", k->x, outer);
    psim_cnn inner = *k;
    inner.ws = b.weights;
    inner.ts = b.tensors;
    inner.ops = b.ops;
    inner.layer = -1;
    inner.n = 0;
    snprintf(inner.x, sizeof inner.x, "x");
    bottleneck(&inner, mid, part ? 1 : stride, !part, "y");
    snprintf(save_c, sizeof save_c, "%s", inner.c);
    char dims[160];
    snprintf(dims, sizeof dims, "batch %s %s %s", inner.c, inner.h, inner.w);
    psim_gb_tensor(g, g->tensors, outer, dims, NULL);
    psim_cnn_at(k, outer, save_c, inner.cs, inner.h, inner.hs, inner.w);
  }
}

psim_status psim_gen_resnet(const psim_gen_net_opts *o, struct cJSON **out) {
  PSIM_CHECK(psim_gen_net_check(o));
  if (o->depth != 50 && o->depth != 101 && o->depth != 152)
    return psim_error(PSIM_EINPUT, "--depth: %lld; expected 50, 101 or 152", (long long)o->depth);
  static const int64_t n50[] = {3, 4, 6, 3}, n101[] = {3, 4, 23, 3}, n152[] = {3, 8, 36, 3};
  const int64_t *n = o->depth == 50 ? n50 : o->depth == 101 ? n101 : n152;
  char name[32];
  snprintf(name, sizeof name, "resnet%lld", (long long)o->depth);
  psim_gb g;
  psim_cnn k;
  psim_cnn_start(&k, &g, o, name, 224);
  psim_cnn_conv(&k, 64, 7, 7, 2, 3, 3, true);
  psim_cnn_pool(&k, "max", 3, 2, 1);
  for (int s = 0; s < 4; s++)
    res_stage(&k, s + 1, 64 << s, s ? 2 : 1, n[s]);
  k.layer = -1;
  psim_cnn_pool(&k, "avg", k.hs, 1, 0);
  psim_cnn_flatten(&k);
  psim_cnn_loss(&k, o->classes);
  return psim_gb_finish(&g, out);
}
