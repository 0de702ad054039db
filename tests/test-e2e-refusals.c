/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-refusals.c: what a worker refuses is answered with why, and the client stays. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "channel.h"
#include "e2e.h"
#include "helpers.h"
#include "segment.h"

static const char code[] = "GPUX_HOST_KERNEL(k)\n{\n}\n";

/* A raw channel with module 7 (kernel "k") loaded. */
static int channel_with_module(struct test_env *e, int *ret_sup)
{
	static uint8_t buf[IPC_MSG_MAX];
	struct ipc_mod_load ml = { .mod_id = 7,
				   .lang = GPUX_LANG_HOST,
				   .code_len = sizeof(code) - 1 };
	int chan = test_raw_channel(&e->d, ret_sup);
	int n = ipc_encode_mod_load(buf, sizeof(buf), 1, &ml, "", code);

	assert_int_equal(test_raw_call(chan, buf, (size_t)n, NULL, 0), GPUX_OK);
	return chan;
}

/* A SUBMIT of kernel "k" with its fixed part as given (module 7 unless it names another). */
static size_t submit_msg(uint8_t *buf, uint32_t id, struct ipc_submit s, const struct ipc_arg *args)
{
	struct ipc_part parts[2] = { { args, (size_t)s.nargs * sizeof(*args) }, { "k", 1 } };
	int n;

	if (!s.mod_id)
		s.mod_id = 7;
	s.name_len = 1;
	n = ipc_encode(buf, IPC_MSG_MAX, IPC_SUBMIT, id, 0, &s, sizeof(s), parts, 2);
	assert_true(n > 0);
	return (size_t)n;
}

static const struct ipc_submit one = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };

/* Send a message and expect the DONE that answers it to carry `status` and `words`. */
static void expect_refusal(int chan, const void *msg, size_t n, int status, const char *words)
{
	char text[512];

	assert_int_equal(test_raw_call(chan, msg, n, text, sizeof(text)), status);
	if (!strstr(text, words))
		fail_msg("\"%s\" does not say \"%s\"", text, words);
}

static void test_e2e_refusals_malformed_requests_are_answered(void **state)
{
	struct test_env *e = *state;
	static uint8_t buf[IPC_MSG_MAX];
	static struct ipc_arg many[IPC_ARGS_MAX + 1];
	pid_t worker = test_worker_pid(&e->d, 0);
	struct ipc_submit s = one;
	int sup, chan = channel_with_module(e, &sup), n;

	/* A grid dimension of 2^31, and more arguments than there may be. */
	s.grid[0] = 1u << 31;
	expect_refusal(chan, buf, submit_msg(buf, 2, s, NULL), GPUX_E_INVAL, "grid");
	s = one;
	s.nargs = IPC_ARGS_MAX + 1;
	for (unsigned i = 0; i < s.nargs; i++)
		many[i] = (struct ipc_arg){ .kind = GPUX_ARG_SCALAR, .size = 4 };
	expect_refusal(chan, buf, submit_msg(buf, 3, s, many), GPUX_E_INVAL, "arguments");

	/* A module in no language, and a module id used twice. */
	{
		struct ipc_mod_load ml = { .mod_id = 8, .lang = 99, .code_len = sizeof(code) - 1 };
		struct ipc_part parts[1] = { { code, sizeof(code) - 1 } };

		n = ipc_encode(buf, sizeof(buf), IPC_MOD_LOAD, 4, 0, &ml, sizeof(ml), parts, 1);
		expect_refusal(chan, buf, (size_t)n, GPUX_E_INVAL, "malformed mod-load");
		ml.mod_id = 7;
		ml.lang = GPUX_LANG_HOST;
		n = ipc_encode_mod_load(buf, sizeof(buf), 5, &ml, "", code);
		expect_refusal(chan, buf, (size_t)n, GPUX_E_INVAL, "in use");
	}

	/*
	 * A load that asks for no answer (as the library sends them to other devices than the
	 * first) whose code is not sealed: the requests naming it are told.
	 */
	{
		struct ipc_mod_load ml = { .mod_id = 9,
					   .lang = GPUX_LANG_HOST,
					   .flags = IPC_MOD_CODE_FD,
					   .code_len = sizeof(code) - 1 };
		int fd = memfd_create("unsealed", MFD_CLOEXEC);

		assert_true(fd >= 0);
		assert_int_equal(write(fd, code, sizeof(code) - 1), (ssize_t)sizeof(code) - 1);
		n = ipc_encode_mod_load(buf, sizeof(buf), 0, &ml, "", NULL);
		assert_int_equal(ipc_channel_send(chan, buf, (size_t)n, &fd, 1, 0), 0);
		(void)close(fd);
		s = one;
		s.mod_id = 9;
		expect_refusal(chan, buf, submit_msg(buf, 15, s, NULL), GPUX_E_INVAL, "sealed");
	}

	/* The default queue opened, a queue opened twice. */
	{
		struct ipc_queue_msg q = { .queue = 0 };

		n = ipc_encode(buf, sizeof(buf), IPC_QUEUE_OPEN, 6, 0, &q, sizeof(q), NULL, 0);
		expect_refusal(chan, buf, (size_t)n, GPUX_E_INVAL, "default");
		q.queue = 3;
		n = ipc_encode(buf, sizeof(buf), IPC_QUEUE_OPEN, 7, 0, &q, sizeof(q), NULL, 0);
		assert_int_equal(test_raw_call(chan, buf, (size_t)n, NULL, 0), GPUX_OK);
		n = ipc_encode(buf, sizeof(buf), IPC_QUEUE_OPEN, 8, 0, &q, sizeof(q), NULL, 0);
		expect_refusal(chan, buf, (size_t)n, GPUX_E_INVAL, "open already");
	}

	/* A device buffer of no bytes, one id twice, a copy in no direction. */
	{
		struct ipc_dbuf_alloc a = { .dbuf_id = 1, .size = 0 };
		struct ipc_copy c = { .dbuf_id = 1, .seg_id = 1, .size = 4, .dir = 9 };

		n = ipc_encode(buf, sizeof(buf), IPC_DBUF_ALLOC, 9, 0, &a, sizeof(a), NULL, 0);
		expect_refusal(chan, buf, (size_t)n, GPUX_E_INVAL, "malformed dbuf-alloc");
		a.size = 64;
		n = ipc_encode(buf, sizeof(buf), IPC_DBUF_ALLOC, 10, 0, &a, sizeof(a), NULL, 0);
		assert_int_equal(test_raw_call(chan, buf, (size_t)n, NULL, 0), GPUX_OK);
		n = ipc_encode(buf, sizeof(buf), IPC_DBUF_ALLOC, 11, 0, &a, sizeof(a), NULL, 0);
		expect_refusal(chan, buf, (size_t)n, GPUX_E_INVAL, "in use");
		n = ipc_encode(buf, sizeof(buf), IPC_COPY, 12, 0, &c, sizeof(c), NULL, 0);
		expect_refusal(chan, buf, (size_t)n, GPUX_E_INVAL, "malformed copy");
	}

	/* A message that has no business on a channel, but asks for an answer. */
	{
		struct ipc_hello h = { .min_version = IPC_VERSION, .max_version = IPC_VERSION };

		n = ipc_encode(buf, sizeof(buf), IPC_HELLO, 13, 0, &h, sizeof(h), NULL, 0);
		expect_refusal(chan, buf, (size_t)n, GPUX_E_INVAL, "not for a worker");
	}

	/* Letting go of what is not there changes nothing. */
	{
		struct ipc_queue_msg q = { .queue = 42 };
		struct ipc_dbuf_free f = { .dbuf_id = 42 };
		struct ipc_seg_drop sd = { .seg_id = 42 };
		struct ipc_mod_drop md = { .mod_id = 42 };

		n = ipc_encode(buf, sizeof(buf), IPC_QUEUE_CLOSE, 0, 0, &q, sizeof(q), NULL, 0);
		assert_int_equal(ipc_channel_send(chan, buf, (size_t)n, NULL, 0, 0), 0);
		n = ipc_encode(buf, sizeof(buf), IPC_DBUF_FREE, 0, 0, &f, sizeof(f), NULL, 0);
		assert_int_equal(ipc_channel_send(chan, buf, (size_t)n, NULL, 0, 0), 0);
		n = ipc_encode(buf, sizeof(buf), IPC_SEG_DROP, 0, 0, &sd, sizeof(sd), NULL, 0);
		assert_int_equal(ipc_channel_send(chan, buf, (size_t)n, NULL, 0, 0), 0);
		n = ipc_encode(buf, sizeof(buf), IPC_MOD_DROP, 0, 0, &md, sizeof(md), NULL, 0);
		assert_int_equal(ipc_channel_send(chan, buf, (size_t)n, NULL, 0, 0), 0);
	}

	/* The same channel still serves. */
	assert_int_equal(test_raw_call(chan, buf, submit_msg(buf, 14, one, NULL), NULL, 0),
			 GPUX_OK);
	(void)close(chan);
	(void)close(sup);
	assert_int_equal(test_worker_pid(&e->d, 0), worker);
	test_env_still_serves(e);
}

/* A SUBMIT reading 16 bytes of segment `seg`. */
static size_t submit_reading(uint8_t *buf, uint32_t id, uint64_t seg)
{
	struct ipc_arg arg = { .kind = GPUX_ARG_IN, .ref = seg, .size = 16 };
	struct ipc_submit s = one;

	s.nargs = 1;
	return submit_msg(buf, id, s, &arg);
}

/* Segments the worker cannot use are refused to the requests that name them, with why. */
static void test_e2e_refusals_refused_segments_are_told_on_use(void **state)
{
	struct test_env *e = *state;
	static uint8_t buf[IPC_MSG_MAX];
	pid_t worker = test_worker_pid(&e->d, 0);
	int sup, chan = channel_with_module(e, &sup), p[2], fd;

	/* A pipe. */
	assert_int_equal(pipe2(p, O_CLOEXEC), 0);
	test_send_seg(chan, 1, 4096, 0, p[0]);
	(void)close(p[0]);
	(void)close(p[1]);
	expect_refusal(chan, buf, submit_reading(buf, 2, 1), GPUX_E_INVAL, "sealed");

	/* A memfd that could still shrink (a SIGBUS waiting to happen). */
	fd = memfd_create("unsealed", MFD_CLOEXEC);
	assert_int_equal(ftruncate(fd, 4096), 0);
	test_send_seg(chan, 2, 4096, 0, fd);
	(void)close(fd);
	expect_refusal(chan, buf, submit_reading(buf, 3, 2), GPUX_E_INVAL, "sealed");

	/* A sealed memfd shorter than it claims. */
	assert_int_equal(ipc_segment_create("short", 4096, &fd), 0);
	test_send_seg(chan, 3, 1 << 20, 0, fd);
	expect_refusal(chan, buf, submit_reading(buf, 4, 3), GPUX_E_INVAL, "4096 bytes");

	/* Frozen, it says, yet writable. */
	test_send_seg(chan, 4, 4096, IPC_SEG_FROZEN, fd);
	expect_refusal(chan, buf, submit_reading(buf, 5, 4), GPUX_E_PERM, "writing");

	/* A good one, then its id again. */
	test_send_seg(chan, 5, 4096, 0, fd);
	assert_int_equal(test_raw_call(chan, buf, submit_reading(buf, 6, 5), NULL, 0), GPUX_OK);
	test_send_seg(chan, 5, 4096, 0, fd);
	expect_refusal(chan, buf, submit_reading(buf, 7, 5), GPUX_E_INVAL, "twice");

	/* The channel still serves, segments as well. */
	test_send_seg(chan, 6, 4096, 0, fd);
	(void)close(fd);
	assert_int_equal(test_raw_call(chan, buf, submit_reading(buf, 8, 6), NULL, 0), GPUX_OK);
	(void)close(chan);
	(void)close(sup);
	assert_int_equal(test_worker_pid(&e->d, 0), worker);
	test_env_still_serves(e);
}

static uint64_t requests_failed(struct test_env *e)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	return devs[0].stats.requests_failed;
}

/* A launch the device cannot run is refused by the library, and only it: nothing is sent. */
static void test_e2e_refusals_bad_launch_shape_refused_at_submit(void **state)
{
	struct test_env *e = *state;
	static const struct gpux_launch bad[] = {
		{ .grid = { 1u << 31, 1, 1 }, .block = { 1, 1, 1 } },
		{ .grid = { 1, UINT32_MAX, 1 }, .block = { 1, 1, 1 } },
		{ .grid = { 1, 65536, 1 }, .block = { 1, 1, 1 } },
		{ .grid = { 1, 1, 1 }, .block = { 1025, 1, 1 } },
		{ .grid = { 1, 1, 1 }, .block = { 64, 64, 1 } },
		{ .grid = { 1, 1, 1 }, .block = { 1, 1, 65 } },
		{ .grid = { 1, 1, 1 }, .block = { 1, 1, 1 }, .shared_bytes = 2u << 20 },
	};
	uint64_t failed = requests_failed(e);

	for (unsigned i = 0; i < ARRAY_SIZE(bad); i++) {
		gpux_req *r = (gpux_req *)&failed;

		assert_int_equal(gpux_submit(e->m, "empty", &bad[i], NULL, 0, &r), GPUX_E_INVAL);
		assert_ptr_equal(r, (gpux_req *)&failed);
		assert_int_equal(gpux_run(e->m, "empty", &bad[i], NULL, 0), GPUX_E_INVAL);
	}
	assert_int_equal(requests_failed(e), failed);
	test_env_still_serves(e);
	{
		/* The largest the device allows is fine. */
		struct gpux_launch l = { .grid = { 3, 1, 1 },
					 .block = { 1024, 1, 1 },
					 .shared_bytes = 1u << 20 };
		assert_int_equal(gpux_run(e->m, "empty", &l, NULL, 0), GPUX_OK);
	}
}

/* The channel's last message says why it is dropped (a DONE without an id), then it ends. */
static void told_dropped(int chan, const char *words)
{
	static uint8_t buf[IPC_MSG_MAX];
	bool told = false;

	for (;;) {
		struct pollfd p = { .fd = chan, .events = POLLIN };
		struct ipc_done_msg d;
		struct ipc_msg m;
		int r;

		assert_int_equal(poll(&p, 1, 10000), 1);
		r = ipc_channel_recv_msg(chan, buf, sizeof(buf), &m, 0);
		if (r <= 0)
			break;
		ipc_msg_close_fds(&m);
		if (m.hdr.type != IPC_DONE || m.hdr.id != 0)
			continue;
		assert_int_equal(ipc_decode_done(&m, &d), 0);
		assert_int_equal(d.m.status, GPUX_E_PROTO);
		assert_non_null(memmem(d.text, d.m.text_len, words, strlen(words)));
		told = true;
	}
	assert_true(told);
}

/*
 * One of the library's SOCK_SEQPACKET sockets: the one to gpuxd, whose peer is bound to
 * `path`, or (path NULL) the channel to device 0, whose peer is unnamed.
 */
static int library_socket(const char *path)
{
	for (int fd = 3; fd < 1024; fd++) {
		struct sockaddr_un sa;
		socklen_t len = sizeof(sa);
		int type;
		socklen_t tlen = sizeof(type);

		if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tlen) < 0 ||
		    type != SOCK_SEQPACKET || getpeername(fd, (struct sockaddr *)&sa, &len) < 0)
			continue;
		if (path ? len > sizeof(sa_family_t) && strcmp(sa.sun_path, path) == 0
			 : len == sizeof(sa_family_t))
			return fd;
	}
	fail_msg("no socket of the library's found");
	return -1;
}

static int library_channel(void)
{
	return library_socket(NULL);
}

/*
 * A worker that drops the library's channel says why: the requests in flight there fail
 * with GPUX_E_PROTO and that reason, and the next call gets a new channel from gpuxd.
 */
static void test_e2e_refusals_dropped_library_client_is_told_and_recovers(void **state)
{
	struct test_env *e = *state;
	pid_t worker = test_worker_pid(&e->d, 0);
	uint8_t junk[300];
	gpux_req *r;

	test_env_still_serves(e);
	assert_int_equal(test_spin_submit(e->m, 0, 300, &r), GPUX_OK);
	/* A record the worker cannot frame: it can tie it to nothing, so it drops the channel. */
	memset(junk, 0xa5, sizeof(junk));
	assert_int_equal(send(library_channel(), junk, sizeof(junk), 0), (ssize_t)sizeof(junk));
	assert_int_equal(gpux_wait(r, 10000), GPUX_E_PROTO);
	assert_non_null(strstr(gpux_req_message(r), "dropped"));
	gpux_req_free(r);

	/* Not a dead device: the next requests run, on a channel of their own. */
	test_env_still_serves(e);
	assert_int_equal(test_spin_run(e->m, 0, 300), GPUX_OK);
	assert_int_equal(test_worker_pid(&e->d, 0), worker);
}

/*
 * Requests in flight when the channel ends: a spin of ms milliseconds, lost if the worker
 * began it, else run again on the next channel (client/replay.c), and behind it one that is
 * lost either way (it names a device buffer, gone with the channel), which is returned.
 */
static gpux_req *in_flight(struct test_env *e, uint32_t ms, gpux_req **ret_spin,
			   gpux_dbuf **ret_dbuf)
{
	struct gpux_launch l = { .grid = { 1 }, .block = { 1 }, .device = 0 };
	struct gpux_arg a;
	gpux_req *r;

	assert_int_equal(gpux_dbuf_alloc(e->ctx, 0, 64, ret_dbuf), GPUX_OK);
	assert_int_equal(test_spin_submit(e->m, 0, ms, ret_spin), GPUX_OK);
	a = gpux_arg_dbuf(*ret_dbuf, 0, 64);
	assert_int_equal(gpux_submit(e->m, "set_flag", &l, &a, 1, &r), GPUX_OK);
	return r;
}

/* The spin of in_flight(): whichever way it went, never another status. */
static void spin_done(gpux_req *spin)
{
	gpux_status st = gpux_wait(spin, 10000);

	assert_true(st == GPUX_OK || st == GPUX_E_WORKER_LOST);
	gpux_req_free(spin);
}

/*
 * A channel that ends without a word, its worker alive (here the library's own end is shut,
 * as when a worker with too many clients closes a new one): what was in flight is lost (this
 * one names a device buffer: it never runs again), and the next call gets a channel from
 * gpuxd at once, not after waiting for a restart that never comes.
 */
static void test_e2e_refusals_silent_end_with_live_worker_recovers(void **state)
{
	struct test_env *e = *state;
	pid_t worker = test_worker_pid(&e->d, 0);
	gpux_req *r, *spin;
	gpux_dbuf *db;

	test_env_still_serves(e);
	r = in_flight(e, 300, &spin, &db);
	assert_int_equal(shutdown(library_channel(), SHUT_RDWR), 0);
	assert_int_equal(gpux_wait(r, 10000), GPUX_E_WORKER_LOST);
	gpux_req_free(r);
	spin_done(spin);
	gpux_dbuf_free(db);

	/* Well inside the 30 s a restart is waited for. */
	(void)alarm(20);
	assert_int_equal(test_spin_run(e->m, 0, 300), GPUX_OK);
	(void)alarm(0);
	test_env_still_serves(e);
	assert_int_equal(test_worker_pid(&e->d, 0), worker);
}

/* Whether process pid is stopped (its state in /proc/PID/stat is T). */
static bool stopped(pid_t pid)
{
	char path[64], buf[512];
	const char *f;

	(void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = proc_stat_fields(path, buf, sizeof(buf));
	return f && *f == 'T';
}

/* Resumes a stopped gpuxd RESUME_AFTER_MS after the test says go on `go`, or after
 * RESUME_ANYWAY_MS without it: a failed check must not leave gpuxd stopped. */
#define RESUME_AFTER_MS 300
#define RESUME_ANYWAY_MS 5000
struct resumer {
	pid_t pid;
	int go[2];
};

static void *resume_later(void *arg)
{
	struct resumer *rs = arg;
	struct pollfd p = { .fd = rs->go[0], .events = POLLIN };

	if (poll(&p, 1, RESUME_ANYWAY_MS) == 1)
		(void)usleep(RESUME_AFTER_MS * 1000);
	(void)kill(rs->pid, SIGCONT);
	return NULL;
}

/*
 * A wish for a new channel that gpuxd's socket cannot take (gpuxd busy: its queue from this
 * client is full) is sent again while the call waits, not lost for the call's 30 s. Here
 * gpuxd is stopped and its queue filled with wishes for a worker generation that never ran
 * (gpuxd answers none of them); then the channel ends and the next run must wait for the
 * library's own wish to get through once gpuxd goes on.
 */
static void test_e2e_refusals_channel_wish_sent_again_when_gpuxd_was_full(void **state)
{
	struct test_env *e = *state;
	struct ipc_channel_req q = { .device = 0, .generation = UINT32_MAX };
	pid_t worker = test_worker_pid(&e->d, 0);
	uint8_t buf[64];
	struct resumer rs = { .pid = e->d.pid };
	gpux_req *r, *spin;
	gpux_dbuf *db;
	pthread_t t;
	int fd, n, sent = 0;

	test_env_still_serves(e);
	assert_int_equal(pipe2(rs.go, O_CLOEXEC), 0);
	assert_int_equal(kill(e->d.pid, SIGSTOP), 0);
	/* Resumed once the library is to ask (a loaded machine may take long to get there, and
	 * gpuxd must still be stopped then), or anyway after a while. */
	assert_int_equal(pthread_create(&t, NULL, resume_later, &rs), 0);
	for (int i = 0; i < RESUME_ANYWAY_MS / 2 && !stopped(e->d.pid); i++)
		(void)usleep(1000);
	assert_true(stopped(e->d.pid));
	fd = library_socket(e->d.sock);
	n = ipc_encode(buf, sizeof(buf), IPC_CHANNEL_REQ, 0, 0, &q, sizeof(q), NULL, 0);
	assert_true(n > 0);
	while (sent < 100000 && send(fd, buf, (size_t)n, MSG_DONTWAIT) == n)
		sent++;
	assert_int_equal(errno, EAGAIN);

	r = in_flight(e, 50, &spin, &db);
	assert_int_equal(shutdown(library_channel(), SHUT_RDWR), 0);
	assert_int_equal(gpux_wait(r, 10000), GPUX_E_WORKER_LOST);
	gpux_req_free(r);
	gpux_dbuf_free(db);

	assert_int_equal(write(rs.go[1], "", 1), 1);
	(void)alarm(20);
	assert_int_equal(test_spin_run(e->m, 0, 50), GPUX_OK);
	spin_done(spin);
	(void)alarm(0);
	assert_int_equal(pthread_join(t, NULL), 0);
	(void)close(rs.go[0]);
	(void)close(rs.go[1]);
	test_env_still_serves(e);
	assert_int_equal(test_worker_pid(&e->d, 0), worker);
}

struct limit_restore {
	pid_t pid;
	struct rlimit old;
};

static void *restore_limit_later(void *arg)
{
	struct limit_restore *lr = arg;

	(void)usleep(300 * 1000);
	(void)prlimit(lr->pid, RLIMIT_NOFILE, &lr->old, NULL);
	return NULL;
}

/*
 * gpuxd that cannot make a client's channel (out of fds: room for the new connection, not
 * for a socket pair) says the device's state, and makes the channel once it can: the client
 * is not left with a ready device and no channel until the next restart.
 */
static void test_e2e_refusals_channel_made_later_when_gpuxd_was_out_of_fds(void **state)
{
	struct test_env *e = *state;
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	struct limit_restore lr = { .pid = e->d.pid };
	struct rlimit low;
	gpux_module *m;
	gpux_ctx *ctx;
	pthread_t t;

	test_env_still_serves(e);
	assert_int_equal(prlimit(e->d.pid, RLIMIT_NOFILE, NULL, &lr.old), 0);
	low = lr.old;
	low.rlim_cur = (rlim_t)test_fd_count_of(e->d.pid) + 1;
	assert_int_equal(prlimit(e->d.pid, RLIMIT_NOFILE, &low, NULL), 0);
	/* Restored in a while whatever happens here: a failed check must not leave it low. */
	assert_int_equal(pthread_create(&t, NULL, restore_limit_later, &lr), 0);
	ctx = test_connect(&e->d);
	(void)alarm(20);
	m = test_load_host_kernels(ctx);
	assert_int_equal(gpux_run(m, "empty", &l, NULL, 0), GPUX_OK);
	(void)alarm(0);
	assert_int_equal(pthread_join(t, NULL), 0);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	test_env_still_serves(e);
}

/*
 * A channel the worker dropped is asked for again only while it is missing: after a restart
 * of the worker has brought a new channel already, asking gpuxd for one more would have the
 * worker drop the channel that the next request runs on.
 */
static void test_e2e_refusals_dropped_then_restarted_keeps_the_new_channel(void **state)
{
	struct test_env *e = *state;
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	static uint8_t buf[IPC_MSG_MAX];
	struct ipc_submit bad = one;
	gpux_req *r;
	size_t n;

	assert_int_equal(test_spin_submit(e->m, 0, 300, &r), GPUX_OK);
	/* A well-framed message that asks for no answer and cannot be: the worker drops the
	 * channel with its last word. */
	bad.grid[1] = 0;
	n = submit_msg(buf, 0, bad, NULL);
	assert_int_equal(send(library_channel(), buf, n, 0), (ssize_t)n);
	assert_int_equal(gpux_wait(r, 10000), GPUX_E_PROTO);
	gpux_req_free(r);

	/* Before the library needs device 0 again, its worker dies and comes back. */
	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	assert_int_equal(kill(test_worker_pid(&e->d, 0), SIGKILL), 0);
	test_wait_generation(&e->d, 0, devs[0].generation);
	assert_int_equal(test_spin_submit(e->m, 0, 300, &r), GPUX_OK);
	assert_int_equal(gpux_wait(r, 10000), GPUX_OK);
	gpux_req_free(r);
	test_env_still_serves(e);
}

/* A broken message that asks for no answer: only its client goes. */
static void test_e2e_refusals_unanswerable_message_drops_only_its_client(void **state)
{
	struct test_env *e = *state;
	static uint8_t buf[IPC_MSG_MAX];
	pid_t worker = test_worker_pid(&e->d, 0);
	struct ipc_submit s = one;
	int sup, chan = channel_with_module(e, &sup);
	size_t n;

	s.grid[1] = 0;
	n = submit_msg(buf, 0, s, NULL);
	assert_int_equal(ipc_channel_send(chan, buf, n, NULL, 0, 0), 0);
	told_dropped(chan, "grid");
	(void)close(chan);
	(void)close(sup);
	assert_int_equal(test_worker_pid(&e->d, 0), worker);
	test_env_still_serves(e);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_e2e_refusals_malformed_requests_are_answered),
		cmocka_unit_test(test_e2e_refusals_bad_launch_shape_refused_at_submit),
		cmocka_unit_test(test_e2e_refusals_refused_segments_are_told_on_use),
		cmocka_unit_test(test_e2e_refusals_unanswerable_message_drops_only_its_client),
		cmocka_unit_test(test_e2e_refusals_dropped_library_client_is_told_and_recovers),
		cmocka_unit_test(test_e2e_refusals_silent_end_with_live_worker_recovers),
		cmocka_unit_test(test_e2e_refusals_channel_wish_sent_again_when_gpuxd_was_full),
		cmocka_unit_test(test_e2e_refusals_channel_made_later_when_gpuxd_was_out_of_fds),
		cmocka_unit_test(test_e2e_refusals_dropped_then_restarted_keeps_the_new_channel),
	};

	return cmocka_run_group_tests(tests, test_env_setup, test_env_teardown);
}
