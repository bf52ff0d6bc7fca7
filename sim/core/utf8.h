/* utf8.h - UTF-8 validation. */
#ifndef PSIM_UTF8_H
#define PSIM_UTF8_H

#include <stddef.h>

/* The offset of the first byte of s that is not valid UTF-8 (overlong forms,
 * surrogates and code points above U+10FFFF are invalid), SIZE_MAX when all
 * of s is valid. O(length). */
size_t psim_utf8_invalid_at(const char *s);

#endif
