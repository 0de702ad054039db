/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-metrics.c: gpuxd --metrics: what it serves, who it names, and a flood it outlasts. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

extern char **environ;

/* A free TCP port on the loopback (free a moment ago: nothing else here takes ports). */
static unsigned free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
	(void)close(fd);
	return ntohs(a.sin_port);
}

/* A connection to the port, or -errno. */
static int tcp_connect(unsigned port)
{
	struct sockaddr_in a = { .sin_family = AF_INET,
				 .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), r;

	if (fd < 0)
		return -errno;
	r = connect(fd, (struct sockaddr *)&a, sizeof(a));
	if (r < 0) {
		r = -errno;
		(void)close(fd);
		return r;
	}
	return fd;
}

/* Everything the server sends until it closes, NUL-terminated (free() it), or NULL when
 * nothing more came for timeout_ms. */
static char *read_all(int fd, int timeout_ms)
{
	size_t cap = 1 << 20, len = 0;
	char *buf = malloc(cap + 1);

	assert_non_null(buf);
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, timeout_ms) != 1) {
			free(buf);
			return NULL;
		}
		n = recv(fd, buf + len, cap - len, 0);
		if (n <= 0)
			break;
		len += (size_t)n;
		assert_true(len < cap);
	}
	buf[len] = '\0';
	return buf;
}

/* A request and its whole answer (within timeout_ms of silence), or NULL. */
static char *http_within(unsigned port, const char *request, int timeout_ms)
{
	int fd = tcp_connect(port);
	char *r = NULL;

	if (fd < 0)
		return NULL;
	if (send(fd, request, strlen(request), MSG_NOSIGNAL) == (ssize_t)strlen(request))
		r = read_all(fd, timeout_ms);
	(void)close(fd);
	return r;
}

static char *http(unsigned port, const char *request)
{
	char *r = http_within(port, request, 10000);

	assert_non_null(r);
	return r;
}

static bool scrape_ok(unsigned port, int timeout_ms)
{
	char *r = http_within(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n", timeout_ms);
	bool ok = r && strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0 &&
		  strstr(r, "\ngpux_launches_total{device=\"0\"} ");

	free(r);
	return ok;
}

/* gpuxd started with --metrics on a free port and `extra` (NULL-terminated, up to 4). */
static struct test_env *open_with_metrics(unsigned *ret_port, const char *const *extra)
{
	static char addr[32];
	const char *args[8] = { "--metrics", addr };
	unsigned port = free_port();

	for (unsigned i = 0; extra && extra[i]; i++)
		args[2 + i] = extra[i];
	(void)snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	*ret_port = port;
	return test_env_open(args);
}

/* GET /metrics answers the Prometheus text, / a page that links to it; anything else is
 * refused, briefly. */
static void test_metrics_endpoint_answers(void **state)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	struct test_env *e;
	char *r, big[5000];
	unsigned port;

	e = open_with_metrics(&port, NULL);
	assert_int_equal(gpux_run(e->m, "empty", &l, NULL, 0), GPUX_OK);

	r = http(port, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
	assert_true(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0);
	assert_non_null(strstr(r, "Content-Type: text/plain; version=0.0.4"));
	assert_non_null(strstr(r, "\ngpux_launches_total{device=\"0\"} "));
	assert_non_null(strstr(r, "\ngpux_requests_total{device=\"0\",status=\"ok\"} "));
	/* gpuxd's own process, as Prometheus' client libraries name it. */
	assert_non_null(strstr(r, "\nprocess_start_time_seconds "));
	assert_non_null(strstr(r, "\nprocess_open_fds "));
	free(r);
	r = http(port, "HEAD /metrics?x=1 HTTP/1.0\n\n");
	assert_true(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0);
	assert_null(strstr(r, "gpux_"));
	free(r);
	r = http(port, "GET / HTTP/1.1\r\n\r\n");
	assert_true(strncmp(r, "HTTP/1.1 200 OK\r\n", 17) == 0);
	assert_non_null(strstr(r, "Content-Type: text/html"));
	assert_non_null(strstr(r, "<a href=\"/metrics\">"));
	free(r);
	r = http(port, "GET /secrets HTTP/1.1\r\n\r\n");
	assert_true(strncmp(r, "HTTP/1.1 404 ", 13) == 0);
	free(r);
	r = http(port, "DELETE /metrics HTTP/1.1\r\n\r\n");
	assert_true(strncmp(r, "HTTP/1.1 405 ", 13) == 0);
	assert_non_null(strstr(r, "\r\nAllow: GET, HEAD\r\n"));
	free(r);
	/* A request that never ends within the cap is dropped unanswered. */
	memset(big, 'a', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	memcpy(big, "GET /", 5);
	r = http(port, big);
	assert_string_equal(r, "");
	free(r);
	/* So is one that does not come whole in time. */
	{
		int fd = tcp_connect(port);
		uint64_t t0 = mono_ns();

		assert_true(fd >= 0);
		assert_int_equal(send(fd, "GET /met", 8, MSG_NOSIGNAL), 8);
		r = read_all(fd, 10000);
		assert_non_null(r);
		assert_string_equal(r, "");
		assert_true(mono_ns() - t0 < 6 * NSEC_PER_SEC);
		free(r);
		(void)close(fd);
	}
	test_env_close(e);
}

/*
 * Slow connections (one byte each, and a new one as soon as the server closes one) beside a
 * scraper: the scraper gets at least 95% of its scrapes. 200 of them, as one user on the
 * machine can open at once; and more than the server holds, where the limit of open files
 * lets this test open them.
 */
static pid_t flood(unsigned port, unsigned n)
{
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid > 0)
		return pid;
	{
		struct pollfd *p = calloc(n, sizeof(*p));

		for (unsigned i = 0; i < n; i++)
			p[i].fd = -1;
		for (;;) {
			for (unsigned i = 0; i < n; i++) {
				if (p[i].fd >= 0)
					continue;
				p[i].fd = tcp_connect(port);
				p[i].events = POLLIN;
				if (p[i].fd >= 0)
					(void)send(p[i].fd, "G", 1, MSG_NOSIGNAL);
			}
			if (poll(p, n, 1000) < 0)
				_exit(1);
			for (unsigned i = 0; i < n; i++)
				if (p[i].fd >= 0 && p[i].revents) {
					(void)close(p[i].fd);
					p[i].fd = -1;
				}
		}
	}
}

static unsigned scrapes_under_flood(unsigned port, unsigned n, unsigned scrapes)
{
	pid_t attacker = flood(port, n);
	unsigned ok = 0;

	/* Let the flood take its places first. */
	(void)usleep(500000);
	for (unsigned i = 0; i < scrapes; i++) {
		ok += scrape_ok(port, 5000);
		(void)usleep(50000);
	}
	assert_int_equal(kill(attacker, SIGKILL), 0);
	assert_int_equal(waitpid(attacker, NULL, 0), attacker);
	return ok;
}

static void test_metrics_slow_connections_cannot_keep_a_scraper_out(void **state)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	struct rlimit rl;
	struct test_env *e;
	unsigned port, ok;

	e = open_with_metrics(&port, NULL);
	assert_int_equal(gpux_run(e->m, "empty", &l, NULL, 0), GPUX_OK);
	ok = scrapes_under_flood(port, 200, 40);
	if (ok < 38)
		fail_msg("200 slow connections: %u of 40 scrapes", ok);
	/* More connections than the server holds (1024): the newest push out the oldest. */
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &rl), 0);
	if (rl.rlim_max >= 1400) {
		struct rlimit mine = rl;

		mine.rlim_cur = rl.rlim_max;
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &mine), 0);
		ok = scrapes_under_flood(port, 1200, 40);
		assert_int_equal(setrlimit(RLIMIT_NOFILE, &rl), 0);
		if (ok < 38)
			fail_msg("1200 slow connections: %u of 40 scrapes", ok);
	}
	/* gpuxd served its client throughout. */
	test_env_still_serves(e);
	test_env_close(e);
}

/* The pid of gpuxd's child named gpux-metrics, or 0. */
static pid_t metrics_pid(pid_t gpuxd)
{
	DIR *d = opendir("/proc");
	struct dirent *ent;
	pid_t found = 0;

	assert_non_null(d);
	while (!found && (ent = readdir(d))) {
		char path[300], buf[512];
		const char *f;
		int ppid;

		if (ent->d_name[0] < '0' || ent->d_name[0] > '9')
			continue;
		(void)snprintf(path, sizeof(path), "/proc/%s/stat", ent->d_name);
		f = proc_stat_fields(path, buf, sizeof(buf));
		if (f && strstr(buf, "(gpux-metrics)") && sscanf(f, "%*c %d", &ppid) == 1 &&
		    ppid == gpuxd)
			found = atoi(ent->d_name);
	}
	(void)closedir(d);
	return found;
}

/* gpux-metrics is gpuxd's: started again when it dies, and gone with gpuxd. */
static void test_metrics_server_restarted(void **state)
{
	struct test_env *e;
	unsigned port;
	pid_t first, second = 0;

	e = open_with_metrics(&port, NULL);
	assert_true(scrape_ok(port, 10000));
	first = metrics_pid(e->d.pid);
	assert_true(first > 0);
	assert_int_equal(kill(first, SIGKILL), 0);
	for (int i = 0; i < 1000 && (second == 0 || second == first); i++) {
		(void)usleep(10000);
		second = metrics_pid(e->d.pid);
	}
	assert_true(second > 0 && second != first);
	assert_true(scrape_ok(port, 10000));
	test_env_close(e);
	/* Gone with gpuxd, which waited for it. */
	assert_true(kill(second, 0) < 0 && errno == ESRCH);
}

/*
 * Memory by user shows who uses the devices: only with --metrics-per-user. By default the
 * endpoint names no user, while a client of this user holds shared memory.
 */
static void per_user(bool asked)
{
	static const char *const opt[] = { "--metrics-per-user", NULL };
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 64, 1, 1 } };
	struct test_env *e;
	char *r, label[64];
	unsigned port;
	gpux_buf *a, *b;

	e = open_with_metrics(&port, asked ? opt : NULL);
	assert_int_equal(gpux_buf_alloc(e->ctx, 64 * sizeof(float), &a), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, 64 * sizeof(float), &b), GPUX_OK);
	{
		uint64_t n = 64;
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n), gpux_arg_in(a, 0, 64 * sizeof(float)),
					   gpux_arg_out(b, 0, 64 * sizeof(float)) };

		assert_int_equal(gpux_run(e->m, "add1", &l, args, 3), GPUX_OK);
	}
	r = http(port, "GET /metrics HTTP/1.1\r\n\r\n");
	(void)snprintf(label, sizeof(label), "gpux_shared_memory_bytes{device=\"0\",uid=\"%u\"} ",
		       (unsigned)getuid());
	if (asked) {
		assert_non_null(strstr(r, label));
	} else {
		assert_null(strstr(r, ",uid="));
		assert_non_null(strstr(r, "\ngpux_shared_memory_bytes{device=\"0\"} "));
		assert_null(strstr(r, "\ngpux_shared_memory_bytes{device=\"0\"} 0\n"));
	}
	free(r);
	gpux_buf_free(a);
	gpux_buf_free(b);
	test_env_close(e);
}

static void test_metrics_no_uid_by_default(void **state)
{
	per_user(false);
}

static void test_metrics_per_user_when_asked(void **state)
{
	per_user(true);
}

/* gpuxd --metrics with an address it cannot serve: its exit status, and its log. */
static int refused(const char *addr, char *log, size_t len)
{
	char dir[] = "/tmp/gpux-test-XXXXXX", sock[64], logpath[64], cache[64];
	char *argv[] = { (char *)getenv("GPUX_DAEMON"),
			 "--socket",
			 sock,
			 "--backend",
			 "host",
			 "--cache-dir",
			 cache,
			 "--metrics",
			 (char *)addr,
			 NULL };
	posix_spawn_file_actions_t fa;
	pid_t pid;
	int st;
	FILE *f;
	size_t n;

	assert_non_null(argv[0]);
	assert_non_null(mkdtemp(dir));
	(void)snprintf(sock, sizeof(sock), "%s/gpuxd.sock", dir);
	(void)snprintf(logpath, sizeof(logpath), "%s/log", dir);
	(void)snprintf(cache, sizeof(cache), "%s/cache", dir);
	(void)posix_spawn_file_actions_init(&fa);
	(void)posix_spawn_file_actions_addopen(&fa, 2, logpath, O_WRONLY | O_CREAT, 0600);
	assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ), 0);
	(void)posix_spawn_file_actions_destroy(&fa);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	f = fopen(logpath, "re");
	assert_non_null(f);
	n = fread(log, 1, len - 1, f);
	log[n] = '\0';
	(void)fclose(f);
	test_rmtree(dir);
	assert_true(WIFEXITED(st));
	return WEXITSTATUS(st);
}

/* A bad address is refused with the real reason: the port's range, the resolver's words, the
 * bind's; never served on another port. */
static void test_metrics_bad_address_says_why(void **state)
{
	char log[8192], addr[32];
	int busy = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);

	assert_int_equal(refused("127.0.0.1:99999", log, sizeof(log)), 2);
	assert_non_null(strstr(log, "--metrics: port 99999 is not from 1 to 65535"));
	assert_int_equal(refused(":notaport", log, sizeof(log)), 2);
	assert_non_null(strstr(log, "--metrics: \"notaport\" is not a port number"));
	assert_int_equal(refused("::1:9464", log, sizeof(log)), 2);
	assert_non_null(strstr(log, "an IPv6 address goes in brackets"));
	/* .invalid never resolves (RFC 6761): whatever the resolver says, it says it. */
	assert_int_equal(refused("nonsense.invalid:9464", log, sizeof(log)), 1);
	assert_non_null(strstr(log, "--metrics nonsense.invalid:9464: "));
	assert_null(strstr(log, "Cannot assign requested address"));
	/* A port another socket holds. */
	assert_true(busy >= 0);
	assert_int_equal(bind(busy, (struct sockaddr *)&a, sizeof(a)), 0);
	assert_int_equal(listen(busy, 1), 0);
	assert_int_equal(getsockname(busy, (struct sockaddr *)&a, &alen), 0);
	(void)snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(a.sin_port));
	assert_int_equal(refused(addr, log, sizeof(log)), 1);
	assert_non_null(strstr(log, "Address already in use"));
	(void)close(busy);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_metrics_endpoint_answers),
		cmocka_unit_test(test_metrics_slow_connections_cannot_keep_a_scraper_out),
		cmocka_unit_test(test_metrics_server_restarted),
		cmocka_unit_test(test_metrics_no_uid_by_default),
		cmocka_unit_test(test_metrics_per_user_when_asked),
		cmocka_unit_test(test_metrics_bad_address_says_why),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
