/* export_common.c - what the exporters share (export.c, export_gspmd.c): a document's JSON
 * text, and how an op's configuration is compared and described. Kept apart so that the
 * format writers depend on it and not on each other. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <string.h>

#include "search/plan/export_impl.h"
#include "sim/core/alloc.h"

psim_status psim_export_json_text(const cJSON *root, char **text, size_t *len) {
  char *s = cJSON_Print(root);
  if (!s)
    return psim_error(PSIM_ENOMEM, "export: out of memory printing JSON");
  size_t n = strlen(s);
  *text = psim_malloc(n + 2);
  if (*text) {
    memcpy(*text, s, n);
    (*text)[n] = '\n';
    (*text)[n + 1] = '\0';
    *len = n + 1;
  }
  cJSON_free(s);
  return *text ? PSIM_OK : psim_error(PSIM_ENOMEM, "export: out of memory");
}

void psim_export_fmt_config(const psim_model *m, int32_t o, const psim_op_config *c, char *buf,
                            size_t size) {
  const psim_op *op = &m->ops[o];
  size_t n = (size_t)snprintf(buf, size, "split");
  for (int32_t i = 0; i < op->n_dims && n < size; i++)
    if (c->degree[i] > 1)
      n += (size_t)snprintf(buf + n, size - n, " %s:%d", m->dims[op->dims[i].dim].name,
                            c->degree[i]);
  if (n < size)
    snprintf(buf + n, size - n, ", %d replicas, devices %d..", c->replicas,
             c->n_devices > 0 ? c->devices[0] : -1);
}

bool psim_export_config_equal(const psim_op_config *a, const psim_op_config *b) {
  return memcmp(a->degree, b->degree, sizeof a->degree) == 0 && a->replicas == b->replicas &&
         a->n_devices == b->n_devices && a->stage == b->stage &&
         (a->n_devices == 0 ||
          memcmp(a->devices, b->devices, (size_t)a->n_devices * sizeof *a->devices) == 0);
}
