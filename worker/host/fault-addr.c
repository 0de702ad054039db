/* SPDX-License-Identifier: MIT */
/* worker/host/fault-addr.c: the address a faulting x86-64 instruction used, unreported. */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "fault-addr.h"

/*
 * An access outside x86-64's canonical addresses (a far write: p[1L << 60]) is a general
 * protection fault, for which the kernel gives SIGSEGV (SIGBUS for the stack) with si_code
 * SI_KERNEL and no address. The address is the instruction's memory operand: its ModRM
 * (and SIB and displacement) over the registers of the signal frame, or the implicit
 * operand of a string instruction (RSI, RDI). Only what an address needs is decoded:
 * prefixes, REX, VEX and EVEX, the opcode's map and whether it has a ModRM; anything else
 * (RIP-relative, FS or GS based, 32-bit addressing, an instruction not listed) is -ENOENT.
 */

#if defined(__x86_64__)

/* Bytes of an instruction at most. */
#define INSN_MAX 15u

/* The opcode tables are kept as written, several cases a line. */
/* clang-format off */

/* One-byte opcodes with a ModRM byte (64-bit mode). */
static bool modrm_1byte(uint8_t op)
{
	if (op < 0x40)
		return (op & 7) < 4;
	switch (op) {
	case 0x63: case 0x69: case 0x6b: case 0xc0: case 0xc1: case 0xc6: case 0xc7:
	case 0xd0: case 0xd1: case 0xd2: case 0xd3: case 0xf6: case 0xf7: case 0xfe: case 0xff:
		return true;
	default:
		return (op >= 0x80 && op <= 0x8f) || (op >= 0xd8 && op <= 0xdf);
	}
}

/* Two-byte (0F xx) opcodes with a ModRM byte. */
static bool modrm_0f(uint8_t op)
{
	switch (op) {
	case 0x05: case 0x06: case 0x07: case 0x08: case 0x09: case 0x0b: case 0x0e:
	case 0x30: case 0x31: case 0x32: case 0x33: case 0x34: case 0x35: case 0x37:
	case 0x77: case 0xa0: case 0xa1: case 0xa2: case 0xa8: case 0xa9: case 0xaa:
		return false;
	default:
		return !(op >= 0x80 && op <= 0x8f) && !(op >= 0xc8 && op <= 0xcf);
	}
}

/* clang-format on */

static uint64_t reg(const uint64_t regs[WRK_X86_REGS], unsigned n)
{
	return regs[n & 15];
}

static bool canonical(uint64_t a)
{
	return (uint64_t)((int64_t)(a << 16) >> 16) == a;
}

int wrk_fault_operand(const uint8_t *insn, size_t len, const uint64_t regs[WRK_X86_REGS],
		      uint64_t *ret_addr)
{
	unsigned i = 0, rex = 0, map = 0, disp8_scale = 1;
	bool seg = false, addr32 = false, vex = false;
	uint8_t op, modrm;
	uint64_t a;

	len = len < INSN_MAX ? len : INSN_MAX;
	/* Legacy prefixes, then REX. */
	for (; i < len; i++) {
		uint8_t b = insn[i];

		if (b == 0x64 || b == 0x65)
			seg = true;
		else if (b == 0x67)
			addr32 = true;
		else if (b != 0x66 && b != 0xf0 && b != 0xf2 && b != 0xf3 && b != 0x2e &&
			 b != 0x36 && b != 0x3e && b != 0x26)
			break;
	}
	if (i < len && (insn[i] & 0xf0) == 0x40)
		rex = insn[i++];
	if (i >= len)
		return -ENOENT;
	op = insn[i++];
	if (!rex && (op == 0xc4 || op == 0xc5 || op == 0x62)) {
		/* VEX or EVEX: R, X, B inverted; the map in the low bits (C5: 0F). */
		unsigned p0 = i < len ? insn[i] : 0;

		if (op == 0xc5) {
			rex = 0x40 | (p0 & 0x80 ? 0 : 4);
			map = 1;
			i += 1;
		} else {
			rex = 0x40 | (p0 & 0x80 ? 0 : 4) | (p0 & 0x40 ? 0 : 2) |
			      (p0 & 0x20 ? 0 : 1);
			map = p0 & (op == 0x62 ? 7 : 0x1f);
			if (op == 0x62) {
				/* Disp8 counts in vectors (16 << L'L bytes), or elements when
				 * broadcast (W: 8 bytes, else 4). */
				unsigned p1 = i + 1 < len ? insn[i + 1] : 0;
				unsigned p2 = i + 2 < len ? insn[i + 2] : 0;

				disp8_scale =
					p2 & 0x10 ? (p1 & 0x80 ? 8 : 4) : 16u << ((p2 >> 5) & 3);
				i += 3;
			} else {
				i += 2;
			}
		}
		vex = true;
		if (i >= len || map < 1 || map > 3)
			return -ENOENT;
		op = insn[i++];
	} else if (op == 0x0f) {
		if (i >= len)
			return -ENOENT;
		op = insn[i++];
		map = 1;
		if (op == 0x38 || op == 0x3a) {
			map = op == 0x38 ? 2 : 3;
			if (i >= len)
				return -ENOENT;
			op = insn[i++];
		}
	}

	if (map == 0 && !vex) {
		/* Implicit operands: the string instructions, the far one of moffs moves. */
		if (op >= 0xa4 && op <= 0xaf && op != 0xa8 && op != 0xa9) {
			uint64_t si = reg(regs, 6), di = reg(regs, 7);

			if (seg || addr32)
				return -ENOENT;
			/* stos and scas use RDI, lods RSI; movs and cmps both: the one outside
			 * the address space. */
			if (op >= 0xaa)
				*ret_addr = op == 0xac || op == 0xad ? si : di;
			else
				*ret_addr = canonical(di) ? si : di;
			return 0;
		}
		if (op >= 0xa0 && op <= 0xa3) {
			unsigned n = addr32 ? 4 : 8;

			if (i + n > len || seg)
				return -ENOENT;
			a = 0;
			memcpy(&a, insn + i, n);
			*ret_addr = a;
			return 0;
		}
		if (!modrm_1byte(op))
			return -ENOENT;
	} else if (map == 1 && !vex && !modrm_0f(op)) {
		return -ENOENT;
	}

	if (i >= len)
		return -ENOENT;
	modrm = insn[i++];
	if ((modrm >> 6) == 3 || seg || addr32)
		return -ENOENT;
	if ((modrm & 7) == 4) {
		uint8_t sib;
		unsigned index, base;

		if (i >= len)
			return -ENOENT;
		sib = insn[i++];
		index = ((sib >> 3) & 7) | (rex & 2 ? 8 : 0);
		base = (sib & 7) | (rex & 1 ? 8 : 0);
		a = index == 4 ? 0 : reg(regs, index) << (sib >> 6);
		if ((sib & 7) == 5 && (modrm >> 6) == 0) {
			int32_t d;

			if (i + 4 > len)
				return -ENOENT;
			memcpy(&d, insn + i, 4);
			*ret_addr = a + (uint64_t)(int64_t)d;
			return 0;
		}
		a += reg(regs, base);
	} else if ((modrm & 7) == 5 && (modrm >> 6) == 0) {
		return -ENOENT; /* RIP-relative: within 2 GiB of the code, never this fault */
	} else {
		a = reg(regs, (modrm & 7) | (rex & 1 ? 8 : 0));
	}
	if ((modrm >> 6) == 1) {
		if (i + 1 > len)
			return -ENOENT;
		a += (uint64_t)((int64_t)(int8_t)insn[i] * (int64_t)disp8_scale);
	} else if ((modrm >> 6) == 2) {
		int32_t d;

		if (i + 4 > len)
			return -ENOENT;
		memcpy(&d, insn + i, 4);
		a += (uint64_t)(int64_t)d;
	}
	*ret_addr = a;
	return 0;
}

#else

int wrk_fault_operand(const uint8_t *insn, size_t len, const uint64_t regs[WRK_X86_REGS],
		      uint64_t *ret_addr)
{
	return -ENOENT;
}

#endif
