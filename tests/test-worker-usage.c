/* SPDX-License-Identifier: MIT */
/* tests/test-worker-usage.c: what a worker says of its driver. */
#include <string.h>

#include "helpers.h"
#include "wrk.h"

static void assert_release(const char *line, const char *want)
{
	char got[32];

	memset(got, 'x', sizeof(got));
	wrk_driver_release(line, got, sizeof(got));
	assert_string_equal(got, want);
}

/* The first line of /proc/driver/nvidia/version, as each kind of kernel module writes it. */
static void test_driver_release_of_each_module(void **state)
{
	(void)state;
	assert_release("NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.95.05  Tue Sep 23 "
		       "09:55:41 UTC 2025\n",
		       "580.95.05");
	/* Before the fix, "for". */
	assert_release("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  "
		       "Release Build  (dvs-builder@U22-I3-AF03-09-1)  Thu Oct 30 2025\n",
		       "580.159.04");
	assert_release("NVRM version: NVIDIA UNIX Open Kernel Module for aarch64  570.86.15\n",
		       "570.86.15");
}

/* Whatever else the file holds gives nothing, and a long word is cut to what fits. */
static void test_driver_release_of_other_lines(void **state)
{
	char small[6];

	(void)state;
	assert_release("", "");
	assert_release("GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n", "");
	assert_release("NVRM version: NVIDIA UNIX Kernel Module\n", "");
	assert_release("NVRM version: NVIDIA UNIX Kernel Module for x86_64\n", "");
	wrk_driver_release("Kernel Module 1234567890", small, sizeof(small));
	assert_string_equal(small, "12345");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_driver_release_of_each_module),
		cmocka_unit_test(test_driver_release_of_other_lines),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
