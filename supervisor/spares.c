/* SPDX-License-Identifier: MIT */
/* supervisor/spares.c: connections made ahead for the children of clients that fork. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "channel.h"
#include "macro.h"
#include "proc.h"
#include "sup.h"

/*
 * A process that forks children which use gpux gets a pool of spares: for each, a client id
 * and a channel to every ready worker, already attached there (the worker has made the
 * client and offered its rings). A child's hello takes one, so its first result waits for
 * one round trip to gpuxd and no worker's set-up. Who is a child: the peer's parent process
 * (SO_PEERCRED's pid, then its parent in /proc) has a connection here. The child connects on
 * a socket of its own, so it is counted and checked as itself (its pid, uid, group), and a
 * spare goes only to a process of the uid and gid it was made for. A child that never uses
 * gpux holds nothing of it and costs gpuxd nothing: the pool is refilled only after a hello
 * took a spare, or found none (which grows the pool, up to SUP_POOL_SPARES). A pool goes
 * with its parent's last connection; its spares go when a worker changes (its channels would
 * lead to a worker gone, or lack one that came) and are made again.
 */

struct sup_spare {
	struct sup_spare *next;
	uint64_t id;
	int chan[IPC_DEVICES_MAX];     /* the client's end of a channel, or -1 */
	uint32_t gen[IPC_DEVICES_MAX]; /* the worker generation it leads to */
};

struct sup_pool {
	pid_t pid; /* the parent */
	uid_t uid;
	gid_t gid;
	int8_t prio_max, prio_default; /* gpuxd's priority policy for them (--priority) */
	unsigned want;                 /* spares to keep */
	unsigned n;
	struct sup_spare *head, *tail; /* oldest first */
};

/* The parent of a process, from /proc (0 when it cannot be read). */
static pid_t parent_of(pid_t pid)
{
	char path[64], buf[512];
	const char *f;

	(void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = proc_stat_fields(path, buf, sizeof(buf));
	/* "state ppid ...". */
	return f && f[0] && f[1] == ' ' ? (pid_t)strtol(f + 2, NULL, 10) : 0;
}

void sup_spare_free(struct sup *s, struct sup_spare *sp)
{
	if (!sp)
		return;
	for (unsigned i = 0; i < IPC_DEVICES_MAX; i++)
		if (sp->chan[i] >= 0)
			(void)close(sp->chan[i]);
	free(sp);
}

int sup_spare_channel(struct sup_spare *sp, const struct sup_worker *w)
{
	int fd;

	if (!sp || sp->chan[w->index] < 0 || sp->gen[w->index] != w->generation)
		return -1;
	fd = sp->chan[w->index];
	sp->chan[w->index] = -1;
	return fd;
}

uint64_t sup_spare_id(const struct sup_spare *sp)
{
	return sp->id;
}

static void pool_drop_spares(struct sup *s, struct sup_pool *p)
{
	while (p->head) {
		struct sup_spare *sp = p->head;

		p->head = sp->next;
		sup_spare_free(s, sp);
		s->nspares--;
	}
	p->tail = NULL;
	p->n = 0;
}

/* The most spares gpuxd holds, all pools together: each holds a channel (an fd here) and a
 * client at every worker, which a connection would too. */
static unsigned spares_max(const struct sup *s)
{
	return MAX(s->opts.max_clients / 2 / MAX(s->nworkers, 1u), 1u);
}

/* One more spare for the pool: a client id and a channel to every ready worker. */
static int spare_make(struct sup *s, struct sup_pool *p)
{
	struct sup_spare *sp = calloc(1, sizeof(*sp));
	struct ipc_attach a;
	uint8_t buf[64];
	unsigned made = 0;
	int n;

	if (!sp)
		return -ENOMEM;
	sp->id = ++s->next_client_id;
	a = (struct ipc_attach){ .client_id = sp->id,
				 .uid = p->uid,
				 .gid = p->gid,
				 .pid = (uint32_t)p->pid,
				 .prio_max = p->prio_max,
				 .prio_default = p->prio_default,
				 .flags = IPC_ATTACH_SPARE };
	n = ipc_encode_attach(buf, sizeof(buf), 0, &a);
	for (unsigned i = 0; i < IPC_DEVICES_MAX; i++)
		sp->chan[i] = -1;
	for (unsigned i = 0; i < s->nworkers && n > 0; i++) {
		struct sup_worker *w = &s->workers[i];
		int pair[2];

		if (w->state != W_READY || !w->control || ipc_channel_pair(pair, false) < 0)
			continue;
		if (ipc_conn_send(w->control, buf, (size_t)n, &pair[1], 1) < 0) {
			(void)close(pair[0]);
		} else {
			sp->chan[i] = pair[0];
			sp->gen[i] = w->generation;
			made++;
		}
		(void)close(pair[1]);
	}
	if (!made) {
		free(sp);
		return -EAGAIN;
	}
	if (p->tail)
		p->tail->next = sp;
	else
		p->head = sp;
	p->tail = sp;
	p->n++;
	s->nspares++;
	return 0;
}

static void on_refill(struct ipc_timer *t, void *userdata)
{
	struct sup *s = userdata;
	uint64_t key;
	void *val;

	if (s->stopping)
		return;
	for (size_t it = 0; ipc_map_next(&s->pools, &it, &key, &val);) {
		struct sup_pool *p = val;

		while (p->n < p->want && s->nspares < spares_max(s))
			if (spare_make(s, p) < 0)
				break;
	}
}

/* Make what the pools want, after this round of the loop (the hellos in it come first). */
static void refill_soon(struct sup *s)
{
	if (!s->stopping && s->refill_timer && ipc_map_size(&s->pools))
		ipc_timer_arm(s->refill_timer, mono_ns());
}

struct sup_spare *sup_spare_take(struct sup *s, const struct sup_client *c)
{
	pid_t ppid = c->pid > 0 ? parent_of(c->pid) : 0;
	struct sup_pool *p;
	struct sup_spare *sp;

	if (ppid <= 1 || s->stopping || !ipc_map_get(&s->per_pid, (uint64_t)ppid))
		return NULL;
	p = ipc_map_get(&s->pools, (uint64_t)ppid);
	if (!p) {
		p = calloc(1, sizeof(*p));
		if (!p)
			return NULL;
		p->pid = ppid;
		p->uid = c->uid;
		p->gid = c->gid;
		p->prio_max = c->prio_max;
		p->prio_default = c->prio_default;
		if (ipc_map_put(&s->pools, (uint64_t)ppid, p) < 0) {
			free(p);
			return NULL;
		}
	}
	/* Made for another identity (the child changed its own, or its groups give it another
	 * priority policy): none for this one. */
	if (p->uid != c->uid || p->gid != c->gid || p->prio_max != c->prio_max ||
	    p->prio_default != c->prio_default)
		return NULL;
	sp = p->head;
	if (sp) {
		p->head = sp->next;
		if (!p->head)
			p->tail = NULL;
		sp->next = NULL;
		p->n--;
		s->nspares--;
		s->spares_taken++;
	} else {
		/* Children came faster than spares: keep more. */
		p->want = MIN(p->want + 1, SUP_POOL_SPARES);
	}
	refill_soon(s);
	return sp;
}

void sup_spares_pid_gone(struct sup *s, pid_t pid)
{
	struct sup_pool *p = ipc_map_remove(&s->pools, (uint64_t)pid);

	if (!p)
		return;
	pool_drop_spares(s, p);
	free(p);
}

void sup_spares_drop(struct sup *s)
{
	uint64_t key;
	void *val;

	for (size_t it = 0; ipc_map_next(&s->pools, &it, &key, &val);)
		pool_drop_spares(s, val);
	refill_soon(s);
}

int sup_spares_start(struct sup *s)
{
	return ipc_timer_new(s->loop, on_refill, s, &s->refill_timer);
}

void sup_spares_free(struct sup *s)
{
	struct sup_pool *p;

	while ((p = ipc_map_pop(&s->pools))) {
		pool_drop_spares(s, p);
		free(p);
	}
	ipc_map_done(&s->pools);
	ipc_timer_free(s->refill_timer);
	s->refill_timer = NULL;
}
