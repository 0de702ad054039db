/* SPDX-License-Identifier: MIT */
/* tests/test-worker-host-build.c: the host back end's compiler, with the system's cc. */
#include <elf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "host-build.h"
#include "macro.h"
#include "wrk.h"

/* Build source with cc: the status; the image (to free) in *ret_image when it built. */
static int build(const char *source, uint8_t **ret_image, size_t *ret_len, char **ret_log)
{
	const char *cc = getenv("GPUX_HOST_CC") ? getenv("GPUX_HOST_CC") : "cc";
	struct wrk_build b = {
		.lang = GPUX_LANG_HOST,
		.code = (const uint8_t *)source,
		.code_len = strlen(source),
		.options = "",
	};
	int fds = test_fd_count(), r;

	*ret_image = NULL;
	*ret_log = NULL;
	r = wrk_host_build(cc, &b, ret_image, ret_len, ret_log);
	assert_no_fd_leak(fds);
	return r;
}

static void test_host_build_makes_a_shared_object(void **state)
{
	uint8_t *image;
	size_t len;
	char *log;

	assert_int_equal(build("int gpux_test_k(void) { return 1; }\n", &image, &len, &log), 0);
	assert_non_null(image);
	assert_true(len > SELFMAG);
	assert_memory_equal(image, ELFMAG, SELFMAG);
	free(image);
	free(log);
}

static void test_host_build_refuses_a_module_past_the_clients_cap(void **state)
{
	char source[256];
	uint8_t *image;
	size_t len;
	char *log;

	/* A source that makes a shared object one MiB larger than a client's modules may be. */
	(void)snprintf(source, sizeof(source),
		       "__asm__(\".section .data.big,\\\"aw\\\"\\n.skip %llu\\n.previous\");\n"
		       "int gpux_test_k(void) { return 1; }\n",
		       (unsigned long long)(WRK_CLIENT_MOD_BYTES + MiB));
	assert_int_equal(build(source, &image, &len, &log), GPUX_E_QUOTA);
	assert_null(image);
	assert_non_null(log);
	assert_non_null(strstr(log, "MiB a client's modules may"));
	free(log);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_host_build_makes_a_shared_object),
		cmocka_unit_test(test_host_build_refuses_a_module_past_the_clients_cap),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
