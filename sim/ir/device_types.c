/* device_types.c - the built-in device types and this machine's CPU figures.
 *
 * GPU figures are vendor data-sheet values as collected in
 * ../shared/calibration/hardware.csv (dense peaks, no sparsity); the K80 row
 * comes from the NVIDIA Tesla K80 data sheet (one K80 board holds two GK210
 * GPUs, and a device here is one GK210: half the board's figures). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sim/ir/device_types.h"

#include "sim/core/alloc.h"
#include "sim/ir/cluster.h"

/* Fixed device-side cost of one GPU kernel (launch gap, tail of the last
 * wave): 21.56 us, fitted to the A100 iteration times of Korthikanti et al.
 * 2022 and vTrain together with the efficiencies below
 * (tests/calibration/prototype/FINDINGS.md, docs/accuracy.md). */
#define GPU_LAUNCH_S 21.56e-6
/* CPU "launch": the call overhead of an OpenBLAS / loop kernel on one core,
 * about 1 us (estimate; profiles replace it). */
#define CPU_LAUNCH_S 1e-6

/* ---- CALIBRATED EFFICIENCY TABLE ---------------------------------------
 * gemm_max and gemm_half_flops (GEMM efficiency eff(F) = gemm_max * F /
 * (F + gemm_half_flops)) and mem (fraction of memory bandwidth reached by
 * memory-bound kernels). A100: gemm_max 0.80 and mem 0.88 fitted, with the
 * runtime overheads below, by running this simulator on the Korthikanti 2022
 * and vTrain A100 measurements (tests/calibration/fit.py, docs/accuracy.md),
 * starting from the analytic prototype's fit (tests/calibration/prototype);
 * gemm_half_flops 1.5 GFLOP (46% efficiency for a 1024^3 GEMM, held fixed:
 * the data constrain it little). Other GPUs: no calibration data in
 * ../shared; gemm_half_flops scaled with the peak (the same tile quantisation
 * takes the same time), gemm_max 0.70 for Hopper (large bf16 GEMMs reach
 * 650-700 of 989 TFLOP/s in cuBLAS), the A100 value elsewhere. Blackwell
 * (b200, b300, gb200, gb300): no calibration data either; the Hopper rule (gemm_max
 * 0.70, gemm_half_flops scaled with the bf16 peak from the A100's 1.5 GFLOP at
 * 312 TFLOP/s: x 2250/312 = 10.8 GFLOP, x 2500/312 = 12.0 GFLOP). */
typedef struct eff_row {
  const char *type;
  psim_efficiency eff;
} eff_row;
static const eff_row calibrated_eff[] = {{"a100-80g", {0.80, 1.5e9, 0.88}},
                                         {"a100-40g", {0.80, 1.5e9, 0.88}},
                                         {"h100", {0.70, 4.75e9, 0.88}},
                                         {"h200", {0.70, 4.75e9, 0.88}},
                                         {"b200", {0.70, 10.8e9, 0.88}},
                                         {"gb200", {0.70, 12.0e9, 0.88}},
                                         {"gb300", {0.70, 12.0e9, 0.88}},
                                         {"b300", {0.70, 10.8e9, 0.88}},
                                         {"v100", {0.80, 0.6e9, 0.88}},
                                         {"p100", {0.80, 1.0e8, 0.88}},
                                         {"k80", {0.80, 2.1e7, 0.88}},
                                         {"cpu", {0.80, 1e8, 0.70}},
                                         {NULL, {0, 0, 0}}};

/* Training-runtime overheads of GPUs (PyTorch eager + NCCL as Megatron-LM
 * runs them on a DGX A100 host), fitted with the table above: 60 us of host
 * time to issue a kernel or communication call, 11.49 us of rank skew per
 * peer of a tensor-parallel collective, 8 ms fixed per iteration. */
static const psim_runtime gpu_runtime = {60e-6, 11.49e-6, 8e-3};
/* ---- end of the calibrated table ------------------------------------ */

typedef struct gpu_row {
  const char *name;
  double bf16, fp16, tf32, fp32, fp64, fp8; /* FLOP/s, dense */
  double mem_bytes, mem_bw;                 /* bytes, bytes/s */
  double fp4;                               /* FLOP/s, dense (NVFP4; Blackwell only) */
  double nvlink_bw;                         /* NVLink per GPU, bytes/s per direction */
} gpu_row;

/* hardware.csv rows a100-sxm-80g, a100-sxm-40g, h100-sxm-80g, h200-sxm-141g,
 * v100-sxm2-16g, p100-sxm2-16g; fp64 and fp8 from the same data sheets
 * (A100: 9.7 TFLOP/s fp64; H100 SXM: 34 TFLOP/s fp64, 1979 TFLOP/s fp8;
 * V100 SXM2: 7.8; P100 SXM2: 5.3). V100 and P100 have no bf16 (0 =
 * unsupported); P100 has no tensor cores (fp16 21.2 TFLOP/s is its
 * half-precision peak). K80 (data sheet, boost clock): 8.73 TFLOP/s fp32,
 * 2.91 fp64, 24 GB, 480 GB/s per board of two GPUs. NVLink per GPU and
 * direction: A100 NVLink3 600 GB/s both ways, H100/H200 NVLink4 900 GB/s,
 * V100 NVLink2 300 GB/s, P100 NVLink1 160 GB/s (the same data sheets).
 *
 * Blackwell, dense figures (the data sheets print them "with sparsity",
 * twice these; MXFP8 runs at the FP8 rate, the block scales being applied in
 * the tensor core: NVIDIA Blackwell Architecture Technical Brief):
 * - b200: one GPU of an HGX / DGX B200 (1000 W). NVIDIA HGX B200 data sheet
 *   (8 GPUs, sparse): FP4 144 PFLOP/s, FP8 72, BF16/FP16 36, TF32 18, FP32
 *   0.6, FP64 0.296 -> per GPU dense FP4 9, FP8 4.5, BF16 2.25, TF32 1.125
 *   PFLOP/s, FP32 75, FP64 37 TFLOP/s; DGX B200 data sheet: 1,440 GB of GPU
 *   memory (180 GB each), HBM3e 62 TB/s (7.7 TB/s each), NVLink 5 at 1.8
 *   TB/s per GPU both directions (14.4 TB/s per system).
 * - gb200: one GPU of a GB200 NVL72 (1200 W). NVIDIA GB200 NVL72 data sheet
 *   (72 GPUs, sparse): FP4 1,440 PFLOP/s, FP8/FP6 720, BF16/FP16 360, TF32
 *   180, FP64 2,880 TFLOP/s (dense FP64); HBM3e up to 13.4 TB at 576 TB/s;
 *   NVLink 130 TB/s -> per GPU dense FP4 10, FP8 5, BF16 2.5, TF32 1.25
 *   PFLOP/s, FP64 40 TFLOP/s, 186 GB at 8 TB/s, NVLink 1.8 TB/s both
 *   directions. FP32 80 TFLOP/s (GB200 NVL72 page: 5,760 TFLOP/s / 72).
 * - gb300: one Blackwell Ultra GPU of a GB300 NVL72 (1400 W). NVIDIA GB300
 *   NVL72 data sheet (72 GPUs): FP4 1,440 PFLOP/s sparse | 1,080 dense,
 *   FP8/FP6 720 sparse, BF16/FP16 360 sparse, TF32 180 sparse, FP32 6,000
 *   TFLOP/s, FP64 100 TFLOP/s; HBM3e up to 20 TB at 576 TB/s; NVLink 130 TB/s
 *   -> per GPU dense FP4 15, FP8 5, BF16 2.5, TF32 1.25 PFLOP/s, FP32 83,
 *   FP64 1.39 TFLOP/s, 279 GB at 8 TB/s, NVLink 1.8 TB/s both directions.
 * - b300: one Blackwell Ultra GPU of an HGX / DGX B300 (the
 *   B200's rates but for FP4 and FP64). NVIDIA HGX B300 data sheet (8 GPUs):
 *   FP4 144 PFLOP/s sparse | 108 dense, FP8/FP6 72, BF16/FP16 36, TF32 18
 *   PFLOP/s sparse, FP32 600, FP64 10 TFLOP/s, up to 2.3 TB of HBM3e, NVLink
 *   5 at 1.8 TB/s per GPU (14.4 TB/s total) -> per GPU dense FP4 13.5, FP8
 *   4.5, BF16 2.25, TF32 1.125 PFLOP/s, FP32 75, FP64 1.25 TFLOP/s; NVIDIA
 *   Technical Blog "Inside NVIDIA Blackwell Ultra" (Aug 2025): 288 GB HBM3e
 *   per GPU (8 stacks) at 8 TB/s, 160 SMs. */
static const gpu_row gpu_table[] = {
    {"a100-80g", 312e12, 312e12, 156e12, 19.5e12, 9.7e12, 0, 80e9, 2.039e12, 0, 300e9},
    {"a100-40g", 312e12, 312e12, 156e12, 19.5e12, 9.7e12, 0, 40e9, 1.555e12, 0, 300e9},
    {"h100", 989e12, 989e12, 495e12, 67e12, 34e12, 1979e12, 80e9, 3.35e12, 0, 450e9},
    {"h200", 989e12, 989e12, 495e12, 67e12, 34e12, 1979e12, 141e9, 4.8e12, 0, 450e9},
    {"b200", 2250e12, 2250e12, 1125e12, 75e12, 37e12, 4500e12, 180e9, 7.7e12, 9000e12, 900e9},
    {"gb200", 2500e12, 2500e12, 1250e12, 80e12, 40e12, 5000e12, 186e9, 8e12, 10000e12, 900e9},
    {"gb300", 2500e12, 2500e12, 1250e12, 83e12, 1.39e12, 5000e12, 279e9, 8e12, 15000e12, 900e9},
    {"b300", 2250e12, 2250e12, 1125e12, 75e12, 1.25e12, 4500e12, 288e9, 8e12, 13500e12, 900e9},
    {"v100", 0, 125e12, 0, 15.7e12, 7.8e12, 0, 16e9, 0.9e12, 0, 150e9},
    {"p100", 0, 21.2e12, 0, 10.6e12, 5.3e12, 0, 16e9, 0.72e12, 0, 80e9},
    {"k80", 0, 0, 0, 8.73e12 / 2, 2.91e12 / 2, 0, 24e9 / 2, 480e9 / 2, 0, 0},
    {NULL, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}};

static const char *const builtin_names[] = {"a100-80g", "a100-40g", "h100", "h200", "b200",
                                            "gb200",    "gb300",    "b300", "v100", "p100",
                                            "k80",      "cpu",      NULL};

static const gpu_row *find_gpu(const char *name) {
  for (const gpu_row *r = gpu_table; name && r->name; r++)
    if (strcmp(r->name, name) == 0)
      return r;
  return NULL;
}

double psim_device_type_builtin_fp4(const char *name) {
  const gpu_row *r = find_gpu(name);
  return r ? r->fp4 : 0;
}

double psim_device_type_builtin_nvlink(const char *name) {
  const gpu_row *r = find_gpu(name);
  return r ? r->nvlink_bw : 0;
}

const char *const *psim_device_type_builtin_names(void) {
  return builtin_names;
}

void psim_device_type_destroy(psim_device_type *t) {
  psim_free(t->name);
  t->name = NULL;
}

static psim_efficiency calibrated(const char *name) {
  for (const eff_row *r = calibrated_eff; r->type; r++)
    if (strcmp(r->type, name) == 0)
      return r->eff;
  return (psim_efficiency){0.75, 1e9, 0.8};
}

static void fill_gpu(const gpu_row *r, psim_device_type *t) {
  t->peak_flops[PSIM_DTYPE_BF16] = r->bf16;
  t->peak_flops[PSIM_DTYPE_FP16] = r->fp16;
  t->peak_flops[PSIM_DTYPE_FP32] = r->fp32;
  t->peak_flops[PSIM_DTYPE_FP64] = r->fp64;
  t->peak_flops[PSIM_DTYPE_FP8] = r->fp8;
  t->peak_tf32 = r->tf32;
  t->mem_bytes = r->mem_bytes;
  t->mem_bw = r->mem_bw;
  t->launch_s = GPU_LAUNCH_S;
  t->rt = gpu_runtime;
}

static void fill_cpu(psim_device_type *t) {
  psim_cpu_info ci;
  psim_cpu_info_detect(&ci);
  t->peak_flops[PSIM_DTYPE_FP32] = ci.core_fp32_flops;
  t->peak_flops[PSIM_DTYPE_FP64] = ci.core_fp32_flops / 2; /* half the SIMD lanes */
  /* No native bf16/fp16 GEMM is assumed: OpenBLAS sbgemm runs near fp32 speed. */
  t->peak_flops[PSIM_DTYPE_BF16] = ci.core_fp32_flops;
  t->peak_flops[PSIM_DTYPE_FP16] = ci.core_fp32_flops;
  t->mem_bytes = ci.node_mem_bytes / ci.cores;
  t->mem_bw = ci.node_mem_bw / ci.cores;
  t->launch_s = CPU_LAUNCH_S;
}

psim_status psim_device_type_builtin(const char *name, psim_device_type *out) {
  memset(out, 0, sizeof *out);
  const gpu_row *row = find_gpu(name);
  if (!row && strcmp(name, "cpu") != 0)
    return psim_error(PSIM_EINPUT, "unknown built-in device type '%.80s'", name);
  if (row)
    fill_gpu(row, out);
  else
    fill_cpu(out);
  out->eff = calibrated(name);
  out->name = psim_strdup(name);
  if (!out->name)
    return psim_error(PSIM_ENOMEM, "out of memory");
  return PSIM_OK;
}

/* ---- this machine's CPU ---------------------------------------------------
 * Per-core peak fp32 FLOP/s = SIMD fp32 lanes x 2 (an FMA is two FLOPs) x FMA
 * units per core x clock. Lanes: 16 with AVX-512F, 8 with AVX2, 4 with SSE
 * (flags in /proc/cpuinfo). FMA units: 2 on cores with AVX2+FMA (Intel
 * Haswell and later, AMD Zen 2 and later; Intel optimisation manual), 1
 * otherwise. Clock: the "cpu MHz" of the first core in /proc/cpuinfo (the
 * current clock, not turbo), 2.5 GHz when absent. */
#define CPU_DEFAULT_HZ 2.5e9
/* Memory bandwidth: no portable way to read it, so a documented default:
 * 10 GB/s per core (typical single-core STREAM triad on server cores),
 * capped at 204.8 GB/s (8 channels of DDR4-3200 x 8 bytes x 3.2 GT/s). */
#define CPU_MEM_BW_PER_CORE 10e9
#define CPU_MEM_BW_CAP      204.8e9
#define CPU_DEFAULT_RAM     16e9

static bool has_flag(const char *flags, const char *flag) {
  size_t n = strlen(flag);
  for (const char *p = strstr(flags, flag); p; p = strstr(p + 1, flag))
    if ((p == flags || p[-1] == ' ' || p[-1] == '\t') &&
        (p[n] == ' ' || p[n] == '\n' || p[n] == '\0'))
      return true;
  return false;
}

static void read_cpuinfo(psim_cpu_info *ci) {
  FILE *f = fopen("/proc/cpuinfo", "r");
  if (!f)
    return;
  char line[8192];
  bool got_flags = false, got_mhz = false;
  while (fgets(line, sizeof line, f) && !(got_flags && got_mhz)) {
    double mhz = 0;
    if (!got_mhz && sscanf(line, "cpu MHz : %lf", &mhz) == 1 && mhz > 100) {
      ci->clock_hz = mhz * 1e6;
      got_mhz = true;
    } else if (!got_flags && strncmp(line, "flags", 5) == 0) {
      got_flags = true;
      bool avx2 = has_flag(line, "avx2"), fma = has_flag(line, "fma");
      ci->simd_fp32_lanes = has_flag(line, "avx512f") ? 16 : avx2 ? 8 : 4;
      ci->core_fp32_flops = (avx2 && fma) ? 2.0 : 1.0; /* FMA units, scaled below */
    }
  }
  fclose(f);
}

void psim_cpu_info_detect(psim_cpu_info *out) {
  memset(out, 0, sizeof *out);
  long cores = sysconf(_SC_NPROCESSORS_ONLN);
  out->cores = cores > 0 && cores < 1 << 20 ? (int32_t)cores : 1;
  out->clock_hz = CPU_DEFAULT_HZ;
  out->simd_fp32_lanes = 4;
  out->core_fp32_flops = 1.0;
  read_cpuinfo(out);
  double fma_units = out->core_fp32_flops;
  out->core_fp32_flops = out->simd_fp32_lanes * 2.0 * fma_units * out->clock_hz;
  double bw = CPU_MEM_BW_PER_CORE * out->cores;
  out->node_mem_bw = bw < CPU_MEM_BW_CAP ? bw : CPU_MEM_BW_CAP;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  out->node_mem_bytes = pages > 0 && page > 0 ? (double)pages * (double)page : CPU_DEFAULT_RAM;
}
