/* SPDX-License-Identifier: MIT */
/* worker/core/seccomp.c: the seccomp-BPF builder of the worker's two sandboxes. */
#include <assert.h>
#include <stdbool.h>
#include <errno.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "seccomp.h"

#define ARG_LO(i) ((uint32_t)offsetof(struct seccomp_data, args[(i)]))
#define LD(p, off) emit((p), (struct sock_filter)BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (off)))
#define RET(p, action) emit((p), (struct sock_filter)BPF_STMT(BPF_RET | BPF_K, (action)))
#define JUMP(p, op, k, jt, jf)                                                                     \
	emit((p), (struct sock_filter)BPF_JUMP(BPF_JMP | (op) | BPF_K, (k), (jt), (jf)))

static void emit(struct wrk_bpf *p, struct sock_filter ins)
{
	if (p->n < WRK_BPF_MAX)
		p->f[p->n] = ins;
	p->n++;
}

void wrk_bpf_begin(struct wrk_bpf *p, uint32_t action)
{
	p->n = 0;
#ifdef WRK_BPF_ARCH
	LD(p, offsetof(struct seccomp_data, arch));
	JUMP(p, BPF_JEQ, WRK_BPF_ARCH, 1, 0);
	RET(p, action);
#endif
	LD(p, offsetof(struct seccomp_data, nr));
#if defined(__x86_64__)
	/* x32 calls share x86-64's audit number: their numbers carry this bit. */
	JUMP(p, BPF_JSET, WRK_BPF_X32_BIT, 0, 1);
	RET(p, action);
#endif
}

void wrk_bpf_allow(struct wrk_bpf *p, const long *nrs, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		JUMP(p, BPF_JEQ, (uint32_t)nrs[i], 0, 1);
		RET(p, SECCOMP_RET_ALLOW);
	}
}

void wrk_bpf_refuse(struct wrk_bpf *p, long nr, uint32_t action)
{
	JUMP(p, BPF_JEQ, (uint32_t)nr, 0, 1);
	RET(p, action);
}

/* Call nr allowed by its argument's bits: when they are `set`, or when none is. */
static void allow_by_bits(struct wrk_bpf *p, long nr, unsigned arg, uint32_t bits, bool set,
			  uint32_t action)
{
	JUMP(p, BPF_JEQ, (uint32_t)nr, 0, 4);
	LD(p, ARG_LO(arg));
	/* A bit set jumps over the refusal (set) or to it (none may be). */
	JUMP(p, BPF_JSET, bits, set ? 1 : 0, set ? 0 : 1);
	RET(p, action);
	RET(p, SECCOMP_RET_ALLOW);
}

void wrk_bpf_allow_without(struct wrk_bpf *p, long nr, unsigned arg, uint32_t bits, uint32_t action)
{
	allow_by_bits(p, nr, arg, bits, false, action);
}

void wrk_bpf_allow_with(struct wrk_bpf *p, long nr, unsigned arg, uint32_t bit, uint32_t action)
{
	allow_by_bits(p, nr, arg, bit, true, action);
}

void wrk_bpf_allow_if(struct wrk_bpf *p, long nr, unsigned arg, const uint32_t *vals,
		      unsigned nvals, uint32_t action)
{
	assert(nvals + 3 <= UINT8_MAX);
	JUMP(p, BPF_JEQ, (uint32_t)nr, 0, nvals + 3);
	LD(p, ARG_LO(arg));
	/* Each value jumps past those after it and the refusal. */
	for (unsigned i = 0; i < nvals; i++)
		JUMP(p, BPF_JEQ, vals[i], nvals - i, 0);
	RET(p, action);
	RET(p, SECCOMP_RET_ALLOW);
}

void wrk_bpf_allow_unless(struct wrk_bpf *p, long nr, unsigned arg, uint32_t val, unsigned ptr_arg,
			  uint32_t action)
{
	JUMP(p, BPF_JEQ, (uint32_t)nr, 0, 8);
	LD(p, ARG_LO(arg));
	JUMP(p, BPF_JEQ, val, 0, 4);
	/* That value: allowed only with a NULL pointer, both halves of it 0. */
	LD(p, ARG_LO(ptr_arg));
	JUMP(p, BPF_JEQ, 0, 0, 3);
	LD(p, ARG_LO(ptr_arg) + 4);
	JUMP(p, BPF_JEQ, 0, 0, 1);
	RET(p, SECCOMP_RET_ALLOW);
	RET(p, action);
}

int wrk_bpf_end(struct wrk_bpf *p, uint32_t action)
{
	RET(p, action);
#ifdef WRK_BPF_ARCH
	return p->n <= WRK_BPF_MAX ? 0 : -E2BIG;
#else
	return -ENOSYS;
#endif
}

int wrk_bpf_load(struct wrk_bpf *p, unsigned flags)
{
	struct sock_fprog fprog = { .len = (unsigned short)p->n, .filter = p->f };

	if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, flags, &fprog) < 0)
		return -errno;
	return 0;
}
