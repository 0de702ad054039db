/* SPDX-License-Identifier: MIT */
/* worker/core/segment.c: clients' shared segments, mapped once per file and registered with the device. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>

#include "channel.h"
#include "macro.h"
#include "wrk.h"

/* The map of mappings is keyed by inode; a collision with another device or uid maps anew. */
static uint64_t mapping_key(dev_t dev, ino_t ino)
{
	return (uint64_t)ino ^ ((uint64_t)dev << 40);
}

/* A user's shared memory mapped here: every mapping once, whichever clients share it. */
static uint64_t user_bytes(struct wrk *w, uint32_t uid)
{
	struct wrk_user *u = ipc_map_get(&w->users, uid);

	return u ? u->shared_bytes : 0;
}

static int user_charge(struct wrk *w, uint32_t uid, uint64_t bytes)
{
	struct wrk_user *u = ipc_map_get(&w->users, uid);
	int r;

	if (!u) {
		u = calloc(1, sizeof(*u));
		if (!u)
			return -ENOMEM;
		r = ipc_map_put(&w->users, uid, u);
		if (r < 0) {
			free(u);
			return r;
		}
	}
	u->shared_bytes += bytes;
	u->mappings++;
	return 0;
}

static void user_uncharge(struct wrk *w, uint32_t uid, uint64_t bytes)
{
	struct wrk_user *u = ipc_map_get(&w->users, uid);

	if (!u)
		return;
	u->shared_bytes -= bytes;
	if (--u->mappings == 0)
		free(ipc_map_remove(&w->users, uid));
}

/* m counts no more (once): not against its user's quota, in the stats or the status page's
 * usage, and nobody finds it to share it. */
static void mapping_uncount(struct wrk *w, struct wrk_mapping *m)
{
	if (m->uncounted)
		return;
	m->uncounted = true;
	user_uncharge(w, m->uid, m->seg.size);
	if (ipc_map_get(&w->mappings, mapping_key(m->st_dev, m->st_ino)) == m)
		(void)ipc_map_remove(&w->mappings, mapping_key(m->st_dev, m->st_ino));
	w->stats.segment_bytes -= m->seg.size;
	w->stats.segments--;
	wrk_usage_sub(w, m->usage_slot, m->seg.size, 0);
}

void wrk_mapping_unref(struct wrk *w, struct wrk_mapping *m)
{
	if (!m)
		return;
	if (--m->refs > 0) {
		/*
		 * Its clients and requests let go while it was being registered: the
		 * registration thread's reference alone is left, which counts for nobody (a
		 * segment its user sends next is not refused for this one's memory). It goes
		 * when the registration ends.
		 */
		if (m->refs == 1 && m->registering)
			mapping_uncount(w, m);
		return;
	}
	mapping_uncount(w, m);
	if (m->registered)
		w->be->map_unregister(w->dev, m);
	if (m->reg_status < 0)
		w->reg.failed--;
	free(m->reg_error);
	ipc_segment_done(&m->seg);
	free(m);
}

/* ---- registration off the loop ---- */

/*
 * Registering a segment with the device takes about 0.4 ms per MiB (CUDA pins its pages);
 * done in the loop as the segment arrived, it held up every client's requests meanwhile, and
 * made a fresh buffer's first request pay for it. So it runs here, as soon as the segment is
 * sent (the library sends a new buffer's segment to every device when it makes it); a
 * request that uses the segment before it is done waits in its queue (wrk_req_segments_ready()),
 * and a segment sent again (another client, a forked child) finds the same mapping, being
 * registered or registered: never twice.
 */
static void *registrar_main(void *arg)
{
	struct wrk *w = arg;
	uint64_t one = 1;

	for (;;) {
		struct wrk_mapping *m;
		char *why = NULL;
		gpux_status st;

		(void)pthread_mutex_lock(&w->reg.lock);
		while (!w->reg.jobs_head && !w->reg.stop)
			(void)pthread_cond_wait(&w->reg.cond, &w->reg.lock);
		m = w->reg.jobs_head;
		if (!m) {
			(void)pthread_mutex_unlock(&w->reg.lock);
			return NULL;
		}
		w->reg.jobs_head = m->next_reg;
		if (!w->reg.jobs_head)
			w->reg.jobs_tail = NULL;
		(void)pthread_mutex_unlock(&w->reg.lock);

		st = w->be->map_register(w->dev, m, &why);

		(void)pthread_mutex_lock(&w->reg.lock);
		m->reg_status = st;
		m->reg_error =
			st < 0 ? (why ? why : strdup("the segment could not be registered")) : NULL;
		if (st >= 0)
			free(why);
		m->next_reg = w->reg.done;
		w->reg.done = m;
		(void)pthread_mutex_unlock(&w->reg.lock);
		(void)write(w->reg.fd, &one, sizeof(one));
	}
}

/* Loop: registrations that ended; the requests that waited for them may go on. */
static void registrar_take(struct wrk *w)
{
	struct wrk_mapping *m;

	(void)pthread_mutex_lock(&w->reg.lock);
	m = w->reg.done;
	w->reg.done = NULL;
	(void)pthread_mutex_unlock(&w->reg.lock);
	if (!m)
		return;
	while (m) {
		struct wrk_mapping *next = m->next_reg;

		m->next_reg = NULL;
		m->registering = false;
		w->reg.pending--;
		if (m->reg_status < 0) {
			/* The requests waiting for it fail; the next one to use it tries again
			 * (mapping_register_again()). */
			w->reg.failed++;
			wrk_log_client(w, m->uid, "a segment of %llu bytes: %s",
				       (unsigned long long)m->seg.size, m->reg_error);
		} else {
			m->registered = true;
		}
		wrk_mapping_unref(w, m);
		m = next;
	}
	wrk_kick_all(w);
}

static void on_registered(struct ipc_watch *watch, int fd, uint32_t revents, void *userdata)
{
	uint64_t v;

	(void)read(fd, &v, sizeof(v));
	registrar_take(userdata);
}

/* Register m off the loop, holding a reference to it meanwhile. */
static void registrar_push(struct wrk *w, struct wrk_mapping *m)
{
	m->registering = true;
	m->refs++;
	w->reg.pending++;
	(void)pthread_mutex_lock(&w->reg.lock);
	if (w->reg.jobs_tail)
		w->reg.jobs_tail->next_reg = m;
	else
		w->reg.jobs_head = m;
	w->reg.jobs_tail = m;
	(void)pthread_cond_signal(&w->reg.cond);
	(void)pthread_mutex_unlock(&w->reg.lock);
}

/*
 * A request uses m, which is not registered: its registration failed (the device out of
 * memory, say). It is tried again now: off the loop, where the request waits for it
 * (wrk_req_segments_ready()) and fails if it fails again; else here. Either way a failure is
 * the request's that meets it, not the segment's for good: the next request may succeed.
 */
static gpux_status mapping_register_again(struct wrk *w, struct wrk_mapping *m, unsigned arg,
					  char **ret_msg)
{
	char *why = NULL;
	gpux_status st;

	if (w->be->register_off_loop) {
		if (m->reg_status < 0) {
			w->reg.failed--;
			m->reg_status = GPUX_OK;
			free(m->reg_error);
			m->reg_error = NULL;
		}
		registrar_push(w, m);
		return GPUX_OK;
	}
	st = w->be->map_register(w->dev, m, &why);
	if (st != GPUX_OK) {
		*ret_msg = wrk_strdup_printf("argument %u: %s", arg,
					     why ? why : "its buffer cannot be registered");
		free(why);
		return st;
	}
	m->registered = true;
	return GPUX_OK;
}

int wrk_segments_start(struct wrk *w)
{
	int r;

	w->reg.fd = -1;
	(void)pthread_mutex_init(&w->reg.lock, NULL);
	(void)pthread_cond_init(&w->reg.cond, NULL);
	if (!w->be->register_off_loop)
		return 0;
	/* A quarter of the CPUs, one at least (at most WRK_POPULATE_HELPERS). */
	r = wrk_populate_start(&w->reg.populate, MAX(1u, (unsigned)get_nprocs() / 4));
	if (r < 0)
		return r;
	w->reg.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (w->reg.fd < 0)
		return -errno;
	r = ipc_watch_new(w->loop, w->reg.fd, POLLIN, on_registered, w, &w->reg.watch);
	if (r < 0)
		return r;
	r = pthread_create(&w->reg.thread, NULL, registrar_main, w);
	if (r != 0)
		return -r;
	w->reg.started = true;
	return 0;
}

void wrk_segments_stop(struct wrk *w)
{
	if (w->reg.started) {
		(void)pthread_mutex_lock(&w->reg.lock);
		w->reg.stop = true;
		(void)pthread_cond_signal(&w->reg.cond);
		(void)pthread_mutex_unlock(&w->reg.lock);
		(void)pthread_join(w->reg.thread, NULL);
		w->reg.started = false;
		/* Never started: their references go as if they had failed. */
		while (w->reg.jobs_head) {
			struct wrk_mapping *m = w->reg.jobs_head;

			w->reg.jobs_head = m->next_reg;
			m->reg_status = GPUX_E_WORKER_LOST;
			m->reg_error = strdup("the worker stops");
			m->next_reg = w->reg.done;
			w->reg.done = m;
		}
		w->reg.jobs_tail = NULL;
		registrar_take(w);
	}
	if (w->be->register_off_loop)
		wrk_populate_stop(&w->reg.populate);
	ipc_watch_free(w->reg.watch);
	w->reg.watch = NULL;
	w->reg.fd = safe_close(w->reg.fd);
}

int wrk_req_segments_ready(struct wrk_req *r, gpux_status *ret_status, char **ret_msg)
{
	struct wrk *w = r->w;

	for (unsigned i = 0; w->reg.dbufs && i < r->nargs; i++) {
		int k = r->args[i].dbuf ? wrk_dbuf_resolve(w, r->args[i].dbuf, ret_status, ret_msg)
					: 1;

		if (k <= 0)
			return k;
	}
	if ((!w->reg.pending && !w->reg.failed) || w->be->register_optional)
		return 1;
	for (unsigned i = 0; i < r->nargs; i++) {
		const struct wrk_mapping *m = r->args[i].map;

		if (!m)
			continue;
		if (m->registering)
			return 0;
		if (m->reg_status < 0) {
			*ret_status = m->reg_status;
			*ret_msg = wrk_strdup_printf("argument %u: %s", i, m->reg_error);
			return -1;
		}
	}
	return 1;
}

/* ---- segments ---- */

static int seg_bind_error(struct wrk_client *c, uint64_t seg_id, gpux_status status, char *error)
{
	struct wrk_seg *s = calloc(1, sizeof(*s));
	int r;

	if (!s) {
		free(error);
		return -ENOMEM;
	}
	s->status = status;
	s->error = error;
	r = ipc_map_put(&c->segs, seg_id, s);
	if (r < 0) {
		free(error);
		free(s);
	}
	return r;
}

/* An existing mapping of the same file for the same user, or NULL. */
static struct wrk_mapping *mapping_find(struct wrk *w, const struct stat *st, uint32_t uid,
					bool frozen)
{
	struct wrk_mapping *m = ipc_map_get(&w->mappings, mapping_key(st->st_dev, st->st_ino));

	if (m && m->st_dev == st->st_dev && m->st_ino == st->st_ino && m->uid == uid &&
	    m->seg.frozen == frozen)
		return m;
	return NULL;
}

/* Map a file not mapped yet; -errno as ipc_segment_attach_take_fd() says. */
static int mapping_new(int fd, const struct stat *st, uint32_t uid, bool frozen,
		       struct wrk_mapping **ret)
{
	struct wrk_mapping *m = calloc(1, sizeof(*m));
	int r;

	if (!m) {
		(void)safe_close(fd);
		return -ENOMEM;
	}
	m->refs = 1;
	m->st_dev = st->st_dev;
	m->st_ino = st->st_ino;
	m->uid = uid;
	r = ipc_segment_attach_take_fd(fd, (uint64_t)st->st_size, frozen, &m->seg);
	if (r < 0) {
		free(m);
		return r;
	}
	/* The mapping keeps the memory: an fd per segment would let a client use up ours. */
	m->seg.fd = safe_close(m->seg.fd);
	*ret = m;
	return 0;
}

/* Why ipc_segment_check() refused a segment (its -errno r), as a client should hear it. */
static gpux_status check_refusal(int r, const struct ipc_seg_add *m, int fd, char **ret_text)
{
	struct stat st;

	switch (r) {
	case -ENOSPC:
		*ret_text = wrk_strdup_printf("the segment is %lld bytes, not the %llu it claims",
					      fstat(fd, &st) == 0 ? (long long)st.st_size : -1LL,
					      (unsigned long long)m->size);
		return GPUX_E_INVAL;
	case -EPERM:
		*ret_text = strdup("a frozen segment must be sealed against writing");
		return GPUX_E_PERM;
	case -EBADF:
		*ret_text = strdup("a segment must be a memfd sealed against shrinking");
		return GPUX_E_INVAL;
	default:
		*ret_text = wrk_strdup_printf("the segment cannot be used: %s", strerror(-r));
		return GPUX_E_INVAL;
	}
}

/*
 * SEG_ADD. Only a message that does not decode is refused (negative return): nothing could
 * tell the client why. A segment that cannot be used (not a sealed memfd of the size it
 * claims, an id sent twice, quota, registration) is bound to its error, which the requests
 * naming it get; past the cap on segments it is not kept, and requests naming it are told so.
 */
int wrk_segment_add(struct wrk_client *c, const struct ipc_msg *msg)
{
	struct wrk *w = c->w;
	struct ipc_msg *mm = (struct ipc_msg *)msg;
	_cleanup_(closep) int fd = -1;
	struct ipc_seg_add m;
	struct wrk_mapping *map;
	struct wrk_seg *s;
	struct stat st;
	char *why = NULL;
	gpux_status status;
	bool frozen;
	int r;

	r = ipc_decode_seg_add(msg, &m);
	if (r < 0)
		return r;
	fd = ipc_msg_take_fd(mm, 0);
	if (ipc_map_get(&c->segs, m.seg_id)) {
		wrk_segment_drop(c, m.seg_id);
		return seg_bind_error(c, m.seg_id, GPUX_E_INVAL,
				      strdup("the segment's id was sent twice"));
	}
	if (ipc_map_size(&c->segs) >= WRK_CLIENT_SEGS_MAX)
		return 0;
	frozen = m.flags & IPC_SEG_FROZEN;
	r = ipc_segment_check(fd, m.size, frozen);
	if (r < 0) {
		status = check_refusal(r, &m, fd, &why);
		return seg_bind_error(c, m.seg_id, status, why);
	}
	if (fstat(fd, &st) < 0)
		return seg_bind_error(c, m.seg_id, GPUX_E_INVAL,
				      wrk_strdup_printf("fstat: %s", strerror(errno)));
	/*
	 * Its pages must all exist already: they are the client's, charged to its memory
	 * cgroup. A page first touched here (registering it, a kernel writing it) would be
	 * charged to this worker's instead.
	 */
	if ((uint64_t)st.st_blocks * 512 < (uint64_t)st.st_size)
		return seg_bind_error(
			c, m.seg_id, GPUX_E_INVAL,
			strdup("the segment's memory is not allocated (posix_fallocate "
			       "it before sending it)"));

	if ((uint64_t)st.st_size >
	    w->opts.quota_shared - MIN(c->shared_bytes, w->opts.quota_shared))
		return seg_bind_error(
			c, m.seg_id, GPUX_E_QUOTA,
			wrk_strdup_printf("a segment of %lld bytes would pass the "
					  "client's shared-memory quota (%llu of %llu "
					  "bytes in use)",
					  (long long)st.st_size,
					  (unsigned long long)c->shared_bytes,
					  (unsigned long long)w->opts.quota_shared));

	map = mapping_find(w, &st, c->uid, frozen);
	if (map) {
		map->refs++;
	} else {
		uint64_t used = user_bytes(w, c->uid);

		if ((uint64_t)st.st_size >
		    w->opts.quota_shared_user - MIN(used, w->opts.quota_shared_user))
			return seg_bind_error(
				c, m.seg_id, GPUX_E_QUOTA,
				wrk_strdup_printf("a segment of %lld bytes would pass "
						  "the user's shared-memory quota "
						  "(%llu of %llu bytes in use)",
						  (long long)st.st_size, (unsigned long long)used,
						  (unsigned long long)w->opts.quota_shared_user));
		r = mapping_new(TAKE_FD(fd), &st, c->uid, frozen, &map);
		if (r == -ENOMEM)
			return seg_bind_error(
				c, m.seg_id, GPUX_E_NOMEM,
				wrk_strdup_printf("no memory to map a segment of %lld "
						  "bytes",
						  (long long)st.st_size));
		if (r < 0)
			return seg_bind_error(c, m.seg_id, GPUX_E_INVAL,
					      wrk_strdup_printf("the segment cannot be mapped: %s",
								strerror(-r)));
		r = user_charge(w, c->uid, map->seg.size);
		if (r < 0) {
			ipc_segment_done(&map->seg);
			free(map);
			return r;
		}
		/* Registered now (or off the loop, below), else at its next use: a failure (the
		 * device out of memory) is the request's that meets it, not the segment's for
		 * good (mapping_register_again()). */
		if (!w->be->register_off_loop) {
			map->registered = w->be->map_register(w->dev, map, &why) == GPUX_OK;
			free(why);
		}
		w->stats.segments++;
		w->stats.segment_bytes += map->seg.size;
		map->usage_slot = wrk_usage_add(w, map->uid, map->seg.size, 0);
		if (!ipc_map_get(&w->mappings, mapping_key(st.st_dev, st.st_ino)))
			(void)ipc_map_put(&w->mappings, mapping_key(st.st_dev, st.st_ino), map);
		if (w->be->register_off_loop)
			registrar_push(w, map);
	}

	s = calloc(1, sizeof(*s));
	if (!s) {
		wrk_mapping_unref(w, map);
		return -ENOMEM;
	}
	s->map = map;
	r = ipc_map_put(&c->segs, m.seg_id, s);
	if (r < 0) {
		wrk_mapping_unref(w, map);
		free(s);
		return r;
	}
	c->shared_bytes += map->seg.size;
	wrk_client_row_update(c);
	return 0;
}

static void seg_free(struct wrk_client *c, struct wrk_seg *s)
{
	if (s->map) {
		c->shared_bytes -= s->map->seg.size;
		wrk_client_row_update(c);
		wrk_mapping_unref(c->w, s->map);
	}
	free(s->error);
	free(s);
}

void wrk_segment_drop(struct wrk_client *c, uint64_t seg_id)
{
	struct wrk_seg *s = ipc_map_remove(&c->segs, seg_id);

	if (s)
		seg_free(c, s);
}

void wrk_segments_free(struct wrk_client *c)
{
	struct wrk_seg *s;

	while ((s = ipc_map_pop(&c->segs)))
		seg_free(c, s);
	ipc_map_done(&c->segs);
}

struct wrk_mapping *wrk_segment_range(struct wrk_client *c, uint64_t seg_id, uint64_t offset,
				      uint64_t len, bool write, unsigned arg,
				      gpux_status *ret_status, char **ret_msg)
{
	struct wrk_seg *s = ipc_map_get(&c->segs, seg_id);

	if (!s && ipc_map_size(&c->segs) >= WRK_CLIENT_SEGS_MAX) {
		/* Sent past the cap on segments, so not kept. */
		*ret_msg = wrk_strdup_printf("argument %u: no such buffer: this client has %u "
					     "segments attached, the most it may",
					     arg, WRK_CLIENT_SEGS_MAX);
		*ret_status = GPUX_E_QUOTA;
		return NULL;
	}
	if (!s) {
		*ret_msg = wrk_strdup_printf("argument %u: no such buffer", arg);
		*ret_status = GPUX_E_INVAL;
		return NULL;
	}
	if (!s->map) {
		*ret_msg =
			wrk_strdup_printf("argument %u: %s", arg, s->error ? s->error : "unusable");
		*ret_status = s->status;
		return NULL;
	}
	if (!range_ok(offset, len, s->map->seg.size)) {
		*ret_msg = wrk_strdup_printf("argument %u: bytes %llu to %llu lie outside its "
					     "buffer of %llu bytes",
					     arg, (unsigned long long)offset,
					     (unsigned long long)(offset + len),
					     (unsigned long long)s->map->seg.size);
		*ret_status = GPUX_E_INVAL;
		return NULL;
	}
	if (s->map->seg.frozen && write) {
		*ret_msg =
			wrk_strdup_printf("argument %u: a frozen buffer can only be an input", arg);
		*ret_status = GPUX_E_INVAL;
		return NULL;
	}
	if (!s->map->registered && !s->map->registering) {
		gpux_status st = mapping_register_again(c->w, s->map, arg, ret_msg);

		if (st != GPUX_OK) {
			*ret_status = st;
			return NULL;
		}
	}
	s->map->refs++;
	return s->map;
}
