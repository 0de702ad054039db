/* SPDX-License-Identifier: MIT */
/* supervisor/clients.c: accepting clients, checking who they are, handing them channels, admin queries. */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "ipc/channel.h"
#include "ipc/macro.h"
#include "sup.h"

#define GROUPS_MAX 256

static uint8_t msgbuf[IPC_MSG_MAX];

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

/* The same user as gpuxd, root, or (with --allow-group) a member of that group. */
static bool allowed(const struct sup *s, int fd, const struct ucred *cr)
{
	if (cr->uid == geteuid() || cr->uid == 0)
		return true;
	if (s->opts.allow_group && (cr->gid == s->opts.allow_gid || in_groups(fd, s->opts.allow_gid)))
		return true;
	return false;
}

/* Refuse a connection with a status before anything else: it is new, the send cannot block. */
static void refuse(int fd, int status, const char *why)
{
	struct ipc_done d = { .status = status };
	int n = ipc_encode_done(msgbuf, sizeof(msgbuf), 0, &d, why);

	if (n > 0)
		(void)ipc_channel_send(fd, msgbuf, (size_t)n, NULL, 0, MSG_DONTWAIT);
	(void)safe_close(fd);
}

static void client_free(struct sup_client *c)
{
	struct sup *s = c->s;

	if (c->prev)
		c->prev->next = c->next;
	else
		s->clients = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nclients--;
	if (c->hello_done)
		(void)ipc_map_remove(&s->client_ids, c->id);
	ipc_timer_free(c->hello_timer);
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
	int n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_DEVICE, 0, fds ? 2 : 0, &d, sizeof(d), NULL, 0);

	if (n > 0)
		(void)ipc_conn_send(c->conn, msgbuf, (size_t)n, fds, fds ? 2 : 0);
}

/* Make a channel between a client and a ready worker and give each its end. */
void sup_client_give_channel(struct sup_client *c, struct sup_worker *w)
{
	struct ipc_attach a = { .client_id = c->id, .uid = c->uid, .gid = c->gid, .pid = (uint32_t)c->pid };
	int pair[2], fds[2], n;

	if (ipc_channel_pair(pair, false) < 0) {
		send_device(c, w, NULL);
		return;
	}
	n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_ATTACH, 0, 1, &a, sizeof(a), NULL, 0);
	if (n < 0 || ipc_conn_send(w->control, msgbuf, (size_t)n, &pair[1], 1) < 0) {
		(void)close(pair[0]);
		(void)close(pair[1]);
		send_device(c, w, NULL);
		return;
	}
	fds[0] = pair[0];
	fds[1] = w->status_ro_fd;
	send_device(c, w, fds);
	(void)close(pair[0]);
	(void)close(pair[1]);
}

/* A worker became ready or went away: tell every client, with a new channel when ready. */
void sup_clients_device_changed(struct sup *s, struct sup_worker *w)
{
	for (struct sup_client *c = s->clients; c; c = c->next) {
		if (!c->hello_done || c->admin)
			continue;
		if (w->state == W_READY && w->control)
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
	n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_KILLED, 0, 0, k, sizeof(*k), NULL, 0);
	if (n > 0)
		(void)ipc_conn_send(c->conn, msgbuf, (size_t)n, NULL, 0);
}

static void send_status(struct sup_client *c, uint32_t id)
{
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	static struct ipc_status_page snap;
	struct sup *s = c->s;
	struct ipc_status st = {
		.ndevices = s->nworkers,
		.nclients = s->nclients,
		.uptime_ns = mono_ns() - s->started_ns,
		.clients_total = s->clients_total,
		.clients_refused = s->clients_refused,
	};
	int n;

	(void)snprintf(st.loop, sizeof(st.loop), "%s", ipc_loop_name(s->loop));
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
		if (w->state == W_READY && ipc_status_read(w->status, &snap))
			d->stats = snap.stats;
	}
	n = ipc_encode_status(msgbuf, sizeof(msgbuf), id, &st, devs);
	if (n > 0)
		(void)ipc_conn_send(c->conn, msgbuf, (size_t)n, NULL, 0);
}

static int hello(struct sup_client *c, const struct ipc_msg *msg)
{
	struct sup *s = c->s;
	struct ipc_welcome wel;
	struct ipc_hello h;
	uint32_t version;
	int n, r;

	r = ipc_decode_hello(msg, &h);
	if (r < 0)
		return r;
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
		c->refused = true;
		ipc_timer_arm(c->hello_timer, mono_ns() + SUP_REFUSED_LINGER_NS);
		return 0;
	}
	c->id = ++s->next_client_id;
	r = ipc_map_put(&s->client_ids, c->id, c);
	if (r < 0)
		return r;
	c->hello_done = true;
	c->admin = h.flags & IPC_HELLO_ADMIN;
	ipc_timer_arm(c->hello_timer, 0);

	wel = (struct ipc_welcome){
		.version = version,
		.ndevices = s->nworkers,
		.client_id = c->id,
		.quota_shared = s->opts.quota_shared,
	};
	n = ipc_encode(msgbuf, sizeof(msgbuf), IPC_WELCOME, msg->hdr.id, 0, &wel, sizeof(wel), NULL, 0);
	if (n < 0)
		return n;
	r = ipc_conn_send(c->conn, msgbuf, (size_t)n, NULL, 0);
	if (r < 0 || c->admin)
		return r;
	for (unsigned i = 0; i < s->nworkers; i++) {
		struct sup_worker *w = &s->workers[i];

		if (w->state == W_READY && w->control)
			sup_client_give_channel(c, w);
		else
			send_device(c, w, NULL);
	}
	return 0;
}

/* A client lost its channel to a device's worker (the worker dropped it, telling why). */
static int channel_req(struct sup_client *c, const struct ipc_msg *msg)
{
	struct sup *s = c->s;
	struct ipc_channel_req q;
	struct sup_worker *w;

	if (ipc_decode_channel_req(msg, &q) < 0 || q.device >= s->nworkers)
		return -EBADMSG;
	w = &s->workers[q.device];
	if (w->state == W_READY && w->control)
		sup_client_give_channel(c, w);
	else
		send_device(c, w, NULL);
	return 0;
}

static void on_client_msg(struct ipc_conn *conn, struct ipc_msg *msg, void *userdata)
{
	struct sup_client *c = userdata;
	struct ipc_status_req sr;
	int r = -EBADMSG;

	if (!c->hello_done && !c->refused && msg->hdr.type == IPC_HELLO)
		r = hello(c, msg);
	else if (c->hello_done && c->admin && msg->hdr.type == IPC_STATUS_REQ &&
		 ipc_decode_status_req(msg, &sr) == 0) {
		send_status(c, msg->hdr.id);
		r = 0;
	} else if (c->hello_done && !c->admin && msg->hdr.type == IPC_CHANNEL_REQ)
		r = channel_req(c, msg);
	if (r < 0) {
		sup_log("client pid %d uid %u: bad %s message: dropped", (int)c->pid, (unsigned)c->uid,
			ipc_type_name(msg->hdr.type));
		client_free(c);
	}
}

static void on_client_close(struct ipc_conn *conn, int error, void *userdata)
{
	struct sup_client *c = userdata;

	if (error < 0 && error != -ECONNRESET && error != -EPIPE)
		sup_log("client pid %d uid %u: %s: dropped", (int)c->pid, (unsigned)c->uid,
			strerror(-error));
	client_free(c);
}

static void on_hello_timeout(struct ipc_timer *t, void *userdata)
{
	struct sup_client *c = userdata;

	sup_log("client pid %d uid %u: %s: dropped", (int)c->pid, (unsigned)c->uid,
		c->refused ? "no protocol version in common" : "no hello");
	client_free(c);
}

static void on_accept(struct ipc_listener *li, int fd, void *userdata)
{
	struct sup *s = userdata;
	struct ucred cr;
	socklen_t len = sizeof(cr);
	struct sup_client *c;
	int r;

	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) {
		(void)safe_close(fd);
		return;
	}
	if (!allowed(s, fd, &cr)) {
		s->clients_refused++;
		sup_log("refused a client: uid %u gid %u pid %d", (unsigned)cr.uid, (unsigned)cr.gid,
			(int)cr.pid);
		refuse(fd, GPUX_E_PERM, "this user may not use this gpuxd");
		return;
	}
	if (s->nclients >= s->opts.max_clients || s->stopping) {
		s->clients_refused++;
		refuse(fd, s->stopping ? GPUX_E_CONNECT : GPUX_E_QUOTA,
		       s->stopping ? "gpuxd is stopping" : "too many clients");
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
	r = ipc_timer_new(s->loop, on_hello_timeout, c, &c->hello_timer);
	if (r < 0) {
		(void)safe_close(fd);
		free(c);
		return;
	}
	r = ipc_conn_new_take_fd(s->loop, fd, on_client_msg, on_client_close, c, &c->conn);
	if (r < 0) {
		ipc_timer_free(c->hello_timer);
		free(c);
		return;
	}
	ipc_timer_arm(c->hello_timer, mono_ns() + SUP_HELLO_TIMEOUT_NS);
	c->next = s->clients;
	if (s->clients)
		s->clients->prev = c;
	s->clients = c;
	s->nclients++;
	s->clients_total++;
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
	ipc_map_done(&s->client_ids);
	ipc_timer_free(s->idle_timer);
	s->idle_timer = NULL;
}
