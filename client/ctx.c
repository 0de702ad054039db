/* SPDX-License-Identifier: MIT */
/* client/ctx.c: the context: made, connected in this process (after fork too), freed. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>

#include "channel.h"
#include "cli.h"
#include "macro.h"
#include "path.h"

/* Bumped in every child after fork(): a context made before sees it and reconnects. */
uint64_t cli_fork_gen;
static pthread_mutex_t all_lock = PTHREAD_MUTEX_INITIALIZER;
static gpux_ctx *all_ctx;
static pthread_once_t atfork_once = PTHREAD_ONCE_INIT;

/* ---- fork: no lock is held across fork(), and the child starts afresh ---- */

static void atfork_prepare(void)
{
	(void)pthread_mutex_lock(&all_lock);
	for (gpux_ctx *c = all_ctx; c; c = c->next)
		(void)pthread_mutex_lock(&c->lock);
}

static void atfork_parent(void)
{
	for (gpux_ctx *c = all_ctx; c; c = c->next) {
		cli_segs_forked(c);
		(void)pthread_mutex_unlock(&c->lock);
	}
	(void)pthread_mutex_unlock(&all_lock);
}

static void atfork_child(void)
{
	cli_fork_gen++;
	/* Let go of the parent's sockets now, not at the child's first call, which may never
	 * come: the parent's connection must not outlive the parent in a child. close() is
	 * safe here; the rest of the forgetting waits for that first call. */
	for (gpux_ctx *c = all_ctx; c; c = c->next) {
		/* A thread of the parent's that was connecting is not in the child. */
		c->connecting = false;
		c->connecting_fd = safe_close(c->connecting_fd);
		c->sup_fd = safe_close(c->sup_fd);
		c->epfd = safe_close(c->epfd);
		c->wake_fd = safe_close(c->wake_fd);
		c->pub_epfd = safe_close(c->pub_epfd);
		c->news_fd = safe_close(c->news_fd);
		for (uint32_t i = 0; i < IPC_DEVICES_MAX; i++) {
			c->devs[i].chan_fd = safe_close(c->devs[i].chan_fd);
			cli_outbox_close_fds(&c->devs[i].out);
		}
		/* Nor the copies its freezing threads were making (the memory they hold). */
		for (struct cli_seg *f = c->freezing; f; f = f->next)
			f->fd = safe_close(f->fd);
		c->connected = false;
		(void)pthread_mutex_unlock(&c->lock);
	}
	(void)pthread_mutex_unlock(&all_lock);
}

static void atfork_register(void)
{
	(void)pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

/* The condition variable waits with deadlines on the clock of mono_ns(). */
static void cond_init(gpux_ctx *ctx)
{
	pthread_condattr_t ca;

	(void)pthread_condattr_init(&ca);
	(void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	(void)pthread_cond_init(&ctx->cond, &ca);
	(void)pthread_condattr_destroy(&ca);
}

/* After fork(), in the child: drop the parent's connection (our copies only) and its requests. */
static void forget_parent(gpux_ctx *ctx)
{
	struct gpux_req *r;

	while ((r = ipc_map_pop(&ctx->reqs)))
		cli_req_finish(r, GPUX_E_INVAL, "this request belongs to the parent process", 42,
			       NULL);
	ctx->epfd = safe_close(ctx->epfd);
	ctx->wake_fd = safe_close(ctx->wake_fd);
	ctx->pub_epfd = safe_close(ctx->pub_epfd);
	ctx->news_fd = safe_close(ctx->news_fd);
	ctx->news = false;
	for (uint32_t i = 0; i < IPC_DEVICES_MAX; i++)
		cli_dev_forget_parent(&ctx->devs[i]);
	cli_disconnect(ctx);
	cli_frozen_forget(ctx);
	cli_kept_forget(ctx);
	ctx->reader = false;
	ctx->nkilled = 0;
	(void)pthread_cond_destroy(&ctx->cond);
	cond_init(ctx);
}

static int poll_fds(gpux_ctx *ctx)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = CLI_EP_WAKE };

	if (ctx->epfd < 0) {
		ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
		if (ctx->epfd < 0)
			return -errno;
	}
	if (ctx->wake_fd < 0) {
		ctx->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		if (ctx->wake_fd < 0)
			return -errno;
		if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, ctx->wake_fd, &ev) < 0)
			return -errno;
	}
	return 0;
}

/* Lock held: in a child after fork(), forget the parent's connection. */
void cli_after_fork(gpux_ctx *ctx)
{
	if (ctx->fork_gen != cli_fork_gen) {
		forget_parent(ctx);
		ctx->fork_gen = cli_fork_gen;
	}
}

/* Lock held: be connected, in this process. */
int cli_ensure(gpux_ctx *ctx)
{
	int r;

	cli_after_fork(ctx);
	/* Another thread is connecting: its connection serves this one too. */
	while (ctx->connecting)
		(void)pthread_cond_wait(&ctx->cond, &ctx->lock);
	if (ctx->connected)
		return 0;
	/* The epoll fd's and the eventfd's own errors mean nothing to a caller (-EIO), but they
	 * are this attempt's reason, not an earlier one's. */
	r = poll_fds(ctx);
	if (r < 0)
		return cli_connect_fail(-EIO, "%s: no fd to wait for gpuxd with: %s", ctx->path,
					strerror(-r));
	return cli_connect(ctx);
}

static bool worker_gone(const struct cli_dev *d)
{
	return d->status && __atomic_load_n(&d->status->gone, __ATOMIC_ACQUIRE);
}

/* Lock held: ask gpuxd for a new channel to a device whose channel ended, from the worker that
 * ended it (gpuxd ignores the wish when that one is gone). */
static void channel_request(gpux_ctx *ctx, uint32_t device)
{
	struct ipc_channel_req q = { .device = device, .generation = ctx->devs[device].generation };
	int n;

	if (!ctx->devs[device].want_channel || !ctx->connected)
		return;
	n = ipc_encode_channel_req(ctx->sbuf, IPC_MSG_MAX, 0, &q);
	/* gpuxd's socket does not block (it is not worth the lock): when gpuxd is too busy to
	 * take the request now, it is asked again (device_settle(), or the next call). */
	if (n > 0 && ipc_channel_send(ctx->sup_fd, ctx->sbuf, (size_t)n, NULL, 0, 0) != -EAGAIN)
		ctx->devs[device].want_channel = false;
}

void cli_channels_request(gpux_ctx *ctx)
{
	for (uint32_t i = 0; i < ctx->ndevices; i++)
		channel_request(ctx, i);
}

static bool dev_settled(gpux_ctx *ctx, void *arg)
{
	const struct cli_dev *d = &ctx->devs[(uintptr_t)arg];

	return !ctx->connected || d->chan_fd >= 0 || d->info.state == GPUX_DEVICE_FAILED;
}

/* Settled, or the channel that came meanwhile ended too: a new wish to send. */
static bool dev_settled_or_wish(gpux_ctx *ctx, void *arg)
{
	return dev_settled(ctx, arg) || ctx->devs[(uintptr_t)arg].want_channel;
}

/*
 * Lock held: wait until the device has a channel, has failed, or gpuxd is gone. A wish for a
 * channel that gpuxd's socket could not take is sent again every CLI_CHANNEL_RETRY_NS, and
 * one that arises while waiting (the channel handed ended at once) is sent when it arises:
 * no answer would come to a wish never sent.
 */
static int device_settle(gpux_ctx *ctx, uint32_t device, uint64_t deadline)
{
	for (;;) {
		bool (*settled)(gpux_ctx *, void *) = dev_settled_or_wish;
		uint64_t until = deadline;
		int r;

		channel_request(ctx, device);
		if (ctx->devs[device].want_channel && ctx->connected) {
			uint64_t retry = mono_ns() + CLI_CHANNEL_RETRY_NS;

			until = deadline ? MIN(deadline, retry) : retry;
			settled = dev_settled;
		}
		r = cli_wait_until(ctx, settled, (void *)(uintptr_t)device, NULL, until);
		if (r == 0 && dev_settled(ctx, (void *)(uintptr_t)device))
			return 0;
		if (r < 0 && (r != -ETIMEDOUT || until == deadline))
			return r;
	}
}

/* Lock held: have a channel to the device, waiting while its worker (re)starts. */
int cli_device_wait(gpux_ctx *ctx, uint32_t device, uint64_t deadline)
{
	int r;

	for (unsigned tries = 0; tries < 3; tries++) {
		r = cli_ensure(ctx);
		if (r < 0)
			return r;
		if (device >= ctx->ndevices)
			return -ENODEV;
		/* The common case, without a system call: a channel whose worker gpuxd has not
		 * seen die. (A message put on a ring gets no EPIPE from a dead worker.) */
		if (ctx->devs[device].chan_fd >= 0 && !worker_gone(&ctx->devs[device]))
			return 0;
		cli_pump(ctx);
		r = device_settle(ctx, device, deadline);
		if (r == -ETIMEDOUT)
			return -ENODEV;
		if (r < 0)
			return r;
		if (!ctx->connected)
			continue; /* gpuxd went away meanwhile: connect again */
		if (ctx->devs[device].chan_fd >= 0)
			return 0;
		return -ENODEV;
	}
	return -ECONNREFUSED;
}

/* ---- public ---- */

/* In the list of contexts, the one that fork() handling goes through. */
static void ctx_register(gpux_ctx *ctx)
{
	(void)pthread_mutex_lock(&all_lock);
	LIST_PREPEND(all_ctx, ctx);
	(void)pthread_mutex_unlock(&all_lock);
}

static void ctx_unregister(gpux_ctx *ctx)
{
	(void)pthread_mutex_lock(&all_lock);
	LIST_REMOVE(all_ctx, ctx);
	(void)pthread_mutex_unlock(&all_lock);
}

/* A context with nothing in it yet, which ctx_free() takes as it is. */
static gpux_ctx *ctx_new(void)
{
	gpux_ctx *ctx = calloc(1, sizeof(*ctx));

	if (!ctx)
		return NULL;
	ctx->sup_fd = ctx->connecting_fd = ctx->epfd = ctx->wake_fd = -1;
	ctx->pub_epfd = ctx->news_fd = -1;
	for (unsigned i = 0; i < IPC_DEVICES_MAX; i++)
		ctx->devs[i].chan_fd = -1;
	ctx->fork_gen = cli_fork_gen;
	(void)pthread_mutex_init(&ctx->lock, NULL);
	cond_init(ctx);
	return ctx;
}

/*
 * Free a context, whole or half-built, with every object still made from it. It must be out
 * of the list of contexts: a fork() now does not wait for its lock.
 */
static void ctx_free(gpux_ctx *ctx)
{
	(void)pthread_mutex_lock(&ctx->lock);
	cli_after_fork(ctx);
	cli_queues_free_all(ctx);
	cli_modules_free_all(ctx);
	cli_dbufs_free_all(ctx);
	cli_bufs_free_all(ctx);
	cli_reqs_free_all(ctx);
	cli_retired_free_all(ctx);
	cli_disconnect(ctx);
	ctx->epfd = safe_close(ctx->epfd);
	ctx->wake_fd = safe_close(ctx->wake_fd);
	ctx->pub_epfd = safe_close(ctx->pub_epfd);
	ctx->news_fd = safe_close(ctx->news_fd);
	(void)pthread_mutex_unlock(&ctx->lock);
	(void)pthread_mutex_destroy(&ctx->lock);
	(void)pthread_cond_destroy(&ctx->cond);
	free(ctx->rbuf);
	free(ctx->sbuf);
	free(ctx->ring_buf);
	free(ctx->path);
	free(ctx);
}

GPUX_EXPORT gpux_status gpux_connect(const char *socket_path, gpux_ctx **ret_ctx)
{
	char path[IPC_SOCKET_PATH_MAX + 1], dir[IPC_SOCKET_PATH_MAX + 16];
	bool private_path = false;
	gpux_ctx *ctx;
	int r;

	/* Every failure says why, not the last attempt's reason. */
	if (!ret_ctx)
		return cli_status_from_errno(cli_connect_fail(-EINVAL,
							      "no place to put the "
							      "context (ret_ctx is NULL)"));
	(void)pthread_once(&atfork_once, atfork_register);
	ctx = ctx_new();
	if (!ctx)
		return cli_status_from_errno(cli_connect_fail(-ENOMEM, "out of memory"));
	ctx->rbuf = malloc(IPC_MSG_MAX);
	ctx->ring_buf = malloc(IPC_RING_REC_MAX);
	ctx->sbuf = malloc(IPC_MSG_MAX);
	if (!ctx->rbuf || !ctx->sbuf || !ctx->ring_buf) {
		r = cli_connect_fail(-ENOMEM, "out of memory");
		goto err;
	}
	if (socket_path) {
		ctx->path = strdup(socket_path);
	} else if (ipc_client_socket(path, sizeof(path), &private_path) < 0) {
		r = cli_connect_fail(-ECONNREFUSED, "the default socket path is too long");
		goto err;
	} else if (!private_path) {
		ctx->path = strdup(path);
	} else if (ipc_default_socket(dir, path, sizeof(path)) == 0 && ipc_private_dir(dir) == 0) {
		ctx->path = strdup(path);
		ctx->autospawn = true;
	} else {
		/* No place of this user's alone to start a private gpuxd at. */
		r = cli_connect_fail(
			-ECONNREFUSED,
			"%s: not a directory of this user's alone, so no private gpuxd "
			"is started there",
			dir);
		goto err;
	}
	if (!ctx->path) {
		r = cli_connect_fail(-ENOMEM, "out of memory");
		goto err;
	}

	/* Listed first: a fork() while it connects closes the child's copies of its fds. */
	ctx_register(ctx);
	(void)pthread_mutex_lock(&ctx->lock);
	r = cli_ensure(ctx);
	(void)pthread_mutex_unlock(&ctx->lock);
	if (r < 0) {
		ctx_unregister(ctx);
		goto err;
	}
	*ret_ctx = ctx;
	return GPUX_OK;
err:
	ctx_free(ctx);
	return cli_status_from_errno(r);
}

GPUX_EXPORT void gpux_disconnect(gpux_ctx *ctx)
{
	if (!ctx)
		return;
	ctx_unregister(ctx);
	ctx_free(ctx);
}

GPUX_EXPORT uint32_t gpux_device_count(gpux_ctx *ctx)
{
	uint32_t n;

	if (!ctx)
		return 0;
	(void)pthread_mutex_lock(&ctx->lock);
	n = cli_ensure(ctx) == 0 ? ctx->ndevices : 0;
	(void)pthread_mutex_unlock(&ctx->lock);
	return n;
}

GPUX_EXPORT gpux_status gpux_device_info(gpux_ctx *ctx, uint32_t device,
					 struct gpux_device_info *ret_info)
{
	int r;

	if (!ctx || !ret_info)
		return GPUX_E_INVAL;
	(void)pthread_mutex_lock(&ctx->lock);
	r = cli_ensure(ctx);
	if (r == 0 && device >= ctx->ndevices)
		r = -ENODEV;
	if (r == 0) {
		cli_pump(ctx);
		*ret_info = ctx->devs[device].info;
	}
	(void)pthread_mutex_unlock(&ctx->lock);
	return cli_status_from_errno(r);
}

/*
 * Lock held, connected: gpux_fd()'s epoll fd, over the one internal waits use and news_fd,
 * which only gpux_process() reads. Made at the first gpux_fd(), so that a program without an
 * event loop never writes news_fd. The epoll fd's and the eventfd's own errors mean nothing
 * to a caller: -EIO.
 */
static int pub_fds(gpux_ctx *ctx)
{
	struct epoll_event ev = { .events = EPOLLIN };
	_cleanup_(closep) int pub = -1;
	_cleanup_(closep) int news = -1;

	if (ctx->pub_epfd >= 0)
		return 0;
	pub = epoll_create1(EPOLL_CLOEXEC);
	news = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (pub < 0 || news < 0 || epoll_ctl(pub, EPOLL_CTL_ADD, ctx->epfd, &ev) < 0 ||
	    epoll_ctl(pub, EPOLL_CTL_ADD, news, &ev) < 0)
		return -EIO;
	ctx->pub_epfd = TAKE_FD(pub);
	ctx->news_fd = TAKE_FD(news);
	ctx->news = false;
	return 0;
}

GPUX_EXPORT gpux_status gpux_fd(gpux_ctx *ctx, int *ret_fd)
{
	int r;

	if (!ctx || !ret_fd)
		return GPUX_E_INVAL;
	(void)pthread_mutex_lock(&ctx->lock);
	r = cli_ensure(ctx);
	if (r == 0)
		r = pub_fds(ctx);
	if (r == 0)
		*ret_fd = ctx->pub_epfd;
	(void)pthread_mutex_unlock(&ctx->lock);
	return cli_status_from_errno(r);
}

GPUX_EXPORT gpux_status gpux_process(gpux_ctx *ctx)
{
	if (!ctx)
		return GPUX_E_INVAL;
	(void)pthread_mutex_lock(&ctx->lock);
	/* Never connects (that may wait): without a connection nothing can have arrived. */
	cli_after_fork(ctx);
	/* Every completion announced so far is in its request: the caller looks at them next. */
	cli_news_read(ctx);
	if (ctx->connected && !ctx->reader) {
		ctx->processing = true;
		cli_pump(ctx);
		ctx->processing = false;
	}
	(void)pthread_mutex_unlock(&ctx->lock);
	return GPUX_OK;
}
