/* profile_cuda_load.c - the CUDA backend of profile.h, loaded on first use.
 *
 * The kernels and the cuBLAS calls live in the CUDA profiler module
 * (profile_cuda.cu, built as libplansim_cuda.so when meson finds nvcc and
 * cuBLAS). This file, compiled in every build, opens it with dlopen the first
 * time a psim_profile_cuda_* function is called and looks up its one entry
 * point with dlsym; the module's own dependencies (libcudart, libcublas,
 * libcublasLt) are loaded with it. A missing module or library is a clear
 * error naming it (PSIM_EFAILED), never a crash, and no other command maps
 * any CUDA library (profile_cuda_impl.h, docs/profiling.md). Not thread-safe:
 * the profiler drives one backend from one thread. */
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "costdb/profile/profile_cuda_impl.h"
#include "sim/core/status.h"

static void *g_handle; /* the open module, NULL until loaded */
static psim_cuda_module g_module;

static const psim_cuda_host g_host = {psim_verror, psim_profile_summary, psim_costdb_dtype_name,
                                      psim_costdb_kind_name};

const char *psim_profile_cuda_module_path(void) {
  const char *env = getenv("PSIM_CUDA_MODULE");
  if (env && *env)
    return env;
#if PSIM_HAVE_CUDA
  /* The build tree's module while it exists (tests, uninstalled runs), else the installed one. */
  if (access(PSIM_CUDA_MODULE_BUILD, F_OK) == 0)
    return PSIM_CUDA_MODULE_BUILD;
  return PSIM_CUDA_MODULE_INSTALLED;
#else
  return NULL;
#endif
}

/* dlsym's object pointer as a function pointer (POSIX guarantees the two
 * have one representation; memcpy keeps ISO C compilers quiet). */
static psim_cuda_module_open_fn entry_point(void *handle) {
  void *sym = dlsym(handle, PSIM_CUDA_MODULE_ENTRY);
  psim_cuda_module_open_fn fn = NULL;
  _Static_assert(sizeof fn == sizeof sym, "function and object pointers differ in size");
  memcpy(&fn, &sym, sizeof fn);
  return fn;
}

static psim_status load(void) {
  if (g_handle)
    return PSIM_OK;
  const char *path = psim_profile_cuda_module_path();
  if (!path)
    return psim_error(PSIM_EFAILED, "this plansim was built without CUDA (meson found no nvcc "
                                    "and cuBLAS); --device cuda is unavailable");
  dlerror();
  void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char *why = dlerror();
    return psim_error(PSIM_EFAILED,
                      "cannot load the CUDA profiler %s: %s (--device cuda needs the CUDA "
                      "runtime and cuBLAS: libcudart, libcublas and libcublasLt where the "
                      "dynamic linker finds them, e.g. LD_LIBRARY_PATH)",
                      path, why ? why : "unknown error");
  }
  psim_cuda_module_open_fn open_fn = entry_point(h);
  psim_cuda_module m;
  psim_status s = PSIM_OK;
  if (!open_fn)
    s = psim_error(PSIM_EFAILED, "%s is not a plansim CUDA profiler: it exports no %s", path,
                   PSIM_CUDA_MODULE_ENTRY);
  else if (open_fn(PSIM_CUDA_MODULE_ABI, &g_host, &m) != PSIM_OK)
    s = psim_error(PSIM_EFAILED,
                   "the CUDA profiler %s was built for another plansim (interface version "
                   "%d expected); rebuild it with this one",
                   path, PSIM_CUDA_MODULE_ABI);
  if (s != PSIM_OK) {
    dlclose(h);
    return s;
  }
  g_module = m;
  g_handle = h;
  return PSIM_OK;
}

psim_status psim_profile_cuda_available(int32_t device_index) {
  PSIM_CHECK(load());
  return g_module.available(device_index);
}

psim_status psim_profile_cuda_fingerprint(int32_t device_index, psim_costdb_fingerprint *fp) {
  PSIM_CHECK(load());
  return g_module.fingerprint(device_index, fp);
}

psim_status psim_profile_cuda_measure(const psim_cost_key *key, const psim_profile_opts *o,
                                      psim_cost_entry *out) {
  PSIM_CHECK(load());
  return g_module.measure(key, o, out);
}
