/* modern_csv.c - the CSV reader of the modern calibration sources: '#'
 * comment lines, a header, fields quoted RFC 4180 style ("" is a quote). */
#include <stdlib.h>
#include <string.h>

#include "modern.h"

/* Splits line in place into at most max fields; returns the count. */
static int split(char *line, char **out, int max) {
  int n = 0;
  char *p = line;
  while (n < max) {
    char *w = p;
    out[n++] = w;
    bool quoted = *p == '"';
    if (quoted)
      p++;
    for (;;) {
      if (*p == '\0' || *p == '\n' || *p == '\r') {
        *w = '\0';
        return n;
      }
      if (quoted && *p == '"' && p[1] == '"') {
        *w++ = '"';
        p += 2;
      } else if (quoted && *p == '"') {
        quoted = false;
        p++;
      } else if (!quoted && *p == ',') {
        *w = '\0';
        p++;
        break;
      } else {
        *w++ = *p++;
      }
    }
  }
  return n;
}

static bool read_line(modern_csv *c, char *buf, size_t cap) {
  while (fgets(buf, (int)cap, c->f))
    if (buf[0] != '#' && buf[0] != '\n' && buf[0] != '\r')
      return true;
  return false;
}

bool modern_csv_open(modern_csv *c, const char *dir, const char *file) {
  memset(c, 0, sizeof *c);
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, file);
  c->f = fopen(path, "r");
  if (!c->f) {
    fprintf(stderr, "psim-calibrate-modern: cannot open %s\n", path);
    return false;
  }
  if (!read_line(c, c->hdr, sizeof c->hdr)) {
    fclose(c->f);
    c->f = NULL;
    return false;
  }
  c->n_cols = split(c->hdr, c->names, MODERN_MAX_COLS);
  return true;
}

bool modern_csv_next(modern_csv *c) {
  if (!c->f || !read_line(c, c->buf, sizeof c->buf))
    return false;
  int n = split(c->buf, c->cells, MODERN_MAX_COLS);
  for (int i = n; i < MODERN_MAX_COLS; i++)
    c->cells[i] = NULL;
  return true;
}

const char *modern_csv_get(const modern_csv *c, const char *name) {
  for (int i = 0; i < c->n_cols; i++)
    if (strcmp(c->names[i], name) == 0)
      return c->cells[i] ? c->cells[i] : "";
  return "";
}

void modern_csv_close(modern_csv *c) {
  if (c->f)
    fclose(c->f);
  c->f = NULL;
}
