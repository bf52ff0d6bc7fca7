/* utf8.c - UTF-8 validation for names and strings read from JSON (issue 24:
 * invalid UTF-8 is refused at load, not cut or passed on to outputs). */
#include "sim/core/utf8.h"

#include <stdbool.h>
#include <stdint.h>

/* Length of the UTF-8 sequence at s (1-4), or 0 when it is not valid UTF-8
 * (overlong forms, surrogates and code points above U+10FFFF included). */
static int utf8_len(const unsigned char *s) {
  unsigned c = s[0];
  int n = c < 0x80             ? 1
          : (c & 0xE0) == 0xC0 ? 2
          : (c & 0xF0) == 0xE0 ? 3
          : (c & 0xF8) == 0xF0 ? 4
                               : 0;
  if (n <= 1)
    return n;
  unsigned cp = c & (0x7F >> n);
  for (int i = 1; i < n; i++) {
    if ((s[i] & 0xC0) != 0x80)
      return 0;
    cp = cp << 6 | (s[i] & 0x3F);
  }
  static const unsigned min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
  bool ok = cp >= min_cp[n] && cp <= 0x10FFFF && (cp < 0xD800 || cp > 0xDFFF);
  return ok ? n : 0;
}

size_t psim_utf8_invalid_at(const char *s) {
  const unsigned char *u = (const unsigned char *)s;
  for (size_t i = 0; u[i];) {
    int n = utf8_len(u + i);
    if (n == 0)
      return i;
    i += (size_t)n;
  }
  return SIZE_MAX;
}
