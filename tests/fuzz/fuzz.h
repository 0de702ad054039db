/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz.h: the libFuzzer entry point that every fuzz target defines, and its checks. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* Run one input; return 0. A broken invariant aborts, which libFuzzer reports as a crash. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A target's invariant: when it does not hold, say which and where, and abort (a crash). */
#define CHECK(x)                                                                                   \
	do {                                                                                       \
		if (!(x)) {                                                                        \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #x);      \
			abort();                                                                   \
		}                                                                                  \
	} while (0)
