/* SPDX-License-Identifier: MIT */
/* tests/test-ipc-channel.c: records with fds over SOCK_SEQPACKET; every fd closed on refusal. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel.h"
#include "helpers.h"
#include "macro.h"

#define FDS_MANY 8 /* more than IPC_FDS_MAX */

static uint8_t sbuf[IPC_MSG_MAX * 2], rbuf[IPC_MSG_MAX];

static void test_channel_pair_is_cloexec_seqpacket(void **state)
{
	int before = test_fd_count();

	for (int nonblock = 0; nonblock < 2; nonblock++) {
		int sv[2], type;
		socklen_t sl = sizeof(type);

		assert_int_equal(ipc_channel_pair(sv, nonblock), 0);
		for (unsigned i = 0; i < 2; i++) {
			assert_true(test_fd_cloexec(sv[i]));
			assert_int_equal(!!(fcntl(sv[i], F_GETFL) & O_NONBLOCK), nonblock);
			assert_int_equal(getsockopt(sv[i], SOL_SOCKET, SO_TYPE, &type, &sl), 0);
			assert_int_equal(type, SOCK_SEQPACKET);
		}
		test_close_all(sv, 2);
	}
	assert_no_fd_leak(before);
}

static void test_channel_send_recv_with_fds(void **state)
{
	int before = test_fd_count();
	int sv[2];

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	for (unsigned nfds = 0; nfds <= IPC_FDS_MAX; nfds++) {
		int fds[IPC_FDS_MAX], got[IPC_FDS_MAX];
		uint8_t payload[100];
		unsigned got_n = 99;
		size_t len;

		test_random_fill(payload, sizeof(payload), nfds);
		len = test_msg_make(sbuf, IPC_ATTACH, nfds, nfds, payload, sizeof(payload));
		test_open_files(fds, nfds);
		assert_int_equal(ipc_channel_send(sv[0], sbuf, len, fds, nfds, 0), 0);
		assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &got_n, 0),
				 (ssize_t)len);
		assert_memory_equal(rbuf, sbuf, len);
		assert_int_equal(got_n, nfds);
		for (unsigned i = 0; i < nfds; i++) {
			assert_true(test_fd_cloexec(got[i]));
			assert_true(test_same_file(got[i], fds[i]));
			assert_int_not_equal(got[i], fds[i]);
		}
		test_close_all(got, nfds);
		test_close_all(fds, nfds);
	}
	test_close_all(sv, 2);
	assert_no_fd_leak(before);
}

static void test_channel_records_keep_boundaries(void **state)
{
	int before = test_fd_count();
	int sv[2], none[IPC_FDS_MAX];
	unsigned n;

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	for (uint32_t i = 1; i <= 50; i++) {
		size_t len = test_msg_make(sbuf, IPC_DONE, i, 0, sbuf + IPC_MSG_MAX, i * 50);
		assert_int_equal(ipc_channel_send(sv[0], sbuf, len, NULL, 0, MSG_DONTWAIT), 0);
	}
	for (uint32_t i = 1; i <= 50; i++) {
		assert_int_equal(
			ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), none, &n, MSG_DONTWAIT),
			(ssize_t)(sizeof(struct ipc_hdr) + i * 50));
		assert_int_equal(test_hdr_get(rbuf).id, i);
		assert_int_equal(n, 0);
	}
	test_close_all(sv, 2);
	assert_no_fd_leak(before);
}

static void test_channel_recv_msg_parses(void **state)
{
	int before = test_fd_count();
	struct ipc_msg msg;
	int sv[2], fds[3];
	size_t len;
	int fd;

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_open_files(fds, 3);
	len = test_msg_make(sbuf, IPC_SEG_DROP, 77, 3, "12345678", 8);
	assert_int_equal(ipc_channel_send(sv[0], sbuf, len, fds, 3, 0), 0);
	assert_int_equal(ipc_channel_recv_msg(sv[1], rbuf, sizeof(rbuf), &msg, 0), 1);
	assert_int_equal(msg.hdr.type, IPC_SEG_DROP);
	assert_int_equal(msg.hdr.id, 77);
	assert_int_equal(msg.len, 8);
	assert_ptr_equal(msg.payload, rbuf + sizeof(struct ipc_hdr));
	assert_int_equal(msg.nfds, 3);
	assert_int_equal(msg.fds[3], -1);

	/* Take one fd; closing the message closes only the others. */
	fd = ipc_msg_take_fd(&msg, 1);
	assert_true(test_same_file(fd, fds[1]));
	assert_int_equal(msg.fds[1], -1);
	assert_int_equal(ipc_msg_take_fd(&msg, IPC_FDS_MAX), -1);
	ipc_msg_close_fds(&msg);
	assert_int_equal(msg.nfds, 0);
	for (unsigned i = 0; i < IPC_FDS_MAX; i++)
		assert_int_equal(msg.fds[i], -1);
	assert_int_equal(test_fd_count(), before + 2 + 3 + 1);
	ipc_msg_close_fds(&msg);
	(void)close(fd);
	test_close_all(fds, 3);
	test_close_all(sv, 2);
	assert_no_fd_leak(before);
}

static void test_channel_recv_blocks_until_message(void **state)
{
	int before = test_fd_count();
	int sv[2], got[IPC_FDS_MAX];
	unsigned n;
	pid_t pid;
	size_t len = test_msg_make(sbuf, IPC_HELLO, 5, 0, NULL, 0);

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		(void)usleep(50 * 1000);
		_exit(ipc_channel_send(sv[0], sbuf, len, NULL, 0, 0) == 0 ? 0 : 1);
	}
	assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, 0), (ssize_t)len);
	assert_int_equal(test_hdr_get(rbuf).id, 5);
	assert_child_ok(pid);
	test_close_all(sv, 2);
	assert_no_fd_leak(before);
}

static void test_channel_recv_empty_is_eagain(void **state)
{
	int before = test_fd_count();
	int sv[2], got[IPC_FDS_MAX];
	unsigned n = 99;
	struct ipc_msg msg;

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, MSG_DONTWAIT),
			 -EAGAIN);
	assert_int_equal(n, 0);
	assert_int_equal(ipc_channel_recv_msg(sv[1], rbuf, sizeof(rbuf), &msg, MSG_DONTWAIT),
			 -EAGAIN);
	test_close_all(sv, 2);

	assert_int_equal(ipc_channel_pair(sv, true), 0);
	assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, 0), -EAGAIN);
	test_close_all(sv, 2);
	assert_no_fd_leak(before);
}

static void test_channel_recv_hangup_returns_zero(void **state)
{
	int before = test_fd_count();
	int sv[2], got[IPC_FDS_MAX], fd;
	unsigned n = 99;
	struct ipc_msg msg;
	size_t len = test_msg_make(sbuf, IPC_HELLO, 1, 1, NULL, 0);

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_open_files(&fd, 1);
	/* What was sent before the hang-up still arrives first. */
	assert_int_equal(ipc_channel_send(sv[0], sbuf, len, &fd, 1, 0), 0);
	test_close_all(&fd, 1);
	test_close_all(&sv[0], 1);
	assert_int_equal(ipc_channel_recv_msg(sv[1], rbuf, sizeof(rbuf), &msg, 0), 1);
	ipc_msg_close_fds(&msg);
	assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, 0), 0);
	assert_int_equal(n, 0);
	assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, MSG_DONTWAIT), 0);
	assert_int_equal(ipc_channel_recv_msg(sv[1], rbuf, sizeof(rbuf), &msg, 0), 0);
	test_close_all(&sv[1], 1);
	assert_no_fd_leak(before);
}

/*
 * sv[1] answers the message sv[0] sent it with `reply` (len bytes, nfds fds) and closes without
 * reading that message: the kernel then reports ECONNRESET to sv[0] once, before the reply.
 */
static void reply_and_reset(int sv[2], const void *reply, size_t len, const int *fds, unsigned nfds)
{
	int ours[2];
	size_t n;

	/* Fds in the unread message too: the kernel drops them with it. */
	test_open_files(ours, 2);
	n = test_msg_make(rbuf, IPC_HELLO, 1, 2, NULL, 0);
	assert_int_equal(ipc_channel_send(sv[0], rbuf, n, ours, 2, 0), 0);
	test_close_all(ours, 2);
	assert_int_equal(ipc_channel_send(sv[1], reply, len, fds, nfds, 0), 0);
	sv[1] = safe_close(sv[1]);
}

/* After the last record of a peer that is gone: the end (0), or an error, never "wait". */
static void assert_at_end(int fd)
{
	int got[IPC_FDS_MAX];
	unsigned n = 99;
	ssize_t r = ipc_channel_recv(fd, rbuf, sizeof(rbuf), got, &n, MSG_DONTWAIT);

	assert_true(r <= 0);
	assert_int_not_equal(r, -EAGAIN);
	assert_int_equal(n, 0);
}

static void test_channel_recv_reply_after_peer_reset(void **state)
{
	int before = test_fd_count();
	int sv[2], got[IPC_FDS_MAX];
	unsigned n = 99;
	size_t len = test_msg_make(sbuf, IPC_DONE, 2, 0, "refused", 7);
	char c;

	/* What the kernel does, which this test is about: ECONNRESET first, then the record. */
	assert_int_equal(ipc_channel_pair(sv, false), 0);
	reply_and_reset(sv, sbuf, len, NULL, 0);
	assert_int_equal(recv(sv[0], &c, 1, MSG_DONTWAIT), -1);
	assert_int_equal(errno, ECONNRESET);
	assert_int_equal(recv(sv[0], rbuf, sizeof(rbuf), MSG_DONTWAIT), (ssize_t)len);
	test_close_all(sv, 2);

	/* ipc_channel_recv() gets the reply, blocking or not. */
	for (int flags = 0; flags <= MSG_DONTWAIT; flags += MSG_DONTWAIT) {
		assert_int_equal(ipc_channel_pair(sv, false), 0);
		reply_and_reset(sv, sbuf, len, NULL, 0);
		assert_int_equal(ipc_channel_recv(sv[0], rbuf, sizeof(rbuf), got, &n, flags),
				 (ssize_t)len);
		assert_memory_equal(rbuf, sbuf, len);
		assert_int_equal(n, 0);
		assert_at_end(sv[0]);
		test_close_all(sv, 2);
	}

	/* With nothing sent before the reset, that is just the end. */
	assert_int_equal(ipc_channel_pair(sv, false), 0);
	assert_int_equal(ipc_channel_send(sv[0], sbuf, len, NULL, 0, 0), 0);
	sv[1] = safe_close(sv[1]);
	assert_at_end(sv[0]);
	test_close_all(sv, 2);
	assert_no_fd_leak(before);
}

static void test_channel_recv_reply_with_fds_after_peer_reset(void **state)
{
	int before = test_fd_count();
	struct ipc_msg msg;
	int sv[2], fds[3];
	size_t len = test_msg_make(sbuf, IPC_SEG_ADD, 2, 3, "12345678", 8);

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_open_files(fds, 3);
	reply_and_reset(sv, sbuf, len, fds, 3);
	assert_int_equal(ipc_channel_recv_msg(sv[0], rbuf, sizeof(rbuf), &msg, 0), 1);
	assert_int_equal(msg.hdr.type, IPC_SEG_ADD);
	assert_int_equal(msg.hdr.id, 2);
	assert_int_equal(msg.nfds, 3);
	for (unsigned i = 0; i < 3; i++) {
		assert_true(test_fd_cloexec(msg.fds[i]));
		assert_true(test_same_file(msg.fds[i], fds[i]));
	}
	/* Ours, the peer's socket gone, and the three that came. */
	assert_int_equal(test_fd_count(), before + 1 + 3 + 3);
	ipc_msg_close_fds(&msg);
	test_close_all(fds, 3);
	assert_at_end(sv[0]);
	test_close_all(sv, 2);
	assert_no_fd_leak(before);
}

static void test_channel_send_to_closed_peer_is_epipe(void **state)
{
	int before = test_fd_count();
	struct sigaction old, dfl = { .sa_handler = SIG_DFL };
	int sv[2], fd;
	size_t len = test_msg_make(sbuf, IPC_HELLO, 1, 1, NULL, 0);

	/* SIGPIPE would kill the test: MSG_NOSIGNAL must prevent it. */
	assert_int_equal(sigaction(SIGPIPE, &dfl, &old), 0);
	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_open_files(&fd, 1);
	test_close_all(&sv[1], 1);
	assert_int_equal(ipc_channel_send(sv[0], sbuf, len, &fd, 1, 0), -EPIPE);
	assert_int_equal(ipc_channel_send(sv[0], sbuf, len, NULL, 0, MSG_DONTWAIT), -EPIPE);
	test_close_all(&fd, 1);
	test_close_all(&sv[0], 1);
	assert_int_equal(sigaction(SIGPIPE, &old, NULL), 0);
	assert_no_fd_leak(before);
}

static void test_channel_send_rejects_too_many_fds(void **state)
{
	int before = test_fd_count();
	int sv[2], fds[IPC_FDS_MAX + 1], got[IPC_FDS_MAX];
	unsigned n;
	size_t len = test_msg_make(sbuf, IPC_HELLO, 1, 0, NULL, 0);

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_open_files(fds, IPC_FDS_MAX + 1);
	assert_int_equal(ipc_channel_send(sv[0], sbuf, len, fds, IPC_FDS_MAX + 1, 0), -EINVAL);
	assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, MSG_DONTWAIT),
			 -EAGAIN);
	test_close_all(fds, IPC_FDS_MAX + 1);
	test_close_all(sv, 2);
	assert_no_fd_leak(before);
}

static void test_channel_send_full_socket_is_eagain(void **state)
{
	int before = test_fd_count();
	int sv[2], got[IPC_FDS_MAX];
	unsigned n, sent = 0;
	int r = 0;

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	while (sent < 100000) {
		size_t len = test_msg_make(sbuf, IPC_DONE, sent, 0, sbuf + IPC_MSG_MAX, 1000);

		r = ipc_channel_send(sv[0], sbuf, len, NULL, 0, MSG_DONTWAIT);
		if (r < 0)
			break;
		sent++;
	}
	assert_int_equal(r, -EAGAIN);
	assert_true(sent > 0);
	for (unsigned i = 0; i < sent; i++) {
		assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, MSG_DONTWAIT),
				 (ssize_t)(sizeof(struct ipc_hdr) + 1000));
		assert_int_equal(test_hdr_get(rbuf).id, i);
	}
	assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, MSG_DONTWAIT),
			 -EAGAIN);
	test_close_all(sv, 2);
	assert_no_fd_leak(before);
}

static void test_channel_recv_refuses_too_many_fds(void **state)
{
	int before = test_fd_count();
	int sv[2], fds[FDS_MANY], got[IPC_FDS_MAX];
	unsigned n = 99;
	size_t len = test_msg_make(sbuf, IPC_HELLO, 1, 0, NULL, 0);

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_open_files(fds, FDS_MANY);
	for (unsigned nfds = IPC_FDS_MAX + 1; nfds <= FDS_MANY; nfds++) {
		int open_before = test_fd_count();

		test_send_raw(sv[0], sbuf, len, fds, nfds);
		assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, 0),
				 -ETOOMANYREFS);
		assert_int_equal(n, 0);
		assert_no_fd_leak(open_before);
	}
	/* The channel still works for the next record. */
	test_send_raw(sv[0], sbuf, len, fds, 2);
	assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, 0), (ssize_t)len);
	assert_int_equal(n, 2);
	test_close_all(got, 2);
	test_close_all(fds, FDS_MANY);
	test_close_all(sv, 2);
	assert_no_fd_leak(before);
}

static void test_channel_recv_refuses_oversized_record(void **state)
{
	int before = test_fd_count();
	int sv[2], fds[3], got[IPC_FDS_MAX];
	unsigned n = 99;

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_open_files(fds, 3);

	test_send_raw(sv[0], sbuf, 200, fds, 3);
	assert_int_equal(ipc_channel_recv(sv[1], rbuf, 100, got, &n, 0), -EMSGSIZE);
	assert_int_equal(n, 0);
	assert_int_equal(test_fd_count(), before + 2 + 3);

	/* One byte over the protocol's limit, into a buffer of exactly the limit. */
	test_send_raw(sv[0], sbuf, IPC_MSG_MAX + 1, fds, 2);
	assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, 0), -EMSGSIZE);
	assert_int_equal(test_fd_count(), before + 2 + 3);

	test_send_raw(sv[0], sbuf, IPC_MSG_MAX, fds, 1);
	assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, 0), IPC_MSG_MAX);
	assert_int_equal(n, 1);
	test_close_all(got, 1);
	test_close_all(fds, 3);
	test_close_all(sv, 2);
	assert_no_fd_leak(before);
}

static void test_channel_recv_refuses_credentials(void **state)
{
	int before = test_fd_count();
	int sv[2], fds[2], got[IPC_FDS_MAX], one = 1;
	unsigned n = 99;
	ssize_t r;
	size_t len = test_msg_make(sbuf, IPC_HELLO, 1, 0, NULL, 0);

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	assert_int_equal(setsockopt(sv[1], SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)), 0);
	assert_int_equal(ipc_channel_send(sv[0], sbuf, len, NULL, 0, 0), 0);
	assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, 0), -EBADMSG);
	assert_int_equal(n, 0);

	/* With fds too: refused as well (the credentials leave the fds no room: MSG_CTRUNC), and
	 * none of them stays open. */
	test_open_files(fds, 2);
	len = test_msg_make(sbuf, IPC_HELLO, 1, 2, NULL, 0);
	assert_int_equal(ipc_channel_send(sv[0], sbuf, len, fds, 2, 0), 0);
	test_close_all(fds, 2);
	r = ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, 0);
	assert_true(r == -EBADMSG || r == -ETOOMANYREFS);
	assert_int_equal(n, 0);
	assert_int_equal(test_fd_count(), before + 2);
	test_close_all(sv, 2);
	assert_no_fd_leak(before);
}

static void test_channel_recv_refuses_empty_record_with_fds(void **state)
{
	int before = test_fd_count();
	int sv[2], fds[2], got[IPC_FDS_MAX];
	unsigned n = 99;

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_open_files(fds, 2);
	test_send_raw(sv[0], sbuf, 0, fds, 2);
	test_close_all(fds, 2);
	assert_int_equal(ipc_channel_recv(sv[1], rbuf, sizeof(rbuf), got, &n, 0), -EBADMSG);
	assert_int_equal(n, 0);
	test_close_all(sv, 2);
	assert_no_fd_leak(before);
}

static void test_channel_recv_msg_refuses_bad_headers(void **state)
{
	int before = test_fd_count();
	int sv[2], fds[3];
	struct ipc_msg msg;
	struct ipc_hdr h;
	size_t len;

	assert_int_equal(ipc_channel_pair(sv, false), 0);
	test_open_files(fds, 3);

	len = test_msg_make(sbuf, IPC_HELLO, 1, 3, NULL, 0);
	h = test_hdr_get(sbuf);
	h.magic ^= 1;
	test_hdr_set(sbuf, &h);
	assert_int_equal(ipc_channel_send(sv[0], sbuf, len, fds, 3, 0), 0);
	assert_int_equal(ipc_channel_recv_msg(sv[1], rbuf, sizeof(rbuf), &msg, 0), -EBADMSG);
	assert_int_equal(test_fd_count(), before + 2 + 3);

	/* The header announces one fd, two came. */
	len = test_msg_make(sbuf, IPC_HELLO, 1, 1, NULL, 0);
	assert_int_equal(ipc_channel_send(sv[0], sbuf, len, fds, 2, 0), 0);
	assert_int_equal(ipc_channel_recv_msg(sv[1], rbuf, sizeof(rbuf), &msg, 0), -EBADMSG);
	assert_int_equal(test_fd_count(), before + 2 + 3);

	len = test_msg_make(sbuf, IPC_SEG_DROP, 1, 2, NULL, 0);
	h = test_hdr_get(sbuf);
	h.version = IPC_VERSION + 1;
	test_hdr_set(sbuf, &h);
	assert_int_equal(ipc_channel_send(sv[0], sbuf, len, fds, 2, 0), 0);
	assert_int_equal(ipc_channel_recv_msg(sv[1], rbuf, sizeof(rbuf), &msg, 0),
			 -EPROTONOSUPPORT);
	assert_int_equal(test_fd_count(), before + 2 + 3);

	/* Shorter than a header. */
	assert_int_equal(ipc_channel_send(sv[0], sbuf, 8, fds, 1, 0), 0);
	assert_int_equal(ipc_channel_recv_msg(sv[1], rbuf, sizeof(rbuf), &msg, 0), -EBADMSG);
	assert_int_equal(test_fd_count(), before + 2 + 3);

	test_close_all(fds, 3);
	test_close_all(sv, 2);
	assert_no_fd_leak(before);
}

/* A msghdr as recvmsg() would fill it, built by hand: for ipc_channel_take_fds() alone. */
struct fake_recv {
	struct msghdr mh;
	_Alignas(struct cmsghdr) char control[2 * CMSG_SPACE(sizeof(int) * FDS_MANY)];
	struct cmsghdr *last;
};

static void fake_init(struct fake_recv *f, int flags)
{
	memset(f, 0, sizeof(*f));
	f->mh.msg_control = f->control;
	f->mh.msg_flags = flags;
}

/* Append a control message of `type` with n fds, each a new file. */
static void fake_add(struct fake_recv *f, int level, int type, unsigned n)
{
	struct cmsghdr *c;
	int fds[FDS_MANY];

	f->mh.msg_controllen += CMSG_SPACE(sizeof(int) * n);
	c = f->last ? CMSG_NXTHDR(&f->mh, f->last) : CMSG_FIRSTHDR(&f->mh);
	assert_non_null(c);
	c->cmsg_level = level;
	c->cmsg_type = type;
	c->cmsg_len = CMSG_LEN(sizeof(int) * n);
	test_open_files(fds, n);
	memcpy(CMSG_DATA(c), fds, sizeof(int) * n);
	f->last = c;
}

static void test_channel_take_fds_closes_on_error(void **state)
{
	int before = test_fd_count();
	struct fake_recv f;
	int got[IPC_FDS_MAX];
	unsigned n = 99;

	fake_init(&f, 0);
	fake_add(&f, SOL_SOCKET, SCM_RIGHTS, 3);
	assert_int_equal(ipc_channel_take_fds(&f.mh, 40, got, &n), 40);
	assert_int_equal(n, 3);
	test_close_all(got, 3);
	assert_no_fd_leak(before);

	/* Two SCM_RIGHTS blocks: counted together. */
	fake_init(&f, 0);
	fake_add(&f, SOL_SOCKET, SCM_RIGHTS, 2);
	fake_add(&f, SOL_SOCKET, SCM_RIGHTS, 2);
	assert_int_equal(ipc_channel_take_fds(&f.mh, 16, got, &n), 16);
	assert_int_equal(n, 4);
	test_close_all(got, 4);
	assert_no_fd_leak(before);

	fake_init(&f, 0);
	fake_add(&f, SOL_SOCKET, SCM_RIGHTS, 3);
	fake_add(&f, SOL_SOCKET, SCM_RIGHTS, 2);
	assert_int_equal(ipc_channel_take_fds(&f.mh, 16, got, &n), -ETOOMANYREFS);
	assert_int_equal(n, 0);
	assert_no_fd_leak(before);

	fake_init(&f, 0);
	fake_add(&f, SOL_SOCKET, SCM_RIGHTS, FDS_MANY);
	assert_int_equal(ipc_channel_take_fds(&f.mh, 16, got, &n), -ETOOMANYREFS);
	assert_no_fd_leak(before);

	fake_init(&f, MSG_CTRUNC);
	fake_add(&f, SOL_SOCKET, SCM_RIGHTS, 2);
	assert_int_equal(ipc_channel_take_fds(&f.mh, 16, got, &n), -ETOOMANYREFS);
	assert_no_fd_leak(before);

	fake_init(&f, MSG_TRUNC);
	fake_add(&f, SOL_SOCKET, SCM_RIGHTS, 2);
	assert_int_equal(ipc_channel_take_fds(&f.mh, 16, got, &n), -EMSGSIZE);
	assert_no_fd_leak(before);

	/* Another control message beside the fds: refused, the fds closed. */
	fake_init(&f, 0);
	fake_add(&f, SOL_SOCKET, SCM_RIGHTS, 2);
	fake_add(&f, SOL_SOCKET, SCM_CREDENTIALS, 0);
	assert_int_equal(ipc_channel_take_fds(&f.mh, 16, got, &n), -EBADMSG);
	assert_int_equal(n, 0);
	assert_no_fd_leak(before);
}

/* Copies for later are each a new fd on the same file, close-on-exec, above stdio; when one
 * cannot be made, none is left open. */
static void test_fds_dup_all_or_none(void **state)
{
	int before = test_fd_count();
	int fds[IPC_FDS_MAX], copy[IPC_FDS_MAX];
	struct stat a, b;

	test_open_files(fds, IPC_FDS_MAX);
	assert_int_equal(ipc_fds_dup(fds, IPC_FDS_MAX, copy), 0);
	for (unsigned i = 0; i < IPC_FDS_MAX; i++) {
		assert_int_not_equal(copy[i], fds[i]);
		assert_true(copy[i] >= 3);
		assert_true(test_fd_cloexec(copy[i]));
		assert_int_equal(fstat(fds[i], &a), 0);
		assert_int_equal(fstat(copy[i], &b), 0);
		assert_true(a.st_ino == b.st_ino && a.st_dev == b.st_dev);
	}
	test_close_all(copy, IPC_FDS_MAX);

	/* The last one is closed: the copies of the others go again. */
	fds[IPC_FDS_MAX - 1] = safe_close(fds[IPC_FDS_MAX - 1]);
	copy[0] = -2;
	assert_int_equal(ipc_fds_dup(fds, IPC_FDS_MAX, copy), -EBADF);
	assert_int_equal(copy[0], -2);
	test_close_all(fds, IPC_FDS_MAX - 1);
	assert_no_fd_leak(before);

	assert_int_equal(ipc_fds_dup(fds, IPC_FDS_MAX + 1, copy), -EINVAL);
	assert_int_equal(ipc_fds_dup(NULL, 0, copy), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_channel_pair_is_cloexec_seqpacket),
		cmocka_unit_test(test_channel_send_recv_with_fds),
		cmocka_unit_test(test_channel_records_keep_boundaries),
		cmocka_unit_test(test_channel_recv_msg_parses),
		cmocka_unit_test(test_channel_recv_blocks_until_message),
		cmocka_unit_test(test_channel_recv_empty_is_eagain),
		cmocka_unit_test(test_channel_recv_hangup_returns_zero),
		cmocka_unit_test(test_channel_recv_reply_after_peer_reset),
		cmocka_unit_test(test_channel_recv_reply_with_fds_after_peer_reset),
		cmocka_unit_test(test_channel_send_to_closed_peer_is_epipe),
		cmocka_unit_test(test_channel_send_rejects_too_many_fds),
		cmocka_unit_test(test_channel_send_full_socket_is_eagain),
		cmocka_unit_test(test_channel_recv_refuses_too_many_fds),
		cmocka_unit_test(test_channel_recv_refuses_oversized_record),
		cmocka_unit_test(test_channel_recv_refuses_credentials),
		cmocka_unit_test(test_channel_recv_refuses_empty_record_with_fds),
		cmocka_unit_test(test_channel_recv_msg_refuses_bad_headers),
		cmocka_unit_test(test_channel_take_fds_closes_on_error),
		cmocka_unit_test(test_fds_dup_all_or_none),
	};

	return cmocka_run_group_tests_name("ipc-channel", tests, NULL, NULL);
}
