/* SPDX-License-Identifier: MIT */
/* tests/fake-cuda/fake-sweep.h: the file through which a fault-injection sweep drives the fake. */
#pragma once

#include <stdint.h>

/*
 * $GPUX_FAKE_CUDA_SWEEP names a file of one struct fake_sweep, which the test creates (zeroed)
 * and maps; every process that loads the fake maps it too (the probe, each worker and its
 * successors). There the fake counts the calls of each entry point, all processes together,
 * and fails one call of the test's choosing, once: call `fail_at` of `fail_fn` returns
 * `fail_code` (a sticky code breaks that process's context, as a fault would). The test arms it
 * by writing fail_fn and fail_code, then fail_at; the fake sets `fired` when it failed the
 * call. A process that exits (exit(), not _exit()) with objects of the driver it never let go
 * of (streams, events, modules, graphs, device memory, registered host memory) counts one in
 * `leaks` and says what in `leak_what`; a release of something never handed out (a device
 * pointer freed twice) counts in `bad_releases`.
 */

#define FAKE_SWEEP_MAGIC 0x70657773u /* "swep" */
#define FAKE_SWEEP_FNS 96u
#define FAKE_SWEEP_NAME 48u

struct fake_sweep_fn {
	char name[FAKE_SWEEP_NAME];
	uint32_t calls;
	uint32_t pad;
};

struct fake_sweep {
	uint32_t magic; /* the fake's, once it has written the names */
	uint32_t nfns;
	char fail_fn[FAKE_SWEEP_NAME];
	uint32_t fail_at; /* 0: nothing is failed */
	int32_t fail_code;
	uint32_t fired;
	uint32_t leaks;
	uint32_t bad_releases;
	uint32_t pad;
	char leak_what[256];
	struct fake_sweep_fn fns[FAKE_SWEEP_FNS];
};
