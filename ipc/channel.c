/* SPDX-License-Identifier: MIT */
/* ipc/channel.c: SOCK_SEQPACKET records with fd passing, closing every fd on refusal. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "channel.h"
#include "macro.h"

int ipc_channel_pair(int ret_fds[2], bool nonblock)
{
	int type = SOCK_SEQPACKET | SOCK_CLOEXEC | (nonblock ? SOCK_NONBLOCK : 0);

	if (socketpair(AF_UNIX, type, 0, ret_fds) < 0)
		return -errno;
	return 0;
}

int ipc_channel_send(int fd, const void *buf, size_t len, const int *fds, unsigned nfds, int flags)
{
	union {
		char buf[IPC_CMSG_SPACE];
		struct cmsghdr align;
	} control;
	struct iovec iov = { (void *)buf, len };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	ssize_t n;

	if (nfds > IPC_FDS_MAX)
		return -EINVAL;
	if (nfds > 0) {
		struct cmsghdr *c;

		memset(&control, 0, sizeof(control));
		mh.msg_control = control.buf;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
		c = CMSG_FIRSTHDR(&mh);
		c->cmsg_level = SOL_SOCKET;
		c->cmsg_type = SCM_RIGHTS;
		c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
		memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
	}
	do
		n = sendmsg(fd, &mh, MSG_NOSIGNAL | flags);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	/* SOCK_SEQPACKET sends a record whole or fails: anything else is a broken socket. */
	if ((size_t)n != len)
		return -EIO;
	return 0;
}

ssize_t ipc_channel_take_fds(const struct msghdr *mh, ssize_t n, int *fds, unsigned *ret_nfds)
{
	unsigned nfds = 0;
	int err = 0;

	for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR((struct msghdr *)mh, c)) {
		if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			const unsigned char *p = CMSG_DATA(c);

			for (size_t i = 0; i < k; i++) {
				int f;
				memcpy(&f, p + i * sizeof(int), sizeof(int));
				if (nfds < IPC_FDS_MAX)
					fds[nfds++] = f;
				else {
					(void)safe_close(f);
					err = -ETOOMANYREFS;
				}
			}
		} else
			err = -EBADMSG;
	}
	if (mh->msg_flags & MSG_CTRUNC)
		err = -ETOOMANYREFS;
	else if (mh->msg_flags & MSG_TRUNC)
		err = -EMSGSIZE;
	if (err < 0) {
		for (unsigned i = 0; i < nfds; i++)
			(void)safe_close(fds[i]);
		*ret_nfds = 0;
		return err;
	}
	*ret_nfds = nfds;
	return n;
}

ssize_t ipc_channel_recv(int fd, void *buf, size_t cap, int *fds, unsigned *ret_nfds, int flags)
{
	union {
		char buf[IPC_CMSG_SPACE];
		struct cmsghdr align;
	} control;
	struct iovec iov = { buf, cap };
	struct msghdr mh = {
		.msg_iov = &iov,
		.msg_iovlen = 1,
		.msg_control = control.buf,
		.msg_controllen = sizeof(control.buf),
	};
	ssize_t n;

	do
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | flags);
	while (n < 0 && errno == EINTR);
	/* A peer that closed with our message unread leaves ECONNRESET, reported once and before
	 * what it had sent us (a refusal, say): look for that before giving up. */
	if (n < 0 && errno == ECONNRESET) {
		mh.msg_controllen = sizeof(control.buf);
		n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
		if (n < 0)
			errno = ECONNRESET;
	}
	if (n < 0) {
		*ret_nfds = 0;
		return -errno;
	}
	n = ipc_channel_take_fds(&mh, n, fds, ret_nfds);
	if (n == 0 && *ret_nfds > 0) {
		/* An empty record is never sent by gpux: treat it as garbage, not as hang-up. */
		for (unsigned i = 0; i < *ret_nfds; i++)
			(void)safe_close(fds[i]);
		*ret_nfds = 0;
		return -EBADMSG;
	}
	return n;
}

int ipc_channel_recv_msg(int fd, void *buf, size_t cap, struct ipc_msg *ret, int flags)
{
	int fds[IPC_FDS_MAX];
	unsigned nfds;
	ssize_t n = ipc_channel_recv(fd, buf, cap, fds, &nfds, flags);
	int r;

	if (n <= 0)
		return (int)n;
	r = ipc_msg_parse(buf, (size_t)n, fds, nfds, ret);
	if (r < 0) {
		for (unsigned i = 0; i < nfds; i++)
			(void)safe_close(fds[i]);
		return r;
	}
	return 1;
}

int ipc_fds_dup(const int *fds, unsigned nfds, int *ret_fds)
{
	int copy[IPC_FDS_MAX];

	if (nfds > IPC_FDS_MAX)
		return -EINVAL;
	for (unsigned i = 0; i < nfds; i++) {
		copy[i] = fcntl(fds[i], F_DUPFD_CLOEXEC, 3);
		if (copy[i] < 0) {
			int r = -errno;

			while (i > 0)
				(void)safe_close(copy[--i]);
			return r;
		}
	}
	memcpy(ret_fds, copy, nfds * sizeof(int));
	return 0;
}

void ipc_msg_close_fds(struct ipc_msg *msg)
{
	for (unsigned i = 0; i < IPC_FDS_MAX; i++)
		msg->fds[i] = safe_close(msg->fds[i]);
	msg->nfds = 0;
}

int ipc_msg_take_fd(struct ipc_msg *msg, unsigned i)
{
	int fd;

	if (i >= IPC_FDS_MAX)
		return -1;
	fd = msg->fds[i];
	msg->fds[i] = -1;
	return fd;
}
