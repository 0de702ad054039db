/* SPDX-License-Identifier: MIT */
/* worker/core/seccomp.h: the seccomp-BPF builder of the worker's two sandboxes. */
#pragma once

#include <linux/audit.h>
#include <linux/filter.h>
#include <stdint.h>

#if defined(__x86_64__)
#define WRK_BPF_ARCH AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define WRK_BPF_ARCH AUDIT_ARCH_AARCH64
#endif

/* x86-64's x32 ABI: the same audit arch in seccomp_data, numbers with this bit set. */
#define WRK_BPF_X32_BIT 0x40000000u

/* Room for the larger filter, the compiler helper's (about 170 instructions). */
#define WRK_BPF_MAX 256

/*
 * A filter being built: instructions past WRK_BPF_MAX are counted, not kept. Between checks
 * the call's number is in the accumulator: a check that loads an argument returns after it.
 */
struct wrk_bpf {
	struct sock_filter f[WRK_BPF_MAX];
	unsigned n;
};

/* Start p: a call of another architecture (int 0x80 on x86-64), or an x32 one, gets action. */
void wrk_bpf_begin(struct wrk_bpf *p, uint32_t action);

/* The calls nrs[0..n) are allowed. */
void wrk_bpf_allow(struct wrk_bpf *p, const long *nrs, unsigned n);
/* Call nr gets action. */
void wrk_bpf_refuse(struct wrk_bpf *p, long nr, uint32_t action);

/*
 * Call nr is allowed when its argument `arg` (the low 32 bits: each argument checked is an int,
 * or flags the kernel reads from them) has none of `bits`, has `bit`, or is one of
 * vals[0..nvals); else it gets action.
 */
void wrk_bpf_allow_without(struct wrk_bpf *p, long nr, unsigned arg, uint32_t bits,
			   uint32_t action);
void wrk_bpf_allow_with(struct wrk_bpf *p, long nr, unsigned arg, uint32_t bit, uint32_t action);
void wrk_bpf_allow_if(struct wrk_bpf *p, long nr, unsigned arg, const uint32_t *vals,
		      unsigned nvals, uint32_t action);

/*
 * Call nr is allowed unless its argument `arg` (low 32 bits) is `val` and its argument `ptr_arg`
 * (a pointer, all 64 bits) is not NULL; then it gets action.
 */
void wrk_bpf_allow_unless(struct wrk_bpf *p, long nr, unsigned arg, uint32_t val, unsigned ptr_arg,
			  uint32_t action);

/* End p: any other call gets action. 0, -E2BIG or -ENOSYS (no filter for this architecture). */
int wrk_bpf_end(struct wrk_bpf *p, uint32_t action);

/* Put the calling thread under p (flags: SECCOMP_FILTER_FLAG_*), no_new_privs set. 0 or -errno. */
int wrk_bpf_load(struct wrk_bpf *p, unsigned flags);
