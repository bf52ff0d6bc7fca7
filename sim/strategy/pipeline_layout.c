/* pipeline_layout.c - Megatron-Core's uneven pipeline splits: the first/last stage
 * layer counts (--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers)
 * and the general --pipeline-model-parallel-layout string. Rules from Megatron-LM at
 * core_v0.15.0: megatron/core/transformer/transformer_config.py (__post_init__, "Uneven
 * PP" and "PP layout"), transformer_block.py (get_num_layers_to_build),
 * transformer_layer.py (get_transformer_layer_offset) and
 * pipeline_parallel_layer_layout.py (PipelineParallelLayerLayout). */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sim/core/alloc.h"
#include "sim/strategy/strategy.h"

/* ---- first / last stage layer counts ---- */

static psim_status check_end(const char *key, int32_t n, int32_t v) {
  if (n < 0)
    return psim_error(PSIM_EINPUT, "%s: %d; expected >= 1 (0 = an even split)", key, (int)n);
  if (n > 0 && n % v != 0) /* transformer_config.py: "must be divisible by virtual ..." */
    return psim_error(PSIM_EINPUT,
                      "%s: %d layers do not divide into the %d virtual stages of the stage "
                      "(Megatron-Core's rule)",
                      key, (int)n, (int)v);
  return PSIM_OK;
}

/* The middle stages' layers: count - first - last over the stages left, each a
 * multiple of v (transformer_config.py: "number of layers at middle stage ... must be
 * divisible by the middle pipeline model parallel size", then "... by virtual pipeline
 * parallel degree"); *per: layers per middle stage. */
static psim_status middle_layers(int32_t count, int32_t pp, int32_t v, int32_t first, int32_t last,
                                 int32_t *per) {
  int32_t mid_stages = pp - (first > 0) - (last > 0);
  int64_t mid = (int64_t)count - first - last;
  const char *key = first > 0 ? "first_stage_layers" : "last_stage_layers";
  if (mid < 0 || (mid_stages == 0 && mid != 0))
    return psim_error(PSIM_EINPUT,
                      "%s: first_stage_layers %d + last_stage_layers %d leave %lld of the "
                      "model's %d transformer layers for %d middle stages",
                      key, (int)first, (int)last, (long long)mid, (int)count, (int)mid_stages);
  *per = 0;
  if (mid_stages == 0)
    return PSIM_OK;
  if (mid % mid_stages != 0 || (mid / mid_stages) % v != 0)
    return psim_error(PSIM_EINPUT,
                      "%s: the %lld layers left for the %d middle stages do not divide evenly "
                      "(x %d virtual stages), Megatron-Core's rule",
                      key, (long long)mid, (int)mid_stages, (int)v);
  *per = (int32_t)(mid / mid_stages);
  if (*per < v)
    return psim_error(PSIM_EINPUT,
                      "%s: the middle stages get %d layers each, fewer than their %d virtual "
                      "stages (a chunk without layers cannot be expressed)",
                      key, (int)*per, (int)v);
  return PSIM_OK;
}

psim_status psim_megatron_chunk_layers(int32_t count, int32_t pp, int32_t v, int32_t first,
                                       int32_t last, int32_t *sizes) {
  PSIM_CHECK(check_end("first_stage_layers", first, v));
  PSIM_CHECK(check_end("last_stage_layers", last, v));
  if (pp < 2 && (first > 0 || last > 0))
    return psim_error(PSIM_EINPUT, "%s: uneven first/last stages need pp > 1 (pp = %d)",
                      first > 0 ? "first_stage_layers" : "last_stage_layers", (int)pp);
  int32_t per = 0;
  PSIM_CHECK(middle_layers(count, pp, v, first, last, &per));
  /* get_num_layers_to_build: every virtual stage of a physical stage gets 1/v of its
   * layers; pipeline order is chunk c on physical stage c % pp (offsets in
   * get_transformer_layer_offset follow that order) */
  for (int32_t c = 0; c < pp * v; c++) {
    int32_t r = c % pp;
    int32_t n = r == 0 && first > 0 ? first : r == pp - 1 && last > 0 ? last : per;
    sizes[c] = n / v;
  }
  return PSIM_OK;
}

/* ---- --pipeline-model-parallel-layout ---- */

#define LAYOUT_MAX_EXPANDED (1 << 20) /* characters after unrolling; refused beyond */

/* Appends n copies of s[0..len) to buf (length *at, capacity LAYOUT_MAX_EXPANDED). */
static psim_status repeat_into(char *buf, size_t *at, const char *s, size_t len, long long n) {
  if (n < 0 || (len > 0 && (unsigned long long)n > (LAYOUT_MAX_EXPANDED - *at) / len))
    return psim_error(PSIM_EINPUT, "pipeline_layout: more than %d characters once unrolled",
                      LAYOUT_MAX_EXPANDED);
  for (long long i = 0; i < n; i++, *at += len)
    memcpy(buf + *at, s, len);
  buf[*at] = '\0';
  return PSIM_OK;
}

/* The number after '*' at s (digits only), its length in *len; -1 when none. */
static long long repeat_count(const char *s, size_t *len) {
  *len = 0;
  if (s[0] != '*' || !isdigit((unsigned char)s[1]))
    return -1;
  long long n = 0;
  size_t i = 1;
  for (; isdigit((unsigned char)s[i]); i++)
    n = n > LAYOUT_MAX_EXPANDED ? n : n * 10 + (s[i] - '0');
  *len = i;
  return n;
}

/* One pass of PipelineParallelLayerLayout.parse_str_to_list's unrolling: group 1 is
 * re.sub(r'\(([^)]+)\)\*(\d+)') (a parenthesised run up to the first ')', repeated),
 * else re.sub(r'(.)\*(\d+)') (one character repeated). */
static psim_status unroll(const char *in, bool group, char *out) {
  size_t at = 0;
  out[0] = '\0';
  for (size_t i = 0; in[i];) {
    const char *close = group && in[i] == '(' ? strchr(in + i + 1, ')') : NULL;
    size_t body = close ? (size_t)(close - in) - i - 1 : 1, len = 0;
    const char *after = close ? close + 1 : in + i + 1;
    long long n = (!group || (close && body > 0)) && *after ? repeat_count(after, &len) : -1;
    if (n < 0 || (!group && in[i + 1] == '\0')) {
      PSIM_CHECK(repeat_into(out, &at, in + i, 1, 1));
      i++;
      continue;
    }
    PSIM_CHECK(repeat_into(out, &at, close ? in + i + 1 : in + i, body, n));
    i = (size_t)(after - in) + len;
  }
  return PSIM_OK;
}

/* Megatron-Core's validate_layer_layout on the unrolled layout s (chunks split by '|'):
 * letters E, L, t, m; E first and L last, once each; no t after an m; every m in the
 * last chunk (with L). plansim adds: every chunk holds a t or an m (a stage is a layer
 * range; the embedding and loss share their neighbours' layers). */
static psim_status check_letters(const char *s, int32_t *n_chunks) {
  int32_t chunks = 1, e = 0, l = 0, m = 0, in_chunk = 0;
  size_t n = strlen(s);
  for (size_t i = 0; i <= n; i++) {
    char ch = s[i];
    if (ch == '|' || ch == '\0') {
      if (in_chunk == 0)
        return psim_error(PSIM_EINPUT,
                          "pipeline_layout: chunk %d has no transformer or MTP layer (plansim's "
                          "stages are layer ranges: the embedding and the loss stay with the "
                          "first and last layers)",
                          (int)chunks - 1);
      chunks += ch == '|';
      in_chunk = 0;
      continue;
    }
    if (!strchr("ELtm", ch))
      return psim_error(PSIM_EINPUT,
                        "pipeline_layout: invalid layer character '%c'; known: E (embedding), "
                        "t (transformer layer), m (MTP layer), L (loss), '|' between stages",
                        ch);
    if ((ch == 'E' && i != 0) || (ch == 'L' && i != n - 1) || (ch == 't' && m > 0) ||
        (ch == 'm' && strchr(s + i, '|')))
      return psim_error(PSIM_EINPUT,
                        "pipeline_layout: '%c' at %zu: the embedding comes first and the loss "
                        "last, once each; MTP layers follow every transformer layer, in the "
                        "last stage with the loss (Megatron-Core's validate_layer_layout)",
                        ch, i);
    e += ch == 'E';
    l += ch == 'L';
    m += ch == 'm';
    in_chunk += ch == 't' || ch == 'm';
  }
  if (e != 1 || l != 1)
    return psim_error(PSIM_EINPUT, "pipeline_layout: the embedding 'E' must come first and the "
                                   "loss 'L' last, once each");
  *n_chunks = chunks;
  return PSIM_OK;
}

/* Layers (t and m) per chunk of the checked layout s into sizes[0..n_chunks). */
static void count_chunks(const char *s, int32_t *sizes, int32_t *n_t, int32_t *n_m) {
  int32_t c = 0;
  sizes[0] = *n_t = *n_m = 0;
  for (const char *p = s; *p; p++) {
    if (*p == '|')
      sizes[++c] = 0;
    sizes[c] += *p == 't' || *p == 'm';
    *n_t += *p == 't';
    *n_m += *p == 'm';
  }
}

psim_status psim_pipeline_layout_parse(const char *text, int32_t pp, int32_t *n_chunks,
                                       int32_t **sizes, int32_t *n_t, int32_t *n_m) {
  *sizes = NULL;
  size_t n = strlen(text);
  char *a = psim_malloc(LAYOUT_MAX_EXPANDED + 1), *b = psim_malloc(LAYOUT_MAX_EXPANDED + 1);
  psim_status st = a && b ? PSIM_OK : psim_error(PSIM_ENOMEM, "out of memory parsing a layout");
  size_t k = 0;
  for (size_t i = 0; st == PSIM_OK && i < n; i++) /* commas are cosmetic */
    if (text[i] != ',' && k < LAYOUT_MAX_EXPANDED)
      a[k++] = text[i];
  if (st == PSIM_OK) {
    a[k] = '\0';
    st = unroll(a, true, b);
  }
  if (st == PSIM_OK)
    st = unroll(b, false, a);
  if (st == PSIM_OK)
    st = check_letters(a, n_chunks);
  if (st == PSIM_OK && (pp < 1 || *n_chunks % pp != 0))
    st = psim_error(PSIM_EINPUT,
                    "pipeline_layout: %d stages do not divide into pp = %d (the layout lists "
                    "pp x virtual stages, Megatron-Core's rule)",
                    (int)*n_chunks, (int)pp);
  if (st == PSIM_OK && !(*sizes = psim_malloc((size_t)*n_chunks * sizeof **sizes)))
    st = psim_error(PSIM_ENOMEM, "out of memory parsing a layout");
  if (st == PSIM_OK)
    count_chunks(a, *sizes, n_t, n_m);
  psim_free(a);
  psim_free(b);
  return st;
}

/* ---- the template's chunk sizes ---- */

psim_status psim_megatron_resolve_layout(psim_megatron_opts *o) {
  if (!o->pipeline_layout[0])
    return PSIM_OK;
  if (o->first_stage_layers > 0 || o->last_stage_layers > 0) /* transformer_config.py */
    return psim_error(PSIM_EINPUT, "pipeline_layout: not with first_stage_layers or "
                                   "last_stage_layers (Megatron-Core's rule)");
  int32_t n = 0, n_t = 0, n_m = 0, *sizes = NULL;
  PSIM_CHECK(psim_pipeline_layout_parse(o->pipeline_layout, o->pp, &n, &sizes, &n_t, &n_m));
  psim_free(sizes);
  int32_t v = n / o->pp;
  if (o->virtual_stages > 1 && o->virtual_stages != v)
    return psim_error(PSIM_EINPUT,
                      "pipeline_layout: %d stages make %d virtual stages on pp = %d, but "
                      "virtual_stages is %d",
                      (int)n, (int)v, (int)o->pp, (int)o->virtual_stages);
  o->virtual_stages = v;
  if (v > 1 && o->schedule == PSIM_SCHED_1F1B)
    o->schedule = PSIM_SCHED_INTERLEAVED;
  return PSIM_OK;
}

/* Transformer and MTP layers of m: the block layers up to the loss's layer, and after. */
static void decoder_mtp(const psim_model *m, int32_t *n_dec, int32_t *n_mtp) {
  int32_t lo, hi, loss = -1;
  psim_strategy_block_range(m, &lo, &hi);
  for (int32_t i = 0; i < m->n_ops; i++)
    if (m->ops[i].kind == PSIM_OP_CROSS_ENTROPY && (loss < 0 || m->ops[i].layer < loss))
      loss = m->ops[i].layer;
  *n_mtp = loss >= lo && loss < hi ? hi - loss : 0;
  *n_dec = hi - lo + 1 - *n_mtp;
}

static psim_status layout_sizes(const psim_megatron_opts *o, int32_t n_dec, int32_t n_mtp,
                                int32_t **sizes) {
  int32_t n = 0, n_t = 0, n_m = 0;
  PSIM_CHECK(psim_pipeline_layout_parse(o->pipeline_layout, o->pp, &n, sizes, &n_t, &n_m));
  if (n != o->pp * o->virtual_stages)
    return psim_error(PSIM_EINPUT, "pipeline_layout: %d stages but pp x virtual_stages = %d",
                      (int)n, (int)(o->pp * o->virtual_stages));
  if (n_t != n_dec || n_m != n_mtp) /* validate_layer_layout: counts match the model's */
    return psim_error(PSIM_EINPUT,
                      "pipeline_layout: %d transformer layers 't' and %d MTP layers 'm', but "
                      "the model has %d and %d",
                      (int)n_t, (int)n_m, (int)n_dec, (int)n_mtp);
  return PSIM_OK;
}

psim_status psim_megatron_stage_sizes(const psim_model *m, const psim_megatron_opts *o,
                                      int32_t **sizes) {
  *sizes = NULL;
  if (!o->pipeline_layout[0] && o->first_stage_layers == 0 && o->last_stage_layers == 0)
    return PSIM_OK;
  int32_t n_dec, n_mtp, n = o->pp * o->virtual_stages;
  decoder_mtp(m, &n_dec, &n_mtp);
  if (o->pipeline_layout[0])
    return layout_sizes(o, n_dec, n_mtp, sizes);
  *sizes = psim_malloc((size_t)n * sizeof **sizes);
  if (!*sizes)
    return psim_error(PSIM_ENOMEM, "out of memory splitting layers");
  PSIM_CHECK(psim_megatron_chunk_layers(n_dec, o->pp, o->virtual_stages, o->first_stage_layers,
                                        o->last_stage_layers, *sizes));
  (*sizes)[n - 1] += n_mtp; /* the MTP modules are built with the loss, on the last stage */
  return PSIM_OK;
}
