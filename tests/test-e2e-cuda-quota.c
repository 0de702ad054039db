/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-cuda-quota.c: what a client's modules may take in a worker, on the fake libcuda. */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "e2e.h"
#include "helpers.h"

/*
 * A client's loaded modules count against it in bytes (256 MiB): their images, and the
 * kernel names the worker keeps for each (copies of the symbols of a cubin, which may all
 * name one long string). The cubins here are made by the test, as the toolkit lays them out.
 */

#define MOD_BYTES_CAP (256ull << 20)
#define NAME_LEN (64u << 10)

/*
 * A cubin for sm_90 with `nsyms` kernels all named by one string of NAME_LEN bytes (`fill`
 * repeated, so that cubins differ) and `text` bytes of code. *ret_len: its size.
 */
static uint8_t *cubin_make(unsigned nsyms, size_t text, char fill, size_t *ret_len)
{
	static const char shstr[] = "\0.shstrtab\0.strtab\0.symtab\0.text.k\0";
	size_t strsz = NAME_LEN + 2, symsz = (nsyms + 1) * sizeof(Elf64_Sym);
	size_t off_str = sizeof(Elf64_Ehdr) + sizeof(shstr);
	size_t off_sym = ALIGN_UP(off_str + strsz, 8);
	size_t off_text = ALIGN_UP(off_sym + symsz, 128);
	size_t off_sh = ALIGN_UP(off_text + text, 8);
	size_t len = off_sh + 5 * sizeof(Elf64_Shdr);
	uint8_t *p = calloc(1, len);
	Elf64_Ehdr h = {
		.e_type = ET_EXEC,
		.e_machine = EM_CUDA,
		.e_version = EV_CURRENT,
		.e_flags = (90 << 8) | 0x4,
		.e_shoff = off_sh,
		.e_ehsize = sizeof(Elf64_Ehdr),
		.e_shentsize = sizeof(Elf64_Shdr),
		.e_shnum = 5,
		.e_shstrndx = 1,
	};
	Elf64_Shdr sh[5] = {
		{ 0 },
		{ .sh_name = 1,
		  .sh_type = SHT_STRTAB,
		  .sh_offset = sizeof(h),
		  .sh_size = sizeof(shstr) },
		{ .sh_name = 11, .sh_type = SHT_STRTAB, .sh_offset = off_str, .sh_size = strsz },
		{ .sh_name = 19,
		  .sh_type = SHT_SYMTAB,
		  .sh_offset = off_sym,
		  .sh_size = symsz,
		  .sh_link = 2,
		  .sh_info = 1,
		  .sh_entsize = sizeof(Elf64_Sym) },
		{ .sh_name = 27,
		  .sh_type = SHT_PROGBITS,
		  .sh_offset = off_text,
		  .sh_size = text,
		  .sh_flags = SHF_ALLOC | SHF_EXECINSTR },
	};

	assert_non_null(p);
	memcpy(h.e_ident, ELFMAG, SELFMAG);
	h.e_ident[EI_CLASS] = ELFCLASS64;
	h.e_ident[EI_DATA] = ELFDATA2LSB;
	h.e_ident[EI_VERSION] = EV_CURRENT;
	h.e_ident[EI_OSABI] = 0x41;
	h.e_ident[EI_ABIVERSION] = 8;
	memcpy(p, &h, sizeof(h));
	memcpy(p + sizeof(h), shstr, sizeof(shstr));
	memset(p + off_str + 1, fill, NAME_LEN);
	for (unsigned i = 1; i <= nsyms; i++) {
		Elf64_Sym s = { .st_name = 1,
				.st_info = ELF64_ST_INFO(STB_GLOBAL, STT_FUNC),
				.st_other = 0x10,
				.st_shndx = 4,
				.st_size = text };

		memcpy(p + off_sym + i * sizeof(s), &s, sizeof(s));
	}
	memcpy(p + off_sh, sh, sizeof(sh));
	*ret_len = len;
	return p;
}

/* Load a cubin made by cubin_make(): the status, and the log (freed) checked for `says`. */
static gpux_status load(gpux_ctx *ctx, unsigned nsyms, size_t text, char fill, gpux_module **ret,
			const char *says)
{
	size_t len;
	uint8_t *code = cubin_make(nsyms, text, fill, &len);
	char *log = NULL;
	gpux_status st = gpux_module_load(ctx, GPUX_LANG_CUBIN, code, len, NULL, ret, &log);

	free(code);
	if (says && (!log || !strstr(log, says)))
		fail_msg("load: %d \"%s\", which says nothing of \"%s\"", st, log ? log : "", says);
	free(log);
	return st;
}

static void start(struct test_daemon *d)
{
	static const char *const args[] = { "--backend", "cuda", NULL };

	test_daemon_start(d, args);
}

/* Kernel names past the cap, all copies of one string: the module is refused, not kept. */
static void test_cuda_quota_kernel_names_are_capped(void **state)
{
	struct test_daemon *d = *state;
	unsigned nsyms = (unsigned)(MOD_BYTES_CAP / NAME_LEN) + 64;
	gpux_module *m = NULL;
	gpux_ctx *ctx;

	start(d);
	ctx = test_connect(d);
	assert_int_equal(load(ctx, nsyms, 128, 'a', &m, "kernel names"), GPUX_E_QUOTA);
	assert_null(m);
	/* The worker is fine, and so is a module of a sane size. */
	assert_int_equal(load(ctx, 4, 128, 'a', &m, NULL), GPUX_OK);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_daemon_stop(d);
}

/*
 * Modules of 113 MiB each (their names): two fit, a third does not, whether it is compiled
 * for this client or was already loaded; another client has its own count, and a module let
 * go gives its bytes back. An image counts too.
 */
static void test_cuda_quota_module_bytes_per_client(void **state)
{
	const unsigned nsyms = 1800;
	struct test_daemon *d = *state;
	gpux_module *a = NULL, *b = NULL, *c = NULL, *c2 = NULL, *big = NULL;
	gpux_ctx *one, *two;

	start(d);
	one = test_connect(d);
	two = test_connect(d);
	assert_int_equal(load(one, nsyms, 128, 'a', &a, NULL), GPUX_OK);
	assert_int_equal(load(one, nsyms, 128, 'b', &b, NULL), GPUX_OK);
	/* A new module: known to be too much once it is built. */
	assert_int_equal(load(one, nsyms, 128, 'c', &c, "256 MiB"), GPUX_E_QUOTA);
	assert_null(c);
	/* Another client's count is its own; it loads that module for good. */
	assert_int_equal(load(two, nsyms, 128, 'c', &c2, NULL), GPUX_OK);
	/* Now it is loaded: too much for the first client still, at once. */
	assert_int_equal(load(one, nsyms, 128, 'c', &c, "256 MiB"), GPUX_E_QUOTA);
	/* A module let go gives its bytes back. */
	gpux_module_free(a);
	assert_int_equal(load(one, nsyms, 128, 'c', &c, NULL), GPUX_OK);
	/* An image counts as its names do: 40 MiB of code does not fit beside two of them. */
	assert_int_equal(load(one, 1, 40u << 20, 'd', &big, "256 MiB"), GPUX_E_QUOTA);
	gpux_module_free(b);
	assert_int_equal(load(one, 1, 40u << 20, 'd', &big, NULL), GPUX_OK);
	gpux_module_free(big);
	gpux_module_free(c);
	gpux_module_free(c2);
	gpux_disconnect(one);
	gpux_disconnect(two);
	test_daemon_stop(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		TEST_WITH_DAEMON(test_cuda_quota_kernel_names_are_capped),
		TEST_WITH_DAEMON(test_cuda_quota_module_bytes_per_client),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
