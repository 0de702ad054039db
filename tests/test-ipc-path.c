/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-path.c: the default socket location and the private directory check. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "helpers.h"
#include "macro.h"
#include "path.h"

/* ---- fixture: $XDG_RUNTIME_DIR and the umask as the test found them, put back after ---- */

struct env {
	char *xdg; /* NULL: it was unset */
	mode_t umask;
	char *dir; /* a temp dir for the test */
	int fds_before;
};

static int env_setup(void **state)
{
	struct env *e = calloc(1, sizeof(*e));
	const char *xdg = getenv("XDG_RUNTIME_DIR");

	assert_non_null(e);
	e->fds_before = test_fd_count();
	if (xdg) {
		e->xdg = strdup(xdg);
		assert_non_null(e->xdg);
	}
	/* A known umask: ipc_private_dir() creates with mkdir(), which applies it. */
	e->umask = umask(022);
	e->dir = test_mkdtemp();
	*state = e;
	return 0;
}

static int env_teardown(void **state)
{
	struct env *e = *state;

	if (e->xdg)
		assert_int_equal(setenv("XDG_RUNTIME_DIR", e->xdg, 1), 0);
	else
		assert_int_equal(unsetenv("XDG_RUNTIME_DIR"), 0);
	(void)umask(e->umask);
	test_rmtree(e->dir);
	assert_no_fd_leak(e->fds_before);
	free(e->dir);
	free(e->xdg);
	free(e);
	return 0;
}

#define PATH_TEST(f) cmocka_unit_test_setup_teardown(f, env_setup, env_teardown)

static char *path_in(const struct env *e, const char *name)
{
	char *p;

	assert_true(asprintf(&p, "%s/%s", e->dir, name) > 0);
	return p;
}

static mode_t mode_of(const char *path)
{
	struct stat st;

	assert_int_equal(lstat(path, &st), 0);
	return st.st_mode;
}

/* ---- ipc_default_socket ---- */

static void test_path_default_socket_under_xdg_runtime_dir(void **state)
{
	char dir[IPC_SOCKET_PATH_MAX], path[IPC_SOCKET_PATH_MAX];

	assert_int_equal(setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1), 0);
	assert_int_equal(ipc_default_socket(dir, path, sizeof(path)), 0);
	assert_string_equal(dir, "/run/user/1234/gpux");
	assert_string_equal(path, "/run/user/1234/gpux/gpuxd.sock");
}

static void test_path_default_socket_falls_back_to_tmp(void **state)
{
	static const char *const bad[] = { "", "run/user/1234", "./run", "~/run" };
	char dir[IPC_SOCKET_PATH_MAX], path[IPC_SOCKET_PATH_MAX];
	char want_dir[32], want_path[64];

	(void)snprintf(want_dir, sizeof(want_dir), "/tmp/gpux-%u", (unsigned)geteuid());
	(void)snprintf(want_path, sizeof(want_path), "%s/gpuxd.sock", want_dir);

	assert_int_equal(unsetenv("XDG_RUNTIME_DIR"), 0);
	assert_int_equal(ipc_default_socket(dir, path, sizeof(path)), 0);
	assert_string_equal(dir, want_dir);
	assert_string_equal(path, want_path);

	/* Not an absolute path: ignored, as the XDG spec asks. */
	for (size_t i = 0; i < ARRAY_SIZE(bad); i++) {
		memset(dir, 'x', sizeof(dir));
		memset(path, 'x', sizeof(path));
		assert_int_equal(setenv("XDG_RUNTIME_DIR", bad[i], 1), 0);
		assert_int_equal(ipc_default_socket(dir, path, sizeof(path)), 0);
		assert_string_equal(dir, want_dir);
		assert_string_equal(path, want_path);
	}
}

/* $XDG_RUNTIME_DIR of n bytes: "/" and then 'r's. */
static void set_xdg_of_len(size_t n)
{
	char *v = malloc(n + 1);

	assert_non_null(v);
	memset(v, 'r', n);
	v[0] = '/';
	v[n] = '\0';
	assert_int_equal(setenv("XDG_RUNTIME_DIR", v, 1), 0);
	free(v);
}

static void test_path_default_socket_too_long(void **state)
{
	/* "/gpux/gpuxd.sock" is 16 bytes: the socket path must stay under AF_UNIX's 108. */
	const size_t fits = IPC_SOCKET_PATH_MAX - 1 - strlen("/gpux/gpuxd.sock");
	char dir[PATH_MAX], path[PATH_MAX];

	set_xdg_of_len(fits);
	assert_int_equal(ipc_default_socket(dir, path, sizeof(path)), 0);
	assert_int_equal(strlen(path), IPC_SOCKET_PATH_MAX - 1);

	/* One byte more no longer fits sun_path with its NUL, however large the buffers. */
	set_xdg_of_len(fits + 1);
	assert_int_equal(ipc_default_socket(dir, path, sizeof(path)), -ENAMETOOLONG);

	/* Far too long: the directory alone overflows the buffers. */
	set_xdg_of_len(PATH_MAX + 100);
	assert_int_equal(ipc_default_socket(dir, path, sizeof(path)), -ENAMETOOLONG);

	/* A short value, and buffers too small for the directory (19 bytes), then for the
	 * socket path (30 bytes) alone. */
	assert_int_equal(setenv("XDG_RUNTIME_DIR", "/run/user/1234", 1), 0);
	assert_int_equal(ipc_default_socket(dir, path, 19), -ENAMETOOLONG);
	assert_int_equal(ipc_default_socket(dir, path, 30), -ENAMETOOLONG);
	assert_int_equal(ipc_default_socket(dir, path, 31), 0);
	assert_string_equal(path, "/run/user/1234/gpux/gpuxd.sock");
}

/* ---- ipc_private_dir ---- */

static void test_path_private_dir_creates_0700(void **state)
{
	struct env *e = *state;
	char *d = path_in(e, "gpux");
	struct stat st;

	assert_int_equal(ipc_private_dir(d), 0);
	assert_int_equal(lstat(d, &st), 0);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_mode & 07777, 0700);
	assert_int_equal(st.st_uid, geteuid());
	/* There already: accepted as it is. */
	assert_int_equal(ipc_private_dir(d), 0);
	assert_int_equal(mode_of(d) & 07777, 0700);
	free(d);
}

static void test_path_private_dir_accepts_existing_0700(void **state)
{
	struct env *e = *state;
	char *d = path_in(e, "mine");

	assert_int_equal(mkdir(d, 0700), 0);
	assert_int_equal(ipc_private_dir(d), 0);
	/* Made earlier with fewer rights for its owner: still closed to others, accepted. */
	assert_int_equal(chmod(d, 0500), 0);
	assert_int_equal(ipc_private_dir(d), 0);
	assert_int_equal(chmod(d, 0700), 0);
	free(d);
}

static void test_path_private_dir_refuses_open_modes(void **state)
{
	static const mode_t modes[] = { 0750, 0705, 0701, 0710, 0770, 0777, 01777, 0707 };
	struct env *e = *state;
	char *d = path_in(e, "open");

	assert_int_equal(mkdir(d, 0700), 0);
	for (size_t i = 0; i < ARRAY_SIZE(modes); i++) {
		assert_int_equal(chmod(d, modes[i]), 0);
		assert_int_equal(ipc_private_dir(d), -EPERM);
		/* Refused, not repaired. */
		assert_int_equal(mode_of(d) & 07777, modes[i]);
	}
	assert_int_equal(chmod(d, 0700), 0);
	assert_int_equal(ipc_private_dir(d), 0);
	free(d);
}

static void test_path_private_dir_refuses_symlink(void **state)
{
	struct env *e = *state;
	char *target = path_in(e, "target"), *link = path_in(e, "link");
	char *dangling = path_in(e, "dangling"), *nowhere = path_in(e, "nowhere");

	/* A link to a directory that would pass: someone else could point it anywhere. */
	assert_int_equal(mkdir(target, 0700), 0);
	assert_int_equal(symlink(target, link), 0);
	assert_int_equal(ipc_private_dir(link), -EPERM);
	assert_true(S_ISLNK(mode_of(link)));

	/* A link to nothing: not followed to create its target. */
	assert_int_equal(symlink(nowhere, dangling), 0);
	assert_int_equal(ipc_private_dir(dangling), -EPERM);
	assert_int_equal(access(nowhere, F_OK), -1);
	free(nowhere);
	free(dangling);
	free(link);
	free(target);
}

static void test_path_private_dir_refuses_file(void **state)
{
	struct env *e = *state;
	char *f = path_in(e, "file");
	int fd = open(f, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0600);

	assert_true(fd >= 0);
	(void)close(fd);
	assert_int_equal(ipc_private_dir(f), -EPERM);
	assert_true(S_ISREG(mode_of(f)));
	free(f);
}

static void test_path_private_dir_refuses_other_owner(void **state)
{
	struct env *e = *state;
	char *d;

	/* Only root can give a directory away. */
	if (geteuid() != 0)
		skip();
	d = path_in(e, "theirs");
	assert_int_equal(mkdir(d, 0700), 0);
	assert_int_equal(chown(d, 65534, 65534), 0);
	assert_int_equal(ipc_private_dir(d), -EPERM);
	assert_int_equal(chown(d, 0, 0), 0);
	assert_int_equal(ipc_private_dir(d), 0);
	free(d);
}

static void test_path_private_dir_missing_parent(void **state)
{
	struct env *e = *state;
	char *d = path_in(e, "no/such");

	assert_int_equal(ipc_private_dir(d), -ENOENT);
	free(d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		PATH_TEST(test_path_default_socket_under_xdg_runtime_dir),
		PATH_TEST(test_path_default_socket_falls_back_to_tmp),
		PATH_TEST(test_path_default_socket_too_long),
		PATH_TEST(test_path_private_dir_creates_0700),
		PATH_TEST(test_path_private_dir_accepts_existing_0700),
		PATH_TEST(test_path_private_dir_refuses_open_modes),
		PATH_TEST(test_path_private_dir_refuses_symlink),
		PATH_TEST(test_path_private_dir_refuses_file),
		PATH_TEST(test_path_private_dir_refuses_other_owner),
		PATH_TEST(test_path_private_dir_missing_parent),
	};

	return cmocka_run_group_tests_name("ipc-path", tests, NULL, NULL);
}
