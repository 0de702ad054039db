/* SPDX-License-Identifier: MIT */
/* tests/test-worker-fault-addr.c: the address of a faulting x86-64 instruction, decoded. */
#include <errno.h>
#include <string.h>

#include "fault-addr.h"
#include "helpers.h"
#include "macro.h"

/* Registers by number (rax = 0 ... r15 = 15): 0x1000 * (n + 1), far apart. */
static void regs_init(uint64_t regs[WRK_X86_REGS])
{
	for (unsigned i = 0; i < WRK_X86_REGS; i++)
		regs[i] = 0x1000ull * (i + 1);
}

#define RAX 0
#define RCX 1
#define RDX 2
#define RBX 3
#define RSI 6
#define RDI 7
#define R12 12
#define R13 13

struct insn_case {
	const char *what;
	uint8_t bytes[15];
	size_t len;
	int reg, index; /* base, index register (-1: none) */
	unsigned scale;
	int64_t disp;
};

/* Each as `as` encodes it; a row a line or two, as written. */
/* clang-format off */
static const struct insn_case cases[] = {
	{ "movss %xmm0, (%rax)", { 0xf3, 0x0f, 0x11, 0x00 }, 4, RAX, -1, 0, 0 },
	{ "movl $1, 0x10(%rdi,%rsi,4)", { 0xc7, 0x44, 0xb7, 0x10, 0x01, 0, 0, 0 }, 8, RDI, RSI,
	  4, 0x10 },
	{ "mov %rax, -8(%r12)", { 0x49, 0x89, 0x44, 0x24, 0xf8 }, 5, R12, -1, 0, -8 },
	{ "vmovdqu %ymm0, 0x20(%rcx)", { 0xc5, 0xfe, 0x7f, 0x41, 0x20 }, 5, RCX, -1, 0, 0x20 },
	{ "vmovdqu64 %zmm0, 0x40(%rdx)", { 0x62, 0xf1, 0xfe, 0x48, 0x7f, 0x42, 0x01 }, 7, RDX, -1,
	  0, 0x40 },
	{ "rep stosb", { 0xf3, 0xaa }, 2, RDI, -1, 0, 0 },
	{ "mov (%r13), %rax", { 0x49, 0x8b, 0x45, 0x00 }, 4, R13, -1, 0, 0 },
	{ "mov 0x1000(,%rbx,8), %rax", { 0x48, 0x8b, 0x04, 0xdd, 0x00, 0x10, 0, 0 }, 8, -1, RBX, 8,
	  0x1000 },
};
/* clang-format on */

static void test_fault_addr_of_memory_operands(void **state)
{
	uint64_t regs[WRK_X86_REGS], a = 0;

	regs_init(regs);
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		const struct insn_case *c = &cases[i];
		uint64_t want = (c->reg >= 0 ? regs[c->reg] : 0) +
				(c->index >= 0 ? regs[c->index] * c->scale : 0) + (uint64_t)c->disp;

		if (wrk_fault_operand(c->bytes, c->len, regs, &a) != 0)
			fail_msg("%s: not decoded", c->what);
		if (a != want)
			fail_msg("%s: %#llx, not %#llx", c->what, (unsigned long long)a,
				 (unsigned long long)want);
	}
}

/* A string move: whichever of RSI and RDI is outside the address space. */
static void test_fault_addr_of_string_moves(void **state)
{
	static const uint8_t movsq[] = { 0x48, 0xa5 };
	uint64_t regs[WRK_X86_REGS], a = 0;

	regs_init(regs);
	regs[RSI] = 1ull << 62;
	assert_int_equal(wrk_fault_operand(movsq, sizeof(movsq), regs, &a), 0);
	assert_int_equal(a, 1ull << 62);
	regs[RSI] = 0x1000;
	regs[RDI] = 1ull << 61;
	assert_int_equal(wrk_fault_operand(movsq, sizeof(movsq), regs, &a), 0);
	assert_int_equal(a, 1ull << 61);
}

/* The far operand of a moffs move is in the instruction. */
static void test_fault_addr_of_absolute_moves(void **state)
{
	static const uint8_t movabs[] = { 0xa3, 0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11 };
	uint64_t regs[WRK_X86_REGS], a = 0;

	regs_init(regs);
	assert_int_equal(wrk_fault_operand(movabs, sizeof(movabs), regs, &a), 0);
	assert_int_equal(a, 0x1122334455667788ull);
}

/* What it cannot tell: no memory operand, RIP-relative, FS-based, cut short. */
static void test_fault_addr_unknown(void **state)
{
	static const struct {
		const char *what;
		uint8_t bytes[15];
		size_t len;
	} unknown[] = {
		{ "mov %eax, %ebx", { 0x89, 0xc3 }, 2 },
		{ "mov 0x10(%rip), %eax", { 0x8b, 0x05, 0x10, 0, 0, 0 }, 6 },
		{ "mov %fs:0x28, %rax", { 0x64, 0x48, 0x8b, 0x04, 0x25, 0x28, 0, 0, 0 }, 9 },
		{ "movl $1, 0x10(%rdi,%rsi,4), cut", { 0xc7, 0x44, 0xb7 }, 3 },
		{ "ret", { 0xc3 }, 1 },
		{ "nothing", { 0 }, 0 },
	};
	uint64_t regs[WRK_X86_REGS], a = 7;

	regs_init(regs);
	for (unsigned i = 0; i < ARRAY_SIZE(unknown); i++)
		if (wrk_fault_operand(unknown[i].bytes, unknown[i].len, regs, &a) != -ENOENT)
			fail_msg("%s: decoded as %#llx", unknown[i].what, (unsigned long long)a);
	assert_int_equal(a, 7);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_fault_addr_of_memory_operands),
		cmocka_unit_test(test_fault_addr_of_string_moves),
		cmocka_unit_test(test_fault_addr_of_absolute_moves),
		cmocka_unit_test(test_fault_addr_unknown),
	};

#if !defined(__x86_64__)
	return 77;
#endif
	return cmocka_run_group_tests(tests, NULL, NULL);
}
