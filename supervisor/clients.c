/* SPDX-License-Identifier: MIT */
/* supervisor/clients.c: accepting clients, checking who they are, handing them channels, admin queries. */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/sockios.h>
#include <sys/ioctl.h>
#include <sys/socket.h>

#include "channel.h"
#include "macro.h"
#include "sup.h"

#define GROUPS_MAX 256

static uint8_t msgbuf[IPC_MSG_MAX];

/* gpuxd answers with gpux.h's statuses and states: the wire's codes of the same values. */
IPC_ASSERT_PUBLIC()

static bool in_groups(int fd, gid_t gid)
{
	gid_t groups[GROUPS_MAX];
	socklen_t len = sizeof(groups);

	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0)
		return false;
	for (size_t i = 0; i < len / sizeof(gid_t); i++)
		if (groups[i] == gid)
			return true;
	return false;
}

/* gpuxd's own user or root: the reserved slots are theirs, and no per-user cap applies. */
static bool owner(uid_t uid)
{
	return uid == geteuid() || uid == 0;
}

/* The same user as gpuxd, root, or (with --allow-group) a member of that group. */
static bool allowed(const struct sup *s, int fd, const struct ucred *cr)
{
	if (owner(cr->uid))
		return true;
	if (s->opts.allow_group &&
	    (cr->gid == s->opts.allow_gid || in_groups(fd, s->opts.allow_gid)))
		return true;
	return false;
}

/*
 * The priorities a client may give its queues, and theirs by default: the first --priority
 * rule that matches it (its user, its primary or a supplementary group, or everybody), else
 * every priority for gpuxd's user and root and 0 at most for others. A client's own queues are
 * all it can raise: nobody but those the rules name may put work before another user's.
 */
static void prio_policy(const struct sup *s, int fd, const struct ucred *cr, int8_t *ret_max,
			int8_t *ret_default)
{
	for (unsigned i = 0; i < s->opts.nprio_rules; i++) {
		const struct sup_prio_rule *r = &s->opts.prio_rules[i];

		if (r->who == SUP_PRIO_ALL || (r->who == SUP_PRIO_USER && r->id == cr->uid) ||
		    (r->who == SUP_PRIO_GROUP && (r->id == cr->gid || in_groups(fd, r->id)))) {
			*ret_max = r->max;
			*ret_default = r->def;
			return;
		}
	}
	*ret_max = owner(cr->uid) ? IPC_PRIO_MAX : 0;
	*ret_default = 0;
}

/* Refuse a connection with a status before anything else: it is new, the send cannot block. */
static void refuse(int fd, gpux_status status, const char *why)
{
	struct ipc_done d = { .status = status };
	int n = ipc_encode_done(msgbuf, sizeof(msgbuf), 0, &d, why);

	if (n > 0)
		(void)ipc_channel_send(fd, msgbuf, (size_t)n, NULL, 0, MSG_DONTWAIT);
	(void)safe_close(fd);
}

/* Connections per uid and per pid, as counts kept in the maps' pointers (never NULL: >= 1). */
static unsigned count_get(const struct ipc_map *m, uint64_t key)
{
	return (unsigned)(uintptr_t)ipc_map_get(m, key);
}

static int count_add(struct ipc_map *m, uint64_t key)
{
	uintptr_t n = (uintptr_t)ipc_map_remove(m, key);

	return ipc_map_put(m, key, (void *)(n + 1));
}

static void count_sub(struct ipc_map *m, uint64_t key)
{
	uintptr_t n = (uintptr_t)ipc_map_remove(m, key);

	if (n > 1)
		(void)ipc_map_put(m, key, (void *)(n - 1));
}

const struct sup_gone *sup_client_gone_get(const struct sup *s, uint64_t client_id)
{
	for (unsigned i = 0; i < SUP_GONE_KEPT; i++)
		if (s->gone[i].id == client_id && client_id)
			return &s->gone[i];
	return NULL;
}

static void client_free(struct sup_client *c)
{
	struct sup *s = c->s;

	/* Its work may outlive it (a kernel that runs on): who it was stays known a while. */
	if (c->hello_done && !c->admin)
		s->gone[s->ngone++ % SUP_GONE_KEPT] = (struct sup_gone){
			.id = c->id, .pid = c->pid, .uid = c->uid, .gone_ns = mono_ns()
		};

	LIST_REMOVE(s->clients, c);
	s->nclients--;
	if (c->silent)
		s->nsilent--;
	if (c->admin_pool)
		s->nadmin_pool--;
	count_sub(&s->per_uid, c->uid);
	if (c->pid > 0) {
		count_sub(&s->per_pid, (uint64_t)c->pid);
		if (!count_get(&s->per_pid, (uint64_t)c->pid))
			sup_spares_pid_gone(s, c->pid);
		sup_workers_tell_processes(s);
	}
	if (c->hello_done)
		(void)ipc_map_remove(&s->client_ids, c->id);
	ipc_timer_free(c->hello_timer);
	ipc_timer_free(c->chan_timer);
	ipc_conn_free(c->conn);
	free(c);
	if (s->nclients == 0 && s->opts.private_mode && !s->stopping)
		ipc_timer_arm(s->idle_timer, mono_ns() + s->opts.idle_exit_ms * NSEC_PER_MSEC);
}

static void send_device(struct sup_client *c, struct sup_worker *w, const int *fds)
{
	struct ipc_device d = {
		.info = w->info,
		.state = sup_public_state(w),
		.generation = w->generation,
		.flags = fds ? IPC_DEVICE_CHANNEL : 0,
	};
	int n = ipc_encode_device(msgbuf, sizeof(msgbuf), 0, &d);

	if (n > 0)
		(void)ipc_conn_send(c->conn, msgbuf, (size_t)n, fds, fds ? 2 : 0);
}

/*
 * A channel that could not be made (gpuxd out of fds, say): the client hears the device's
 * state now, and gets the channel later, as if it had asked (channels_give()). Without it, a
 * client told the device is ready would wait for a channel that nobody means to give.
 */
static void give_later(struct sup_client *c, struct sup_worker *w)
{
	send_device(c, w, NULL);
	c->chan_wanted |= 1ULL << w->index;
	c->chan_wanted_gen[w->index] = w->generation;
	ipc_timer_arm(c->chan_timer, mono_ns() + SUP_CHANNEL_RETRY_NS);
}

/*
 * Give a client the channel to a ready worker that a spare made ahead (supervisor/spares.c):
 * the worker attached it as the spare's id, which is the client's now, and learns whose it is
 * (ADOPT, which also wakes it for the client's first request). False when the spare has none
 * to that worker as it runs now.
 */
static bool give_spare_channel(struct sup_client *c, struct sup_worker *w, struct sup_spare *sp)
{
	struct ipc_adopt a = { .client_id = c->id, .pid = (uint32_t)MAX(c->pid, 0) };
	int fds[2] = { sup_spare_channel(sp, w), w->status_ro_fd };
	int n;

	if (fds[0] < 0)
		return false;
	n = ipc_encode_adopt(msgbuf, sizeof(msgbuf), 0, &a);
	if (n > 0)
		(void)ipc_conn_send(w->control, msgbuf, (size_t)n, NULL, 0);
	send_device(c, w, fds);
	(void)close(fds[0]);
	c->chan_last_ns[w->index] = mono_ns();
	c->chan_wanted &= ~(1ULL << w->index);
	return true;
}

/* Make a channel between a client and a ready worker and give each its end. */
void sup_client_give_channel(struct sup_client *c, struct sup_worker *w)
{
	struct ipc_attach a = {
		.client_id = c->id,
		.uid = c->uid,
		.gid = c->gid,
		.pid = (uint32_t)c->pid,
		.prio_max = c->prio_max,
		.prio_default = c->prio_default,
	};
	int pair[2], fds[2], n;

	if (ipc_channel_pair(pair, false) < 0) {
		give_later(c, w);
		return;
	}
	n = ipc_encode_attach(msgbuf, sizeof(msgbuf), 0, &a);
	if (n < 0 || ipc_conn_send(w->control, msgbuf, (size_t)n, &pair[1], 1) < 0) {
		(void)close(pair[0]);
		(void)close(pair[1]);
		give_later(c, w);
		return;
	}
	fds[0] = pair[0];
	fds[1] = w->status_ro_fd;
	send_device(c, w, fds);
	(void)close(pair[0]);
	(void)close(pair[1]);
	c->chan_last_ns[w->index] = mono_ns();
	/* Whatever the client asked of this device, it has a channel now. */
	c->chan_wanted &= ~(1ULL << w->index);
}

/* A worker became ready or went away: tell every client, with a new channel when ready. */
void sup_clients_device_changed(struct sup *s, struct sup_worker *w)
{
	sup_spares_drop(s);
	for (struct sup_client *c = s->clients; c; c = c->next) {
		if (!c->hello_done || c->admin)
			continue;
		if (sup_worker_serving(w))
			sup_client_give_channel(c, w);
		else
			send_device(c, w, NULL);
	}
}

void sup_client_send_killed(struct sup *s, uint64_t client_id, const struct ipc_killed *k)
{
	struct sup_client *c = ipc_map_get(&s->client_ids, client_id);
	int n;

	if (!c)
		return;
	n = ipc_encode_killed(msgbuf, sizeof(msgbuf), 0, k);
	if (n > 0)
		(void)ipc_conn_send(c->conn, msgbuf, (size_t)n, NULL, 0);
}

void sup_status_collect(struct sup *s, struct ipc_status *ret, struct ipc_dev_status *devs)
{
	static struct ipc_status_page snap;
	struct ipc_status st = {
		.ndevices = s->nworkers,
		.nclients = s->nclients,
		.uptime_ns = mono_ns() - s->started_ns,
		.clients_total = s->clients_total,
		.clients_refused = s->clients_refused,
		.spares = s->nspares,
		.count = s->nworkers,
		.flags = s->stopping ? IPC_STATUS_STOPPING : 0,
	};

	(void)snprintf(st.loop, sizeof(st.loop), "%s", ipc_loop_name(s->loop));
	(void)snprintf(st.version, sizeof(st.version), "%s", GPUX_VERSION_STRING);
	for (unsigned i = 0; i < s->nworkers; i++) {
		const struct sup_worker *w = &s->workers[i];
		struct ipc_dev_status *d = &devs[i];

		memset(d, 0, sizeof(*d));
		d->info = w->info;
		d->state = sup_public_state(w);
		d->pid = (uint32_t)MAX(w->pid, 0);
		d->generation = w->generation;
		d->restarts = w->restarts;
		d->deaths_recent = sup_worker_recent_deaths(w);
		d->launch_rate = w->launch_rate;
		if (w->state == W_READY && ipc_status_read(w->status, &snap)) {
			d->stats = snap.stats;
			/* What the worker wrote is a string only where we make it one. */
			d->stats.driver[sizeof(d->stats.driver) - 1] = '\0';
		}
	}
	*ret = st;
}

/* One page of the status, from device `first` on. */
static void send_status(struct sup_client *c, uint32_t id, uint32_t first)
{
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct ipc_status st;
	int n;

	sup_status_collect(c->s, &st, devs);
	st.first = MIN(first, st.ndevices);
	st.count = MIN(st.ndevices - st.first, (uint32_t)IPC_STATUS_PAGE_DEVS);
	n = ipc_encode_status(msgbuf, sizeof(msgbuf), id, &st, devs + st.first);
	if (n > 0)
		(void)ipc_conn_send(c->conn, msgbuf, (size_t)n, NULL, 0);
}

/* ---- gpux top: the clients, and what their workers' tables say of them ---- */

static int cmp_client_id(const void *a, const void *b)
{
	uint64_t x = ((const struct ipc_client_info *)a)->id;
	uint64_t y = ((const struct ipc_client_info *)b)->id;

	return x < y ? -1 : x > y;
}

/* Add what worker w's table says of the clients in rows (index: id -> position + 1). */
static void clients_from_table(const struct sup_worker *w, const struct ipc_map *index,
			       struct ipc_client_info *rows)
{
	const struct ipc_client_table *t = w->clients;

	if (!t || w->pid <= 0 ||
	    __atomic_load_n(&t->magic, __ATOMIC_ACQUIRE) != IPC_CLIENT_TABLE_MAGIC)
		return;
	for (unsigned i = 0; i < IPC_WORKER_CLIENTS_MAX; i++) {
		const struct ipc_client_row *row = &t->rows[i];
		uint64_t id = __atomic_load_n(&row->client_id, __ATOMIC_ACQUIRE);
		uintptr_t at = id ? (uintptr_t)ipc_map_get(index, id) : 0;
		struct ipc_client_info *c;

		if (!at)
			continue;
		c = &rows[at - 1];
		c->requests += __atomic_load_n(&row->requests, __ATOMIC_RELAXED);
		c->device_bytes += __atomic_load_n(&row->device_bytes, __ATOMIC_RELAXED);
		c->inflight += (uint32_t)__atomic_load_n(&row->inflight, __ATOMIC_RELAXED);
		/* Every worker maps the same segments of a client: the most is what it holds. */
		c->shared_bytes =
			MAX(c->shared_bytes, __atomic_load_n(&row->shared_bytes, __ATOMIC_RELAXED));
		c->channels++;
	}
}

/*
 * CLIENTS: a page of the clients the asker may see whose id is above `after`, by id. gpuxd's
 * own user and root see every client; another user sees its own (who else uses the devices,
 * and for what, is not its business).
 */
static void send_clients(struct sup_client *asker, uint32_t id, uint64_t after)
{
	struct sup *s = asker->s;
	bool all = owner(asker->uid);
	struct ipc_clients m = { 0 };
	struct ipc_map index = IPC_MAP_INIT;
	_cleanup_(freep) struct ipc_client_info *rows = calloc(s->nclients + 1, sizeof(*rows));
	uint64_t now = mono_ns();
	size_t n = 0;
	int len;

	if (!rows)
		return;
	for (const struct sup_client *c = s->clients; c; c = c->next) {
		if (!c->hello_done || c->admin || (!all && c->uid != asker->uid))
			continue;
		m.total++;
		if (c->id > after)
			rows[n++] = (struct ipc_client_info){
				.id = c->id,
				.pid = (uint32_t)MAX(c->pid, 0),
				.uid = c->uid,
				.connected_ns = now - c->accepted_ns,
			};
	}
	qsort(rows, n, sizeof(*rows), cmp_client_id);
	m.count = (uint32_t)MIN(n, (size_t)IPC_CLIENTS_PAGE);
	for (uint32_t i = 0; i < m.count; i++)
		if (ipc_map_put(&index, rows[i].id, (void *)(uintptr_t)(i + 1)) < 0) {
			ipc_map_done(&index);
			return;
		}
	for (unsigned k = 0; k < s->nworkers; k++)
		clients_from_table(&s->workers[k], &index, rows);
	ipc_map_done(&index);
	len = ipc_encode_clients(msgbuf, sizeof(msgbuf), id, &m, rows);
	if (len > 0)
		(void)ipc_conn_send(asker->conn, msgbuf, (size_t)len, NULL, 0);
}

static int hello(struct sup_client *c, const struct ipc_msg *msg)
{
	struct sup *s = c->s;
	struct sup_spare *spare = NULL;
	struct ipc_welcome wel;
	struct ipc_hello h;
	uint32_t version;
	int n, r;

	r = ipc_decode_hello(msg, &h);
	if (r < 0)
		return r;
	c->silent = false;
	s->nsilent--;
	version = MIN(h.max_version, IPC_VERSION);
	if (version < MAX(h.min_version, IPC_VERSION_MIN)) {
		struct ipc_done d = { .status = GPUX_E_VERSION };
		struct ipc_hdr hdr;

		n = ipc_encode_done(msgbuf, sizeof(msgbuf), msg->hdr.id, &d,
				    "no protocol version in common with gpuxd");
		if (n > 0) {
			/* In the client's newest version, which it can parse. */
			memcpy(&hdr, msgbuf, sizeof(hdr));
			hdr.version = (uint8_t)MIN(MAX(h.max_version, 1u), UINT8_MAX);
			memcpy(msgbuf, &hdr, sizeof(hdr));
			(void)ipc_conn_send(c->conn, msgbuf, (size_t)n, NULL, 0);
		}
		c->refused = "no protocol version in common";
		ipc_timer_arm(c->hello_timer, mono_ns() + SUP_REFUSED_LINGER_NS);
		return 0;
	}
	/* While gpuxd drains, it still answers admin queries (gpux status shows the drain). */
	if (s->stopping && !(h.flags & IPC_HELLO_ADMIN)) {
		n = ipc_encode_done(msgbuf, sizeof(msgbuf), msg->hdr.id,
				    &(struct ipc_done){ .status = GPUX_E_STOPPING },
				    "gpuxd is stopping: it takes no new clients");
		if (n > 0)
			(void)ipc_conn_send(c->conn, msgbuf, (size_t)n, NULL, 0);
		s->clients_refused++;
		c->refused = "gpuxd is stopping";
		ipc_timer_arm(c->hello_timer, mono_ns() + SUP_REFUSED_LINGER_NS);
		return 0;
	}
	/* The slots beyond max_clients are for gpux status. */
	if (c->admin_pool && !(h.flags & IPC_HELLO_ADMIN)) {
		struct ipc_done d = { .status = GPUX_E_QUOTA };

		s->clients_refused++;
		n = ipc_encode_done(msgbuf, sizeof(msgbuf), msg->hdr.id, &d, "too many clients");
		if (n > 0)
			(void)ipc_conn_send(c->conn, msgbuf, (size_t)n, NULL, 0);
		c->refused = "too many clients";
		ipc_timer_arm(c->hello_timer, mono_ns() + SUP_REFUSED_LINGER_NS);
		return 0;
	}
	/* A forked child of a client takes what was made ahead for it, its id included. */
	if (!(h.flags & IPC_HELLO_ADMIN))
		spare = sup_spare_take(s, c);
	c->id = spare ? sup_spare_id(spare) : ++s->next_client_id;
	r = ipc_map_put(&s->client_ids, c->id, c);
	if (r < 0) {
		sup_spare_free(s, spare);
		return r;
	}
	c->hello_done = true;
	c->admin = h.flags & IPC_HELLO_ADMIN;
	ipc_timer_arm(c->hello_timer, 0);

	wel = (struct ipc_welcome){
		.version = version,
		.ndevices = s->nworkers,
		.client_id = c->id,
		.quota_shared = s->opts.quota_shared,
		.flags = s->opts.private_mode ? IPC_WELCOME_PRIVATE : 0,
		.prio_max = c->prio_max,
		.prio_default = c->prio_default,
	};
	n = ipc_encode_welcome(msgbuf, sizeof(msgbuf), msg->hdr.id, &wel);
	r = n < 0 ? n : ipc_conn_send(c->conn, msgbuf, (size_t)n, NULL, 0);
	for (unsigned i = 0; i < s->nworkers && r == 0 && !c->admin; i++) {
		struct sup_worker *w = &s->workers[i];

		if (!sup_worker_serving(w))
			send_device(c, w, NULL);
		else if (!give_spare_channel(c, w, spare))
			sup_client_give_channel(c, w);
	}
	sup_spare_free(s, spare);
	return r;
}

/*
 * Channels a client asks for (CHANNEL_REQ) come one at a time per device. Each is a
 * socketpair here, an ATTACH with one end to the worker and a DEVICE with two fds to the
 * client: a client asking again and again, reading nothing, would have gpuxd hold fds
 * without end. So a request is answered once the client has read all that gpuxd sent it
 * (the last channel too) and SUP_CHANNEL_INTERVAL_NS after the device's last channel to it;
 * until then it waits, and later requests for that device are the same request.
 */
static bool client_unread(const struct sup_client *c)
{
	int n = 0;

	if (ipc_conn_queued(c->conn) > 0)
		return true;
	/* AF_UNIX: bytes sent that the peer has not read yet. A kernel that cannot say leaves
	 * the interval and the queue's cap of fds. */
	return ioctl(ipc_conn_fd(c->conn), SIOCOUTQ, &n) == 0 && n > 0;
}

static void channels_give(struct sup_client *c)
{
	struct sup *s = c->s;
	uint64_t now = mono_ns(), next = 0;

	for (unsigned i = 0; i < s->nworkers && c->chan_wanted; i++) {
		struct sup_worker *w = &s->workers[i];
		uint64_t at = c->chan_last_ns[i] + SUP_CHANNEL_INTERVAL_NS;

		if (!(c->chan_wanted & (1ULL << i)))
			continue;
		if (now >= at && !client_unread(c)) {
			uint32_t gen = c->chan_wanted_gen[i];

			c->chan_wanted &= ~(1ULL << i);
			/* A channel of a later worker than the one asked of came already, or comes
			 * when it is ready; a worker that died is announced to every client. A
			 * second channel would take the place of the first, and of what runs on
			 * it. While gpuxd stops, its draining workers take no new channel. */
			sup_worker_reap_if_dead(w);
			if (!s->stopping && sup_worker_serving(w) &&
			    (gen == 0 || gen == w->generation))
				sup_client_give_channel(c, w);
			/* Given, or nothing to give; else it failed and is tried again. */
			if (!(c->chan_wanted & (1ULL << i)))
				continue;
		}
		at = MAX(at, now + SUP_CHANNEL_RETRY_NS);
		next = next ? MIN(next, at) : at;
	}
	ipc_timer_arm(c->chan_timer, next);
}

static void on_chan_timer(struct ipc_timer *t, void *userdata)
{
	channels_give(userdata);
}

/* A client lost its channel to a device's worker: the worker dropped it, or the channel ended
 * without a word before gpuxd told the client of a death. */
static int channel_req(struct sup_client *c, const struct ipc_msg *msg)
{
	struct ipc_channel_req q;

	_Static_assert(IPC_DEVICES_MAX <= 64, "chan_wanted has a bit per device");
	if (ipc_decode_channel_req(msg, &q) < 0 || q.device >= c->s->nworkers)
		return -EBADMSG;
	c->chan_wanted |= 1ULL << q.device;
	c->chan_wanted_gen[q.device] = q.generation;
	channels_give(c);
	return 0;
}

static void on_client_msg(struct ipc_conn *conn, struct ipc_msg *msg, void *userdata)
{
	struct sup_client *c = userdata;
	struct ipc_status_req sr;
	struct ipc_clients_req cr;
	int r = -EBADMSG;

	if (!c->hello_done && !c->refused && msg->hdr.type == IPC_HELLO)
		r = hello(c, msg);
	else if (c->hello_done && c->admin && msg->hdr.type == IPC_STATUS_REQ &&
		 ipc_decode_status_req(msg, &sr) == 0) {
		send_status(c, msg->hdr.id, sr.first);
		r = 0;
	} else if (c->hello_done && c->admin && msg->hdr.type == IPC_CLIENTS_REQ &&
		   ipc_decode_clients_req(msg, &cr) == 0) {
		send_clients(c, msg->hdr.id, cr.after);
		r = 0;
	} else if (c->hello_done && !c->admin && msg->hdr.type == IPC_CHANNEL_REQ)
		r = channel_req(c, msg);
	if (r < 0) {
		sup_logp(LOG_WARNING, "client pid %d uid %u: bad %s message: dropped", (int)c->pid,
			 (unsigned)c->uid, ipc_type_name(msg->hdr.type));
		client_free(c);
	}
}

static void on_client_close(struct ipc_conn *conn, int error, void *userdata)
{
	struct sup_client *c = userdata;

	if (error < 0 && error != -ECONNRESET && error != -EPIPE)
		sup_logp(LOG_WARNING, "client pid %d uid %u: %s: dropped", (int)c->pid,
			 (unsigned)c->uid, strerror(-error));
	client_free(c);
}

static void on_hello_timeout(struct ipc_timer *t, void *userdata)
{
	struct sup_client *c = userdata;

	sup_log("client pid %d uid %u: %s: dropped", (int)c->pid, (unsigned)c->uid,
		c->refused ? c->refused : "no hello");
	client_free(c);
}

/*
 * Under pressure: connections that have not said hello hold a quarter of the slots, or only
 * the reserved slots are left. Then a connection has the shorter deadline to say hello.
 */
static bool busy(const struct sup *s)
{
	const struct sup_opts *o = &s->opts;

	return (uint64_t)s->nsilent * 4 >= o->max_clients ||
	       s->nclients - s->nadmin_pool + o->reserved_clients >= o->max_clients;
}

/*
 * Connections that were silent under pressure ("hurried") are cut once silent for the busy
 * deadline, by one sweep timer armed for the oldest of them rather than by moving each one's
 * own timer (kept in a sorted list: thousands of moves at once).
 */
static void on_hello_sweep(struct ipc_timer *t, void *userdata)
{
	struct sup *s = userdata;
	uint64_t now = mono_ns(), busy_ns = s->opts.busy_hello_timeout_ms * NSEC_PER_MSEC;
	uint64_t oldest = UINT64_MAX;
	struct sup_client *c = s->clients;
	unsigned dropped = 0;

	while (c) {
		struct sup_client *next = c->next;

		if (c->silent && c->hurried) {
			if (now - c->accepted_ns >= busy_ns) {
				client_free(c);
				dropped++;
			} else {
				oldest = MIN(oldest, c->accepted_ns);
			}
		}
		c = next;
	}
	if (dropped)
		sup_log("under pressure: dropped %u connection%s without hello", dropped,
			dropped == 1 ? "" : "s");
	s->sweep_armed = oldest != UINT64_MAX;
	if (s->sweep_armed)
		ipc_timer_arm(t, oldest + busy_ns);
}

/* A new connection came: under pressure, it and every silent one are hurried. */
static void hello_pressure(struct sup *s, struct sup_client *new)
{
	bool b = busy(s);

	if (b && !s->hello_busy)
		for (struct sup_client *c = s->clients; c; c = c->next)
			c->hurried = c->silent;
	s->hello_busy = b;
	new->hurried = b;
	if (b && !s->sweep_armed) {
		s->sweep_armed = true;
		ipc_timer_arm(s->hello_sweep, mono_ns());
	}
}

/*
 * Who may have a slot, and which: *ret_admin_pool false (one of max_clients) or true (one
 * kept for gpux status). GPUX_E_QUOTA, with *ret_why, for none.
 */
static gpux_status admit(struct sup *s, const struct ucred *cr, bool *ret_admin_pool,
			 const char **ret_why)
{
	const struct sup_opts *o = &s->opts;
	bool own = owner(cr->uid);
	unsigned limit = own ? o->max_clients : o->max_clients - o->reserved_clients;

	if (cr->pid > 0 &&
	    count_get(&s->per_pid, (uint64_t)cr->pid) >= o->max_clients_per_process) {
		*ret_why = "too many connections from this process";
		return GPUX_E_QUOTA;
	}
	if (!own && count_get(&s->per_uid, cr->uid) >= o->max_clients_per_user) {
		*ret_why = "too many connections of this user";
		return GPUX_E_QUOTA;
	}
	if (s->nclients - s->nadmin_pool < limit) {
		*ret_admin_pool = false;
		return GPUX_OK;
	}
	*ret_why = "too many clients";
	if (s->nadmin_pool >= o->admin_clients)
		return GPUX_E_QUOTA;
	/* Another user takes one of these at a time: its silent connections cannot fill them. */
	for (const struct sup_client *c = s->clients; c && !own; c = c->next)
		if (c->admin_pool && c->uid == cr->uid)
			return GPUX_E_QUOTA;
	*ret_admin_pool = true;
	return GPUX_OK;
}

static void on_accept(struct ipc_listener *li, int fd, void *userdata)
{
	struct sup *s = userdata;
	struct ucred cr;
	socklen_t len = sizeof(cr);
	struct sup_client *c;
	const char *why = NULL;
	bool admin_pool = false;
	gpux_status st;
	int r;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) {
		(void)safe_close(fd);
		return;
	}
	if (!allowed(s, fd, &cr)) {
		s->clients_refused++;
		sup_logp(LOG_WARNING, "refused a client: uid %u gid %u pid %d", (unsigned)cr.uid,
			 (unsigned)cr.gid, (int)cr.pid);
		refuse(fd, GPUX_E_PERM, "this user may not use this gpuxd");
		return;
	}
	st = admit(s, &cr, &admin_pool, &why);
	if (st < 0) {
		s->clients_refused++;
		refuse(fd, st, why);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (!c) {
		(void)safe_close(fd);
		return;
	}
	c->s = s;
	c->uid = cr.uid;
	c->gid = cr.gid;
	c->pid = cr.pid;
	prio_policy(s, fd, &cr, &c->prio_max, &c->prio_default);
	r = count_add(&s->per_uid, cr.uid);
	if (r == 0 && cr.pid > 0) {
		r = count_add(&s->per_pid, (uint64_t)cr.pid);
		if (r < 0)
			count_sub(&s->per_uid, cr.uid);
		else
			sup_workers_tell_processes(s);
	}
	if (r < 0) {
		(void)safe_close(fd);
		free(c);
		return;
	}
	r = ipc_timer_new(s->loop, on_hello_timeout, c, &c->hello_timer);
	if (r == 0)
		r = ipc_timer_new(s->loop, on_chan_timer, c, &c->chan_timer);
	if (r == 0)
		r = ipc_conn_new_take_fd(s->loop, TAKE_FD(fd), on_client_msg, on_client_close, c,
					 &c->conn);
	LIST_PREPEND(s->clients, c);
	s->nclients++;
	c->silent = true;
	s->nsilent++;
	c->admin_pool = admin_pool;
	s->nadmin_pool += c->admin_pool;
	if (r < 0) {
		(void)safe_close(fd);
		client_free(c);
		return;
	}
	ipc_conn_set_queue_fds(c->conn, SUP_CLIENT_QUEUE_FDS);
	s->clients_total++;
	c->accepted_ns = mono_ns();
	ipc_timer_arm(c->hello_timer,
		      c->accepted_ns + (c->admin_pool ? s->opts.busy_hello_timeout_ms
						      : s->opts.hello_timeout_ms) *
					       NSEC_PER_MSEC);
	hello_pressure(s, c);
	ipc_timer_arm(s->idle_timer, 0);
}

static void on_idle(struct ipc_timer *t, void *userdata)
{
	struct sup *s = userdata;

	if (s->nclients == 0) {
		sup_log("private gpuxd: no clients for %llu ms: exiting",
			(unsigned long long)s->opts.idle_exit_ms);
		sup_stop(s);
	}
}

int sup_clients_start(struct sup *s)
{
	int r;

	r = ipc_timer_new(s->loop, on_idle, s, &s->idle_timer);
	if (r < 0)
		return r;
	r = ipc_timer_new(s->loop, on_hello_sweep, s, &s->hello_sweep);
	if (r < 0)
		return r;
	r = sup_spares_start(s);
	if (r < 0)
		return r;
	if (s->opts.private_mode)
		ipc_timer_arm(s->idle_timer, mono_ns() + s->opts.idle_exit_ms * NSEC_PER_MSEC);
	return ipc_listener_new(s->loop, s->listen_fd, on_accept, s, &s->listener);
}

void sup_clients_free(struct sup *s)
{
	ipc_listener_free(s->listener);
	s->listener = NULL;
	while (s->clients)
		client_free(s->clients);
	sup_spares_free(s);
	ipc_map_done(&s->client_ids);
	ipc_map_done(&s->per_uid);
	ipc_map_done(&s->per_pid);
	ipc_timer_free(s->idle_timer);
	s->idle_timer = NULL;
	ipc_timer_free(s->hello_sweep);
	s->hello_sweep = NULL;
}
