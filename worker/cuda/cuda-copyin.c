/* SPDX-License-Identifier: MIT */
/* worker/cuda/cuda-copyin.c: the kernel that copies a request's arguments in, from the client's pages. */
#include <signal.h>
#include <string.h>

#include "cuda-dev.h"
#include "macro.h"

/*
 * gpux_copy_in(struct cuda_copyin t): block row y copies range y of the table, if y < t.n,
 * reading the client's registered pages where the device sees them (16 bytes a load, then
 * the last bytes one by one) and writing the request's device memory. Each range's source
 * is 16-byte aligned, as is its destination (the slot's scratch). Table: n at 0, then
 * dst[8] at 8, src[8] at 72, len[8] at 136 (struct cuda_copyin). Written in PTX, so that
 * it needs no compiler: the driver compiles it for the device when it is loaded.
 */
static const char copyin_ptx[] =
	".version 7.0\n"
	".target sm_50\n"
	".address_size 64\n"
	".visible .entry gpux_copy_in(.param .align 8 .b8 t[200])\n"
	"{\n"
	"	.reg .pred %p;\n"
	"	.reg .b32 %w<6>;\n"
	"	.reg .b64 %r<13>;\n"
	/* Range y: dst %r2, src %r3, len %r4. */
	"	mov.u32 %w0, %ctaid.y;\n"
	"	ld.param.u32 %w1, [t];\n"
	"	setp.ge.u32 %p, %w0, %w1;\n"
	"	@%p bra DONE;\n"
	"	mov.u64 %r0, t;\n"
	"	mul.wide.u32 %r1, %w0, 8;\n"
	"	add.u64 %r0, %r0, %r1;\n"
	"	ld.param.u64 %r2, [%r0+8];\n"
	"	ld.param.u64 %r3, [%r0+72];\n"
	"	ld.param.u64 %r4, [%r0+136];\n"
	/* This thread's first 16-byte word %r5, the stride %r7, the words %r8. */
	"	mov.u32 %w2, %ctaid.x;\n"
	"	mov.u32 %w3, %ntid.x;\n"
	"	mov.u32 %w4, %tid.x;\n"
	"	mov.u32 %w5, %nctaid.x;\n"
	"	mul.wide.u32 %r5, %w2, %w3;\n"
	"	cvt.u64.u32 %r6, %w4;\n"
	"	add.u64 %r5, %r5, %r6;\n"
	"	mul.wide.u32 %r7, %w5, %w3;\n"
	"	shr.u64 %r8, %r4, 4;\n"
	"	mov.u64 %r9, %r5;\n"
	"WORDS:\n"
	"	setp.ge.u64 %p, %r9, %r8;\n"
	"	@%p bra TAIL;\n"
	"	shl.b64 %r10, %r9, 4;\n"
	"	add.u64 %r11, %r3, %r10;\n"
	"	ld.global.v4.u32 {%w0, %w1, %w2, %w3}, [%r11];\n"
	"	add.u64 %r12, %r2, %r10;\n"
	"	st.global.v4.u32 [%r12], {%w0, %w1, %w2, %w3};\n"
	"	add.u64 %r9, %r9, %r7;\n"
	"	bra WORDS;\n"
	/* The bytes after the last whole word. */
	"TAIL:\n"
	"	shl.b64 %r9, %r8, 4;\n"
	"	add.u64 %r9, %r9, %r5;\n"
	"BYTES:\n"
	"	setp.ge.u64 %p, %r9, %r4;\n"
	"	@%p bra DONE;\n"
	"	add.u64 %r11, %r3, %r9;\n"
	"	ld.global.u8 %w0, [%r11];\n"
	"	add.u64 %r12, %r2, %r9;\n"
	"	st.global.u8 [%r12], %w0;\n"
	"	add.u64 %r9, %r9, %r7;\n"
	"	bra BYTES;\n"
	"DONE:\n"
	"	ret;\n"
	"}\n";

_Static_assert(sizeof(struct cuda_copyin) == 200, "the table gpux_copy_in reads");

/* The driver's compilation of the PTX took 120 ms on an H200 (driver 580): on a thread of its
 * own, so that no request waits for it. */
static void *copyin_load(void *arg)
{
	struct cuda_dev *d = arg;
	CUmodule mod = NULL;
	CUfunction fn = NULL;
	sigset_t all;
	CUresult e;

	sigfillset(&all);
	(void)pthread_sigmask(SIG_BLOCK, &all, NULL);
	e = d->cu.cuCtxSetCurrent(d->ctx);
	if (e == CUDA_SUCCESS)
		e = d->cu.cuModuleLoadData(&mod, copyin_ptx);
	if (e == CUDA_SUCCESS)
		e = d->cu.cuModuleGetFunction(&fn, mod, "gpux_copy_in");
	if (e != CUDA_SUCCESS) {
		_cleanup_(freep) char *msg = cuda_msg(d, "loading the copy-in kernel", e);

		wrk_log(d->w, "%s: copies in go by cuMemcpyHtoDAsync", msg ? msg : "out of memory");
		if (mod)
			(void)d->cu.cuModuleUnload(mod);
		atomic_store(&d->copyin_state, COPYIN_FAILED);
		return NULL;
	}
	d->copyin_mod = mod;
	d->copyin_fn = fn;
	atomic_store(&d->copyin_state, COPYIN_READY);
	return NULL;
}

void cuda_copyin_start(struct cuda_dev *d)
{
	int e;

	/* Before the thread starts: it may be done before pthread_create() returns. */
	atomic_store(&d->copyin_state, COPYIN_LOADING);
	e = pthread_create(&d->copyin_thread, NULL, copyin_load, d);
	if (e != 0) {
		wrk_log(d->w, "the copy-in kernel's thread: %s: copies in go by cuMemcpyHtoDAsync",
			strerror(e));
		atomic_store(&d->copyin_state, COPYIN_FAILED);
		return;
	}
	d->copyin_started = true;
}

CUfunction cuda_copyin_fn(struct cuda_dev *d)
{
	return atomic_load(&d->copyin_state) == COPYIN_READY ? d->copyin_fn : NULL;
}

void cuda_copyin_stop(struct cuda_dev *d)
{
	if (d->copyin_started) {
		(void)pthread_join(d->copyin_thread, NULL);
		d->copyin_started = false;
	}
	if (d->copyin_mod)
		(void)d->cu.cuModuleUnload(d->copyin_mod);
	d->copyin_mod = NULL;
	d->copyin_fn = NULL;
}
