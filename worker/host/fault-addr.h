/* SPDX-License-Identifier: MIT */
/* worker/host/fault-addr.h: the address a faulting x86-64 instruction used, unreported. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* General-purpose registers in the instruction set's order: rax, rcx, rdx, rbx, rsp, rbp,
 * rsi, rdi, r8 ... r15. */
#define WRK_X86_REGS 16u

/*
 * The memory address that the x86-64 instruction at insn (len bytes readable, at most 15
 * looked at) accesses, given the registers it ran with: what a general protection fault
 * (an address outside the canonical ones) does not report. 0 with *ret_addr, or -ENOENT
 * when the instruction has no such operand or is not one this decodes (RIP-relative,
 * FS/GS-based, 32-bit addressing; any other architecture).
 */
int wrk_fault_operand(const uint8_t *insn, size_t len, const uint64_t regs[WRK_X86_REGS],
		      uint64_t *ret_addr);
