/* SPDX-License-Identifier: MIT */
/* client/outbox.c: messages a channel's full socket could not take yet, in order, fds and all. */
#include <assert.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "channel.h"
#include "cli.h"
#include "macro.h"

struct cli_out_msg {
	struct cli_out_msg *next;
	uint32_t len;
	unsigned nfds;
	int fds[IPC_FDS_MAX]; /* our own copies: the caller may close its fds meanwhile */
	uint8_t data[];
};

/* What a queued message costs, as the caps count it. */
static size_t msg_cost(size_t len)
{
	return sizeof(struct cli_out_msg) + len;
}

int cli_outbox_push(struct cli_outbox *o, const void *msg, size_t len, const int *fds,
		    unsigned nfds)
{
	struct cli_out_msg *m;
	int r;

	assert(nfds <= IPC_FDS_MAX && len <= IPC_MSG_MAX);
	m = malloc(msg_cost(len));
	if (!m)
		return -ENOMEM;
	r = ipc_fds_dup(fds, nfds, m->fds);
	if (r < 0) {
		free(m);
		return r;
	}
	m->next = NULL;
	m->len = (uint32_t)len;
	m->nfds = nfds;
	memcpy(m->data, msg, len);
	if (o->tail)
		o->tail->next = m;
	else
		o->head = m;
	o->tail = m;
	o->bytes += msg_cost(len);
	o->nfds += m->nfds;
	return 0;
}

static void msg_free(struct cli_out_msg *m)
{
	for (unsigned i = 0; i < m->nfds; i++)
		(void)safe_close(m->fds[i]);
	free(m);
}

int cli_outbox_flush(struct cli_outbox *o, int fd)
{
	while (o->head) {
		struct cli_out_msg *m = o->head;
		int r = ipc_channel_send(fd, m->data, m->len, m->fds, m->nfds, MSG_DONTWAIT);

		if (r < 0)
			return r;
		o->head = m->next;
		if (!o->head)
			o->tail = NULL;
		o->bytes -= msg_cost(m->len);
		o->nfds -= m->nfds;
		msg_free(m);
	}
	return 0;
}

void cli_outbox_clear(struct cli_outbox *o)
{
	while (o->head) {
		struct cli_out_msg *m = o->head;

		o->head = m->next;
		msg_free(m);
	}
	o->tail = NULL;
	o->bytes = 0;
	o->nfds = 0;
}

void cli_outbox_close_fds(struct cli_outbox *o)
{
	for (struct cli_out_msg *m = o->head; m; m = m->next)
		for (unsigned i = 0; i < m->nfds; i++)
			m->fds[i] = safe_close(m->fds[i]);
}
