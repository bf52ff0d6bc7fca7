/* fuzz_export.c - libFuzzer target: the exporters' escaping (export_text.c,
 * issue 24). For any input string s:
 *   - psim_export_shell_quote(s), read back by the POSIX shell's quoting rules
 *     (single quotes literal, a backslash outside them takes the next byte),
 *     is s again, and a word that needed quotes has no unquoted byte the shell
 *     treats specially;
 *   - psim_export_toml_quote(s) (torchtitan's job config), read back by TOML 1.0's
 *     basic-string rules, is s again;
 *   - psim_export_proto_quote(s), read back by protobuf text format's string
 *     rules (\" \\ and octal \NNN), is s again and holds no raw control byte;
 *   - psim_export_check_name accepts s only when it has no control byte and is
 *     valid UTF-8, and then psim_export_printable(s) is s when s holds no
 *     backslash. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "search/plan/export.h"
#include "sim/core/alloc.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, const char *s) {
  fprintf(stderr, "fuzz_export: %s for \"%s\"\n", what, s);
  abort();
}

/* Reads a shell word: '...' is literal, \c outside quotes is c, anything else
 * must be a safe character. Returns the word (malloc) or NULL when malformed. */
static char *shell_unquote(const char *w) {
  char *out = malloc(strlen(w) + 1);
  size_t n = 0;
  for (const char *p = w; *p;) {
    if (*p == '\'') {
      const char *q = strchr(p + 1, '\'');
      if (!q)
        return free(out), NULL;
      memcpy(out + n, p + 1, (size_t)(q - p - 1));
      n += (size_t)(q - p - 1);
      p = q + 1;
    } else if (*p == '\\' && p[1]) {
      out[n++] = p[1];
      p += 2;
    } else if (strchr("$`\"\\|&;<>()*?[]#~{} \t\n!", *p)) {
      return free(out), NULL; /* a byte the shell would act on, unquoted */
    } else {
      out[n++] = *p++;
    }
  }
  out[n] = '\0';
  return out;
}

static char *proto_unquote(const char *w) {
  size_t len = strlen(w);
  if (len < 2 || w[0] != '"' || w[len - 1] != '"')
    return NULL;
  char *out = malloc(len);
  size_t n = 0;
  for (size_t i = 1; i + 1 < len; i++) {
    unsigned char c = (unsigned char)w[i];
    if (c < 0x20 || c == 0x7f || c == '"')
      return free(out), NULL; /* raw control byte or unescaped quote */
    if (c != '\\') {
      out[n++] = (char)c;
    } else if (w[i + 1] == '"' || w[i + 1] == '\\') {
      out[n++] = w[++i];
    } else if (i + 3 < len && w[i + 1] >= '0' && w[i + 1] <= '3') {
      out[n++] = (char)((w[i + 1] - '0') * 64 + (w[i + 2] - '0') * 8 + (w[i + 3] - '0'));
      i += 3;
    } else {
      return free(out), NULL;
    }
  }
  out[n] = '\0';
  return out;
}

static int hex_digit(char c) {
  return c >= '0' && c <= '9'   ? c - '0'
         : c >= 'A' && c <= 'F' ? c - 'A' + 10
         : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                : -1;
}

/* Reads a TOML 1.0 basic string (toml.io/en/v1.0.0#string): "...", raw control bytes
 * other than tab refused, escapes \" \\ \b \t \n \f \r \uXXXX (only U+0001..U+007F
 * here: the writer escapes control bytes alone and passes other bytes through). */
static char *toml_unquote(const char *w) {
  size_t len = strlen(w);
  if (len < 2 || w[0] != '"' || w[len - 1] != '"')
    return NULL;
  char *out = malloc(len);
  size_t n = 0;
  for (size_t i = 1; i + 1 < len; i++) {
    unsigned char c = (unsigned char)w[i];
    if ((c < 0x20 && c != '\t') || c == 0x7f || c == '"')
      return free(out), NULL; /* a raw control byte or an unescaped quote */
    if (c != '\\') {
      out[n++] = (char)c;
      continue;
    }
    char e = w[++i];
    const char *simple = strchr("\"\\btnfr", e);
    if (e && simple) {
      out[n++] = "\"\\\b\t\n\f\r"[simple - "\"\\btnfr"];
    } else if (e == 'u' && i + 4 < len) {
      int v = 0;
      for (int k = 1; k <= 4; k++)
        v = hex_digit(w[i + k]) < 0 || v < 0 ? -1 : v * 16 + hex_digit(w[i + k]);
      if (v <= 0 || v > 0x7f)
        return free(out), NULL;
      out[n++] = (char)v;
      i += 4;
    } else {
      return free(out), NULL;
    }
  }
  out[n] = '\0';
  return out;
}

static char *quoted(void (*quote)(psim_sb *, const char *), const char *s) {
  psim_sb b = {0};
  quote(&b, s);
  char *text = NULL;
  size_t len = 0;
  if (psim_sb_finish(&b, "fuzz", &text, &len) != PSIM_OK)
    abort();
  return text;
}

static void check_round_trips(const char *s) {
  char *w = quoted(psim_export_shell_quote, s);
  char *back = shell_unquote(w);
  if (!back || strcmp(back, s) != 0)
    fail("shell quoting does not round-trip", s);
  free(back);
  psim_free(w);
  w = quoted(psim_export_proto_quote, s);
  back = proto_unquote(w);
  if (!back || strcmp(back, s) != 0)
    fail("protobuf text quoting does not round-trip", s);
  free(back);
  psim_free(w);
  w = quoted(psim_export_toml_quote, s);
  back = toml_unquote(w);
  if (!back || strcmp(back, s) != 0)
    fail("TOML basic-string quoting does not round-trip", s);
  free(back);
  psim_free(w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size > 4096)
    return 0;
  char s[4097];
  memcpy(s, data, size);
  s[size] = '\0'; /* a NUL inside ends the name, as in a C string from cJSON */
  check_round_trips(s);
  bool control = false;
  for (const char *p = s; *p; p++)
    control |= (unsigned char)*p < 0x20 || *p == 0x7f;
  bool accepted = psim_export_check_name("name", s) == PSIM_OK;
  if (accepted && control)
    fail("a control character is accepted", s);
  char shown[8192];
  psim_export_printable(s, shown, sizeof shown);
  if (accepted && !strchr(s, '\\') && strcmp(shown, s) != 0)
    fail("an accepted name is not printed as it is", s);
  psim_error_clear();
  return 0;
}
