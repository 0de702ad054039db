/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-connect.c: connecting waits for gpuxd without holding up other threads or fork(). */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

/* How long a fork() may take before the test gives up on it: never reached unless broken. */
#define FORK_PATIENCE_S 60

/* A thread that needs gpuxd with a context that lost it, so connects again; what it got. */
struct connector {
	pthread_t thread;
	gpux_ctx *ctx;
	uint32_t ndevices;
	char why[512];
	bool done;
};

static void *connector_main(void *arg)
{
	struct connector *c = arg;

	c->ndevices = gpux_device_count(c->ctx);
	(void)snprintf(c->why, sizeof(c->why), "%s", gpux_connect_error());
	__atomic_store_n(&c->done, true, __ATOMIC_RELEASE);
	return NULL;
}

/* A thread that forks a child that exits at once, and says when fork() came back. */
struct forker {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done;
	int status;
};

static void *forker_main(void *arg)
{
	struct forker *f = arg;
	pid_t pid = fork();
	int st = -1;

	if (pid == 0)
		_exit(0);
	if (pid > 0 && waitpid(pid, &st, 0) != pid)
		st = -1;
	(void)pthread_mutex_lock(&f->lock);
	f->status = st;
	f->done = true;
	(void)pthread_cond_signal(&f->cond);
	(void)pthread_mutex_unlock(&f->lock);
	return NULL;
}

static void forker_start(struct forker *f)
{
	memset(f, 0, sizeof(*f));
	(void)pthread_mutex_init(&f->lock, NULL);
	(void)pthread_cond_init(&f->cond, NULL);
	assert_int_equal(pthread_create(&f->thread, NULL, forker_main, f), 0);
}

/* Whether the fork came back within FORK_PATIENCE_S (a watchdog against a hung test). */
static bool forker_wait(struct forker *f)
{
	struct timespec ts;
	bool done;

	(void)clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_sec += FORK_PATIENCE_S;
	(void)pthread_mutex_lock(&f->lock);
	while (!f->done)
		if (pthread_cond_timedwait(&f->cond, &f->lock, &ts) != 0)
			break;
	done = f->done;
	(void)pthread_mutex_unlock(&f->lock);
	return done;
}

static void forker_join(struct forker *f)
{
	assert_int_equal(pthread_join(f->thread, NULL), 0);
	assert_true(WIFEXITED(f->status) && WEXITSTATUS(f->status) == 0);
	(void)pthread_mutex_destroy(&f->lock);
	(void)pthread_cond_destroy(&f->cond);
}

/*
 * With c's thread waiting to connect: fork() in another thread comes back while it still
 * waits; then release() lets the connection end, which fails (no device).
 */
static void fork_while_connecting(struct connector *c, void (*release)(void *), void *arg)
{
	struct forker f;
	bool forked, connect_over;

	forker_start(&f);
	forked = forker_wait(&f);
	connect_over = __atomic_load_n(&c->done, __ATOMIC_ACQUIRE);
	release(arg);
	assert_int_equal(pthread_join(c->thread, NULL), 0);
	forker_join(&f);
	assert_true(forked);
	assert_false(connect_over);
	assert_int_equal(c->ndevices, 0);
}

static void close_fd(void *arg)
{
	(void)close(*(int *)arg);
}

/*
 * A gpuxd that takes the connection and never answers the hello: while a thread waits for
 * its answer, fork() in another thread is not held up (the library takes every context's
 * lock around fork(), so connecting must not wait with one held).
 */
static void test_connect_fork_not_held_by_a_silent_gpuxd(void **state)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct connector c = { 0 };
	struct test_daemon d;
	char hello[256];
	int lfd, conn, st;

	/* A context that a gpuxd served, gone now; a silent one listens in its place. */
	test_daemon_start(&d, NULL);
	c.ctx = test_connect(&d);
	assert_int_equal(kill(d.pid, SIGTERM), 0);
	assert_int_equal(waitpid(d.pid, &st, 0), d.pid);
	d.pid = 0;
	assert_int_equal(gpux_process(c.ctx), GPUX_OK);
	memcpy(sa.sun_path, d.sock, strlen(d.sock) + 1);
	lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	assert_true(lfd >= 0);
	assert_int_equal(bind(lfd, (struct sockaddr *)&sa, sizeof(sa)), 0);
	assert_int_equal(listen(lfd, 4), 0);

	assert_int_equal(pthread_create(&c.thread, NULL, connector_main, &c), 0);
	conn = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
	assert_true(conn >= 0);
	/* The hello is here: the connector now waits for an answer that does not come. */
	assert_true(recv(conn, hello, sizeof(hello), 0) > 0);

	/* Then the silent gpuxd hangs up: connecting fails at once, not at its deadline. */
	fork_while_connecting(&c, close_fd, &conn);
	assert_non_null(strstr(c.why, "did not answer"));
	assert_null(strstr(c.why, "timed out"));

	gpux_disconnect(c.ctx);
	(void)close(lfd);
	test_daemon_stop(&d);
}

/* The slow "gpuxd" below reads a line from this fifo, then exits 1. */
static void let_start_fail(void *fifo)
{
	int fd = open(fifo, O_WRONLY | O_CLOEXEC);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, "go\n", 3), 3);
	(void)close(fd);
}

/*
 * The private gpuxd started for a connection takes its time to be ready: fork() in another
 * thread is not held up meanwhile, and the connection says how the start ended.
 */
static void test_connect_fork_not_held_by_a_starting_gpuxd(void **state)
{
	char rt[64], sock[96], cache[96], log[96], path[96], fifo[96], started[96], script[300];
	const char *old_rt = getenv("XDG_RUNTIME_DIR"), *daemon = getenv("GPUX_DAEMON");
	char *saved_rt = old_rt ? strdup(old_rt) : NULL, *saved_daemon = strdup(daemon);
	struct connector c = { 0 };
	FILE *s;

	(void)snprintf(rt, sizeof(rt), "/tmp/gpux-slow-XXXXXX");
	assert_non_null(mkdtemp(rt));
	(void)snprintf(sock, sizeof(sock), "%s/gpux/gpuxd.sock", rt);
	(void)snprintf(cache, sizeof(cache), "%s/cache", rt);
	(void)snprintf(log, sizeof(log), "%s/gpuxd.log", rt);
	(void)snprintf(path, sizeof(path), "%s/slow-gpuxd", rt);
	(void)snprintf(fifo, sizeof(fifo), "%s/go", rt);
	(void)snprintf(started, sizeof(started), "%s/started", rt);
	assert_int_equal(setenv("XDG_RUNTIME_DIR", rt, 1), 0);
	assert_int_equal(setenv("GPUX_CACHE_DIR", cache, 1), 0);
	assert_int_equal(setenv("GPUX_LOG_FILE", log, 1), 0);
	(void)unsetenv("GPUX_SOCKET");

	/* A context that started a private gpuxd, gone now. */
	assert_int_equal(gpux_connect(NULL, &c.ctx), GPUX_OK);
	test_stop_pid(test_daemon_pid_at(sock));
	assert_int_equal(gpux_process(c.ctx), GPUX_OK);

	/* The next "gpuxd" is slow to start, and then fails. */
	assert_int_equal(mkfifo(fifo, 0600), 0);
	(void)snprintf(script, sizeof(script), "#!/bin/sh\n: > %s\nread line < %s\nexit 1\n",
		       started, fifo);
	s = fopen(path, "w");
	assert_non_null(s);
	assert_true(fputs(script, s) >= 0);
	assert_int_equal(fclose(s), 0);
	assert_int_equal(chmod(path, 0700), 0);
	assert_int_equal(setenv("GPUX_DAEMON", path, 1), 0);

	assert_int_equal(pthread_create(&c.thread, NULL, connector_main, &c), 0);
	while (access(started, F_OK) != 0)
		(void)usleep(10000);

	/* Then the start fails. */
	fork_while_connecting(&c, let_start_fail, fifo);
	assert_non_null(strstr(c.why, "failed with status 1"));

	gpux_disconnect(c.ctx);
	if (saved_rt)
		(void)setenv("XDG_RUNTIME_DIR", saved_rt, 1);
	else
		(void)unsetenv("XDG_RUNTIME_DIR");
	(void)setenv("GPUX_DAEMON", saved_daemon, 1);
	(void)unsetenv("GPUX_CACHE_DIR");
	(void)unsetenv("GPUX_LOG_FILE");
	free(saved_rt);
	free(saved_daemon);
	{
		char cmd[96];

		(void)snprintf(cmd, sizeof(cmd), "rm -rf %s", rt);
		(void)system(cmd);
	}
}

static unsigned clients_of(const struct test_daemon *d)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(d, &st, devs), 0);
	return st.nclients;
}

/* gpux_process() takes in what has arrived and never connects (which may wait): a context
 * whose gpuxd went away connects again at the next call that needs gpuxd. */
static void test_connect_process_never_connects(void **state)
{
	struct test_daemon d1, d2;
	gpux_ctx *ctx;
	unsigned before;
	int st;

	test_daemon_start(&d1, NULL);
	ctx = test_connect(&d1);
	assert_int_equal(kill(d1.pid, SIGTERM), 0);
	assert_int_equal(waitpid(d1.pid, &st, 0), d1.pid);
	d1.pid = 0;
	test_daemon_start_at(&d2, d1.sock, NULL);
	before = clients_of(&d2);
	for (int i = 0; i < 3; i++)
		assert_int_equal(gpux_process(ctx), GPUX_OK);
	assert_int_equal(clients_of(&d2), before);
	assert_int_equal(gpux_device_count(ctx), 1);
	assert_int_equal(clients_of(&d2), before + 1);
	gpux_disconnect(ctx);
	test_daemon_stop(&d2);
	test_daemon_stop(&d1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_connect_fork_not_held_by_a_silent_gpuxd),
		cmocka_unit_test(test_connect_fork_not_held_by_a_starting_gpuxd),
		cmocka_unit_test(test_connect_process_never_connects),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
