/* SPDX-License-Identifier: MIT */
/* tests/fuzz/fuzz.h: the libFuzzer entry point that every fuzz target defines. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Run one input; return 0. A broken invariant aborts, which libFuzzer reports as a crash. */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
