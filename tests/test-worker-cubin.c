/* SPDX-License-Identifier: MIT */
/* tests/test-worker-cubin.c: the checks of a client's cubins and fatbins, and module kernel lists. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cubin.h"
#include "helpers.h"
#include "macro.h"

/*
 * The seeds of fuzz-cubin (tests/fuzz/corpus-cubin, written by gen-corpus-cubin) are cubins
 * and fatbins with known answers: which devices each runs on, which kernels it has, and for
 * the broken ones that they are refused with a message, whatever the device.
 */

#define NO_ENTRIES "-"

static const struct {
	const char *file;
	unsigned runs_on[3]; /* compute capabilities it is accepted for (0: none more) */
	unsigned refused_on[3];
	const char *refusal; /* in the message */
	const char *entries; /* "a b" in order; NO_ENTRIES when they cannot be read */
} cases[] = {
	{ "cubin-sm90", { 90 }, { 80, 100, 89 }, "made for sm_90", "_Z4kernPf plain" },
	{ "cubin-sm86-abi7", { 86, 89 }, { 80, 90 }, "made for sm_86", "_Z4kernPf plain" },
	{ "cubin-sm80", { 80, 86, 89 }, { 90, 75 }, "made for sm_80", "_Z4kernPf plain" },
	{ "cubin-symbol-name-outside", { 90 }, { 0 }, NULL, "plain" },
	{ "fatbin-sm80-sm90-ptx",
	  { 80, 90, 100 },
	  { 75 },
	  "it has: sm_80 cubin, sm_90 cubin, "
	  "compute_90 PTX",
	  "_Z4kernPf plain" },
	/* Compressed code cannot be checked: refused where the driver might pick it. */
	{ "fatbin-compressed", { 0 }, { 90, 70, 100 }, "is compressed", NO_ENTRIES },
	{ "fatbin-compressed", { 0 }, { 60 }, "no code for sm_60", NO_ENTRIES },
	{ "fatbin-sm90-compressed-ptx",
	  { 90 },
	  { 100 },
	  "its compute_90 PTX, which a device "
	  "of sm_100 may run, is compressed",
	  "_Z4kernPf plain" },
	{ "fatbin-sm90-compressed-ptx", { 0 }, { 89 }, "no code for sm_89", NULL },
	{ "fatbin-sm80-compressed-sm86", { 80 }, { 86, 89 }, "its sm_86 cubin", "_Z4kernPf plain" },
	{ "fatbin-sm80-only",
	  { 80, 86 },
	  { 90 },
	  "no code for sm_90 (it has: sm_80 cubin)",
	  "_Z4kernPf plain" },
	{ "ptx", { 0 }, { 90 }, "not a cubin", "_Z4kernPf" },
	{ "bad-cubin-class32", { 0 }, { 90, 80 }, "64-bit", NULL },
	{ "bad-cubin-header-only", { 0 }, { 90 }, "outside the file", NULL },
	{ "bad-cubin-machine", { 0 }, { 90 }, "machine 62", NULL },
	{ "bad-cubin-phnum", { 0 }, { 90 }, "sizes are wrong", NULL },
	{ "bad-cubin-relocatable", { 0 }, { 90 }, "not a loadable cubin", NULL },
	{ "bad-cubin-section-name", { 0 }, { 90 }, "has no name", NULL },
	{ "bad-cubin-section-offset", { 0 }, { 90 }, "section 4 lies outside", NULL },
	{ "bad-cubin-shnum-huge", { 0 }, { 90 }, "outside the file", NULL },
	{ "bad-cubin-shoff-wraps", { 0 }, { 90 }, "outside the file", NULL },
	{ "bad-cubin-shstrndx", { 0 }, { 90 }, "outside the file", NULL },
	{ "bad-cubin-strtab-unterminated", { 0 }, { 90 }, "not terminated", NULL },
	{ "bad-cubin-symtab-entsize", { 0 }, { 90 }, "malformed", NULL },
	{ "bad-cubin-symtab-link", { 0 }, { 90 }, "malformed", NULL },
	{ "bad-cubin-truncated", { 0 }, { 90, 80 }, "outside the file", NULL },
	{ "bad-fatbin-arch-disagrees",
	  { 0 },
	  { 90 },
	  "an entry says sm_90, its cubin sm_80",
	  NULL },
	{ "bad-fatbin-entry-size-wraps", { 0 }, { 80 }, "lies outside the fatbin", NULL },
	{ "bad-fatbin-truncated", { 0 }, { 80 }, "header is wrong", NULL },
};

static uint8_t *slurp(const char *name, size_t *ret_len)
{
	char path[512];
	uint8_t *p;

	(void)snprintf(path, sizeof(path), "%s/%s", CORPUS_DIR, name);
	p = test_read_file(path, ret_len);
	assert_non_null(p);
	return p;
}

static void test_cubin_checks_know_the_answers(void **state)
{
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		size_t len;
		uint8_t *p = slurp(cases[i].file, &len);

		for (unsigned k = 0; k < 3 && cases[i].runs_on[k]; k++) {
			char *msg = NULL;

			if (wrk_cubin_check(p, len, cases[i].runs_on[k], &msg) != 0)
				fail_msg("%s on %u: refused: %s", cases[i].file,
					 cases[i].runs_on[k], msg ? msg : "");
		}
		for (unsigned k = 0; k < 3 && cases[i].refused_on[k]; k++) {
			char *msg = NULL;

			assert_int_equal(wrk_cubin_check(p, len, cases[i].refused_on[k], &msg),
					 -EINVAL);
			assert_non_null(msg);
			if (cases[i].refusal && !strstr(msg, cases[i].refusal))
				fail_msg("%s on %u: \"%s\" says nothing of \"%s\"", cases[i].file,
					 cases[i].refused_on[k], msg, cases[i].refusal);
			free(msg);
		}
		free(p);
	}
}

static int collect(const char *name, void *userdata)
{
	char *list = userdata;

	if (*list)
		strcat(list, " ");
	strcat(list, name);
	return 0;
}

static void test_cubin_lists_kernels(void **state)
{
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		char list[512] = "";
		size_t len;
		uint8_t *p;
		int r;

		if (!cases[i].entries)
			continue;
		p = slurp(cases[i].file, &len);
		r = wrk_code_entries(p, len, collect, list);
		if (strcmp(cases[i].entries, NO_ENTRIES) == 0)
			assert_int_equal(r, -ENOENT);
		else if (r != 0 || strcmp(list, cases[i].entries) != 0)
			fail_msg("%s: %d \"%s\", wanted \"%s\"", cases[i].file, r, list,
				 cases[i].entries);
		free(p);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cubin_checks_know_the_answers),
		cmocka_unit_test(test_cubin_lists_kernels),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
