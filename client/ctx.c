/* SPDX-License-Identifier: MIT */
/* client/ctx.c: the connection to gpuxd and its workers: connect, autospawn, fork, receive, wait. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "cli.h"
#include "ipc/channel.h"
#include "ipc/macro.h"
#include "ipc/path.h"
#include "ipc/spin.h"

#ifndef GPUX_LIBEXECDIR
#define GPUX_LIBEXECDIR "/usr/local/libexec"
#endif

#define EP_SUP 1ull
#define EP_WAKE 2ull
#define EP_CHAN0 16ull /* + device index: that device's channel */

extern char **environ;

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
	for (gpux_ctx *c = all_ctx; c; c = c->next)
		(void)pthread_mutex_unlock(&c->lock);
	(void)pthread_mutex_unlock(&all_lock);
}

static void atfork_child(void)
{
	cli_fork_gen++;
	/* Let go of the parent's sockets now, not at the child's first call, which may never
	 * come: the parent's connection must not outlive the parent in a child. close() is
	 * safe here; the rest of the forgetting waits for that first call. */
	for (gpux_ctx *c = all_ctx; c; c = c->next) {
		c->sup_fd = safe_close(c->sup_fd);
		c->epfd = safe_close(c->epfd);
		c->wake_fd = safe_close(c->wake_fd);
		for (uint32_t i = 0; i < IPC_DEVICES_MAX; i++)
			c->devs[i].chan_fd = safe_close(c->devs[i].chan_fd);
		c->connected = false;
		(void)pthread_mutex_unlock(&c->lock);
	}
	(void)pthread_mutex_unlock(&all_lock);
}

static void atfork_register(void)
{
	(void)pthread_atfork(atfork_prepare, atfork_parent, atfork_child);
}

gpux_status cli_status_of(int err)
{
	switch (err) {
	case 0:
		return GPUX_OK;
	case -ENOMEM:
		return GPUX_E_NOMEM;
	case -EINVAL:
		return GPUX_E_INVAL;
	case -ETIMEDOUT:
		return GPUX_E_TIMEOUT;
	case -EPIPE:
	case -ECONNRESET:
		return GPUX_E_WORKER_LOST;
	case -ENODEV:
		return GPUX_E_NODEV;
	case -EBADMSG:
	case -EPROTO:
		return GPUX_E_PROTO;
	default:
		return err < 0 && err >= GPUX_E_VERSION ? (gpux_status)err : GPUX_E_IO;
	}
}

/* ---- channels ---- */

static void rings_unref(struct cli_rings *r)
{
	if (r && --r->refs == 0) {
		ipc_segment_done(&r->seg);
		free(r);
	}
}

static void dev_drop_rings(struct cli_dev *d)
{
	rings_unref(d->rings);
	d->rings = NULL;
	d->sock_in = d->sock_out = 0;
}

static void dev_close_channel(gpux_ctx *ctx, uint32_t i)
{
	struct cli_dev *d = &ctx->devs[i];

	if (d->chan_fd < 0)
		return;
	dev_drop_rings(d);
	d->chan_fd = safe_close(d->chan_fd);
	cli_reqs_lost(ctx, i, d->chan_gen);
	d->inflight = 0;
	if (d->info.state == GPUX_DEVICE_READY)
		d->info.state = GPUX_DEVICE_RESTARTING;
}

static void dev_set_status_page(struct cli_dev *d, int fd)
{
	void *p = mmap(NULL, IPC_STATUS_PAGE_SIZE, PROT_READ, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return;
	if (d->status)
		(void)munmap(d->status, IPC_STATUS_PAGE_SIZE);
	d->status = p;
}

static void chan_drain(gpux_ctx *ctx, uint32_t i);

static void on_device(gpux_ctx *ctx, struct ipc_msg *msg)
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
		d->info.state = dm.state;
		return;
	}
	if (d->chan_fd >= 0) {
		chan_drain(ctx, i);
		dev_close_channel(ctx, i);
	}
	dev_drop_rings(d);
	d->chan_fd = ipc_msg_take_fd(msg, 0);
	d->chan_gen = ++ctx->chan_counter;
	d->generation = dm.generation;
	d->info.state = dm.state;
	d->inflight = 0;
	dev_set_status_page(d, msg->fds[1]);
	{
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = EP_CHAN0 + i };
		(void)epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, d->chan_fd, &ev);
	}
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

static void sup_lost(gpux_ctx *ctx)
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

static void sup_drain(gpux_ctx *ctx)
{
	while (ctx->sup_fd >= 0) {
		struct ipc_msg msg;
		int r = ipc_channel_recv_msg(ctx->sup_fd, ctx->rbuf, IPC_MSG_MAX, &msg, MSG_DONTWAIT);

		if (r == -EAGAIN)
			return;
		if (r <= 0) {
			sup_lost(ctx);
			return;
		}
		if (msg.hdr.type == IPC_DEVICE)
			on_device(ctx, &msg);
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
	r = ipc_map_get(&ctx->reqs, msg->hdr.id);
	if (!r || r->device != device)
		return;
	t = (struct gpux_times){ d.m.queue_ns, d.m.run_ns, d.m.device_ns };
	cli_req_finish(r, (gpux_status)d.m.status, d.text, d.m.text_len, &t);
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
	if (ipc_segment_attach_take_fd(ipc_msg_take_fd(msg, 0), IPC_RINGS_BYTES, false,
				       &r->seg) < 0) {
		free(r);
		return;
	}
	/* The mapping is what counts: one fd fewer per channel. */
	r->seg.fd = safe_close(r->seg.fd);
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
		int r = ipc_channel_recv_msg(d->chan_fd, ctx->rbuf, IPC_MSG_MAX, &msg, MSG_DONTWAIT);

		if (r == -EAGAIN)
			break;
		if (r <= 0 || ring_take(ctx, i, d->sock_in) < 0) {
			if (r > 0)
				ipc_msg_close_fds(&msg);
			else
				(void)ring_take(ctx, i, d->sock_in);
			dev_close_channel(ctx, i);
			return;
		}
		d->sock_in++;
		if (msg.hdr.type == IPC_DONE)
			on_done(ctx, i, &msg);
		else if (msg.hdr.type == IPC_RINGS)
			on_rings(ctx, i, &msg);
		ipc_msg_close_fds(&msg);
	}
	if (d->chan_fd >= 0 && ring_take(ctx, i, d->sock_in) < 0)
		dev_close_channel(ctx, i);
}

/* Take in everything that has arrived, gpuxd's news first (a deadline kill comes before
 * the death it causes). Lock held. */
void cli_pump(gpux_ctx *ctx)
{
	sup_drain(ctx);
	for (uint32_t i = 0; i < ctx->ndevices; i++)
		chan_drain(ctx, i);
}

/* cli_pump(), reading only the channels that epoll reported. Lock held. */
static void pump_events(gpux_ctx *ctx, const struct epoll_event *ev, int n)
{
	uint64_t v;

	sup_drain(ctx);
	for (int i = 0; i < n; i++) {
		if (ev[i].data.u64 == EP_WAKE)
			(void)read(ctx->wake_fd, &v, sizeof(v));
		else if (ev[i].data.u64 >= EP_CHAN0 && ev[i].data.u64 - EP_CHAN0 < ctx->ndevices)
			chan_drain(ctx, (uint32_t)(ev[i].data.u64 - EP_CHAN0));
	}
}

static void wake_reader(gpux_ctx *ctx)
{
	uint64_t one = 1;

	if (ctx->reader && ctx->wake_fd >= 0)
		(void)write(ctx->wake_fd, &one, sizeof(one));
}

/* Take what the rings hold; returns whether there was anything. */
static bool rings_take_all(gpux_ctx *ctx)
{
	bool any = false;

	for (uint32_t i = 0; i < ctx->ndevices; i++) {
		int n = ctx->devs[i].rings ? ring_take(ctx, i, ctx->devs[i].sock_in) : 0;

		if (n < 0)
			dev_close_channel(ctx, i);
		any |= n != 0;
	}
	return any;
}

/* The rings a reader spins on, each held (refs) while the lock is not. */
struct spin_set {
	unsigned n;
	struct cli_rings *rings[IPC_DEVICES_MAX];
	uint32_t seen[IPC_DEVICES_MAX]; /* down's tail when the spin began */
};

static bool spin_set_changed(const struct spin_set *s)
{
	for (unsigned i = 0; i < s->n; i++)
		if (atomic_load(&s->rings[i]->down.ctl->tail) != s->seen[i])
			return true;
	return false;
}

/* How many spins between two looks at the fds and two offers of the CPU (a system call
 * each): many spinning clients must not starve the worker they wait for. */
#define SPIN_FD_EVERY 16u

/*
 * Whether this reader may spin: only while every client of the workers it waits for, and
 * their loop and waiter threads, could have a CPU each. Beyond that, spinners would take the
 * CPUs that the workers need (measured: 64 spinning clients on 16 CPUs cut the rate 4-fold).
 */
static bool spin_fits(const gpux_ctx *ctx)
{
	uint64_t spinners = 0;

	for (uint32_t i = 0; i < ctx->ndevices; i++) {
		const struct cli_dev *d = &ctx->devs[i];

		if (d->rings && d->status)
			spinners += __atomic_load_n(&d->status->stats.clients, __ATOMIC_RELAXED) + 2;
	}
	return ipc_spin_fits(spinners);
}

/*
 * Wait for something to take in, for up to ms (-1: no limit). For the first ipc_spin_ns() of
 * it (not past the deadline) look without sleeping: at the rings, which then tell the
 * workers that no kick is needed, and now and then at the fds; then sleep in epoll. Called
 * and returns with the lock held, which it drops meanwhile. Returns epoll's count (0 when
 * only a ring has news, *ret_ring then set), or -1 with errno.
 */
static int wait_events(gpux_ctx *ctx, struct epoll_event *ev, int nev, int ms, uint64_t deadline,
		       bool *ret_ring)
{
	uint64_t until = mono_ns() + ipc_spin_ns();
	struct spin_set s = { 0 };
	bool taken = false;
	int n = 0;

	if (deadline && deadline < until)
		until = deadline;
	if (ipc_spin_ns() == 0 || !spin_fits(ctx))
		until = 0;
	for (uint32_t i = 0; i < ctx->ndevices && until > 0; i++) {
		struct cli_rings *r = ctx->devs[i].rings;

		if (!r)
			continue;
		r->refs++;
		ipc_ring_set_polling(&r->down, true);
		s.seen[s.n] = atomic_load(&r->down.ctl->tail);
		s.rings[s.n++] = r;
	}
	/*
	 * What a worker published since the caller last looked and before it saw the polling
	 * word came without a kick, and is older than `seen`: take it now. Whatever is left
	 * waits for a socket message (its stamp), which will wake us.
	 */
	if (s.n > 0 && rings_take_all(ctx)) {
		until = 0;
		taken = true;
	}
	(void)pthread_mutex_unlock(&ctx->lock);
	for (unsigned k = 0; mono_ns() < until; k++) {
		if (spin_set_changed(&s))
			break;
		if (k % SPIN_FD_EVERY == 0) {
			n = epoll_wait(ctx->epfd, ev, nev, 0);
			if (n != 0)
				break;
			(void)sched_yield();
		}
		cpu_relax();
	}
	(void)pthread_mutex_lock(&ctx->lock);
	/* From now on the workers kick; what came before that without one is seen here. */
	for (unsigned i = 0; i < s.n; i++)
		ipc_ring_set_polling(&s.rings[i]->down, false);
	*ret_ring = taken || spin_set_changed(&s);
	for (unsigned i = 0; i < s.n; i++)
		rings_unref(s.rings[i]);
	if (n != 0 || *ret_ring)
		return n;
	(void)pthread_mutex_unlock(&ctx->lock);
	n = epoll_wait(ctx->epfd, ev, nev, ms);
	(void)pthread_mutex_lock(&ctx->lock);
	return n;
}

/*
 * Wait, lock held, until pred() holds or the deadline (mono_ns; 0: none) passes. One thread
 * at a time waits in epoll and takes in what arrives for all; the others sleep on the
 * condition variable and look again when it is done.
 */
int cli_wait_until(gpux_ctx *ctx, bool (*pred)(gpux_ctx *ctx, void *arg), void *arg,
		   uint64_t deadline)
{
	while (!pred(ctx, arg)) {
		uint64_t now = mono_ns();

		if (deadline && now >= deadline)
			return -ETIMEDOUT;
		if (!ctx->reader) {
			struct epoll_event ev[8];
			bool ring = false;
			int ms = -1, n;

			if (deadline)
				ms = (int)MIN((deadline - now + NSEC_PER_MSEC - 1) / NSEC_PER_MSEC,
					      (uint64_t)INT_MAX);
			/* What reached a ring while nobody looked (no kick: older records were
			 * there) is taken before waiting. */
			if (rings_take_all(ctx)) {
				(void)pthread_cond_broadcast(&ctx->cond);
				continue;
			}
			ctx->reader = true;
			n = wait_events(ctx, ev, (int)ARRAY_SIZE(ev), ms, deadline, &ring);
			ctx->reader = false;
			if (n < 0 && errno != EINTR) {
				(void)pthread_cond_broadcast(&ctx->cond);
				return -errno;
			}
			/* A full batch may have left some out: then look at everything. */
			if (n == (int)ARRAY_SIZE(ev)) {
				uint64_t v;

				(void)read(ctx->wake_fd, &v, sizeof(v));
				cli_pump(ctx);
			} else if (n > 0)
				pump_events(ctx, ev, n);
			if (ring)
				(void)rings_take_all(ctx);
			(void)pthread_cond_broadcast(&ctx->cond);
		} else {
			struct timespec ts;

			if (deadline) {
				ts.tv_sec = (time_t)(deadline / NSEC_PER_SEC);
				ts.tv_nsec = (long)(deadline % NSEC_PER_SEC);
				(void)pthread_cond_timedwait(&ctx->cond, &ctx->lock, &ts);
			} else {
				(void)pthread_cond_wait(&ctx->cond, &ctx->lock);
			}
		}
	}
	return 0;
}

/* ---- connecting ---- */

/* gpuxd: $GPUX_DAEMON, beside this library, or where it was installed. */
static char *find_daemon(void)
{
	const char *e = getenv("GPUX_DAEMON");
	Dl_info info;
	char *p;

	if (e && *e)
		return strdup(e);
	if (dladdr((void *)gpux_connect, &info) && info.dli_fname && strchr(info.dli_fname, '/')) {
		char *copy = strdup(info.dli_fname);
		if (copy && asprintf(&p, "%s/gpuxd", dirname(copy)) >= 0) {
			free(copy);
			if (access(p, X_OK) == 0)
				return p;
			free(p);
		} else
			free(copy);
	}
	return strdup(GPUX_LIBEXECDIR "/gpuxd");
}

/*
 * Start a private gpuxd. It daemonizes and its first process exits once the socket
 * listens, so waiting for that process is waiting for readiness, and leaves no zombie.
 */
static int autospawn(const char *path)
{
	_cleanup_(freep) char *daemon = find_daemon();
	char *argv[] = { "gpuxd", "--private", "--daemonize", "--socket", (char *)path, NULL };
	const char *log = getenv("GPUX_LOG_FILE");
	posix_spawn_file_actions_t fa;
	posix_spawnattr_t attr;
	sigset_t none;
	pid_t pid;
	int r, st;

	if (!daemon)
		return -ENOMEM;
	(void)posix_spawn_file_actions_init(&fa);
	(void)posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	(void)posix_spawn_file_actions_addopen(&fa, 1, log && *log ? log : "/dev/null",
					       O_WRONLY | O_APPEND | O_CREAT, 0600);
	(void)posix_spawn_file_actions_adddup2(&fa, 1, 2);
	/* The program's own fds, close-on-exec or not, are none of gpuxd's business. */
	(void)posix_spawn_file_actions_addclosefrom_np(&fa, 3);
	(void)posix_spawnattr_init(&attr);
	sigemptyset(&none);
	(void)posix_spawnattr_setsigmask(&attr, &none);
	(void)posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK);
	r = posix_spawn(&pid, daemon, &fa, &attr, argv, environ);
	(void)posix_spawn_file_actions_destroy(&fa);
	(void)posix_spawnattr_destroy(&attr);
	if (r != 0)
		return -r;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return 0; /* reaped by the program's own SIGCHLD handling: just try */
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -ECONNREFUSED;
}

static int connect_socket(const char *path, int *ret_fd)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	_cleanup_(closep) int fd = -1;

	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, path, strlen(path));
	fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

/* Receive one message, waiting at most until the deadline. */
static int recv_until(int fd, uint8_t *buf, struct ipc_msg *msg, uint64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		uint64_t now = mono_ns();
		int r;

		if (now >= deadline)
			return -ETIMEDOUT;
		r = poll(&p, 1, (int)((deadline - now) / NSEC_PER_MSEC) + 1);
		if (r < 0 && errno != EINTR)
			return -errno;
		if (r <= 0)
			continue;
		r = ipc_channel_recv_msg(fd, buf, IPC_MSG_MAX, msg, MSG_DONTWAIT);
		if (r == -EAGAIN)
			continue;
		return r == 0 ? -ECONNRESET : r;
	}
}

static int hello(gpux_ctx *ctx, uint64_t deadline)
{
	struct ipc_hello h = { .min_version = IPC_VERSION_MIN, .max_version = IPC_VERSION };
	struct ipc_welcome wel;
	struct ipc_msg msg;
	int n, r;

	n = ipc_encode(ctx->sbuf, IPC_MSG_MAX, IPC_HELLO, 1, 0, &h, sizeof(h), NULL, 0);
	/* A refusal may be waiting already, and the socket closed behind it: read it anyway. */
	(void)ipc_channel_send(ctx->sup_fd, ctx->sbuf, (size_t)n, NULL, 0, 0);
	r = recv_until(ctx->sup_fd, ctx->rbuf, &msg, deadline);
	if (r < 0)
		return GPUX_E_CONNECT;
	if (msg.hdr.type == IPC_DONE) {
		struct ipc_done_msg d;
		r = ipc_decode_done(&msg, &d) == 0 && d.m.status < 0 ? d.m.status : GPUX_E_PROTO;
		ipc_msg_close_fds(&msg);
		return r;
	}
	r = ipc_decode_welcome(&msg, &wel);
	ipc_msg_close_fds(&msg);
	if (r < 0 || wel.ndevices == 0)
		return GPUX_E_PROTO;
	ctx->client_id = wel.client_id;
	ctx->ndevices = wel.ndevices;
	/* One DEVICE per device follows at once. */
	for (uint32_t i = 0; i < wel.ndevices; i++) {
		r = recv_until(ctx->sup_fd, ctx->rbuf, &msg, deadline);
		if (r < 0)
			return GPUX_E_CONNECT;
		if (msg.hdr.type == IPC_DEVICE)
			on_device(ctx, &msg);
		ipc_msg_close_fds(&msg);
	}
	return 0;
}

static void disconnect_fds(gpux_ctx *ctx)
{
	for (uint32_t i = 0; i < IPC_DEVICES_MAX; i++) {
		struct cli_dev *d = &ctx->devs[i];

		dev_drop_rings(d);
		d->chan_fd = safe_close(d->chan_fd);
		if (d->status)
			(void)munmap(d->status, IPC_STATUS_PAGE_SIZE);
		d->status = NULL;
		d->inflight = 0;
	}
	ctx->sup_fd = safe_close(ctx->sup_fd);
	ctx->connected = false;
}

static int do_connect(gpux_ctx *ctx)
{
	uint64_t deadline = mono_ns() + CLI_CONNECT_NS;
	bool spawned = false;
	int r;

	for (unsigned backoff_us = 1000;; backoff_us = MIN(backoff_us * 2, 100000u)) {
		r = connect_socket(ctx->path, &ctx->sup_fd);
		if (r == 0)
			break;
		if (r != -ENOENT && r != -ECONNREFUSED)
			return r == -EACCES ? GPUX_E_PERM : GPUX_E_CONNECT;
		if (!ctx->autospawn || mono_ns() > deadline)
			return GPUX_E_CONNECT;
		if (!spawned) {
			spawned = true;
			if (autospawn(ctx->path) < 0)
				return GPUX_E_CONNECT;
			continue;
		}
		(void)usleep(backoff_us);
	}
	r = hello(ctx, deadline);
	if (r < 0) {
		disconnect_fds(ctx);
		return r;
	}
	{
		struct epoll_event ev = { .events = EPOLLIN, .data.u64 = EP_SUP };
		(void)epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, ctx->sup_fd, &ev);
	}
	ctx->connected = true;
	return 0;
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
	/* A reader of the parent spinning on the rings at fork() is not in this process. */
	for (uint32_t i = 0; i < IPC_DEVICES_MAX; i++)
		if (ctx->devs[i].rings)
			ctx->devs[i].rings->refs = 1;
	disconnect_fds(ctx);
	ctx->reader = false;
	ctx->nkilled = 0;
	(void)pthread_cond_destroy(&ctx->cond);
	{
		pthread_condattr_t ca;
		(void)pthread_condattr_init(&ca);
		(void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		(void)pthread_cond_init(&ctx->cond, &ca);
		(void)pthread_condattr_destroy(&ca);
	}
}

static int poll_fds(gpux_ctx *ctx)
{
	struct epoll_event ev = { .events = EPOLLIN, .data.u64 = EP_WAKE };

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
	if (ctx->connected)
		return 0;
	r = poll_fds(ctx);
	if (r < 0)
		return GPUX_E_IO;
	return do_connect(ctx);
}

static bool worker_gone(const struct cli_dev *d)
{
	return d->status && __atomic_load_n(&d->status->gone, __ATOMIC_ACQUIRE);
}

static bool dev_settled(gpux_ctx *ctx, void *arg)
{
	const struct cli_dev *d = &ctx->devs[(uintptr_t)arg];

	return !ctx->connected || d->chan_fd >= 0 || d->info.state == GPUX_DEVICE_FAILED;
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
			return GPUX_E_NODEV;
		/* The common case, without a system call: a channel whose worker gpuxd has not
		 * seen die. (A message put on a ring gets no EPIPE from a dead worker.) */
		if (ctx->devs[device].chan_fd >= 0 && !worker_gone(&ctx->devs[device]))
			return 0;
		cli_pump(ctx);
		r = cli_wait_until(ctx, dev_settled, (void *)(uintptr_t)device, deadline);
		if (r == -ETIMEDOUT)
			return GPUX_E_NODEV;
		if (r < 0)
			return GPUX_E_IO;
		if (!ctx->connected)
			continue; /* gpuxd went away meanwhile: connect again */
		if (ctx->devs[device].chan_fd >= 0)
			return 0;
		return GPUX_E_NODEV;
	}
	return GPUX_E_CONNECT;
}

/* Lock held: send on the device's channel; -EPIPE when its worker is gone (channel closed). */
static int chan_send(gpux_ctx *ctx, uint32_t device, const void *msg, size_t len,
		     const int *fds, unsigned nfds)
{
	struct cli_dev *d = &ctx->devs[device];
	int r = ipc_channel_send(d->chan_fd, msg, len, fds, nfds, 0);

	if (r == -EPIPE || r == -ECONNRESET) {
		chan_drain(ctx, device);
		dev_close_channel(ctx, device);
		return -EPIPE;
	}
	if (r == 0)
		d->sock_out++;
	return r;
}

void cli_send_drop(gpux_ctx *ctx, uint32_t device, uint64_t gen, uint16_t type,
		   const void *payload, size_t len)
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
		if (r == 1 && chan_send(ctx, device, &ipc_kick, sizeof(ipc_kick), NULL, 0) == -EPIPE)
			return -EPIPE;
		if (r >= 0)
			return 0;
	}
	return chan_send(ctx, device, msg, len, fds, nfds);
}

/* ---- public ---- */

GPUX_EXPORT gpux_status gpux_connect(const char *socket_path, gpux_ctx **ret_ctx)
{
	char dir[128], path[128];
	pthread_mutexattr_t ma;
	pthread_condattr_t ca;
	gpux_ctx *ctx;
	const char *env = getenv("GPUX_SOCKET");
	int r;

	if (!ret_ctx)
		return GPUX_E_INVAL;
	(void)pthread_once(&atfork_once, atfork_register);
	ctx = calloc(1, sizeof(*ctx));
	if (!ctx)
		return GPUX_E_NOMEM;
	ctx->sup_fd = ctx->epfd = ctx->wake_fd = -1;
	for (unsigned i = 0; i < IPC_DEVICES_MAX; i++)
		ctx->devs[i].chan_fd = -1;
	ctx->fork_gen = cli_fork_gen;
	ctx->rbuf = malloc(IPC_MSG_MAX);
	ctx->ring_buf = malloc(IPC_RING_REC_MAX);
	ctx->sbuf = malloc(IPC_MSG_MAX);
	if (socket_path)
		ctx->path = strdup(socket_path);
	else if (env && *env)
		ctx->path = strdup(env);
	else if (ipc_default_socket(dir, path, sizeof(path)) == 0 && ipc_private_dir(dir) == 0) {
		ctx->path = strdup(path);
		ctx->autospawn = true;
	}
	if (!ctx->rbuf || !ctx->sbuf || !ctx->ring_buf || !ctx->path) {
		r = ctx->path || socket_path || (env && *env) ? GPUX_E_NOMEM : GPUX_E_CONNECT;
		free(ctx->rbuf);
		free(ctx->sbuf);
		free(ctx->ring_buf);
		free(ctx->path);
		free(ctx);
		return r;
	}
	(void)pthread_mutexattr_init(&ma);
	(void)pthread_mutex_init(&ctx->lock, &ma);
	(void)pthread_mutexattr_destroy(&ma);
	(void)pthread_condattr_init(&ca);
	(void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	(void)pthread_cond_init(&ctx->cond, &ca);
	(void)pthread_condattr_destroy(&ca);

	(void)pthread_mutex_lock(&ctx->lock);
	r = cli_ensure(ctx);
	(void)pthread_mutex_unlock(&ctx->lock);
	if (r < 0) {
		ctx->epfd = safe_close(ctx->epfd);
		ctx->wake_fd = safe_close(ctx->wake_fd);
		(void)pthread_mutex_destroy(&ctx->lock);
		(void)pthread_cond_destroy(&ctx->cond);
		free(ctx->rbuf);
		free(ctx->sbuf);
		free(ctx->ring_buf);
		free(ctx->path);
		free(ctx);
		return (gpux_status)r;
	}
	(void)pthread_mutex_lock(&all_lock);
	ctx->next = all_ctx;
	if (all_ctx)
		all_ctx->prev = ctx;
	all_ctx = ctx;
	(void)pthread_mutex_unlock(&all_lock);
	*ret_ctx = ctx;
	return GPUX_OK;
}

GPUX_EXPORT void gpux_disconnect(gpux_ctx *ctx)
{
	if (!ctx)
		return;
	(void)pthread_mutex_lock(&all_lock);
	if (ctx->prev)
		ctx->prev->next = ctx->next;
	else
		all_ctx = ctx->next;
	if (ctx->next)
		ctx->next->prev = ctx->prev;
	(void)pthread_mutex_unlock(&all_lock);

	(void)pthread_mutex_lock(&ctx->lock);
	cli_after_fork(ctx);
	cli_queues_free_all(ctx);
	cli_modules_free_all(ctx);
	cli_dbufs_free_all(ctx);
	cli_bufs_free_all(ctx);
	cli_reqs_free_all(ctx);
	disconnect_fds(ctx);
	ctx->epfd = safe_close(ctx->epfd);
	ctx->wake_fd = safe_close(ctx->wake_fd);
	(void)pthread_mutex_unlock(&ctx->lock);
	(void)pthread_mutex_destroy(&ctx->lock);
	(void)pthread_cond_destroy(&ctx->cond);
	free(ctx->rbuf);
	free(ctx->sbuf);
	free(ctx->ring_buf);
	free(ctx->path);
	free(ctx);
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
		r = GPUX_E_NODEV;
	if (r == 0) {
		cli_pump(ctx);
		*ret_info = ctx->devs[device].info;
	}
	(void)pthread_mutex_unlock(&ctx->lock);
	return (gpux_status)r;
}

GPUX_EXPORT gpux_status gpux_fd(gpux_ctx *ctx, int *ret_fd)
{
	int r;

	if (!ctx || !ret_fd)
		return GPUX_E_INVAL;
	(void)pthread_mutex_lock(&ctx->lock);
	r = cli_ensure(ctx);
	if (r == 0)
		*ret_fd = ctx->epfd;
	(void)pthread_mutex_unlock(&ctx->lock);
	return (gpux_status)r;
}

GPUX_EXPORT gpux_status gpux_process(gpux_ctx *ctx)
{
	int r;

	if (!ctx)
		return GPUX_E_INVAL;
	(void)pthread_mutex_lock(&ctx->lock);
	r = cli_ensure(ctx);
	if (r == 0 && !ctx->reader)
		cli_pump(ctx);
	(void)pthread_mutex_unlock(&ctx->lock);
	return (gpux_status)r;
}

/* Used by requests freed or finished by another thread to wake the waiting one. */
void cli_wake(gpux_ctx *ctx)
{
	wake_reader(ctx);
	(void)pthread_cond_broadcast(&ctx->cond);
}
