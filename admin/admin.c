/* SPDX-License-Identifier: MIT */
/* admin/admin.c: an admin client of gpuxd: connect, say hello, read the whole status, the clients. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "admin.h"
#include "channel.h"
#include "macro.h"

/* One message, within timeout_ms; its fds (there should be none) are closed. */
static int recv_one(int fd, int timeout_ms, uint8_t *buf, struct ipc_msg *msg)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int r = poll(&p, 1, timeout_ms);

	if (r < 0)
		return -errno;
	if (r == 0)
		return -ETIMEDOUT;
	r = ipc_channel_recv_msg(fd, buf, IPC_MSG_MAX, msg, 0);
	if (r == 0)
		return -ECONNRESET;
	if (r < 0)
		return r;
	ipc_msg_close_fds(msg);
	return 0;
}

static int refusal(const struct ipc_msg *msg, char *why, size_t why_len)
{
	struct ipc_done_msg d;

	if (ipc_decode_done(msg, &d) < 0)
		return -EPROTO;
	if (why && why_len)
		(void)snprintf(why, why_len, "%.*s", (int)MIN(d.m.text_len, why_len - 1), d.text);
	switch (d.m.status) {
	case IPC_E_PERM:
		return -EPERM;
	case IPC_E_STOPPING:
		return -ESHUTDOWN;
	case IPC_E_QUOTA:
		return -EUSERS;
	case IPC_E_VERSION:
		return -EPROTONOSUPPORT;
	default:
		return -EPROTO;
	}
}

int ipc_admin_connect(const char *path, int timeout_ms, char *why, size_t why_len)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct ipc_hello h = { .min_version = IPC_VERSION_MIN,
			       .max_version = IPC_VERSION,
			       .flags = IPC_HELLO_ADMIN };
	_cleanup_(freep) uint8_t *buf = malloc(IPC_MSG_MAX);
	_cleanup_(closep) int fd = -1;
	struct ipc_welcome wel;
	struct ipc_msg msg;
	uint8_t out[64];
	int n, r;

	if (why && why_len)
		why[0] = '\0';
	if (!buf)
		return -ENOMEM;
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	n = ipc_encode_hello(out, sizeof(out), 1, &h);
	/* A refusal may be waiting already, and the socket closed behind it: read it anyway. */
	(void)ipc_channel_send(fd, out, (size_t)n, NULL, 0, 0);
	r = recv_one(fd, timeout_ms, buf, &msg);
	if (r < 0)
		return r;
	if (msg.hdr.type == IPC_DONE)
		return refusal(&msg, why, why_len);
	if (ipc_decode_welcome(&msg, &wel) < 0)
		return -EPROTO;
	return TAKE_FD(fd);
}

int ipc_admin_status(int fd, int timeout_ms, struct ipc_status *ret, struct ipc_dev_status *devs)
{
	_cleanup_(freep) uint8_t *buf = malloc(IPC_MSG_MAX);
	struct ipc_status whole = { 0 };
	uint32_t first = 0;
	uint8_t out[64];

	if (!buf)
		return -ENOMEM;
	do {
		struct ipc_status_req q = { .first = first };
		struct ipc_status_msg st;
		struct ipc_msg msg;
		int n = ipc_encode_status_req(out, sizeof(out), first + 1, &q);
		int r = ipc_channel_send(fd, out, (size_t)n, NULL, 0, 0);

		if (r == 0)
			r = recv_one(fd, timeout_ms, buf, &msg);
		if (r == 0)
			r = ipc_decode_status(&msg, &st);
		if (r < 0)
			return r;
		/* Pages of one answer, in order; an empty page before the end is no answer. */
		if (st.m.first != first || (first > 0 && st.m.ndevices != whole.ndevices) ||
		    (st.m.count == 0 && first < st.m.ndevices))
			return -EBADMSG;
		if (first == 0)
			whole = st.m;
		for (uint32_t i = 0; i < st.m.count; i++)
			ipc_status_dev(&st, i, &devs[first + i]);
		first += st.m.count;
	} while (first < whole.ndevices);
	whole.first = 0;
	whole.count = whole.ndevices;
	*ret = whole;
	return 0;
}

int ipc_admin_clients(int fd, int timeout_ms, struct ipc_client_info **ret, size_t *ret_n)
{
	_cleanup_(freep) uint8_t *buf = malloc(IPC_MSG_MAX);
	_cleanup_(freep) struct ipc_client_info *all = NULL;
	size_t n = 0, cap = 0;
	uint64_t after = 0;
	uint8_t out[64];
	uint32_t page;

	if (!buf)
		return -ENOMEM;
	do {
		struct ipc_clients_req q = { .after = after };
		struct ipc_clients_msg cl;
		struct ipc_msg msg;
		int len = ipc_encode_clients_req(out, sizeof(out), 1, &q);
		int r = ipc_channel_send(fd, out, (size_t)len, NULL, 0, 0);

		if (r == 0)
			r = recv_one(fd, timeout_ms, buf, &msg);
		if (r == 0)
			r = ipc_decode_clients(&msg, &cl);
		if (r < 0)
			return r;
		page = cl.m.count;
		if (n + page > IPC_ADMIN_CLIENTS_MAX)
			return -E2BIG;
		if (n + page > cap) {
			size_t want = MAX(2 * cap, n + page);
			struct ipc_client_info *more = realloc(all, want * sizeof(*all));

			if (!more)
				return -ENOMEM;
			all = more;
			cap = want;
		}
		for (uint32_t i = 0; i < page; i++) {
			ipc_clients_row(&cl, i, &all[n + i]);
			/* Each page goes on from the last: a row at or before it is no answer. */
			if (all[n + i].id <= after)
				return -EBADMSG;
			after = all[n + i].id;
		}
		n += page;
	} while (page == IPC_CLIENTS_PAGE);
	*ret = TAKE_PTR(all);
	*ret_n = n;
	return 0;
}
