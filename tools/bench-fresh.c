/* SPDX-License-Identifier: MIT */
/* tools/bench-fresh.c: gpux bench's fresh-buffer scenario: a new buffer's first launch against its second. */
#include <math.h>
#include <string.h>

#include "bench.h"
#include "macro.h"

/*
 * A program makes an IN and an OUT buffer of `size`, writes its input, and launches; then
 * launches again. The first launch used to register both buffers with the device on its way
 * (0.4 ms a MiB on an H200); now the workers register a buffer as it is made, while the
 * program writes it, and the first launch waits only for what is left. The target is DESIGN's:
 * the first at most 1.2 times the second. block_sum reads the input at memory speed, on 1024
 * blocks, and writes its first 4 KiB; the OUT range is copied back whole. A pair made after
 * a like one was freed takes its memory, kept registered (gpux_buf_free()): measured apart,
 * as "reused"; the fresh ones let it go first (gpux_buf_trim()).
 */
/* One pair of buffers: the times of its first and second launch (ns) in t[0], t[1]. */
static int fresh_pair(struct bench *b, uint64_t size, bool reused, uint64_t *t)
{
	struct gpux_launch l = { .grid = { 1024 }, .block = { 256 } };
	uint64_t n = size / 4;
	gpux_buf *in, *out;
	int rc = 0;

	if (!reused)
		gpux_buf_trim(b->ctx);
	if (gpux_buf_alloc(b->ctx, size, &in) != GPUX_OK)
		return -1;
	if (gpux_buf_alloc(b->ctx, size, &out) != GPUX_OK) {
		gpux_buf_free(in);
		return -1;
	}
	memset(gpux_buf_data(in), 1, size);
	for (unsigned k = 0; k < 2 && rc == 0; k++) {
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(in, 0, size),
					   gpux_arg_out(out, 0, size) };

		if (bench_run1(b, "block_sum", &l, args, 3, &t[k]) != GPUX_OK)
			rc = -1;
	}
	gpux_buf_free(out);
	gpux_buf_free(in);
	return rc;
}

/* The median of several pairs' first and second launches. */
static int fresh_one(struct bench *b, uint64_t size, bool reused)
{
	unsigned reps = b->quick ? 1 : size >= (256u << 20) ? 3 : 7;
	uint64_t first[7], second[7], t[2];
	double t0, t1;
	char name[64];

	/* Reused: after a like pair, not after the larger ones before. */
	if (reused && fresh_pair(b, size, true, t) < 0)
		return -1;
	for (unsigned i = 0; i < reps; i++) {
		if (fresh_pair(b, size, reused, t) < 0)
			return -1;
		first[i] = t[0];
		second[i] = t[1];
	}
	t0 = bench_median(first, reps);
	t1 = bench_median(second, reps);
	(void)snprintf(name, sizeof(name), "%s %llu MiB IN + OUT: 1st vs 2nd launch",
		       reused ? "reused" : "fresh", (unsigned long long)(size >> 20));
	bench_add(b, name, t0 / 1e6, t1 / 1e6, "ms", "<= 1.2x", t0 / t1, t0 <= 1.2 * t1);
	return 0;
}

int bench_fresh(struct bench *b)
{
	/* Each in a segment of its own: smaller buffers share arenas, made once. */
	static const uint64_t sizes[] = { 1 << 20, 16 << 20, 64 << 20, 256 << 20 };

	for (unsigned i = 0; i < ARRAY_SIZE(sizes); i++) {
		if (b->quick && sizes[i] > (64 << 20))
			continue;
		if (fresh_one(b, sizes[i], false) < 0)
			return -1;
	}
	/* What gpux_buf_free() keeps: pairs of up to 32 MiB. */
	for (unsigned i = 0; i < 2; i++)
		if (fresh_one(b, sizes[i], true) < 0)
			return -1;
	return 0;
}
