/* profile_cuda.cu - CUDA backend of plansim profile: cublasGemmEx (fp32, fp16
 * and bf16 with tensor cores; fp64) for matmul and attention, and small CUDA
 * kernels for the memory-bound ops, timed with CUDA events
 * (docs/profiling.md). Built only when meson finds nvcc and cuBLAS, as the
 * shared module libplansim_cuda.so that profile_cuda_load.c opens with dlopen
 * (profile_cuda_impl.h): it links libcudart and cuBLAS, nothing of libplansim,
 * and reaches the host only through the psim_cuda_host it is given. */
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

extern "C" {
#include "costdb/profile/profile_cuda_impl.h"
}

#define NBUF 10

namespace {

struct gpu_kernel {
  const psim_cost_key *key;
  bool bwd;
  size_t elem;         /* bytes per element of the key's dtype */
  cudaDataType_t type; /* cuBLAS data type */
  cublasComputeType_t compute;
  void *x[NBUF];
  size_t len[NBUF]; /* elements */
  float *f32[4];    /* fp32 side buffers (Adam state, embedding grads) */
  size_t f32_len;
};

cublasHandle_t g_handle;
int g_handle_device = -1;
const psim_cuda_host *g_host; /* set by psim_cuda_module_open */

/* psim_error through the host (the module has no error state of its own). */
__attribute__((format(printf, 2, 3))) psim_status fail(psim_status s, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  s = g_host->verror(s, fmt, ap);
  va_end(ap);
  return s;
}

psim_status cuda_fail(cudaError_t e, const char *what) {
  return fail(PSIM_EFAILED, "CUDA %s failed: %s", what, cudaGetErrorString(e));
}

psim_status blas_fail(cublasStatus_t s, const char *what) {
  return fail(PSIM_EFAILED, "cuBLAS %s failed with status %d", what, (int)s);
}

template <typename T> __device__ float to_f(T v) {
  return (float)v;
}
template <> __device__ float to_f<__half>(__half v) {
  return __half2float(v);
}
template <> __device__ float to_f<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T> __device__ T from_f(float v) {
  return (T)v;
}
template <> __device__ __half from_f<__half>(float v) {
  return __float2half(v);
}
template <> __device__ __nv_bfloat16 from_f<__nv_bfloat16>(float v) {
  return __float2bfloat16(v);
}

/* gelu by the tanh approximation (Hendrycks & Gimpel 2016): the costliest
 * common element-wise function, used for every unary fn. */
__device__ float gelu(float a) {
  return 0.5f * a * (1.f + tanhf(0.7978845608f * (a + 0.044715f * a * a * a)));
}

template <typename T>
__global__ void ew_kernel(const T *a, const T *b, T *y, T *ga, long n, long nb, bool bwd) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x) {
    float v = nb > 0 ? to_f(a[i]) + to_f(b[i % nb]) : gelu(to_f(a[i]));
    if (bwd)
      ga[i] = from_f<T>(to_f(y[i]) * v);
    else
      y[i] = from_f<T>(v);
  }
}

template <typename T>
__global__ void dropout_kernel(const T *a, T *y, unsigned char *mask, long n, bool bwd) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x) {
    if (!bwd) {
      unsigned h = (unsigned)i * 2654435761u;
      mask[i] = (h >> 7) % 10u != 0u; /* keep with p = 0.9 */
    }
    y[i] = from_f<T>(mask[i] ? to_f(a[i]) * 1.1111111f : 0.f);
  }
}

__device__ float block_sum(float v, float *sh) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_down_sync(0xffffffffu, v, o);
  if ((threadIdx.x & 31) == 0)
    sh[threadIdx.x >> 5] = v;
  __syncthreads();
  float t = 0;
  for (int w = 0; w < (int)(blockDim.x >> 5); w++)
    t += sh[w];
  __syncthreads();
  return t;
}

/* One block per row: softmax (mode 0), layer/rms norm (1) or their
 * backward; reads the row twice and writes it once, like the fused kernels
 * of Megatron-LM and Apex. */
template <typename T>
__global__ void rows_kernel(const T *x, const T *g, T *y, long cols, int mode, bool bwd) {
  __shared__ float sh[32];
  const T *xr = x + blockIdx.x * cols;
  float s1 = 0, s2 = 0;
  for (long j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = to_f(xr[j]);
    s1 += mode == 0 ? __expf(v) : v;
    s2 += bwd ? v * to_f(g[blockIdx.x * cols + j]) : v * v;
  }
  s1 = block_sum(s1, sh);
  s2 = block_sum(s2, sh);
  float mean = s1 / (float)cols, inv = rsqrtf(s2 / (float)cols - mean * mean + 1e-5f);
  for (long j = threadIdx.x; j < cols; j += blockDim.x) {
    float v = to_f(xr[j]), gv = bwd ? to_f(g[blockIdx.x * cols + j]) : 1.f;
    float out = mode == 0 ? __expf(v) / s1 * (gv - (bwd ? s2 : 0.f)) : (v - mean) * inv * gv;
    y[blockIdx.x * cols + j] = from_f<T>(out);
  }
}

template <typename T>
__global__ void gather_kernel(const T *table, T *out, float *gtable, long t, long h, long v,
                              bool bwd) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < t * h;
       i += (long)gridDim.x * blockDim.x) {
    long row = ((i / h) * 2654435761l) % v, col = i % h;
    if (bwd)
      atomicAdd(&gtable[row * h + col], to_f(out[i]));
    else
      out[i] = table[row * h + col];
  }
}

template <typename T> __global__ void copy_kernel(const T *in, T *out, long nin, long nout) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < nout;
       i += (long)gridDim.x * blockDim.x)
    out[i] = in[nin > 0 ? i % nin : 0];
}

/* Adam (Kingma & Ba 2015) on fp32 master weights and moments. */
__global__ void adam_kernel(float *w, const float *g, float *m, float *v, long n) {
  for (long i = blockIdx.x * (long)blockDim.x + threadIdx.x; i < n;
       i += (long)gridDim.x * blockDim.x) {
    m[i] = 0.9f * m[i] + 0.1f * g[i];
    v[i] = 0.999f * v[i] + 0.001f * g[i] * g[i];
    w[i] -= 1e-4f * (m[i] * 10.f) / (sqrtf(v[i] * 1000.f) + 1e-8f);
  }
}

int grid_for(long n) {
  long b = (n + 255) / 256;
  return (int)(b < 65535 ? (b > 0 ? b : 1) : 65535);
}

/* Row-major C[m,n] = A[m,k] B[k,n], batched with strides, on column-major
 * cuBLAS: C^T = B^T A^T. ta/tb transpose A and B (for the backward GEMMs). */
cublasStatus_t gemm(gpu_kernel *k, bool ta, bool tb, long m, long n, long kk, const void *a,
                    const void *b, void *c, long batch, long sa, long sb, long sc) {
  static const float one = 1.f, zero = 0.f;
  static const double oned = 1.0, zerod = 0.0;
  bool dbl = k->type == CUDA_R_64F;
  return cublasGemmStridedBatchedEx(
      g_handle, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, (int)n, (int)m,
      (int)kk, dbl ? (const void *)&oned : (const void *)&one, b, k->type, tb ? (int)kk : (int)n,
      sb, a, k->type, ta ? (int)m : (int)kk, sa, dbl ? (const void *)&zerod : (const void *)&zero,
      c, k->type, (int)n, sc, (int)batch, k->compute, CUBLAS_GEMM_DEFAULT);
}

template <typename T> psim_status launch_memory(gpu_kernel *k) {
  const int64_t *s = k->key->shape;
  T **x = (T **)k->x;
  bool b = k->bwd;
  switch (k->key->kind) {
  case PSIM_OP_ELEMENTWISE:
    ew_kernel<T><<<grid_for(s[0]), 256>>>(x[0], x[1], x[2], x[3], s[0], s[1], b);
    break;
  case PSIM_OP_DROPOUT:
    dropout_kernel<T><<<grid_for(s[0]), 256>>>(x[0], x[1], (unsigned char *)x[2], s[0], b);
    break;
  case PSIM_OP_SOFTMAX:
  case PSIM_OP_CROSS_ENTROPY:
  case PSIM_OP_LAYERNORM:
  case PSIM_OP_RMSNORM:
    rows_kernel<T><<<(unsigned)s[0], 256>>>(
        x[0], x[3], x[1], s[1],
        k->key->kind == PSIM_OP_SOFTMAX || k->key->kind == PSIM_OP_CROSS_ENTROPY ? 0 : 1, b);
    break;
  case PSIM_OP_EMBEDDING:
    gather_kernel<T><<<grid_for(s[0] * s[1]), 256>>>(x[0], x[1], k->f32[0], s[0], s[1], s[2], b);
    break;
  case PSIM_COSTDB_KIND_ADAM:
    adam_kernel<<<grid_for(s[0]), 256>>>(k->f32[0], k->f32[1], k->f32[2], k->f32[3], s[0]);
    break;
  default:
    copy_kernel<T><<<grid_for(b ? s[0] : s[1]), 256>>>(b ? x[1] : x[0], b ? x[0] : x[1],
                                                       b ? s[1] : s[0], b ? s[0] : s[1]);
  }
  cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? PSIM_OK : cuda_fail(e, "kernel launch");
}

psim_status launch_gemm(gpu_kernel *k) {
  const int64_t *s = k->key->shape;
  long b = s[0], m = s[1], n = s[2], kk = s[3];
  cublasStatus_t st;
  if (!k->bwd)
    st = gemm(k, false, false, m, n, kk, k->x[0], k->x[1], k->x[2], b, m * kk, kk * n, m * n);
  else if ((st = gemm(k, false, true, m, kk, n, k->x[2], k->x[1], k->x[3], b, m * n, kk * n,
                      m * kk)) == CUBLAS_STATUS_SUCCESS) /* dA = dC B^T */
    st = gemm(k, true, false, kk, n, m, k->x[0], k->x[2], k->x[4], b, m * kk, m * n,
              kk * n); /* dB = A^T dC */
  return st == CUBLAS_STATUS_SUCCESS ? PSIM_OK : blas_fail(st, "GemmStridedBatchedEx");
}

/* Attention as FlashAttention-less kernels: S = Q K^T, softmax, O = P V;
 * backward: dP = dO V^T, dV = P^T dO, softmax backward, dQ = dS K, dK = dS^T Q. */
template <typename T> psim_status launch_attention(gpu_kernel *k) {
  const int64_t *s = k->key->shape;
  long b = s[0], q = s[1], kv = s[2], d = s[3];
  void **x = k->x;
  cublasStatus_t st = gemm(k, false, true, q, kv, d, x[0], x[1], x[4], b, q * d, kv * d, q * kv);
  if (st == CUBLAS_STATUS_SUCCESS)
    rows_kernel<T><<<(unsigned)(b * q), 256>>>((T *)x[4], (T *)x[5], (T *)x[4], kv, 0, k->bwd);
  if (st == CUBLAS_STATUS_SUCCESS && !k->bwd)
    st = gemm(k, false, false, q, d, kv, x[4], x[2], x[3], b, q * kv, kv * d, q * d);
  if (st == CUBLAS_STATUS_SUCCESS && k->bwd) {
    st = gemm(k, false, true, q, kv, d, x[3], x[2], x[5], b, q * d, kv * d, q * kv);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = gemm(k, true, false, kv, d, q, x[4], x[3], x[8], b, q * kv, q * d, kv * d);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = gemm(k, false, false, q, d, kv, x[5], x[1], x[6], b, q * kv, kv * d, q * d);
    if (st == CUBLAS_STATUS_SUCCESS)
      st = gemm(k, true, false, kv, d, q, x[5], x[0], x[7], b, q * kv, q * d, kv * d);
  }
  return st == CUBLAS_STATUS_SUCCESS ? PSIM_OK : blas_fail(st, "attention GEMM");
}

template <typename T> psim_status launch_typed(gpu_kernel *k) {
  if (k->key->kind == PSIM_OP_MATMUL)
    return launch_gemm(k);
  if (k->key->kind == PSIM_OP_ATTENTION)
    return launch_attention<T>(k);
  return launch_memory<T>(k);
}

psim_status launch(gpu_kernel *k) {
  switch (k->type) {
  case CUDA_R_16F: return launch_typed<__half>(k);
  case CUDA_R_16BF: return launch_typed<__nv_bfloat16>(k);
  case CUDA_R_64F: return launch_typed<double>(k);
  default: return launch_typed<float>(k);
  }
}

/* Element counts per buffer (as the CPU backend, profile_cpu.c). */
bool plan(gpu_kernel *k) {
  const int64_t *s = k->key->shape;
  size_t *n = k->len;
  memset(n, 0, sizeof k->len);
  switch (k->key->kind) {
  case PSIM_OP_MATMUL:
    n[0] = n[3] = (size_t)(s[0] * s[1] * s[3]), n[1] = n[4] = (size_t)(s[0] * s[3] * s[2]);
    n[2] = (size_t)(s[0] * s[1] * s[2]);
    return true;
  case PSIM_OP_ATTENTION:
    n[0] = n[3] = n[6] = (size_t)(s[0] * s[1] * s[3]);
    n[1] = n[2] = n[7] = n[8] = (size_t)(s[0] * s[2] * s[3]);
    n[4] = n[5] = (size_t)(s[0] * s[1] * s[2]);
    return true;
  case PSIM_OP_ELEMENTWISE: n[0] = n[2] = n[3] = (size_t)s[0], n[1] = (size_t)s[1]; return true;
  case PSIM_OP_DROPOUT: n[0] = n[1] = n[2] = (size_t)s[0]; return true;
  case PSIM_OP_SOFTMAX:
  case PSIM_OP_LAYERNORM:
  case PSIM_OP_RMSNORM:
  case PSIM_OP_CROSS_ENTROPY: n[0] = n[1] = n[3] = (size_t)(s[0] * s[1]); return s[1] >= 1;
  case PSIM_OP_EMBEDDING:
    n[0] = (size_t)(s[2] * s[1]), n[1] = (size_t)(s[0] * s[1]), k->f32_len = n[0];
    return s[2] >= 1;
  case PSIM_COSTDB_KIND_ADAM: k->f32_len = (size_t)s[0]; return true;
  case PSIM_OP_CONV2D: return false;
  default: n[0] = (size_t)s[0], n[1] = (size_t)s[1]; return true;
  }
}

psim_status pick_type(gpu_kernel *k) {
  k->compute = CUBLAS_COMPUTE_32F;
  switch (k->key->dtype) {
  case PSIM_DTYPE_FP32: k->type = CUDA_R_32F, k->elem = 4; return PSIM_OK;
  case PSIM_DTYPE_FP16: k->type = CUDA_R_16F, k->elem = 2; return PSIM_OK;
  case PSIM_DTYPE_BF16: k->type = CUDA_R_16BF, k->elem = 2; return PSIM_OK;
  case PSIM_DTYPE_FP64:
    k->type = CUDA_R_64F, k->elem = 8, k->compute = CUBLAS_COMPUTE_64F;
    return PSIM_OK;
  default:
    return fail(PSIM_EUNIMPLEMENTED, "no %s kernels on CUDA", g_host->dtype_name(k->key->dtype));
  }
}

void release(gpu_kernel *k) {
  for (int i = 0; i < NBUF; i++)
    cudaFree(k->x[i]);
  for (int i = 0; i < 4; i++)
    cudaFree(k->f32[i]);
}

psim_status allocate(gpu_kernel *k) {
  for (int i = 0; i < NBUF; i++) {
    if (!k->len[i])
      continue;
    cudaError_t e = cudaMalloc(&k->x[i], k->len[i] * k->elem);
    if (e != cudaSuccess)
      return cuda_fail(e, "cudaMalloc");
    cudaMemset(k->x[i], 0, k->len[i] * k->elem); /* zeros: no NaN or denormal slow paths */
  }
  for (int i = 0; i < 4 && k->f32_len; i++) {
    cudaError_t e = cudaMalloc(&k->f32[i], k->f32_len * sizeof(float));
    if (e != cudaSuccess)
      return cuda_fail(e, "cudaMalloc");
    cudaMemset(k->f32[i], 0, k->f32_len * sizeof(float));
  }
  return PSIM_OK;
}

psim_status time_events(gpu_kernel *k, const psim_profile_opts *o, psim_cost_entry *out) {
  enum { MAX_SAMPLES = 1000 };
  double samples[MAX_SAMPLES], spent = 0;
  int32_t cap = o->max_reps < MAX_SAMPLES ? o->max_reps : MAX_SAMPLES, n = 0;
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  psim_status s = launch(k); /* warm-up: cuBLAS heuristics, module loading */
  cudaDeviceSynchronize();
  while (s == PSIM_OK && n < cap && (n < o->min_reps || spent < o->budget_s)) {
    cudaEventRecord(a);
    s = launch(k);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    samples[n++] = 1e-3 * ms;
    spent += 1e-3 * ms + 5e-6;
    if (o->interrupt && *o->interrupt)
      break;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  if (s != PSIM_OK)
    return s;
  g_host->summary(samples, n, &out->median_s, &out->iqr_s, &out->min_s);
  out->count = n;
  out->scale = 1;
  return PSIM_OK;
}

psim_status ensure_handle(int device) {
  if (g_handle_device == device)
    return PSIM_OK;
  cudaError_t e = cudaSetDevice(device);
  if (e != cudaSuccess)
    return cuda_fail(e, "cudaSetDevice");
  cublasStatus_t st = cublasCreate(&g_handle);
  if (st != CUBLAS_STATUS_SUCCESS)
    return blas_fail(st, "cublasCreate");
  g_handle_device = device;
  return PSIM_OK;
}

psim_status cuda_available(int32_t device_index) {
  int n = 0;
  cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0)
    return fail(PSIM_EFAILED,
                "no CUDA GPU is present on this machine (%s); "
                "--device cuda needs one",
                e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
  if (device_index < 0 || device_index >= n)
    return fail(PSIM_EINPUT, "GPU %d does not exist (this machine has %d)", device_index, n);
  return PSIM_OK;
}

psim_status cuda_fingerprint(int32_t device_index, psim_costdb_fingerprint *fp) {
  PSIM_CHECK(cuda_available(device_index));
  PSIM_CHECK(ensure_handle(device_index));
  cudaDeviceProp p;
  cudaError_t e = cudaGetDeviceProperties(&p, device_index);
  if (e != cudaSuccess)
    return cuda_fail(e, "cudaGetDeviceProperties");
  int blas = 0, driver = 0, runtime = 0;
  cublasGetVersion(g_handle, &blas);
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  memset(fp, 0, sizeof *fp);
  snprintf(fp->device, sizeof fp->device, "cuda");
  snprintf(fp->name, sizeof fp->name, "%.120s", p.name);
  fp->cores = p.multiProcessorCount;
  fp->threads = 1;
  snprintf(fp->library, sizeof fp->library, "cuBLAS %d, CUDA runtime %d, driver %d", blas, runtime,
           driver);
  return PSIM_OK;
}

psim_status cuda_measure(const psim_cost_key *key, const psim_profile_opts *o,
                         psim_cost_entry *out) {
  gpu_kernel k;
  memset(&k, 0, sizeof k);
  k.key = key;
  k.bwd = key->pass == PSIM_PASS_BWD;
  out->key = *key;
  PSIM_CHECK(pick_type(&k));
  if (!plan(&k))
    return fail(PSIM_EUNIMPLEMENTED, "no CUDA kernel for %s (the roofline estimate is used)",
                g_host->kind_name(key->kind));
  PSIM_CHECK(ensure_handle(o->device_index));
  psim_status s = allocate(&k);
  if (s == PSIM_OK)
    s = time_events(&k, o, out);
  release(&k);
  return s;
}

} // namespace

/* The module's one exported symbol (PSIM_CUDA_MODULE_ENTRY). */
extern "C" __attribute__((visibility("default"))) psim_status
psim_cuda_module_open(int32_t abi, const psim_cuda_host *host, psim_cuda_module *out) {
  if (abi != PSIM_CUDA_MODULE_ABI || !host || !out)
    return PSIM_EFAILED;
  g_host = host;
  out->available = cuda_available;
  out->fingerprint = cuda_fingerprint;
  out->measure = cuda_measure;
  return PSIM_OK;
}
