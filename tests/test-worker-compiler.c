/* SPDX-License-Identifier: MIT */
/* tests/test-worker-compiler.c: the worker's side of its compile helper, against a helper that lies. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "channel.h"
#include "compiler.h"
#include "cuda-image.h"
#include "helpers.h"
#include "macro.h"
#include "segment.h"

/*
 * The helper compiles a client's source, so the worker believes nothing it says. The worker
 * starts its helper as /proc/self/exe --compiler: here that is this program, which then plays
 * a helper that greets as the real one does and answers every compile as $TEST_HELPER says:
 *   status:N    a reply of status N, without an image
 *   image:FILE  success, with an image whose code is FILE of the cubin corpus
 *   raw:FILE    success, with FILE itself (no image around it)
 *   silent      closes its socket and lives on (as a helper taken over might)
 *   hang        never answers
 */

static uint8_t *slurp(const char *name, size_t *ret_len)
{
	char path[512];
	uint8_t *p;

	(void)snprintf(path, sizeof(path), "%s/%s", CORPUS_DIR, name);
	p = test_read_file(path, ret_len);
	if (!p)
		exit(3);
	return p;
}

static int helper_reply(int fd, int status, int image_fd)
{
	struct cc_rep rep = { .magic = CC_MAGIC, .status = status };

	return ipc_channel_send(fd, &rep, sizeof(rep), &image_fd, image_fd >= 0 ? 1 : 0, 0);
}

/* The image fd the mode `how` answers with (-1: none), and the status. */
static int helper_answer(const char *how, int *ret_status)
{
	uint8_t *code, *img = NULL;
	size_t len, img_len;
	int fd = -1;

	*ret_status = 0;
	if (strncmp(how, "status:", 7) == 0) {
		*ret_status = atoi(how + 7);
		return -1;
	}
	code = slurp(strchr(how, ':') + 1, &len);
	if (strncmp(how, "image:", 6) == 0) {
		if (wrk_cuimage_pack(code, len, NULL, 0, 0, &img, &img_len) < 0)
			exit(3);
		free(code);
		code = img;
		len = img_len;
	}
	if (ipc_blob_new("test-image", code, len, &fd) < 0)
		exit(3);
	free(code);
	return fd;
}

static int fake_helper(const char *how)
{
	static uint8_t buf[IPC_MSG_MAX];
	int fds[IPC_FDS_MAX];
	unsigned nfds;
	ssize_t n;

	/* SETUP, then hello. */
	n = ipc_channel_recv(3, buf, sizeof(buf), fds, &nfds, 0);
	if (n <= 0 || nfds != 0 || helper_reply(3, 0, -1) < 0)
		return 1;
	while ((n = ipc_channel_recv(3, buf, sizeof(buf), fds, &nfds, 0)) > 0) {
		int status, fd;

		if (strcmp(how, "hang") == 0) {
			(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
			for (;;)
				(void)pause();
		}
		if (strcmp(how, "silent") == 0) {
			/* Gone with the test if the worker's side never ends it. */
			(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
			(void)close(3);
			for (;;)
				(void)pause();
		}
		fd = helper_answer(how, &status);

		for (unsigned i = 0; i < nfds; i++)
			(void)close(fds[i]);
		if (helper_reply(3, status, fd) < 0)
			return 1;
		(void)safe_close(fd);
	}
	return 0;
}

/* Build a module with a helper answering as `how`: the status, and the log in *ret_log. A
 * compile's time is 300 ms at most here. */
static int build(const char *how, char **ret_log)
{
	static const char src[] = "__global__ void k() {}";
	struct wrk_compiler c = WRK_COMPILER_INIT;
	struct wrk_toolkit tk = { .ndirs = 0 };
	struct wrk_build b = {
		.lang = GPUX_LANG_CUDA,
		.code = (const uint8_t *)src,
		.code_len = sizeof(src) - 1,
		.options = "",
	};
	uint8_t *image = NULL;
	size_t len = 0;
	int fds = test_fd_count(), r;

	assert_int_equal(setenv("TEST_HELPER", how, 1), 0);
	c.timeout_ns = 300 * NSEC_PER_MSEC;
	*ret_log = NULL;
	wrk_compiler_target(&c, 90, &tk);
	r = wrk_compiler_build(&c, &b, &image, &len, ret_log);
	if (r == 0) {
		assert_non_null(image);
		assert_true(len > 0);
	} else {
		assert_null(image);
	}
	free(image);
	wrk_compiler_stop(&c);
	assert_no_fd_leak(fds);
	return r;
}

static void assert_refused(const char *how, const char *why)
{
	char *log = NULL;

	assert_int_equal(build(how, &log), GPUX_E_COMPILE);
	assert_non_null(log);
	if (!strstr(log, why))
		fail_msg("%s: \"%s\" says nothing of \"%s\"", how, log, why);
	free(log);
}

static void test_compiler_takes_a_good_image(void **state)
{
	char *log = NULL;

	assert_int_equal(build("image:cubin-sm90", &log), 0);
	assert_null(log);
}

static void test_compiler_checks_the_helpers_cubin(void **state)
{
	assert_refused("image:bad-cubin-section-offset", "section 4 lies outside");
	assert_refused("image:bad-cubin-machine", "not CUDA");
	/* A cubin for another device than the one asked for. */
	assert_refused("image:cubin-sm80", "made for sm_80");
	assert_refused("image:fatbin-compressed", "is compressed");
	assert_refused("raw:cubin-sm90", "malformed image");
}

static void test_compiler_status_is_one_a_compile_ends_with(void **state)
{
	char *log = NULL;

	/* What a compile ends with is passed on: the helper's own refusals. */
	assert_int_equal(build("status:-2", &log), GPUX_E_NOMEM);
	free(log);
	assert_int_equal(build("status:-1", &log), GPUX_E_INVAL);
	free(log);
	assert_int_equal(build("status:-10", &log), GPUX_E_COMPILE);
	free(log);
	/* Anything else is the compile's failure, even a status of gpux's: a quota, a stop. */
	assert_refused("status:-12", "no compile ends with (-12)");
	assert_refused("status:-18", "no compile ends with (-18)");
	assert_refused("status:-1000", "no compile ends with (-1000)");
	assert_refused("status:-2147483648", "no compile ends with");
	assert_refused("status:7", "no compile ends with (7)");
}

/* A helper that hangs up but does not exit is ended, not waited for forever. */
static void test_compiler_ends_a_helper_that_hangs_up(void **state)
{
	assert_refused("silent", "the compiler died: Killed");
}

/* A compile past its time says so, and the helper is ended (then started again). */
static void test_compiler_past_its_time_says_so(void **state)
{
	assert_refused("hang", "the compiler ran past its 0.3 s limit");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_compiler_takes_a_good_image),
		cmocka_unit_test(test_compiler_checks_the_helpers_cubin),
		cmocka_unit_test(test_compiler_status_is_one_a_compile_ends_with),
		cmocka_unit_test(test_compiler_ends_a_helper_that_hangs_up),
		cmocka_unit_test(test_compiler_past_its_time_says_so),
	};

	/* Started by the code under test as its helper. */
	if (argc > 1 && strcmp(argv[1], "--compiler") == 0)
		return fake_helper(getenv("TEST_HELPER") ? getenv("TEST_HELPER") : "");
	return cmocka_run_group_tests(tests, NULL, NULL);
}
