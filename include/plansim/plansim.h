/* plansim.h - the public C API of libplansim.
 *
 * Everything a program outside this repository may call: open a model, a cluster and a
 * strategy from their JSON files (docs/model.md, docs/cluster.md, docs/strategy.md), predict
 * one training iteration, and read the errors. The handles are opaque; the library is built
 * with hidden visibility and exports exactly the functions marked PSIM_API here (tests check
 * the shared object's dynamic symbols against this header).
 *
 * Conventions: every fallible call returns a psim_status; on failure psim_error_message()
 * holds a message for people naming the file, the JSON position or path and what was
 * expected (thread-local). Handles are released by their psim_close_* function, which takes
 * NULL. Quantities are SI: seconds, bytes, FLOP/s.
 *
 * The library's internals (sim/, costdb/, search/) include this header too, so the status
 * codes and declarations here are the ones the code is compiled against. This header
 * includes no internal header (scripts/check-layers enforces it). */
#ifndef PLANSIM_PLANSIM_H
#define PLANSIM_PLANSIM_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PSIM_API __attribute__((visibility("default")))

typedef enum psim_status {
  PSIM_OK = 0,
  PSIM_ENOMEM,        /* an allocation failed */
  PSIM_EINPUT,        /* bad input or usage: the file, path and expectation are in the message */
  PSIM_EIO,           /* reading or writing a file failed */
  PSIM_EFAILED,       /* the work itself failed (infeasible, solver error) */
  PSIM_EINTERRUPTED,  /* SIGINT/SIGTERM or an interrupt hook asked to stop */
  PSIM_ELIMIT,        /* a limit of the tool itself (tasks, memory) would be exceeded */
  PSIM_EUNIMPLEMENTED /* the capability is not built yet */
} psim_status;

/* Opaque handles. */
typedef struct psim_model psim_model;
typedef struct psim_cluster psim_cluster;
typedef struct psim_strategy psim_strategy;

/* The library's version ("0.1.0"). */
PSIM_API const char *psim_version(void);
/* The last message recorded on this thread ("" when none). */
PSIM_API const char *psim_error_message(void);
/* Short name of a status ("out of memory", "bad input", ...). */
PSIM_API const char *psim_status_name(psim_status s);

/* Loads and validates a plansim.model/1 file into *out (NULL on failure). */
PSIM_API psim_status psim_open_model(const char *path, psim_model **out);
PSIM_API void psim_close_model(psim_model *m);
/* Loads a plansim.cluster/1 file (explicit or hierarchical form) into *out. */
PSIM_API psim_status psim_open_cluster(const char *path, psim_cluster **out);
PSIM_API void psim_close_cluster(psim_cluster *c);
/* Loads a plansim.strategy/1 file (a template or the explicit form) or a plan file, and
 * expands it against the model and the cluster (errors say why it does not fit). */
PSIM_API psim_status psim_open_strategy(const char *path, const psim_model *m, psim_cluster *c,
                                        psim_strategy **out);
PSIM_API void psim_close_strategy(psim_strategy *s);

/* What a prediction of one training iteration gives (a subset of `plansim simulate --json`;
 * psim_predict_json gives all of it). */
typedef struct psim_prediction {
  double iteration_time_s;  /* one iteration (forward, backward, gradient sync, update) */
  double samples_per_s;     /* global batch / iteration time */
  double tokens_per_s;      /* 0 when the model has no sequence dim */
  double mfu;               /* model FLOP/s per device over its peak for the model dtype */
  double peak_memory_bytes; /* largest peak over the devices */
  double capacity_bytes;    /* that device's memory */
  int fits;                 /* 1 when every device's peak fits its memory */
} psim_prediction;

/* Simulates one training iteration with default options (aggregate fidelity, folding, the
 * roofline costs). The cluster is not const: its route cache fills as routes are asked. */
PSIM_API psim_status psim_predict(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                                  psim_prediction *out);
/* The same, as the JSON object `plansim simulate --json` prints (a NUL-terminated string in
 * *json, released with psim_free_string). */
PSIM_API psim_status psim_predict_json(const psim_model *m, psim_cluster *c, const psim_strategy *s,
                                       char **json);
PSIM_API void psim_free_string(char *s);

#ifdef __cplusplus
}
#endif

#endif
