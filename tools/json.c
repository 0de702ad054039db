/* SPDX-License-Identifier: MIT */
/* tools/json.c: the JSON the gpux command writes, through jansson (never printf). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "tools.h"

json_t *tool_json_u64(uint64_t v)
{
	/* JSON numbers past 2^63 do not occur in counters of this life. */
	return json_integer(v > (uint64_t)INT64_MAX ? INT64_MAX : (json_int_t)v);
}

json_t *tool_json_real(double v)
{
	/* NaN and infinities are no JSON: a missing value is null. */
	return isfinite(v) ? json_real(v) : json_null();
}

/* The length of the valid UTF-8 sequence at p (left bytes there), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *p, size_t left)
{
	uint32_t c;
	size_t n;

	if (p[0] < 0x80)
		return 1;
	if (p[0] >= 0xc2 && p[0] <= 0xdf)
		n = 2, c = p[0] & 0x1f;
	else if (p[0] >= 0xe0 && p[0] <= 0xef)
		n = 3, c = p[0] & 0x0f;
	else if (p[0] >= 0xf0 && p[0] <= 0xf4)
		n = 4, c = p[0] & 0x07;
	else
		return 0;
	if (left < n)
		return 0;
	for (size_t i = 1; i < n; i++) {
		if ((p[i] & 0xc0) != 0x80)
			return 0;
		c = c << 6 | (p[i] & 0x3f);
	}
	/* Overlong forms, UTF-16 surrogates and what lies past U+10FFFF are no UTF-8. */
	if ((n == 3 && c < 0x800) || (n == 4 && c < 0x10000) || c > 0x10ffff ||
	    (c >= 0xd800 && c <= 0xdfff))
		return 0;
	return n;
}

json_t *tool_json_text(const char *s)
{
	size_t len = strlen(s), o = 0;
	json_t *j;
	char *out;

	j = json_stringn(s, len);
	if (j)
		return j;
	/* Not UTF-8: each byte that is not part of a character becomes the four characters
	 * \xNN, so that nothing is lost (a compiler's log quoting Latin-1 source, say). */
	out = malloc(4 * len + 1);
	if (!out)
		return NULL;
	for (size_t i = 0; i < len;) {
		size_t n = utf8_seq((const unsigned char *)s + i, len - i);

		if (n == 0) {
			(void)snprintf(out + o, 5, "\\x%02x", (unsigned char)s[i]);
			o += 4;
			i++;
		} else {
			memcpy(out + o, s + i, n);
			o += n;
			i += n;
		}
	}
	j = json_stringn(out, o);
	free(out);
	return j;
}

int tool_json_print(json_t *root)
{
	int r;

	if (!root)
		return tool_fail("json", "out of memory");
	r = json_dumpf(root, stdout, JSON_INDENT(1) | JSON_REAL_PRECISION(9));
	json_decref(root);
	if (r < 0 || fputc('\n', stdout) == EOF || fflush(stdout) != 0)
		return tool_fail("json", "cannot write to stdout");
	return TOOL_OK;
}
