/* export_text.c - names in the exporters' target languages (issue 24: a model
 * named "x\necho INJECTED; #" put a runnable line into the Megatron script,
 * and FlexFlow op names went raw into quoted protobuf strings). */
#include <assert.h>
#include <stdio.h>
#include <string.h>

#include "search/plan/export.h"
#include "sim/core/strbuf.h"
#include "sim/core/utf8.h"

psim_status psim_export_check_name(const char *what, const char *name) {
  const unsigned char *s = (const unsigned char *)name;
  size_t bad = psim_utf8_invalid_at(name);
  for (size_t i = 0; s[i]; i++) {
    if (i == bad || s[i] < 0x20 || s[i] == 0x7F) {
      char shown[160];
      psim_export_printable(name, shown, sizeof shown);
      return psim_error(PSIM_EINPUT,
                        "%s \"%s\" has %s (byte 0x%02x at offset %zu): an exported "
                        "configuration cannot hold it; rename it",
                        what, shown, i == bad ? "invalid UTF-8" : "a control character", s[i], i);
    }
  }
  return PSIM_OK;
}

void psim_export_printable(const char *s, char *out, size_t size) {
  assert(size >= 8);
  size_t n = 0;
  for (const unsigned char *p = (const unsigned char *)s; *p && n + 5 < size; p++) {
    if (*p < 0x20 || *p == 0x7F || *p == '\\')
      n += (size_t)snprintf(out + n, size - n, "\\x%02x", *p);
    else
      out[n++] = (char)*p;
  }
  out[n] = '\0';
}

/* Characters a shell word may hold unquoted (POSIX portable file-name
 * characters and a few more that no shell treats specially). */
static bool shell_safe(const char *s) {
  if (!*s)
    return false;
  for (; *s; s++)
    if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._+-/:@%=,", *s))
      return false;
  return true;
}

void psim_export_shell_quote(psim_sb *b, const char *s) {
  if (shell_safe(s)) {
    psim_sb_printf(b, "%s", s);
    return;
  }
  psim_sb_printf(b, "'");
  for (const char *q; (q = strchr(s, '\'')); s = q + 1)
    psim_sb_printf(b, "%.*s'\\''", (int)(q - s), s); /* close, an escaped quote, reopen */
  psim_sb_printf(b, "%s'", s);
}

/* s in double quotes, " and \ escaped with a backslash, control bytes in ctrl's format. */
static void quote_escaped(psim_sb *b, const char *s, const char *ctrl) {
  psim_sb_printf(b, "\"");
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    if (*p == '"' || *p == '\\')
      psim_sb_printf(b, "\\%c", *p);
    else if (*p < 0x20 || *p == 0x7F)
      psim_sb_printf(b, ctrl, *p);
    else
      psim_sb_printf(b, "%c", *p);
  }
  psim_sb_printf(b, "\"");
}

void psim_export_proto_quote(psim_sb *b, const char *s) {
  quote_escaped(b, s, "\\%03o"); /* octal: text format's escape for any byte */
}

void psim_export_toml_quote(psim_sb *b, const char *s) {
  quote_escaped(b, s, "\\u%04X"); /* TOML 1.0 basic strings have no octal escapes */
}

/* Every name an exporter may write: the model's, the cluster's, its device
 * types', and the model's ops', tensors' and dims'. */
psim_status psim_export_check_names(const psim_model *m, const psim_cluster *c) {
  PSIM_CHECK(psim_export_check_name("model name", m->name));
  PSIM_CHECK(psim_export_check_name("cluster name", c->name));
  for (int32_t i = 0; i < c->n_types; i++)
    PSIM_CHECK(psim_export_check_name("device type", c->types[i].name));
  for (int32_t i = 0; i < m->n_dims; i++)
    PSIM_CHECK(psim_export_check_name("dim name", m->dims[i].name));
  for (int32_t i = 0; i < m->n_tensors; i++)
    PSIM_CHECK(psim_export_check_name("tensor name", m->tensors[i].name));
  for (int32_t i = 0; i < m->n_ops; i++)
    PSIM_CHECK(psim_export_check_name("op name", m->ops[i].name));
  return PSIM_OK;
}
