/* SPDX-License-Identifier: MIT */
/* worker/core/dcache.c: the content-addressed device cache: frozen inputs uploaded once per user. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "macro.h"
#include "wrk.h"

/*
 * An entry is found by (uid, length, XXH3-128 of the bytes), the hash computed here, once
 * per range of a frozen (write-sealed) mapping: bytes nobody can change any more. Entries
 * are never shared between users. A miss uploads the bytes apart from any request (the
 * back end marks the upload's end; requests wait for that mark before their launch), and
 * the entry holds the source mapping until a request that waited for it has finished.
 * Entries nobody uses are kept least recently used first, evicted to make room under the
 * byte budget, after the idle TTL, and all at once when a device allocation fails.
 */

#define TTL_TICK_MIN_NS (100 * NSEC_PER_MSEC)

static uint64_t bucket(uint32_t uid, uint64_t len, struct ipc_key k)
{
	return k.lo ^ (k.hi * 0x9e3779b97f4a7c15ull) ^ (len * 0xff51afd7ed558ccdull) ^ uid;
}

/* The key of a range of a frozen mapping, computed once. */
static struct ipc_key range_key(struct wrk_mapping *m, uint64_t offset, uint64_t len)
{
	struct wrk_range_key *k;

	for (unsigned i = 0; i < MIN(m->nkeys, WRK_MAPPING_KEYS); i++)
		if (m->keys[i].offset == offset && m->keys[i].len == len)
			return m->keys[i].key;
	k = &m->keys[m->nkeys++ % WRK_MAPPING_KEYS];
	*k = (struct wrk_range_key){ offset, len,
				     ipc_key_of((const uint8_t *)m->seg.addr + offset, len) };
	return k->key;
}

static void affinity_rebuild(struct wrk *w)
{
	struct wrk_centry *e;
	size_t it = 0;

	ipc_status_write_begin(w->status);
	memset(w->status->affinity, 0, sizeof(w->status->affinity));
	while (ipc_map_next(&w->centries, &it, NULL, (void **)&e))
		for (; e; e = e->hnext) {
			uint32_t bit[2];

			ipc_affinity_bits(e->uid, e->key.lo, e->key.hi, bit);
			w->status->affinity[bit[0] / 64] |= 1ull << (bit[0] % 64);
			w->status->affinity[bit[1] / 64] |= 1ull << (bit[1] % 64);
		}
	ipc_status_write_end(w->status);
}

static void idle_unlink(struct wrk *w, struct wrk_centry *e)
{
	if (e->lru_prev)
		e->lru_prev->lru_next = e->lru_next;
	else
		w->cidle_head = e->lru_next;
	if (e->lru_next)
		e->lru_next->lru_prev = e->lru_prev;
	else
		w->cidle_tail = e->lru_prev;
	e->lru_prev = e->lru_next = NULL;
}

static void chain_unlink(struct wrk *w, struct wrk_centry *e)
{
	uint64_t b = bucket(e->uid, e->len, e->key);
	struct wrk_centry *head = ipc_map_get(&w->centries, b);

	if (head == e) {
		(void)ipc_map_remove(&w->centries, b);
		if (e->hnext)
			(void)ipc_map_put(&w->centries, b, e->hnext);
		return;
	}
	for (struct wrk_centry *p = head; p; p = p->hnext)
		if (p->hnext == e) {
			p->hnext = e->hnext;
			return;
		}
}

/* The upload has ended (waited for by a request, or here): the source can go. */
static void settle(struct wrk *w, struct wrk_centry *e, bool wait)
{
	if (e->ready) {
		if (wait)
			w->be->ready_wait(w->dev, e->ready);
		w->be->ready_free(w->dev, e->ready);
		e->ready = NULL;
	}
	wrk_mapping_unref(w, e->source);
	e->source = NULL;
}

static void evict(struct wrk *w, struct wrk_centry *e)
{
	idle_unlink(w, e);
	chain_unlink(w, e);
	settle(w, e, true);
	w->be->dev_free(w->dev, e->ptr);
	wrk_user_credit(w, e->ledger_row, e->len);
	w->stats.cache_bytes -= e->len;
	w->stats.cache_entries--;
	w->stats.cache_evictions++;
	free(e);
}

uint64_t wrk_dcache_reclaim_user(struct wrk *w, uint32_t uid)
{
	uint64_t freed = 0;

	for (struct wrk_centry *e = w->cidle_head, *next; e; e = next) {
		next = e->lru_next;
		if (e->uid == uid) {
			freed += e->len;
			evict(w, e);
		}
	}
	if (freed)
		affinity_rebuild(w);
	return freed;
}

uint64_t wrk_dcache_reclaim(struct wrk *w)
{
	uint64_t freed = 0;

	while (w->cidle_tail) {
		freed += w->cidle_tail->len;
		evict(w, w->cidle_tail);
	}
	if (freed)
		affinity_rebuild(w);
	return freed;
}

gpux_status wrk_dev_alloc(struct wrk *w, uint64_t len, void **ret_ptr, char **ret_msg)
{
	gpux_status r = w->be->dev_alloc(w->dev, len, ret_ptr, ret_msg);

	if (r == GPUX_E_NOMEM && wrk_dcache_reclaim(w) > 0) {
		free(*ret_msg);
		*ret_msg = NULL;
		r = w->be->dev_alloc(w->dev, len, ret_ptr, ret_msg);
	}
	return r;
}

/*
 * The reserve: device buffers and cached inputs live between requests, and a device full of
 * them would leave a request's copies (the CUDA back end's scratch and temporaries) no room,
 * so that even a launch with a 4-byte OUT argument failed. So what they hold together stays
 * below the device's memory less the reserve, and (where the back end can tell) an
 * allocation for them leaves at least the reserve free on the device, whatever else (the
 * context, other processes) took the rest.
 */
gpux_status wrk_dev_room(struct wrk *w, uint64_t len, const char *what, char **ret_msg)
{
	uint64_t reserve = w->opts.device_reserve, total = w->info.mem_total;
	uint64_t held = w->stats.dbuf_bytes + w->stats.cache_bytes;
	uint64_t cap = total > reserve ? total - reserve : 0, room;

	if (held > cap || len > cap - held) {
		*ret_msg =
			wrk_strdup_printf("%s of %llu bytes would eat into the device-memory "
					  "reserve: device buffers and cached inputs hold %llu "
					  "of the device's %llu bytes, and %llu are kept for "
					  "running requests (gpuxd --device-reserve)",
					  what, (unsigned long long)len, (unsigned long long)held,
					  (unsigned long long)total, (unsigned long long)reserve);
		return GPUX_E_NOMEM;
	}
	room = w->be->mem_room ? w->be->mem_room(w->dev) : UINT64_MAX;
	if (room < reserve || len > room - reserve) {
		*ret_msg =
			wrk_strdup_printf("%s of %llu bytes would eat into the device-memory "
					  "reserve: %llu bytes of the device are free, and %llu "
					  "are kept for running requests (gpuxd --device-reserve)",
					  what, (unsigned long long)len, (unsigned long long)room,
					  (unsigned long long)reserve);
		return GPUX_E_NOMEM;
	}
	return 0;
}

static void on_ttl(struct ipc_timer *t, void *userdata)
{
	struct wrk *w = userdata;
	uint64_t now = mono_ns(), ttl = w->opts.cache_ttl_ms * NSEC_PER_MSEC;
	bool any = false;

	while (w->cidle_tail && now - w->cidle_tail->last_use > ttl) {
		evict(w, w->cidle_tail);
		any = true;
	}
	if (any) {
		affinity_rebuild(w);
		wrk_status_publish(w);
	}
	ipc_timer_arm(t, now + MAX(ttl / 4, TTL_TICK_MIN_NS));
}

int wrk_dcache_start(struct wrk *w)
{
	int r;

	if (!w->opts.cache_bytes)
		w->opts.cache_bytes = w->info.mem_total / 4;
	r = ipc_timer_new(w->loop, on_ttl, w, &w->cache_timer);
	if (r < 0)
		return r;
	ipc_timer_arm(w->cache_timer,
		      mono_ns() + MAX(w->opts.cache_ttl_ms * NSEC_PER_MSEC / 4, TTL_TICK_MIN_NS));
	return 0;
}

void wrk_dcache_stop(struct wrk *w)
{
	struct wrk_centry *e;

	ipc_timer_free(w->cache_timer);
	w->cache_timer = NULL;
	(void)wrk_dcache_reclaim(w);
	/* Entries still used by requests that never finished go with the process. */
	while ((e = ipc_map_pop(&w->centries)))
		while (e) {
			struct wrk_centry *next = e->hnext;
			settle(w, e, true);
			wrk_user_credit(w, e->ledger_row, e->len);
			free(e);
			e = next;
		}
	ipc_map_done(&w->centries);
}

/*
 * The device copy of a frozen range for a request of client c: found, or made now (its
 * upload started). NULL when it cannot be cached (larger than the budget, no device memory):
 * the request then uploads it as any IN argument.
 */
struct wrk_centry *wrk_dcache_get(struct wrk_client *c, struct wrk_mapping *m, uint64_t offset,
				  uint64_t len)
{
	struct wrk *w = c->w;
	struct ipc_key k = range_key(m, offset, len);
	uint64_t b = bucket(c->uid, len, k);
	struct wrk_centry *head = ipc_map_get(&w->centries, b), *e;
	char *msg = NULL;
	void *ptr = NULL, *ready = NULL;
	gpux_status r;
	int row;

	for (e = head; e; e = e->hnext)
		if (e->uid == c->uid && e->len == len && ipc_key_equal(e->key, k)) {
			if (e->refs++ == 0)
				idle_unlink(w, e);
			e->last_use = mono_ns();
			w->stats.cache_hits++;
			return e;
		}
	w->stats.cache_misses++;
	if (len > w->opts.cache_bytes)
		return NULL;
	while ((w->stats.cache_bytes + len > w->opts.cache_bytes ||
		w->stats.cache_entries >= WRK_CACHE_ENTRIES_MAX) &&
	       w->cidle_tail)
		evict(w, w->cidle_tail);
	if (w->stats.cache_bytes + len > w->opts.cache_bytes ||
	    w->stats.cache_entries >= WRK_CACHE_ENTRIES_MAX)
		return NULL;
	/* Within its user's cap over all workers, its idle entries here given up first; past
	 * it, the input is not cached (the request uploads it as any other). */
	r = wrk_user_charge(w, c->uid, len, &row, &msg);
	if (r == GPUX_E_QUOTA && wrk_dcache_reclaim_user(w, c->uid) > 0) {
		free(msg);
		msg = NULL;
		r = wrk_user_charge(w, c->uid, len, &row, &msg);
	}
	free(msg);
	msg = NULL;
	if (r < 0)
		return NULL;
	/* Not into the reserve: idle entries make room first, else the input goes uncached. */
	while ((r = wrk_dev_room(w, len, "a cached input", &msg)) < 0 && w->cidle_tail) {
		free(msg);
		msg = NULL;
		evict(w, w->cidle_tail);
	}
	if (r == 0)
		r = wrk_dev_alloc(w, len, &ptr, &msg);
	if (r == 0) {
		r = w->be->upload(w->dev, ptr, (const uint8_t *)m->seg.addr + offset, len, &ready,
				  &msg);
		if (r < 0)
			w->be->dev_free(w->dev, ptr);
	}
	free(msg);
	e = r == 0 ? calloc(1, sizeof(*e)) : NULL;
	if (!e) {
		if (r == 0) {
			if (ready) {
				w->be->ready_wait(w->dev, ready);
				w->be->ready_free(w->dev, ready);
			}
			w->be->dev_free(w->dev, ptr);
		}
		wrk_user_credit(w, row, len);
		return NULL;
	}
	*e = (struct wrk_centry){
		.refs = 1,
		.ledger_row = row,
		.uid = c->uid,
		.len = len,
		.key = k,
		.ptr = ptr,
		.ready = ready,
		.last_use = mono_ns(),
	};
	if (ready) {
		e->source = m;
		m->refs++;
	}
	/* The evictions above may have taken the bucket's first entry. */
	head = ipc_map_get(&w->centries, b);
	if (head)
		(void)ipc_map_remove(&w->centries, b);
	e->hnext = head;
	if (ipc_map_put(&w->centries, b, e) < 0) {
		if (head)
			(void)ipc_map_put(&w->centries, b, head);
		settle(w, e, true);
		w->be->dev_free(w->dev, ptr);
		wrk_user_credit(w, row, len);
		free(e);
		return NULL;
	}
	w->stats.cache_bytes += len;
	w->stats.cache_entries++;
	affinity_rebuild(w);
	return e;
}

/* A request that used the entry has finished; `waited`: its launch waited for the upload. */
void wrk_dcache_put(struct wrk *w, struct wrk_centry *e, bool waited)
{
	if (waited && e->ready)
		settle(w, e, false);
	if (--e->refs > 0)
		return;
	e->last_use = mono_ns();
	e->lru_prev = NULL;
	e->lru_next = w->cidle_head;
	if (w->cidle_head)
		w->cidle_head->lru_prev = e;
	w->cidle_head = e;
	if (!w->cidle_tail)
		w->cidle_tail = e;
}
