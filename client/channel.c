/* SPDX-License-Identifier: MIT */
/* client/channel.c: the channels to gpuxd and the workers: what arrives, in order, and sending. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/socket.h>

#include "channel.h"
#include "cli.h"
#include "macro.h"

void cli_rings_unref(struct cli_rings *r)
{
	if (r && --r->refs == 0) {
		ipc_segment_done(&r->seg);
		free(r);
	}
}

void cli_dev_drop_rings(struct cli_dev *d)
{
	cli_rings_unref(d->rings);
	d->rings = NULL;
	d->sock_in = d->sock_out = 0;
}

void cli_dev_forget_parent(struct cli_dev *d)
{
	/* Not mapped in a child (MADV_DONTFORK): unmapping would hit whatever it mapped there
	 * since. A reader spinning on them in the parent is not in this process. */
	free(d->rings);
	d->rings = NULL;
	d->sock_in = d->sock_out = 0;
	d->status = NULL;
}

/*
 * The channel ended. A worker that said why it drops us lives on: a new channel is asked of
 * gpuxd when the device is next needed. An end without a word is most often a death, which
 * gpuxd announces, handing a new channel to everyone once the successor is ready; but a live
 * worker may end a channel silently too (it has too many clients, or the end overtook its
 * word), so gpuxd is asked as well: it hands a channel only while that same worker runs.
 */
static void dev_close_channel(gpux_ctx *ctx, uint32_t i)
{
	struct cli_dev *d = &ctx->devs[i];

	if (d->chan_fd < 0)
		return;
	cli_dev_drop_rings(d);
	cli_outbox_clear(&d->out);
	d->out_armed = false;
	d->chan_fd = safe_close(d->chan_fd);
	/* Before its marks go: they say what of its requests may run again. */
	cli_reqs_lost(ctx, i, d->chan_gen);
	cli_marks_drop(d);
	d->inflight = 0;
	if (d->dropped) {
		d->want_channel = true;
	} else if (d->info.state == GPUX_DEVICE_READY) {
		d->info.state = GPUX_DEVICE_RESTARTING;
		d->want_channel = true;
	}
	free(d->dropped);
	d->dropped = NULL;
}

static void dev_set_status_page(struct cli_dev *d, int fd)
{
	struct ipc_status_page snap;
	void *p = mmap(NULL, IPC_STATUS_PAGE_SIZE, PROT_READ, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return;
	/* A child forked later maps its own (a page a child never uses costs it nothing). */
	(void)madvise(p, IPC_STATUS_PAGE_SIZE, MADV_DONTFORK);
	if (d->status)
		(void)munmap(d->status, IPC_STATUS_PAGE_SIZE);
	d->status = p;
	/* Written before the worker was ready, never changed. */
	memset(&d->limits, 0, sizeof(d->limits));
	if (ipc_status_read(d->status, &snap))
		d->limits = snap.limits;
}

static void chan_drain(gpux_ctx *ctx, uint32_t i);
static int chan_flush(gpux_ctx *ctx, uint32_t i);

void cli_device_msg(gpux_ctx *ctx, struct ipc_msg *msg)
{
	struct ipc_device dm;
	struct cli_dev *d;
	uint32_t i;

	if (ipc_decode_device(msg, &dm) < 0 || dm.info.index >= ctx->ndevices)
		return;
	i = dm.info.index;
	d = &ctx->devs[i];
	d->info.index = i;
	d->info.backend = dm.info.backend;
	d->info.cc_major = dm.info.cc_major;
	d->info.cc_minor = dm.info.cc_minor;
	d->info.sm_count = dm.info.sm_count;
	d->info.mem_total = dm.info.mem_total;
	memcpy(d->info.uuid, dm.info.uuid, sizeof(d->info.uuid));
	memcpy(d->info.name, dm.info.name, sizeof(d->info.name));
	if (!(dm.flags & IPC_DEVICE_CHANNEL)) {
		/* gpuxd saw the worker die: what it answered before is in the channel; the rest
		 * is lost. Its end of the channel may outlive it for a while (a dead process's
		 * io_uring lets go of sockets late), so gpuxd's word is what counts. */
		chan_drain(ctx, i);
		dev_close_channel(ctx, i);
		d->want_channel = false;
		d->info.state = dm.state;
		return;
	}
	if (d->chan_fd >= 0) {
		chan_drain(ctx, i);
		dev_close_channel(ctx, i);
	}
	cli_dev_drop_rings(d);
	cli_marks_drop(d);
	/* A channel asked for after a drop is here, or one came with a new worker: asking
	 * gpuxd for another would have the worker drop this one, and what runs on it. */
	d->want_channel = false;
	d->chan_fd = ipc_msg_take_fd(msg, 0);
	d->chan_gen = ++ctx->chan_counter;
	d->generation = dm.generation;
	d->info.state = dm.state;
	d->inflight = 0;
	dev_set_status_page(d, msg->fds[1]);
	{
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = CLI_EP_CHAN0 + i };
		(void)epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, d->chan_fd, &ev);
	}
	/* A channel made ahead (for a forked child) has its rings offered already: the first
	 * request can take them. */
	chan_drain(ctx, i);
}

static void on_killed(gpux_ctx *ctx, struct ipc_msg *msg)
{
	struct ipc_killed k;
	struct gpux_req *r;

	if (ipc_decode_killed(msg, &k) < 0 || k.device >= ctx->ndevices)
		return;
	ctx->killed[ctx->nkilled++ % CLI_KILLED_MAX] = k;
	r = ipc_map_get(&ctx->reqs, k.req_id);
	if (r && r->device == k.device && ctx->devs[k.device].generation == k.generation)
		cli_req_finish(r, GPUX_E_TIMEOUT, "the request ran past its deadline", 33, NULL);
}

static void daemon_lost(gpux_ctx *ctx)
{
	/* gpuxd is gone; its workers follow it. The next call connects again. */
	(void)epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, ctx->sup_fd, NULL);
	ctx->sup_fd = safe_close(ctx->sup_fd);
	ctx->connected = false;
	for (uint32_t i = 0; i < ctx->ndevices; i++) {
		chan_drain(ctx, i);
		dev_close_channel(ctx, i);
	}
}

/* Take in what gpuxd sent: its news of devices, and of deadline kills. */
static void daemon_drain(gpux_ctx *ctx)
{
	while (ctx->sup_fd >= 0) {
		struct ipc_msg msg;
		int r = ipc_channel_recv_msg(ctx->sup_fd, ctx->rbuf, IPC_MSG_MAX, &msg,
					     MSG_DONTWAIT);

		if (r == -EAGAIN)
			return;
		if (r <= 0) {
			daemon_lost(ctx);
			return;
		}
		if (msg.hdr.type == IPC_DEVICE)
			cli_device_msg(ctx, &msg);
		else if (msg.hdr.type == IPC_KILLED)
			on_killed(ctx, &msg);
		ipc_msg_close_fds(&msg);
	}
}

static void on_done(gpux_ctx *ctx, uint32_t device, struct ipc_msg *msg)
{
	struct ipc_done_msg d;
	struct gpux_req *r;
	struct gpux_times t;

	if (ipc_decode_done(msg, &d) < 0)
		return;
	/* No id: the worker's last word, why it drops this channel; the end follows. */
	if (msg->hdr.id == 0) {
		struct cli_dev *dev = &ctx->devs[device];

		free(dev->dropped);
		if (asprintf(&dev->dropped, "the worker dropped this connection: %.*s",
			     (int)d.m.text_len, d.text) < 0)
			dev->dropped = NULL;
		return;
	}
	r = ipc_map_get(&ctx->reqs, msg->hdr.id);
	if (!r || r->device != device)
		return;
	t = (struct gpux_times){ d.m.queue_ns, d.m.run_ns, d.m.device_ns };
	cli_req_finish(r, (gpux_status)d.m.status, d.text, d.m.text_len, &t);
}

/* What a module load got, or a question's answer, just before its DONE: kept with the
 * request. */
static void on_mod_info(gpux_ctx *ctx, uint32_t device, struct ipc_msg *msg)
{
	struct gpux_req *r = ipc_map_get(&ctx->reqs, msg->hdr.id);

	if (!r || r->device != device || r->done)
		return;
	if (msg->hdr.type == IPC_MOD_INFO && ipc_decode_mod_info(msg, &r->mod_info) == 0)
		r->has_mod_info = true;
	else if (msg->hdr.type == IPC_KERNEL_ATTRS &&
		 ipc_decode_kernel_attrs(msg, &r->answer.kattrs) == 0)
		r->answer_type = IPC_KERNEL_ATTRS;
	else if (msg->hdr.type == IPC_GLOBAL && ipc_decode_global(msg, &r->answer.global) == 0)
		r->answer_type = IPC_GLOBAL;
}

static bool is_info(uint16_t type)
{
	return type == IPC_MOD_INFO || type == IPC_KERNEL_ATTRS || type == IPC_GLOBAL;
}

/* The worker's offer of shared rings: taken when it is what this library knows. */
static void on_rings(gpux_ctx *ctx, uint32_t i, struct ipc_msg *msg)
{
	struct cli_dev *d = &ctx->devs[i];
	struct ipc_rings_offer o;
	struct cli_rings *r;

	if (d->rings || ipc_decode_rings(msg, &o) < 0 || o.size != IPC_RINGS_BYTES)
		return;
	r = calloc(1, sizeof(*r));
	if (!r)
		return;
	if (ipc_segment_attach_take_fd(ipc_msg_take_fd(msg, 0), IPC_RINGS_BYTES, false, &r->seg) <
	    0) {
		free(r);
		return;
	}
	/* The mapping is what counts: one fd fewer per channel. A child forked later has
	 * channels of its own, and neither keeps nor unmaps this. */
	r->seg.fd = safe_close(r->seg.fd);
	(void)madvise(r->seg.addr, IPC_RINGS_BYTES, MADV_DONTFORK);
	ipc_ring_init(&r->up, r->seg.addr, IPC_RING_UP);
	ipc_ring_init(&r->down, r->seg.addr, IPC_RING_DOWN);
	r->refs = 1;
	d->rings = r;
}

/* Take the completions on a channel's ring that were sent after fewer than `seq_ok` socket
 * messages. Returns how many, or -EBADMSG when the ring is corrupt. */
static int ring_take(gpux_ctx *ctx, uint32_t i, uint32_t seq_ok)
{
	struct cli_dev *d = &ctx->devs[i];
	int taken = 0;

	while (d->rings) {
		struct ipc_msg msg;
		int n = ipc_ring_get(&d->rings->down, ctx->ring_buf, IPC_RING_REC_MAX, seq_ok);

		if (n == 0)
			break;
		if (n < 0 || ipc_msg_parse(ctx->ring_buf, (size_t)n, NULL, 0, &msg) < 0)
			return -EBADMSG;
		if (msg.hdr.type == IPC_DONE)
			on_done(ctx, i, &msg);
		else if (is_info(msg.hdr.type))
			on_mod_info(ctx, i, &msg);
		taken++;
	}
	return taken;
}

/* Read what a channel holds, its socket and its ring in the order they were sent; at its end
 * (the worker died) fail what is still in flight. */
static void chan_drain(gpux_ctx *ctx, uint32_t i)
{
	struct cli_dev *d = &ctx->devs[i];

	while (d->chan_fd >= 0) {
		struct ipc_msg msg;
		int r = ipc_channel_recv_msg(d->chan_fd, ctx->rbuf, IPC_MSG_MAX, &msg,
					     MSG_DONTWAIT);

		if (r == -EAGAIN)
			break;
		if (r <= 0 || ring_take(ctx, i, d->sock_in) < 0) {
			/* At its end no socket message will come any more, whatever the records'
			 * stamps count (one the worker queued may have gone with the channel): take
			 * all that is left, its last word among them. */
			if (r > 0)
				ipc_msg_close_fds(&msg);
			else
				(void)ring_take(ctx, i, d->sock_in + INT32_MAX);
			dev_close_channel(ctx, i);
			return;
		}
		d->sock_in++;
		if (msg.hdr.type == IPC_DONE)
			on_done(ctx, i, &msg);
		else if (is_info(msg.hdr.type))
			on_mod_info(ctx, i, &msg);
		else if (msg.hdr.type == IPC_RINGS)
			on_rings(ctx, i, &msg);
		else if (msg.hdr.type == IPC_MARKS)
			cli_marks_take(ctx, i, &msg);
		ipc_msg_close_fds(&msg);
	}
	if (d->chan_fd >= 0 && ring_take(ctx, i, d->sock_in) < 0)
		dev_close_channel(ctx, i);
}

/*
 * A request sent without a word of the channel's marks never runs again after its worker's
 * death. The worker offers the page as the channel is attached, before gpuxd hands the
 * channel over or just after: it may wait unread in the socket (a process that saw a
 * restarted worker's channel come and read nothing since) or be on its way.
 */
void cli_marks_wait(gpux_ctx *ctx, uint32_t i)
{
	struct cli_dev *d = &ctx->devs[i];
	uint64_t until = mono_ns() + CLI_MARKS_WAIT_NS;

	if (d->marks || d->chan_fd < 0 || d->marks_waited == d->chan_gen)
		return;
	d->marks_waited = d->chan_gen;
	chan_drain(ctx, i);
	while (!d->marks && d->chan_fd >= 0 && d->status &&
	       (__atomic_load_n(&d->status->features, __ATOMIC_RELAXED) & IPC_STATUS_MARKS)) {
		struct pollfd p = { .fd = d->chan_fd, .events = POLLIN };
		uint64_t now = mono_ns();

		if (now >= until ||
		    poll(&p, 1, (int)((until - now + NSEC_PER_MSEC - 1) / NSEC_PER_MSEC)) <= 0)
			break;
		chan_drain(ctx, i);
	}
}

/* Take in everything that has arrived, gpuxd's news first (a deadline kill comes before
 * the death it causes). Lock held. */
void cli_pump(gpux_ctx *ctx)
{
	daemon_drain(ctx);
	for (uint32_t i = 0; i < ctx->ndevices; i++) {
		chan_drain(ctx, i);
		(void)chan_flush(ctx, i);
	}
	/* A worker that came back, or room, for requests lost with their workers. */
	cli_replay(ctx);
}

/* cli_pump(), reading only the channels that epoll reported (and sending what waited for
 * room on them). Lock held. */
void cli_pump_events(gpux_ctx *ctx, const struct epoll_event *ev, int n)
{
	uint64_t v;

	daemon_drain(ctx);
	for (int i = 0; i < n; i++) {
		if (ev[i].data.u64 == CLI_EP_WAKE) {
			(void)read(ctx->wake_fd, &v, sizeof(v));
		} else if (ev[i].data.u64 >= CLI_EP_CHAN0 &&
			   ev[i].data.u64 - CLI_EP_CHAN0 < ctx->ndevices) {
			uint32_t dev = (uint32_t)(ev[i].data.u64 - CLI_EP_CHAN0);

			chan_drain(ctx, dev);
			if (ev[i].events & EPOLLOUT)
				(void)chan_flush(ctx, dev);
		}
	}
	cli_replay(ctx);
}

/* Take what the rings hold; returns whether there was anything. */
bool cli_rings_take_all(gpux_ctx *ctx)
{
	bool any = false;

	for (uint32_t i = 0; i < ctx->ndevices; i++) {
		int n = ctx->devs[i].rings ? ring_take(ctx, i, ctx->devs[i].sock_in) : 0;

		if (n < 0)
			dev_close_channel(ctx, i);
		any |= n != 0;
	}
	/* Room, perhaps, for requests lost with their workers. */
	if (any)
		cli_replay(ctx);
	return any;
}

/* Lock held: have epoll report room on the channel while its outbox holds anything. */
static void chan_watch_room(gpux_ctx *ctx, uint32_t i)
{
	struct cli_dev *d = &ctx->devs[i];
	bool want = d->out.head != NULL;
	struct epoll_event ev = { .events = EPOLLIN | (want ? EPOLLOUT : 0),
				  .data.u64 = CLI_EP_CHAN0 + i };

	if (want != d->out_armed && epoll_ctl(ctx->epfd, EPOLL_CTL_MOD, d->chan_fd, &ev) == 0)
		d->out_armed = want;
}

/*
 * Lock held: send what waits in the channel's outbox, as much as its socket takes now. A
 * message that cannot be sent for any reason but a full socket ends the channel: what follows
 * it must not overtake it. Returns 0, or -EPIPE when the channel is closed.
 */
static int chan_flush(gpux_ctx *ctx, uint32_t i)
{
	struct cli_dev *d = &ctx->devs[i];
	int r;

	if (d->chan_fd < 0 || !d->out.head)
		return 0;
	r = cli_outbox_flush(&d->out, d->chan_fd);
	if (r < 0 && r != -EAGAIN) {
		chan_drain(ctx, i);
		dev_close_channel(ctx, i);
		return -EPIPE;
	}
	chan_watch_room(ctx, i);
	return 0;
}

/* Lock held: queue a message that its socket cannot take now, unless the worker has left so
 * much unread (callers wait long before: cli_room_wait()) that it is taken for one that
 * dropped us. */
static int chan_queue(gpux_ctx *ctx, uint32_t i, const void *msg, size_t len, const int *fds,
		      unsigned nfds)
{
	struct cli_dev *d = &ctx->devs[i];
	int r;

	if (d->out.bytes + len > CLI_OUTBOX_MAX || d->out.nfds + nfds > CLI_OUTBOX_FDS_MAX) {
		char why[96];

		(void)snprintf(why, sizeof(why),
			       "the worker left %u MiB or %u fds sent to it unread",
			       CLI_OUTBOX_MAX >> 20, CLI_OUTBOX_FDS_MAX);
		free(d->dropped);
		d->dropped = strdup(why);
		return -EPIPE;
	}
	r = cli_outbox_push(&d->out, msg, len, fds, nfds);
	if (r == 0)
		chan_watch_room(ctx, i);
	return r;
}

/* Lock held: send on the device's channel, or (`queue`) queue (cli_send()), else -EAGAIN;
 * -EPIPE when its worker is gone (channel closed). */
static int chan_send(gpux_ctx *ctx, uint32_t device, const void *msg, size_t len, const int *fds,
		     unsigned nfds, bool queue)
{
	struct cli_dev *d = &ctx->devs[device];
	int r = chan_flush(ctx, device);

	if (r < 0)
		return r;
	/* Behind messages that still wait, this one waits too: the worker takes them in order. */
	r = d->out.head ? -EAGAIN : ipc_channel_send(d->chan_fd, msg, len, fds, nfds, MSG_DONTWAIT);
	if (r == -EAGAIN && queue)
		r = chan_queue(ctx, device, msg, len, fds, nfds);
	if (r == -EPIPE || r == -ECONNRESET) {
		chan_drain(ctx, device);
		dev_close_channel(ctx, device);
		return -EPIPE;
	}
	if (r == 0)
		d->sock_out++;
	return r;
}

int cli_send_now(gpux_ctx *ctx, uint32_t device, const void *msg, size_t len, const int *fds,
		 unsigned nfds)
{
	if (ctx->devs[device].chan_fd < 0)
		return -EPIPE;
	return chan_send(ctx, device, msg, len, fds, nfds, false);
}

static bool has_room(gpux_ctx *ctx, void *arg)
{
	const struct cli_dev *d = &ctx->devs[(uintptr_t)arg];

	/* Requests lost with the device's last worker go there before any new one. */
	return d->chan_fd < 0 ||
	       (d->inflight < CLI_INFLIGHT_MAX && d->out.bytes < CLI_OUTBOX_WAIT &&
		d->out.nfds < CLI_OUTBOX_FDS_WAIT &&
		!cli_replay_blocks(ctx, (uint32_t)(uintptr_t)arg));
}

int cli_room_wait(gpux_ctx *ctx, uint32_t device)
{
	return cli_wait_until(ctx, has_room, (void *)(uintptr_t)device, NULL, 0);
}

void cli_send_drop(gpux_ctx *ctx, uint32_t device, uint64_t gen, uint16_t type, const void *payload,
		   size_t len)
{
	int n;

	if (ctx->fork_gen != cli_fork_gen || !ctx->connected || !gen ||
	    gen != ctx->devs[device].chan_gen)
		return;
	n = ipc_encode(ctx->sbuf, IPC_MSG_MAX, type, 0, 0, payload, len, NULL, 0);
	if (n > 0)
		(void)cli_send(ctx, device, ctx->sbuf, (size_t)n, NULL, 0);
}

int cli_send(gpux_ctx *ctx, uint32_t device, const void *msg, size_t len, const int *fds,
	     unsigned nfds)
{
	struct cli_dev *d = &ctx->devs[device];

	if (d->chan_fd < 0)
		return -EPIPE;
	/* The ring when it can carry the message, and the worker is told only if it sleeps. */
	if (d->rings && nfds == 0) {
		int r = ipc_ring_put(&d->rings->up, msg, (uint32_t)len, d->sock_out);

		/* The message is on its way: only a worker that is gone makes it fail. */
		if (r == 1 &&
		    chan_send(ctx, device, &ipc_kick, sizeof(ipc_kick), NULL, 0, true) == -EPIPE)
			return -EPIPE;
		if (r >= 0)
			return 0;
	}
	return chan_send(ctx, device, msg, len, fds, nfds, true);
}
