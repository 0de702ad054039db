/* SPDX-License-Identifier: MIT */
/* tools/json.c: the JSON the gpux command writes, through jansson (never printf). */
#include <math.h>

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
