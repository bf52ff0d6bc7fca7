/* profile_cpu.c - CPU backend of plansim profile: OpenBLAS GEMMs pinned to one
 * thread (one core = one simulated device) and the project's own loops for
 * memory-bound kernels. Timing: one warm-up call, then repetitions timed with
 * the thread's CPU clock (psim_profile_cpu_clock_s) until the per-shape
 * budget (wall clock) is spent (docs/profiling.md). */
#include <cblas.h>
#include <dlfcn.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "costdb/profile/profile.h"
#include "sim/core/alloc.h"
#include "sim/core/clock.h"

#define NBUF 10

typedef void (*sbgemm_fn)(enum CBLAS_ORDER, enum CBLAS_TRANSPOSE, enum CBLAS_TRANSPOSE, blasint,
                          blasint, blasint, float, const uint16_t *, blasint, const uint16_t *,
                          blasint, float, float *, blasint);

/* One kernel instance: its key, buffers (floats) and integer side data. */
typedef struct kernel {
  const psim_cost_key *key;
  bool bwd;
  float *x[NBUF];
  size_t len[NBUF];
  int32_t *ids; /* token ids / labels */
  size_t n_ids;
  uint8_t *mask; /* dropout mask */
  size_t elem;   /* bytes per buffer element */
  void (*run)(struct kernel *k);
} kernel;

static sbgemm_fn sbgemm_ptr(void) {
  static int looked;
  static sbgemm_fn fn;
  if (!looked) {
    *(void **)&fn = dlsym(RTLD_DEFAULT, "cblas_sbgemm");
    looked = 1;
  }
  return fn;
}

bool psim_profile_cpu_has_bf16(void) {
  return sbgemm_ptr() != NULL;
}

/* The kernels run on the calling thread (OpenBLAS with one thread computes in
 * the caller), so the thread's CPU clock is the simulated device's busy time:
 * the same as the wall clock on an idle core, but without the time the
 * scheduler gives the core to other processes. On the shared 2-core
 * development machine (load 3-4) wall-clock repetitions of one kernel varied
 * by up to 2x; CPU-clock ones by a few percent (docs/accuracy.md). */
double psim_profile_cpu_clock_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- GEMM-based kernels --------------------------------------------------- */

static void sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float *a, const float *b,
                  float *c) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
              (blasint)m, (blasint)n, (blasint)k, 1.0f, a, ta ? (blasint)m : (blasint)k, b,
              tb ? (blasint)k : (blasint)n, 0.0f, c, (blasint)n);
}

static void run_gemm(kernel *k) {
  const int64_t *s = k->key->shape;
  int64_t b = s[0], m = s[1], n = s[2], kk = s[3];
  for (int64_t i = 0; i < b; i++) {
    float *a = k->x[0] + i * m * kk, *w = k->x[1] + i * kk * n, *c = k->x[2] + i * m * n;
    if (!k->bwd) {
      sgemm(false, false, m, n, kk, a, w, c);
    } else {
      sgemm(false, true, m, kk, n, c, w, k->x[3] + i * m * kk); /* dA = dC B^T */
      sgemm(true, false, kk, n, m, a, c, k->x[4] + i * kk * n); /* dB = A^T dC */
    }
  }
}

static void run_dgemm(kernel *k) {
  const int64_t *s = k->key->shape;
  int64_t m = s[1], n = s[2], kk = s[3], passes = k->bwd ? 2 : 1;
  double *a = (double *)k->x[0], *w = (double *)k->x[1], *c = (double *)k->x[2];
  for (int64_t i = 0; i < s[0] * passes; i++)
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)m, (blasint)n, (blasint)kk, 1.0,
                a, (blasint)kk, w, (blasint)n, 0.0, c, (blasint)n);
}

static void run_sbgemm(kernel *k) {
  const int64_t *s = k->key->shape;
  int64_t m = s[1], n = s[2], kk = s[3], passes = k->bwd ? 2 : 1;
  for (int64_t i = 0; i < s[0] * passes; i++)
    sbgemm_ptr()(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)m, (blasint)n, (blasint)kk,
                 1.0f, (const uint16_t *)k->x[0], (blasint)kk, (const uint16_t *)k->x[1],
                 (blasint)n, 0.0f, k->x[2], (blasint)n);
}

static void softmax_rows(float *x, int64_t rows, int64_t cols, bool causal) {
  for (int64_t r = 0; r < rows; r++) {
    float *p = x + r * cols, mx = -INFINITY, sum = 0;
    int64_t len = causal && r + 1 < cols ? r + 1 : cols;
    for (int64_t j = 0; j < len; j++)
      mx = p[j] > mx ? p[j] : mx;
    for (int64_t j = 0; j < len; j++)
      sum += (p[j] = expf(p[j] - mx));
    for (int64_t j = 0; j < len; j++)
      p[j] /= sum;
    for (int64_t j = len; j < cols; j++)
      p[j] = 0;
  }
}

static void softmax_rows_bwd(const float *y, const float *g, float *gx, int64_t rows,
                             int64_t cols) {
  for (int64_t r = 0; r < rows; r++) {
    const float *yr = y + r * cols, *gr = g + r * cols;
    float dot = 0;
    for (int64_t j = 0; j < cols; j++)
      dot += yr[j] * gr[j];
    for (int64_t j = 0; j < cols; j++)
      gx[r * cols + j] = yr[j] * (gr[j] - dot);
  }
}

/* Buffers: 0 Q, 1 K, 2 V, 3 O, 4 S/P (one batch), 5 dP, 6 dQ, 7 dK, 8 dV. */
static void run_attention(kernel *k) {
  const int64_t *s = k->key->shape;
  int64_t q = s[1], kv = s[2], d = s[3];
  bool causal = strncmp(k->key->fn, "causal", 6) == 0;
  for (int64_t i = 0; i < s[0]; i++) {
    float *Q = k->x[0] + i * q * d, *K = k->x[1] + i * kv * d, *V = k->x[2] + i * kv * d;
    float *O = k->x[3] + i * q * d, *P = k->x[4], *dP = k->x[5];
    sgemm(false, true, q, kv, d, Q, K, P);
    softmax_rows(P, q, kv, causal);
    if (!k->bwd) {
      sgemm(false, false, q, d, kv, P, V, O);
      continue;
    }
    sgemm(false, true, q, kv, d, O, V, dP);                   /* dP = dO V^T */
    sgemm(true, false, kv, d, q, P, O, k->x[8] + i * kv * d); /* dV = P^T dO */
    softmax_rows_bwd(P, dP, dP, q, kv);
    sgemm(false, false, q, d, kv, dP, K, k->x[6] + i * q * d); /* dQ = dS K */
    sgemm(true, false, kv, d, q, dP, Q, k->x[7] + i * kv * d); /* dK = dS^T Q */
  }
}

/* Convolution shape b c h w o x y stride; input rows hin = (h-1)*stride + x
 * (padding is outside the kernel's cost). Buffers: 0 in, 1 weight, 2 out,
 * 3 col, 4 dweight, 5 din. */
static void im2col(const float *in, float *col, const int64_t *s, bool back) {
  int64_t c = s[1], h = s[2], w = s[3], kx = s[5], ky = s[6], st = s[7];
  int64_t hin = (h - 1) * st + kx, win = (w - 1) * st + ky;
  for (int64_t ci = 0; ci < c * kx * ky; ci++) {
    int64_t ch = ci / (kx * ky), dy = ci / ky % kx, dx = ci % ky;
    for (int64_t oy = 0; oy < h; oy++) {
      const float *src = in + (ch * hin + oy * st + dy) * win + dx;
      float *dst = col + (ci * h + oy) * w;
      for (int64_t ox = 0; ox < w; ox++) {
        if (back)
          ((float *)src)[ox * st] += dst[ox];
        else
          dst[ox] = src[ox * st];
      }
    }
  }
}

static void run_conv(kernel *k) {
  const int64_t *s = k->key->shape;
  int64_t c = s[1], hw = s[2] * s[3], o = s[4], ckk = c * s[5] * s[6];
  size_t in_img = k->len[0] / (size_t)s[0];
  for (int64_t i = 0; i < s[0]; i++) {
    float *in = k->x[0] + (size_t)i * in_img, *out = k->x[2] + i * o * hw;
    im2col(in, k->x[3], s, false);
    if (!k->bwd) {
      sgemm(false, false, o, hw, ckk, k->x[1], k->x[3], out);
      continue;
    }
    sgemm(false, true, o, ckk, hw, out, k->x[3], k->x[4]); /* dW = dOut col^T */
    sgemm(true, false, ckk, hw, o, k->x[1], out, k->x[3]); /* dcol = W^T dOut */
    im2col(k->x[5] + (size_t)i * in_img, k->x[3], s, true);
  }
}

/* ---- memory-bound kernels (the project's own loops) ------------------- */

typedef enum ew_fn {
  EW_ADD,
  EW_MUL,
  EW_DIV,
  EW_RELU,
  EW_GELU,
  EW_SILU,
  EW_TANH,
  EW_SIGMOID,
  EW_SCALE,
  EW_SWIGLU
} ew_fn;

static ew_fn ew_parse(const char *fn) {
  static const struct {
    const char *name;
    ew_fn f;
  } t[] = {{"add", EW_ADD},         {"sub", EW_ADD},       {"mul", EW_MUL},   {"div", EW_DIV},
           {"relu", EW_RELU},       {"gelu", EW_GELU},     {"silu", EW_SILU}, {"tanh", EW_TANH},
           {"sigmoid", EW_SIGMOID}, {"swiglu", EW_SWIGLU}, {"mask", EW_MUL}};
  for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
    if (strcmp(fn, t[i].name) == 0)
      return t[i].f;
  return EW_SCALE; /* scale, identity and unknown unary functions: one multiply */
}

static inline float ew_unary(ew_fn f, float a) {
  switch (f) {
  case EW_RELU: return a > 0 ? a : 0;
  case EW_GELU: return 0.5f * a * (1 + tanhf(0.7978845608f * (a + 0.044715f * a * a * a)));
  case EW_SILU:
  case EW_SWIGLU: return a / (1 + expf(-a));
  case EW_TANH: return tanhf(a);
  case EW_SIGMOID: return 1 / (1 + expf(-a));
  default: return 0.5f * a;
  }
}

static inline float ew_binary(ew_fn f, float a, float b) {
  switch (f) {
  case EW_ADD: return a + b;
  case EW_MUL: return a * b;
  case EW_DIV: return a / b;
  case EW_SWIGLU: return ew_unary(EW_SILU, a) * b;
  default: return ew_unary(f, a) + b;
  }
}

/* Buffers: 0 a, 1 b (second input), 2 out / grad out, 3 grad a, 4 grad b. */
static void run_elementwise(kernel *k) {
  ew_fn f = ew_parse(k->key->fn);
  int64_t n = k->key->shape[0], nb = k->key->shape[1];
  const float *a = k->x[0], *b = k->x[1];
  float *y = k->x[2];
  for (int64_t i = 0; i < n; i++) {
    float bv = nb > 0 ? b[i % nb] : 0;
    if (!k->bwd) {
      y[i] = nb > 0 ? ew_binary(f, a[i], bv) : ew_unary(f, a[i]);
    } else {
      float d = nb > 0 ? ew_binary(f, a[i], bv) : ew_unary(f, a[i]);
      k->x[3][i] = y[i] * d; /* f'(a) costs about f(a) */
      if (nb > 0)
        k->x[4][i % nb] += y[i] * a[i];
    }
  }
}

static void run_dropout(kernel *k) {
  int64_t n = k->key->shape[0];
  uint32_t r = 2463534242u;
  for (int64_t i = 0; i < n; i++) {
    if (!k->bwd) {
      r ^= r << 13, r ^= r >> 17, r ^= r << 5; /* xorshift32 */
      k->mask[i] = (r & 1023u) >= 102u;        /* keep with p = 0.9 */
    }
    k->x[1][i] = k->mask[i] ? k->x[0][i] * 1.1111111f : 0.0f;
  }
}

/* Normalising kernels over rows x cols. Buffers: 0 x, 1 y, 2 gamma, 3 grad y,
 * 4 grad x, 5 grad gamma. */
static void norm_row(kernel *k, int64_t r, int64_t cols, bool rms) {
  const float *x = k->x[0] + r * cols, *gm = k->x[2];
  float *y = k->x[1] + r * cols, mean = 0, var = 0;
  for (int64_t j = 0; j < cols && !rms; j++)
    mean += x[j];
  mean /= (float)cols;
  for (int64_t j = 0; j < cols; j++)
    var += (x[j] - mean) * (x[j] - mean);
  float inv = 1.0f / sqrtf(var / (float)cols + 1e-5f);
  if (!k->bwd) {
    for (int64_t j = 0; j < cols; j++)
      y[j] = (x[j] - mean) * inv * gm[j];
    return;
  }
  const float *g = k->x[3] + r * cols;
  float *gx = k->x[4] + r * cols, *gg = k->x[5], s1 = 0, s2 = 0;
  for (int64_t j = 0; j < cols; j++) {
    float xh = (x[j] - mean) * inv, gy = g[j] * gm[j];
    gg[j] += g[j] * xh;
    s1 += gy, s2 += gy * xh;
  }
  for (int64_t j = 0; j < cols; j++)
    gx[j] = inv * (g[j] * gm[j] - (s1 + (x[j] - mean) * inv * s2) / (float)cols);
}

static void run_rows(kernel *k) {
  int64_t rows = k->key->shape[0], cols = k->key->shape[1];
  int32_t kind = k->key->kind;
  if (kind == PSIM_OP_LAYERNORM || kind == PSIM_OP_RMSNORM) {
    for (int64_t r = 0; r < rows; r++)
      norm_row(k, r, cols, kind == PSIM_OP_RMSNORM);
    return;
  }
  if (!k->bwd || kind == PSIM_OP_CROSS_ENTROPY) {
    memcpy(k->x[1], k->x[0], (size_t)(rows * cols) * sizeof(float));
    softmax_rows(k->x[1], rows, cols, false);
  }
  if (kind == PSIM_OP_CROSS_ENTROPY) { /* loss (fwd) or softmax - onehot (bwd) */
    for (int64_t r = 0; r < rows; r++) {
      float *p = k->x[1] + r * cols + k->ids[r] % cols;
      k->x[3][r] = k->bwd ? (*p -= 1.0f) : -logf(*p + 1e-30f);
    }
  } else if (k->bwd) {
    softmax_rows_bwd(k->x[1], k->x[3], k->x[4], rows, cols);
  }
}

/* Embedding t h v. Buffers: 0 table (v x h), 1 out (t x h), 2 grad table. */
static void run_embedding(kernel *k) {
  int64_t t = k->key->shape[0], h = k->key->shape[1];
  for (int64_t i = 0; i < t; i++) {
    int64_t id = k->ids[i];
    float *row = k->x[1] + i * h;
    if (!k->bwd) {
      memcpy(row, k->x[0] + id * h, (size_t)h * sizeof(float));
      continue;
    }
    float *gt = k->x[2] + id * h;
    for (int64_t j = 0; j < h; j++)
      gt[j] += row[j];
  }
}

static void run_io(kernel *k) {
  int64_t ni = k->key->shape[0], no = k->key->shape[1];
  const float *in = k->bwd ? k->x[1] : k->x[0];
  float *out = k->bwd ? k->x[0] : k->x[1];
  int64_t nin = k->bwd ? no : ni, nout = k->bwd ? ni : no;
  if (nin == nout) {
    memcpy(out, in, (size_t)nout * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < nout; i++)
    out[i] = in[nin > 0 ? i % nin : 0];
}

/* Adam (Kingma & Ba 2015, Algorithm 1): buffers 0 w, 1 g, 2 m, 3 v. */
static void run_adam(kernel *k) {
  int64_t n = k->key->shape[0];
  float *w = k->x[0], *g = k->x[1], *m = k->x[2], *v = k->x[3];
  for (int64_t i = 0; i < n; i++) {
    m[i] = 0.9f * m[i] + 0.1f * g[i];
    v[i] = 0.999f * v[i] + 0.001f * g[i] * g[i];
    w[i] -= 1e-4f * (m[i] * 10.0f) / (sqrtf(v[i] * 1000.0f) + 1e-8f);
  }
}

/* ---- setup ---------------------------------------------------------------- */

/* Buffer sizes (elements) per kind; returns false when the key is malformed. */
static bool plan_buffers(kernel *k) {
  const int64_t *s = k->key->shape;
  size_t *n = k->len;
  memset(n, 0, sizeof k->len);
  switch (k->key->kind) {
  case PSIM_OP_MATMUL:
    n[0] = n[3] = (size_t)(s[0] * s[1] * s[3]), n[1] = n[4] = (size_t)(s[0] * s[3] * s[2]);
    n[2] = (size_t)(s[0] * s[1] * s[2]);
    if (!k->bwd)
      n[3] = n[4] = 0;
    k->run = run_gemm;
    return true;
  case PSIM_OP_ATTENTION:
    n[0] = n[3] = n[6] = (size_t)(s[0] * s[1] * s[3]);
    n[1] = n[2] = n[7] = n[8] = (size_t)(s[0] * s[2] * s[3]);
    n[4] = n[5] = (size_t)(s[1] * s[2]);
    k->run = run_attention;
    return true;
  case PSIM_OP_CONV2D: {
    size_t hin = (size_t)((s[2] - 1) * s[7] + s[5]), win = (size_t)((s[3] - 1) * s[7] + s[6]);
    n[0] = n[5] = (size_t)(s[0] * s[1]) * hin * win;
    n[1] = n[4] = (size_t)(s[4] * s[1] * s[5] * s[6]);
    n[2] = (size_t)(s[0] * s[4] * s[2] * s[3]);
    n[3] = (size_t)(s[1] * s[5] * s[6] * s[2] * s[3]);
    k->run = run_conv;
    return s[7] >= 1;
  }
  case PSIM_OP_ELEMENTWISE:
    n[0] = n[2] = n[3] = (size_t)s[0], n[1] = n[4] = (size_t)s[1];
    k->run = run_elementwise;
    return true;
  case PSIM_OP_DROPOUT:
    n[0] = n[1] = (size_t)s[0];
    k->run = run_dropout;
    return true;
  case PSIM_OP_SOFTMAX:
  case PSIM_OP_LAYERNORM:
  case PSIM_OP_RMSNORM:
  case PSIM_OP_CROSS_ENTROPY:
    n[0] = n[1] = n[3] = n[4] = (size_t)(s[0] * s[1]), n[2] = n[5] = (size_t)s[1];
    k->n_ids = (size_t)s[0];
    k->run = run_rows;
    return s[1] >= 1;
  case PSIM_OP_EMBEDDING:
    n[0] = n[2] = (size_t)(s[2] * s[1]), n[1] = (size_t)(s[0] * s[1]);
    k->n_ids = (size_t)s[0];
    k->run = run_embedding;
    return s[2] >= 1;
  case PSIM_COSTDB_KIND_ADAM:
    n[0] = n[1] = n[2] = n[3] = (size_t)s[0];
    k->run = run_adam;
    return true;
  default:
    n[0] = (size_t)s[0], n[1] = (size_t)s[1];
    k->run = run_io;
    return true;
  }
}

static void kernel_free(kernel *k) {
  for (int i = 0; i < NBUF; i++)
    psim_free(k->x[i]);
  psim_free(k->ids);
  psim_free(k->mask);
}

/* Fills buffers with small values in [0.01, 0.02) (no denormals, no NaN). */
static psim_status kernel_alloc(kernel *k, size_t elem) {
  k->elem = elem;
  for (int i = 0; i < NBUF; i++) {
    if (!k->len[i])
      continue;
    if (!(k->x[i] = psim_malloc(k->len[i] * elem)))
      return psim_error(PSIM_ENOMEM, "out of memory for kernel buffers");
    for (size_t j = 0; j < k->len[i] * elem / sizeof(float); j++)
      k->x[i][j] = 0.01f + 0.01f * (float)((j * 2654435761u) % 1000u) / 1000.0f;
  }
  k->mask = psim_calloc(k->len[0] + 1, 1);
  k->ids = psim_calloc(k->n_ids + 1, sizeof(int32_t));
  if (!k->mask || !k->ids)
    return psim_error(PSIM_ENOMEM, "out of memory for kernel buffers");
  int64_t range = k->key->kind == PSIM_OP_EMBEDDING ? k->key->shape[2] : 1 << 30;
  for (size_t j = 0; j < k->n_ids; j++)
    k->ids[j] = (int32_t)((j * 2654435761u) % (uint64_t)range);
  return PSIM_OK;
}

/* Chooses the kernel for the key's dtype; PSIM_EUNIMPLEMENTED when absent. */
static psim_status pick_dtype(kernel *k, size_t *elem) {
  *elem = sizeof(float);
  if (k->key->dtype == PSIM_DTYPE_FP32)
    return PSIM_OK;
  if (k->key->kind == PSIM_OP_MATMUL && k->key->dtype == PSIM_DTYPE_FP64) {
    *elem = sizeof(double);
    k->run = run_dgemm;
    return PSIM_OK;
  }
  if (k->key->kind == PSIM_OP_MATMUL && k->key->dtype == PSIM_DTYPE_BF16 && sbgemm_ptr()) {
    k->run = run_sbgemm; /* bf16 inputs (2 bytes), fp32 output: fp32 buffers are ample */
    return PSIM_OK;
  }
  return psim_error(PSIM_EUNIMPLEMENTED, "no %s %s kernel on this CPU%s",
                    psim_costdb_dtype_name(k->key->dtype), psim_costdb_kind_name(k->key->kind),
                    k->key->kind == PSIM_OP_MATMUL && k->key->dtype == PSIM_DTYPE_BF16
                        ? " (this OpenBLAS does not export cblas_sbgemm; profile with --dtype fp32)"
                        : " (the CPU backend's own kernels are fp32; profile with --dtype fp32)");
}

/* Evicts the kernel's buffers from every cache level before a timed
 * repetition, so that each repetition starts with its operands in DRAM. In a
 * training iteration every other layer's weights, gradients and activations
 * pass through the caches between two uses of one kernel's operands; timing
 * repetitions back to back on warm caches instead made the 64 x 1024 x 1024
 * GEMMs of models/mlp 35% too fast against running the iteration's kernel
 * sequence (docs/accuracy.md, "End to end on this machine"). The same practice
 * as GPU benchmark harnesses that clear the L2 before each repetition.
 * x86: clflush per 64-byte line (cost proportional to the kernel's buffers);
 * Elsewhere nothing is evicted (the repetitions run on warm caches). */
static void evict_kernel(const kernel *k) {
#if defined(__x86_64__) || defined(__i386__)
  for (int i = 0; i < NBUF; i++) {
    const char *p = (const char *)k->x[i];
    for (size_t off = 0; p && off < k->len[i] * k->elem; off += 64)
      _mm_clflush(p + off);
  }
  for (size_t off = 0; k->ids && off < (k->n_ids + 1) * sizeof(int32_t); off += 64)
    _mm_clflush((const char *)k->ids + off);
  for (size_t off = 0; k->mask && off < k->len[0] + 1; off += 64)
    _mm_clflush(k->mask + off);
  _mm_mfence();
#else
  (void)k;
#endif
}

static psim_status time_kernel(kernel *k, const psim_profile_opts *o, psim_cost_entry *out) {
  enum { MAX_SAMPLES = 1000 };
  double samples[MAX_SAMPLES];
  int32_t cap = o->max_reps < MAX_SAMPLES ? o->max_reps : MAX_SAMPLES, n = 0;
  k->run(k); /* warm-up: page faults, OpenBLAS buffers */
  double start = psim_clock_now_s();
  while (n < cap && (n < o->min_reps || psim_clock_now_s() - start < o->budget_s)) {
    evict_kernel(k);
    double t0 = psim_profile_cpu_clock_s();
    k->run(k);
    samples[n++] = psim_profile_cpu_clock_s() - t0;
    if (o->interrupt && *o->interrupt)
      break;
  }
  psim_profile_summary(samples, n, &out->median_s, &out->iqr_s, &out->min_s);
  out->count = n;
  out->scale = 1;
  if (out->median_s <= 0)
    out->median_s = out->min_s = 1e-9; /* below the clock's resolution */
  return PSIM_OK;
}

psim_status psim_profile_cpu_measure(const psim_cost_key *key, const psim_profile_opts *o,
                                     psim_cost_entry *out) {
  kernel k;
  memset(&k, 0, sizeof k);
  k.key = key;
  k.bwd = key->pass == PSIM_PASS_BWD;
  out->key = *key;
  if (!psim_costdb_signature(key->kind) || !plan_buffers(&k))
    return psim_error(PSIM_EINPUT, "malformed kernel key for kind %s",
                      psim_costdb_kind_name(key->kind));
  size_t elem = sizeof(float);
  PSIM_CHECK(pick_dtype(&k, &elem));
  openblas_set_num_threads(1); /* one core = one simulated device */
  psim_status s = kernel_alloc(&k, elem);
  if (s == PSIM_OK)
    s = time_kernel(&k, o, out);
  kernel_free(&k);
  return s;
}

struct psim_profile_kernel {
  psim_cost_key key; /* the kernel's key (kernel.key points here) */
  kernel k;
};

psim_status psim_profile_cpu_kernel_create(const psim_cost_key *key, psim_profile_kernel **out) {
  *out = NULL;
  psim_profile_kernel *pk = psim_calloc(1, sizeof *pk);
  if (!pk)
    return psim_error(PSIM_ENOMEM, "out of memory for a kernel");
  pk->key = *key;
  pk->k.key = &pk->key;
  pk->k.bwd = key->pass == PSIM_PASS_BWD;
  size_t elem = sizeof(float);
  psim_status s = PSIM_OK;
  if (!psim_costdb_signature(key->kind) || !plan_buffers(&pk->k))
    s = psim_error(PSIM_EINPUT, "malformed kernel key for kind %s",
                   psim_costdb_kind_name(key->kind));
  if (s == PSIM_OK)
    s = pick_dtype(&pk->k, &elem);
  if (s == PSIM_OK)
    s = kernel_alloc(&pk->k, elem);
  if (s != PSIM_OK) {
    psim_profile_cpu_kernel_destroy(pk);
    return s;
  }
  *out = pk;
  return PSIM_OK;
}

void psim_profile_cpu_kernel_run(psim_profile_kernel *k) {
  k->k.run(&k->k);
}

void psim_profile_cpu_kernel_destroy(psim_profile_kernel *k) {
  if (!k)
    return;
  kernel_free(&k->k);
  psim_free(k);
}

static void cpu_model_name(char *buf, size_t n) {
  snprintf(buf, n, "unknown CPU");
  FILE *f = fopen("/proc/cpuinfo", "r");
  char line[512];
  while (f && fgets(line, sizeof line, f)) {
    char *colon = strchr(line, ':');
    if (strncmp(line, "model name", 10) == 0 && colon) {
      colon += 2;
      colon[strcspn(colon, "\n")] = '\0';
      snprintf(buf, n, "%s", colon);
      break;
    }
  }
  if (f)
    fclose(f);
}

psim_status psim_profile_cpu_fingerprint(psim_costdb_fingerprint *fp) {
  memset(fp, 0, sizeof *fp);
  snprintf(fp->device, sizeof fp->device, "cpu");
  cpu_model_name(fp->name, sizeof fp->name);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  fp->cores = cores > 0 ? (int32_t)cores : 1;
  fp->threads = 1;
  snprintf(fp->library, sizeof fp->library, "%s", openblas_get_config());
  return PSIM_OK;
}
