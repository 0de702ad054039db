/* SPDX-License-Identifier: MIT */
/* basic/parse.h: numbers from command lines, for gpuxd's and gpux-worker's options. */
#pragma once

#include <stdint.h>

/*
 * The whole of s as an unsigned number in `base`, digits only. Returns 0 and sets *ret, or
 * -EINVAL when s is empty, has anything before or after the digits (a sign, blanks), or
 * does not fit.
 */
int ipc_parse_u64(const char *s, int base, uint64_t *ret);
