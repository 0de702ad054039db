/* SPDX-License-Identifier: MIT */
/* gpux/cuda-host/gpux_cuda_block.h: one block's CUDA threads on one CPU thread, as fibers. */
#ifndef GPUX_CUDA_BLOCK_H
#define GPUX_CUDA_BLOCK_H
#pragma GCC system_header

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "gpux_cuda_abi.h"
#include "vector_types.h"

/*
 * A block's threads run one after another on the CPU thread that runs the block, each to
 * its end, on that thread's own stack: most kernels never wait, and cost a call per CUDA
 * thread. The first time a thread waits (__syncthreads(), a warp operation), the threads not
 * started yet become fibers, each on a stack of its own that the worker keeps, and the
 * threads take turns (cooperatively: each runs until it waits or ends, then hands the CPU
 * thread to the next one that can run). When the thread on the CPU thread's stack ends, the
 * block's runner waits there until the last fiber has ended.
 *
 * A barrier is released when every thread that has not ended has arrived (a thread that
 * returned early does not hold the others, as on a GPU). A warp operation completes when
 * every lane of its mask that has not ended has arrived at it; lanes of a mask must all ask
 * for the same operation with the same mask. When no thread can go on, the block fails with
 * a message: nothing hangs, nothing goes on with a wrong result.
 */

#if !defined(__x86_64__) && !defined(__aarch64__)
#error "gpux runs CUDA C++ on the host on x86-64 and aarch64 only"
#endif

struct dim3 {
	unsigned int x, y, z;
	constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
		: x(vx), y(vy), z(vz) {}
	constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
	constexpr operator uint3() const { return uint3{ x, y, z }; }
};

namespace gpux_cu {

/* The stack switch, in assembly below: save the callee-saved registers on this stack and its
 * pointer in *save, then take those of the stack at `to`. */
extern "C" __attribute__((visibility("hidden"))) void gpux_cu_switch(void **save, void *to);
extern "C" __attribute__((visibility("hidden"))) void gpux_cu_fiber_start(void);

#if defined(__x86_64__)
__asm__(".text\n"
	".p2align 4\n"
	".type gpux_cu_switch,@function\n"
	"gpux_cu_switch:\n"
	"\tpushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n"
	"\tmovq %rsp, (%rdi)\n"
	"\tmovq %rsi, %rsp\n"
	"\tpopq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n"
	"\tret\n"
	".size gpux_cu_switch, .-gpux_cu_switch\n"
	".p2align 4\n"
	".type gpux_cu_fiber_start,@function\n"
	"gpux_cu_fiber_start:\n"
	"\tmovq %r12, %rdi\n"
	"\tcallq *%r13\n"
	"\tud2\n"
	".size gpux_cu_fiber_start, .-gpux_cu_fiber_start\n");
enum { FRAME_WORDS = 9, FRAME_ARG = 3, FRAME_FN = 2, FRAME_RET = 6 };
#else
__asm__(".text\n"
	".p2align 4\n"
	".type gpux_cu_switch,%function\n"
	"gpux_cu_switch:\n"
	"\tsub sp, sp, #176\n"
	"\tstp x19, x20, [sp, #0]\n\tstp x21, x22, [sp, #16]\n\tstp x23, x24, [sp, #32]\n"
	"\tstp x25, x26, [sp, #48]\n\tstp x27, x28, [sp, #64]\n\tstp x29, x30, [sp, #80]\n"
	"\tstp d8, d9, [sp, #96]\n\tstp d10, d11, [sp, #112]\n\tstp d12, d13, [sp, #128]\n"
	"\tstp d14, d15, [sp, #144]\n"
	"\tmov x2, sp\n\tstr x2, [x0]\n\tmov sp, x1\n"
	"\tldp x19, x20, [sp, #0]\n\tldp x21, x22, [sp, #16]\n\tldp x23, x24, [sp, #32]\n"
	"\tldp x25, x26, [sp, #48]\n\tldp x27, x28, [sp, #64]\n\tldp x29, x30, [sp, #80]\n"
	"\tldp d8, d9, [sp, #96]\n\tldp d10, d11, [sp, #112]\n\tldp d12, d13, [sp, #128]\n"
	"\tldp d14, d15, [sp, #144]\n"
	"\tadd sp, sp, #176\n"
	"\tret\n"
	".size gpux_cu_switch, .-gpux_cu_switch\n"
	".p2align 4\n"
	".type gpux_cu_fiber_start,%function\n"
	"gpux_cu_fiber_start:\n"
	"\tmov x0, x19\n"
	"\tblr x20\n"
	"\tbrk #0\n"
	".size gpux_cu_fiber_start, .-gpux_cu_fiber_start\n");
enum { FRAME_WORDS = 22, FRAME_ARG = 0, FRAME_FN = 1, FRAME_RET = 11 };
#endif

enum : uint8_t { T_NEW, T_RUN, T_BAR, T_WARP, T_READY, T_DONE };
enum : uint8_t {
	W_SHFL, W_UP, W_DOWN, W_XOR, W_BALLOT, W_ANY, W_ALL, W_SYNC, W_MATCH_ANY, W_MATCH_ALL,
	W_ADD, W_MIN, W_MAX, W_UMIN, W_UMAX, W_AND, W_OR, W_XOR_RED,
};
constexpr uint32_t THREADS_MAX = 1024;
constexpr uint32_t WARPS_MAX = THREADS_MAX / 32;

struct thread {
	void *sp;
	uint3 tid;
	uint8_t state, op;
	int32_t arg, width;
	uint32_t mask;
	uint64_t val, res;
};

struct block {
	uint3 tid;         /* the running thread's threadIdx */
	uint3 bid;
	dim3 bdim, gdim;
	uint32_t lin;      /* its index in the block */
	uint32_t n;        /* threads */
	uint32_t live;     /* threads not ended (started or not) */
	uint32_t main;     /* the thread on the CPU thread's own stack */
	uint32_t cursor;   /* where the scheduler looks next */
	uint32_t bar_arrived;
	uint32_t red_acc, red_count, red_n; /* __syncthreads_count(): arriving, last released */
	bool fibers;
	void *runner_sp; /* the block's runner, once its direct thread ended */
	thread *t;
	uint32_t warp_waiting[WARPS_MAX]; /* lanes at a warp operation */
	uint32_t warp_gone[WARPS_MAX];    /* lanes ended at its last warp operation */
	gpux_cu_launch *l;
	void *kargs;
	void (*thread_fn)(void *kargs);
	void *abort_buf[5];
};

/* The block this CPU thread runs: what threadIdx and the others read. */
static __thread block *cur;

[[noreturn]] static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void fail(const char *fmt, ...)
{
	block *b = cur;
	va_list ap;
	int n;

	n = snprintf(b->l->error, sizeof(b->l->error), "thread (%u,%u,%u) of block (%u,%u,%u): ",
		     b->tid.x, b->tid.y, b->tid.z, b->bid.x, b->bid.y, b->bid.z);
	va_start(ap, fmt);
	if (n >= 0 && (size_t)n < sizeof(b->l->error))
		(void)vsnprintf(b->l->error + n, sizeof(b->l->error) - (size_t)n, fmt, ap);
	va_end(ap);
	__builtin_longjmp(b->abort_buf, 1);
}

static inline void set_cur(block *b, uint32_t i)
{
	b->lin = i;
	b->tid = b->t[i].tid;
}

static void warp_try(block *b, uint32_t w, uint32_t mask);

/* Every thread that has not ended is at the barrier: let them go, with its counts. */
static void release(block *b)
{
	b->red_count = b->red_acc;
	b->red_n = b->bar_arrived;
	b->red_acc = 0;
	b->bar_arrived = 0;
	for (uint32_t k = 0; k < b->n; k++)
		if (b->t[k].state == T_BAR)
			b->t[k].state = T_READY;
}

/* Thread `i` ended (any mode but the direct loop before fibers). */
static void thread_end(block *b, uint32_t i)
{
	uint32_t w = i / 32;

	b->t[i].state = T_DONE;
	b->live--;
	if (b->bar_arrived && b->bar_arrived == b->live)
		release(b);
	/* Lanes of its warp may have waited for it. */
	for (uint32_t bits = b->warp_waiting[w]; bits; bits &= bits - 1)
		warp_try(b, w, b->t[w * 32 + (uint32_t)__builtin_ctz(bits)].mask);
}

static void switch_next(block *b, void **save);

extern "C" __attribute__((used)) void gpux_cu_fiber_main(block *b)
{
	uint32_t me = b->lin;
	void *dead;

	b->thread_fn(b->kargs);
	thread_end(b, me);
	if (b->live == 0)
		gpux_cu_switch(&dead, b->runner_sp);
	switch_next(b, &dead);
	__builtin_unreachable();
}

/*
 * Save the running context in *save and go on with the next thread that can run (one that
 * was let go, or one not started yet), looking from the cursor on, round the block: each
 * thread hands the CPU thread to the next itself, as the one scheduler. Nothing that can
 * run: the block is stuck.
 */
static void switch_next(block *b, void **save)
{
	for (uint32_t k = 0; k < b->n; k++) {
		uint32_t i = b->cursor;
		thread *t = &b->t[i];

		b->cursor = i + 1 == b->n ? 0 : i + 1;
		if (t->state == T_NEW) {
			uintptr_t top = (uintptr_t)b->l->stack(i);
			void **frame;

			if (!top)
				fail("no memory for the stacks of %u threads", b->n);
			frame = (void **)(top - FRAME_WORDS * sizeof(void *));
			memset(frame, 0, FRAME_WORDS * sizeof(void *));
			frame[FRAME_ARG] = b;
			frame[FRAME_FN] = (void *)gpux_cu_fiber_main;
			frame[FRAME_RET] = (void *)gpux_cu_fiber_start;
			t->sp = frame;
		} else if (t->state != T_READY) {
			continue;
		}
		t->state = T_RUN;
		set_cur(b, i);
		gpux_cu_switch(save, t->sp);
		return;
	}
	fail("deadlock: the block's threads wait for each other (a __syncthreads() or a warp "
	     "operation that not every thread reaches)");
}

/* The calling thread waits: its state says for what; it runs again (T_RUN) once that is
 * there, which may be now. */
static void wait_self(block *b)
{
	uint32_t me = b->lin;

	if (b->t[me].state == T_READY)
		b->t[me].state = T_RUN;
	else
		switch_next(b, &b->t[me].sp);
}

/* The first wait of a block: the threads before the caller ended, the rest are fibers. */
__attribute__((noinline)) static void fibers_begin(block *b)
{
	uint32_t me = b->lin;

	b->fibers = true;
	b->main = me;
	b->live = b->n - me;
	b->cursor = me + 1 == b->n ? 0 : me + 1;
	b->bar_arrived = 0;
	b->red_acc = 0;
	for (uint32_t i = 0, x = 0, y = 0, z = 0; i < b->n; i++) {
		b->t[i].state = i < me ? T_DONE : i == me ? T_RUN : T_NEW;
		b->t[i].tid = uint3{ x, y, z };
		if (++x == b->bdim.x) {
			x = 0;
			if (++y == b->bdim.y) {
				y = 0;
				z++;
			}
		}
	}
	for (uint32_t w = 0; w < (b->n + 31) / 32; w++)
		b->warp_waiting[w] = b->warp_gone[w] = 0;
}

/* __syncthreads() and its counting variants: the threads that arrived with pred set (and in
 * *ret_n how many arrived). */
__attribute__((noinline)) static uint32_t barrier(bool pred, uint32_t *ret_n)
{
	block *b = cur;
	uint32_t me = b->lin;

	if (!b->fibers) {
		if (b->n == 1) {
			if (ret_n)
				*ret_n = 1;
			return pred;
		}
		fibers_begin(b);
	}
	b->t[me].state = T_BAR;
	b->red_acc += pred;
	if (++b->bar_arrived == b->live)
		release(b);
	wait_self(b);
	if (ret_n)
		*ret_n = b->red_n;
	return b->red_count;
}

/* ---- warp operations ---- */

static uint32_t lanes_present(const block *b, uint32_t w)
{
	uint32_t first = w * 32;

	return b->n - first >= 32 ? 0xffffffffu : (1u << (b->n - first)) - 1;
}

static uint32_t lanes_ended(const block *b, uint32_t w)
{
	uint32_t bits = 0, first = w * 32, n = b->n - first < 32 ? b->n - first : 32;

	for (uint32_t k = 0; k < n; k++)
		bits |= (uint32_t)(b->t[first + k].state == T_DONE) << k;
	return bits;
}

static uint64_t src_value(const block *b, uint32_t w, uint32_t lane, uint32_t src, uint32_t in)
{
	if (src >= 32 || !(in >> src & 1))
		return b->t[w * 32 + lane].val;
	return b->t[w * 32 + src].val;
}

/* Complete the operation of the lanes of warp w whose mask is `mask`, if all are there. */
static void warp_try(block *b, uint32_t w, uint32_t mask)
{
	uint32_t need = mask & lanes_present(b, w) & ~lanes_ended(b, w);
	uint32_t first = w * 32, op;
	uint64_t acc = 0, ballot = 0;
	bool any = false, all = true;

	if (!need || (b->warp_waiting[w] & need) != need)
		return;
	op = b->t[first + (uint32_t)__builtin_ctz(need)].op;
	for (uint32_t bits = need; bits; bits &= bits - 1) {
		const thread *t = &b->t[first + (uint32_t)__builtin_ctz(bits)];

		if (t->op != op || t->mask != mask)
			fail("the lanes of warp %u ask for different warp operations or masks", w);
	}
	for (uint32_t bits = need, k = 0; bits; bits &= bits - 1, k++) {
		uint64_t v = b->t[first + (uint32_t)__builtin_ctz(bits)].val;
		int64_t sv = (int64_t)(int32_t)v, sa = (int64_t)(int32_t)acc;

		ballot |= (uint64_t)(v != 0) << __builtin_ctz(bits);
		any |= v != 0;
		all &= v != 0;
		switch (op) {
		case W_ADD: acc = (uint32_t)(acc + v); break;
		case W_MIN: acc = k == 0 || sv < sa ? v : acc; break;
		case W_MAX: acc = k == 0 || sv > sa ? v : acc; break;
		case W_UMIN: acc = k == 0 || (uint32_t)v < (uint32_t)acc ? v : acc; break;
		case W_UMAX: acc = k == 0 || (uint32_t)v > (uint32_t)acc ? v : acc; break;
		case W_AND: acc = k == 0 ? v : acc & v; break;
		case W_OR: acc |= v; break;
		case W_XOR_RED: acc ^= v; break;
		default: break;
		}
	}
	for (uint32_t bits = need; bits; bits &= bits - 1) {
		uint32_t lane = (uint32_t)__builtin_ctz(bits);
		thread *t = &b->t[first + lane];
		uint32_t width = (uint32_t)t->width, seg = lane & ~(width - 1);
		uint32_t d = (uint32_t)t->arg;

		switch (op) {
		case W_SHFL:
			t->res = src_value(b, w, lane, seg + (d & (width - 1)), need);
			break;
		case W_UP:
			t->res = (lane & (width - 1)) < d ? t->val : src_value(b, w, lane, lane - d, need);
			break;
		case W_DOWN:
			t->res = (lane & (width - 1)) + d >= width ? t->val
								   : src_value(b, w, lane, lane + d, need);
			break;
		case W_XOR:
			t->res = (lane ^ d) >= seg + width ? t->val
							   : src_value(b, w, lane, lane ^ d, need);
			break;
		case W_BALLOT: t->res = ballot; break;
		case W_ANY: t->res = any; break;
		case W_ALL: t->res = all; break;
		case W_MATCH_ANY: {
			uint64_t m = 0;

			for (uint32_t o = need; o; o &= o - 1)
				m |= (uint64_t)(b->t[first + (uint32_t)__builtin_ctz(o)].val == t->val)
				     << __builtin_ctz(o);
			t->res = m;
			break;
		}
		case W_MATCH_ALL: {
			bool same = true;

			for (uint32_t o = need; o; o &= o - 1)
				same &= b->t[first + (uint32_t)__builtin_ctz(o)].val == t->val;
			t->res = same ? need : 0;
			break;
		}
		case W_SYNC: t->res = 0; break;
		default: t->res = acc; break;
		}
		t->state = T_READY;
	}
	b->warp_waiting[w] &= ~need;
	b->warp_gone[w] = lanes_ended(b, w);
}

/* The calling lane's part of a warp operation; its result. */
__attribute__((noinline)) static uint64_t warp_op(uint8_t op, uint32_t mask, uint64_t val,
						  int32_t arg, int32_t width)
{
	block *b = cur;
	uint32_t me = b->lin, w = me / 32, lane = me % 32;
	thread *t;

	if (!(mask >> lane & 1))
		fail("a warp operation whose mask (%#x) leaves out its own lane %u", mask, lane);
	if (width <= 0 || width > 32 || (width & (width - 1)))
		width = 32;
	if (!b->fibers)
		fibers_begin(b);
	t = &b->t[me];
	t->state = T_WARP;
	t->op = op;
	t->mask = mask;
	t->val = val;
	t->arg = arg;
	t->width = width;
	b->warp_waiting[w] |= 1u << lane;
	warp_try(b, w, mask);
	wait_self(b);
	return b->t[me].res;
}

/* __activemask(): the lanes of the caller's warp that had not ended at its last warp
 * operation. A GPU's warp runs on together after one; here each lane in turn, to its next
 * wait or its end, so a lane that ended since would be missing from its neighbours'. */
static inline uint32_t active_mask()
{
	block *b = cur;
	uint32_t w = b->lin / 32;

	return b->fibers ? lanes_present(b, w) & ~b->warp_gone[w] : lanes_present(b, w);
}

/* ---- running a block ---- */

/* After the direct loop, whose last thread waited once: the others, to their ends. */
__attribute__((noinline)) static void fibers_finish(block *b)
{
	thread_end(b, b->main);
	if (b->live)
		switch_next(b, &b->runner_sp);
}

static inline void block_init(block *b, gpux_cu_launch *l, thread *t, void *kargs,
			      void (*fn)(void *))
{
	b->l = l;
	b->bid = uint3{ l->block_idx.x, l->block_idx.y, l->block_idx.z };
	b->bdim = dim3(l->block_dim.x, l->block_dim.y, l->block_dim.z);
	b->gdim = dim3(l->grid_dim.x, l->grid_dim.y, l->grid_dim.z);
	b->n = l->block_dim.x * l->block_dim.y * l->block_dim.z;
	b->live = b->n;
	b->main = 0;
	b->cursor = 0;
	b->bar_arrived = 0;
	b->fibers = false;
	b->t = t;
	b->kargs = kargs;
	b->thread_fn = fn;
	b->tid = uint3{ 0, 0, 0 };
	b->lin = 0;
}

} /* namespace gpux_cu */

#endif
