/* SPDX-License-Identifier: MIT */
/* basic/parse.c: numbers from command lines, for gpuxd's and gpux-worker's options. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>

#include "parse.h"

int ipc_parse_u64(const char *s, int base, uint64_t *ret)
{
	unsigned long long v;
	char *end;

	/* strtoull() would skip blanks and take "-1" as 2^64 - 1. */
	if (!isdigit((unsigned char)*s))
		return -EINVAL;
	errno = 0;
	v = strtoull(s, &end, base);
	if (errno || end == s || *end)
		return -EINVAL;
	*ret = v;
	return 0;
}
