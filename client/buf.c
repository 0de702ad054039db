/* SPDX-License-Identifier: MIT */
/* client/buf.c: shared buffers: small ones carved from arena segments, large ones in their own. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>

#include "cli.h"
#include "macro.h"
#include "segment.h"

/*
 * A worker registers each segment with the device once, which costs 0.2 ms to 9 ms; so small
 * buffers share 4 MiB arenas and a process sends a few segments, not one per buffer. An
 * arena is carved by the process that made it only: a child that inherited it may use and
 * free the buffers it inherited, but takes new ones from arenas of its own.
 */

#define ARENA_PAGES (CLI_ARENA_SIZE / CLI_PAGE)

static bool page_used(const struct cli_seg *s, unsigned p)
{
	return s->used_pages[p / 64] & (1ull << (p % 64));
}

/* Pages given back stay taken where a child may use them (cli_segs_forked()). */
static void pages_mark(struct cli_seg *s, unsigned first, unsigned n, bool used)
{
	for (unsigned p = first; p < first + n; p++) {
		if (used)
			s->used_pages[p / 64] |= 1ull << (p % 64);
		else
			s->used_pages[p / 64] &= ~(1ull << (p % 64)) | s->forked_pages[p / 64];
	}
}

/* First fit: the first run of n free pages, or -1. */
static int pages_find(const struct cli_seg *s, unsigned n)
{
	unsigned run = 0;

	for (unsigned p = 0; p < ARENA_PAGES; p++) {
		run = page_used(s, p) ? 0 : run + 1;
		if (run == n)
			return (int)(p + 1 - n);
	}
	return -1;
}

/* Lock held: the segment's SEG_ADD in ctx->sbuf; its length, or -errno. */
static int seg_add_encode(gpux_ctx *ctx, const struct cli_seg *s)
{
	struct ipc_seg_add a = {
		.seg_id = s->id,
		.size = s->size,
		.flags = s->frozen ? IPC_SEG_FROZEN : 0,
	};

	return ipc_encode_seg_add(ctx->sbuf, IPC_MSG_MAX, 0, &a);
}

/* Lock held: send the segment to device's worker if its socket takes it now (cli_send_now()). */
static void seg_offer(gpux_ctx *ctx, struct cli_seg *s, uint32_t device)
{
	int n = seg_add_encode(ctx, s);

	if (n > 0 && cli_send_now(ctx, device, ctx->sbuf, (size_t)n, &s->fd, 1) == 0)
		s->sent[device] = ctx->devs[device].chan_gen;
}

/* Lock held: send the segment to every device's worker that has not got it on its current
 * channel, if its socket takes it now. */
static void seg_offer_all(gpux_ctx *ctx, struct cli_seg *s)
{
	if (!ctx->connected || ctx->fork_gen != cli_fork_gen)
		return;
	for (uint32_t i = 0; i < ctx->ndevices; i++)
		if (ctx->devs[i].chan_fd >= 0 && s->sent[i] != ctx->devs[i].chan_gen)
			seg_offer(ctx, s, i);
}

/*
 * Lock held: a new segment of this process joins the context's list, and goes to every
 * device's worker at once: a worker registers it with its device as it arrives, off its
 * loop (0.4 ms a MiB on a GPU), so that it is done, or under way, by the first request that
 * uses it, on whichever device that runs. (Not connected yet, a channel down, or a worker
 * that has not read what it was sent: it goes with that first request, as after a restart,
 * which waits for room first. The calls that make segments do not wait: a copy of the fd
 * queued in the outbox for each would let a worker that reads slowly hold them all.)
 */
static void seg_link(gpux_ctx *ctx, struct cli_seg *s)
{
	s->owner = cli_fork_gen;
	s->id = ++ctx->next_obj_id;
	LIST_PREPEND(ctx->segs, s);
	ctx->nsegs++;
	ctx->shared_bytes += s->size;
	seg_offer_all(ctx, s);
}

/*
 * Freed buffers' segments: a segment of a buffer's own, or an arena whose last buffer went,
 * is kept, mapped and registered at the workers, for this process's next buffer of a like
 * size, which then costs no registration (0.4 ms a MiB on a GPU): CLI_KEEP_BYTES in
 * CLI_KEEP_MAX segments at most, the oldest let go first, all of them before a segment is
 * refused for gpuxd's cap on shared memory, and at gpux_buf_trim(). Only a segment this
 * process made and never handed out (gpux_buf_fd()) is kept: no other process holds its
 * file. A child lets its parent's kept ones go (cli_kept_forget()).
 */
static void kept_unlink(gpux_ctx *ctx, struct cli_seg *s)
{
	ctx->kept_bytes -= s->size;
	ctx->nkept--;
	s->kept = 0;
}

/*
 * Lock held. Tell the workers that have it (on this process's channels) to let it go.
 * `mapped`: its pages are still mapped (not replaced by another mapping at that address).
 */
static void seg_free(gpux_ctx *ctx, struct cli_seg *s, bool mapped)
{
	struct ipc_seg_drop d = { .seg_id = s->id };

	if (s->kept)
		kept_unlink(ctx, s);
	for (uint32_t i = 0; i < ctx->ndevices; i++)
		cli_send_drop(ctx, i, s->sent[i], IPC_SEG_DROP, &d, sizeof(d));
	LIST_REMOVE(ctx->segs, s);
	ctx->nsegs--;
	ctx->shared_bytes -= s->size;
	if (mapped)
		(void)munmap(s->addr, s->size);
	(void)close(s->fd);
	free(s);
}

/* Lock held: let the oldest kept segment go; false when none is kept. */
static bool kept_drop_oldest(gpux_ctx *ctx)
{
	struct cli_seg *old = NULL;

	for (struct cli_seg *s = ctx->segs; s; s = s->next)
		if (s->kept && (!old || s->kept < old->kept))
			old = s;
	if (old)
		seg_free(ctx, old, true);
	return old;
}

/* Lock held: keep s, whose last buffer went (above); false: it is not to be kept. */
static bool seg_keep(gpux_ctx *ctx, struct cli_seg *s)
{
	if (!s->reusable || s->owner != cli_fork_gen || s->size > CLI_KEEP_BYTES)
		return false;
	while (ctx->kept_bytes + s->size > CLI_KEEP_BYTES || ctx->nkept >= CLI_KEEP_MAX)
		(void)kept_drop_oldest(ctx);
	s->kept = ++ctx->keep_seq;
	ctx->kept_bytes += s->size;
	ctx->nkept++;
	return true;
}

/*
 * Lock held: the kept segment of a buffer's own that best fits a buffer of len bytes (page
 * aligned), at most twice as large, taken back: its first len bytes zeroed (past them, what
 * this process's freed buffer left), offered again to workers on a new channel. NULL: none.
 */
static struct cli_seg *kept_take(gpux_ctx *ctx, uint64_t len)
{
	struct cli_seg *best = NULL;

	for (struct cli_seg *s = ctx->segs; s; s = s->next)
		if (s->kept && !s->arena && s->size >= len && s->size / 2 <= len &&
		    (!best || s->size < best->size))
			best = s;
	if (!best)
		return NULL;
	kept_unlink(ctx, best);
	memset(best->addr, 0, len);
	seg_offer_all(ctx, best);
	return best;
}

/*
 * A child forked now may use the buffers alive in it (they are usable by children forked
 * later): their memory is never handed out again here, where a new buffer would be zeroed
 * and written under the child. A segment of a buffer's own is not kept once freed; an
 * arena's pages in use stay taken when their buffers are freed. Kept segments hold no buffer.
 */
void cli_segs_forked(gpux_ctx *ctx)
{
	for (struct cli_seg *s = ctx->segs; s; s = s->next) {
		if (s->kept)
			continue;
		if (!s->arena)
			s->reusable = false;
		for (unsigned i = 0; i < ARRAY_SIZE(s->used_pages); i++)
			s->forked_pages[i] |= s->used_pages[i];
	}
}

void cli_kept_forget(gpux_ctx *ctx)
{
	struct cli_seg *next;

	for (struct cli_seg *s = ctx->segs; s; s = next) {
		next = s->next;
		if (s->kept)
			seg_free(ctx, s, true);
	}
}

/*
 * Lock held: -EDQUOT when one segment more, of `size` bytes, would pass CLI_SEGMENTS_MAX or
 * gpuxd's cap on this client's shared memory (--quota-shared). Checked before a memfd is
 * made, so that a request for too much touches no memory: posix_fallocate() of it would
 * charge the pages to this process's memory cgroup, whose OOM killer may pick anyone in it
 * (a private gpuxd and its workers among them). The workers check the same cap again.
 */
static int seg_room(gpux_ctx *ctx, uint64_t size)
{
	while (ctx->nsegs >= CLI_SEGMENTS_MAX ||
	       size > ctx->quota_shared - MIN(ctx->shared_bytes, ctx->quota_shared))
		if (!kept_drop_oldest(ctx))
			return -EDQUOT;
	return 0;
}

static int seg_new(gpux_ctx *ctx, uint64_t size, bool arena, struct cli_seg **ret)
{
	struct cli_seg *s;
	void *addr;
	int r;

	r = seg_room(ctx, size);
	if (r < 0)
		return r;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	r = ipc_segment_create(arena ? "gpux-arena" : "gpux-buffer", size, &s->fd);
	if (r < 0) {
		free(s);
		return r == -ENOMEM || r == -ENOSPC ? -ENOMEM : -EIO;
	}
	r = ipc_segment_map(s->fd, size, true, &addr);
	if (r < 0) {
		(void)close(s->fd);
		free(s);
		return -ENOMEM;
	}
	s->addr = addr;
	s->size = size;
	s->arena = arena;
	s->reusable = true;
	seg_link(ctx, s);
	*ret = s;
	return 0;
}

/* Lock held: the device's worker has the segment on the current channel. */
int cli_seg_sync(gpux_ctx *ctx, struct cli_seg *s, uint32_t device)
{
	int n, r;

	if (s->sent[device] == ctx->devs[device].chan_gen)
		return 0;
	n = seg_add_encode(ctx, s);
	if (n < 0)
		return n;
	r = cli_send(ctx, device, ctx->sbuf, (size_t)n, &s->fd, 1);
	if (r == 0)
		s->sent[device] = ctx->devs[device].chan_gen;
	return r;
}

static int arena_alloc(gpux_ctx *ctx, uint64_t size, struct cli_seg **ret_seg, uint64_t *ret_off)
{
	unsigned pages = (unsigned)((size + CLI_PAGE - 1) / CLI_PAGE);
	struct cli_seg *s;
	int first = -1, r;

	for (s = ctx->segs; s; s = s->next)
		if (s->arena && s->owner == cli_fork_gen && (first = pages_find(s, pages)) >= 0)
			break;
	if (!s) {
		r = seg_new(ctx, CLI_ARENA_SIZE, true, &s);
		if (r < 0)
			return r;
		first = 0;
	}
	if (s->kept)
		kept_unlink(ctx, s);
	pages_mark(s, (unsigned)first, pages, true);
	s->nbufs++;
	/* Fresh memfd pages are zero; reused ones are not. */
	memset(s->addr + (uint64_t)first * CLI_PAGE, 0, (size_t)pages * CLI_PAGE);
	*ret_seg = s;
	*ret_off = (uint64_t)first * CLI_PAGE;
	return 0;
}

GPUX_EXPORT gpux_status gpux_buf_alloc(gpux_ctx *ctx, size_t size, gpux_buf **ret_buf)
{
	gpux_buf *b;
	uint64_t len;
	int r;

	if (!ctx || !ret_buf || size == 0 || size > (uint64_t)INT64_MAX - CLI_PAGE)
		return GPUX_E_INVAL;
	len = ALIGN_UP((uint64_t)size, (uint64_t)CLI_PAGE);
	b = calloc(1, sizeof(*b));
	if (!b)
		return GPUX_E_NOMEM;
	(void)pthread_mutex_lock(&ctx->lock);
	cli_after_fork(ctx);
	if (size <= CLI_ARENA_BUF_MAX)
		r = arena_alloc(ctx, size, &b->seg, &b->offset);
	else if ((b->seg = kept_take(ctx, len)))
		r = 0;
	else
		r = seg_new(ctx, len, false, &b->seg);
	if (r < 0) {
		(void)pthread_mutex_unlock(&ctx->lock);
		free(b);
		return cli_status_from_errno(r);
	}
	if (!b->seg->arena)
		b->seg->nbufs = 1;
	b->magic = CLI_BUF_MAGIC;
	b->ctx = ctx;
	b->size = size;
	LIST_PREPEND(ctx->bufs, b);
	(void)pthread_mutex_unlock(&ctx->lock);
	*ret_buf = b;
	return GPUX_OK;
}

GPUX_EXPORT void *gpux_buf_data(gpux_buf *b)
{
	return cli_alive(b, CLI_BUF_MAGIC) ? b->seg->addr + b->offset : NULL;
}

GPUX_EXPORT size_t gpux_buf_size(const gpux_buf *b)
{
	return cli_alive(b, CLI_BUF_MAGIC) ? (size_t)b->size : 0;
}

GPUX_EXPORT gpux_status gpux_buf_fd(gpux_buf *b, int *ret_fd, uint64_t *ret_offset)
{
	gpux_ctx *ctx;

	if (!cli_alive(b, CLI_BUF_MAGIC) || !ret_fd || !ret_offset)
		return GPUX_E_INVAL;
	ctx = b->ctx;
	/* Under the lock: a freeze on another thread replaces the segment, and a free on
	 * another thread may have come first. */
	(void)pthread_mutex_lock(&ctx->lock);
	if (!cli_alive(b, CLI_BUF_MAGIC)) {
		(void)pthread_mutex_unlock(&ctx->lock);
		return GPUX_E_INVAL;
	}
	*ret_fd = b->seg->fd;
	*ret_offset = b->offset;
	/* Another process may hold its file from now on: its pages go with it when freed. */
	b->seg->reusable = false;
	(void)pthread_mutex_unlock(&ctx->lock);
	return GPUX_OK;
}

/*
 * The whole memfd becomes one segment of this process, as a large buffer's is: the sender's
 * buffers in it are at the offsets it gave (gpux_buf_fd()), and the workers are sent this
 * process's own fd of it. -EINVAL: not a gpux memfd; -EDQUOT: a segment or fd too many.
 */
static int buf_import(gpux_ctx *ctx, int fd, gpux_buf **ret_buf)
{
	_cleanup_(closep) int own = -1;
	struct stat st;
	struct cli_seg *s;
	gpux_buf *b;
	void *addr;
	int seals, r;
	bool frozen;

	if (fstat(fd, &st) < 0 || st.st_size <= 0)
		return -EINVAL;
	seals = fcntl(fd, F_GET_SEALS);
	frozen = seals >= 0 && (seals & F_SEAL_WRITE);
	if (ipc_segment_check(fd, (uint64_t)st.st_size, frozen) < 0)
		return -EINVAL;
	own = fcntl(fd, F_DUPFD_CLOEXEC, 3);
	if (own < 0)
		return errno == EMFILE ? -EDQUOT : -errno;
	r = ipc_segment_map(own, (uint64_t)st.st_size, !frozen, &addr);
	if (r < 0)
		return r;
	s = calloc(1, sizeof(*s));
	b = calloc(1, sizeof(*b));
	(void)pthread_mutex_lock(&ctx->lock);
	cli_after_fork(ctx);
	r = s && b ? seg_room(ctx, (uint64_t)st.st_size) : -ENOMEM;
	if (r < 0) {
		(void)pthread_mutex_unlock(&ctx->lock);
		free(s);
		free(b);
		(void)munmap(addr, (size_t)st.st_size);
		return r;
	}
	s->fd = TAKE_FD(own);
	s->addr = addr;
	s->size = (uint64_t)st.st_size;
	s->frozen = frozen;
	s->nbufs = 1;
	seg_link(ctx, s);
	b->magic = CLI_BUF_MAGIC;
	b->ctx = ctx;
	b->seg = s;
	b->size = s->size;
	LIST_PREPEND(ctx->bufs, b);
	(void)pthread_mutex_unlock(&ctx->lock);
	*ret_buf = b;
	return 0;
}

GPUX_EXPORT gpux_status gpux_buf_import(gpux_ctx *ctx, int fd, gpux_buf **ret_buf)
{
	if (!ctx || fd < 0 || !ret_buf)
		return GPUX_E_INVAL;
	return cli_status_from_errno(buf_import(ctx, fd, ret_buf));
}

/* Give an arena's pages back (their mapping at that address is the arena's again). */
static void arena_put(gpux_ctx *ctx, struct cli_seg *a, uint64_t offset, uint64_t size)
{
	pages_mark(a, (unsigned)(offset / CLI_PAGE), (unsigned)((size + CLI_PAGE - 1) / CLI_PAGE),
		   false);
	if (--a->nbufs == 0 && !seg_keep(ctx, a))
		seg_free(ctx, a, true);
}

/* Lock held. `retire`: keep the handle to recognize it (client/handle.c). */
static void buf_free(gpux_ctx *ctx, gpux_buf *b, bool retire)
{
	struct cli_seg *s = b->seg;

	LIST_REMOVE(ctx->bufs, b);
	if (b->arena) {
		/* Frozen out of an arena: the arena's pages come back under the frozen ones. */
		uint64_t len = ALIGN_UP(b->size, (uint64_t)CLI_PAGE);
		void *p = mmap(s->addr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED,
			       b->arena->fd, (off_t)b->arena_offset);

		seg_free(ctx, s, p == MAP_FAILED);
		/* Pages that could not be mapped again stay taken: they are a hole now. */
		arena_put(ctx, b->arena, b->arena_offset, p == MAP_FAILED ? 0 : b->size);
	} else if (s->arena) {
		arena_put(ctx, s, b->offset, b->size);
	} else if (!seg_keep(ctx, s)) {
		seg_free(ctx, s, true);
	}
	if (retire)
		cli_retire(ctx, b);
	else
		free(b);
}

GPUX_EXPORT void gpux_buf_free(gpux_buf *b)
{
	gpux_ctx *ctx;

	if (!cli_alive(b, CLI_BUF_MAGIC))
		return;
	ctx = b->ctx;
	(void)pthread_mutex_lock(&ctx->lock);
	cli_after_fork(ctx);
	/* Again under the lock: another thread may have freed it meanwhile. */
	if (cli_alive(b, CLI_BUF_MAGIC))
		buf_free(ctx, b, true);
	(void)pthread_mutex_unlock(&ctx->lock);
}

GPUX_EXPORT void gpux_buf_trim(gpux_ctx *ctx)
{
	if (!ctx)
		return;
	(void)pthread_mutex_lock(&ctx->lock);
	cli_after_fork(ctx);
	while (kept_drop_oldest(ctx))
		;
	(void)pthread_mutex_unlock(&ctx->lock);
}

void cli_buf_free(gpux_ctx *ctx, gpux_buf *b)
{
	buf_free(ctx, b, false);
}

void cli_bufs_free_all(gpux_ctx *ctx)
{
	while (ctx->bufs)
		buf_free(ctx, ctx->bufs, false);
	while (ctx->segs)
		seg_free(ctx, ctx->segs, true);
}

/* Lock held: the content key of a range of a frozen segment, computed once. */
struct ipc_key cli_seg_key(struct cli_seg *s, uint64_t offset, uint64_t size)
{
	struct cli_range_key *k;

	for (unsigned i = 0; i < MIN(s->nkeys, CLI_SEG_KEYS); i++)
		if (s->keys[i].offset == offset && s->keys[i].size == size)
			return s->keys[i].key;
	k = &s->keys[s->nkeys++ % CLI_SEG_KEYS];
	*k = (struct cli_range_key){ offset, size, ipc_key_of(s->addr + offset, size) };
	return k->key;
}

/* The key's bytes, as gpux_affinity_holds() reads them: lo then hi, little-endian. */
static void key_bytes(struct ipc_key k, uint8_t ret[GPUX_KEY_SIZE])
{
	for (unsigned i = 0; i < 8; i++) {
		ret[i] = (uint8_t)(k.lo >> (8 * i));
		ret[8 + i] = (uint8_t)(k.hi >> (8 * i));
	}
}

GPUX_EXPORT gpux_status gpux_buf_key(gpux_buf *b, uint64_t offset, uint64_t size,
				     uint8_t ret_key[GPUX_KEY_SIZE])
{
	struct ipc_key k;
	gpux_ctx *ctx;

	if (!cli_alive(b, CLI_BUF_MAGIC) || !ret_key)
		return GPUX_E_INVAL;
	ctx = b->ctx;
	/* Under the lock: a freeze on another thread replaces the segment. */
	(void)pthread_mutex_lock(&ctx->lock);
	if (!cli_alive(b, CLI_BUF_MAGIC) || !b->seg->frozen || offset > b->size ||
	    size > b->size - offset || (size == 0 && offset == b->size)) {
		(void)pthread_mutex_unlock(&ctx->lock);
		return GPUX_E_INVAL;
	}
	k = cli_seg_key(b->seg, b->offset + offset, size ? size : b->size - offset);
	(void)pthread_mutex_unlock(&ctx->lock);
	key_bytes(k, ret_key);
	return GPUX_OK;
}

/*
 * Lock held: a frozen copy to be, of len bytes, as a memfd. While it is filled without the
 * lock, it is listed in ctx->freezing, so that a child that fork() makes meanwhile closes its
 * copy of the fd (the filling thread is not in the child to do it).
 */
static int frozen_new(gpux_ctx *ctx, uint64_t len, struct cli_seg **ret)
{
	struct cli_seg *f = calloc(1, sizeof(*f));
	int r;

	if (!f)
		return -ENOMEM;
	r = ipc_segment_create("gpux-frozen", len, &f->fd);
	if (r < 0) {
		free(f);
		return r;
	}
	f->size = len;
	f->frozen = true;
	f->nbufs = 1;
	LIST_PREPEND(ctx->freezing, f);
	*ret = f;
	return 0;
}

/*
 * Without the lock (a copy of 256 MiB takes a while): the size bytes at addr into f, sealed
 * against writing, and their key, read from the copy. pwrite() reads the buffer and answers
 * EFAULT rather than fault if another thread unmapped it meanwhile. The copy is mapped to be
 * read under the lock, where no fork() comes between: the mapping is not a child's.
 */
static int frozen_fill(gpux_ctx *ctx, struct cli_seg *f, const void *addr, uint64_t size)
{
	void *copy;
	int r = 0;

	if (pwrite(f->fd, addr, size, 0) != (ssize_t)size)
		return -EIO;
	r = ipc_segment_seal_write(f->fd);
	if (r < 0)
		return r;
	(void)pthread_mutex_lock(&ctx->lock);
	copy = mmap(NULL, f->size, PROT_READ, MAP_SHARED, f->fd, 0);
	if (copy == MAP_FAILED)
		r = -errno;
	else if (madvise(copy, f->size, MADV_DONTFORK) < 0)
		r = -errno;
	(void)pthread_mutex_unlock(&ctx->lock);
	if (r == 0) {
		f->keys[0] = (struct cli_range_key){ 0, size, ipc_key_of(copy, size) };
		f->nkeys = 1;
	}
	if (copy != MAP_FAILED)
		(void)munmap(copy, f->size);
	return r;
}

/* After fork(), in the child: the copies other threads were making are not this process's
 * (their fds are closed already, by atfork_child()). */
void cli_frozen_forget(gpux_ctx *ctx)
{
	while (ctx->freezing) {
		struct cli_seg *f = ctx->freezing;

		ctx->freezing = f->next;
		(void)safe_close(f->fd);
		free(f);
	}
}

/* A copy that failed: for want of memory (-ENOMEM), else the buffer's or the memfd's (-EIO). */
static int copy_errno(int r)
{
	return r == -ENOMEM || r == -ENOSPC ? -ENOMEM : -EIO;
}

/* Lock held: the buffer b, still as it was when its copy was made, is in use at all? */
static bool freeze_still_wanted(const gpux_buf *b, const struct cli_seg *old)
{
	return cli_alive(b, CLI_BUF_MAGIC) && b->seg == old && !old->frozen;
}

/*
 * A frozen copy (frozen_new(), frozen_fill()) takes the buffer's place at its own address
 * (MAP_FIXED), so that its data pointer does not change. Two threads freezing one buffer both
 * copy; the first to come back puts its copy in place, the other lets its own go.
 */
GPUX_EXPORT gpux_status gpux_buf_freeze(gpux_buf *b)
{
	gpux_ctx *ctx;
	struct cli_seg *f = NULL, *old;
	uint64_t len, size;
	void *addr, *p;
	int r;

	if (!cli_alive(b, CLI_BUF_MAGIC))
		return GPUX_E_INVAL;
	ctx = b->ctx;
	(void)pthread_mutex_lock(&ctx->lock);
	cli_after_fork(ctx);
	if (!cli_alive(b, CLI_BUF_MAGIC)) {
		(void)pthread_mutex_unlock(&ctx->lock);
		return GPUX_E_INVAL;
	}
	old = b->seg;
	if (old->frozen) {
		(void)pthread_mutex_unlock(&ctx->lock);
		return GPUX_OK;
	}
	size = b->size;
	len = ALIGN_UP(size, (uint64_t)CLI_PAGE);
	addr = old->addr + b->offset;
	/* Out of an arena, the frozen pages are one segment more, and memory more. */
	r = old->arena ? seg_room(ctx, len) : 0;
	if (r == 0)
		r = frozen_new(ctx, len, &f);
	(void)pthread_mutex_unlock(&ctx->lock);
	if (r < 0)
		return r == -EDQUOT ? GPUX_E_QUOTA : cli_status_from_errno(copy_errno(r));
	r = frozen_fill(ctx, f, addr, size);

	(void)pthread_mutex_lock(&ctx->lock);
	/* Not being filled any more. */
	LIST_REMOVE(ctx->freezing, f);
	if (r < 0) {
		r = copy_errno(r);
	} else if (!freeze_still_wanted(b, old)) {
		/* Freed meanwhile (INVAL), or frozen by another thread (OK). */
		r = cli_alive(b, CLI_BUF_MAGIC) ? 0 : -EINVAL;
	} else if (old->arena && seg_room(ctx, len) < 0) {
		r = -EDQUOT;
	} else {
		p = mmap(addr, len, PROT_READ, MAP_SHARED | MAP_FIXED, f->fd, 0);
		r = p == MAP_FAILED ? (errno == ENOMEM ? -ENOMEM : -EIO) : 1;
	}
	if (r <= 0) {
		/* Closed under the lock: a fork() after it unlisted would leave the child the fd.
		 */
		(void)safe_close(f->fd);
		(void)pthread_mutex_unlock(&ctx->lock);
		free(f);
		return cli_status_from_errno(r);
	}
	f->addr = addr;
	seg_link(ctx, f);
	if (old->arena) {
		/* Its pages stay taken in the arena until the buffer is freed. */
		b->arena = old;
		b->arena_offset = b->offset;
	} else {
		/* Its whole mapping was replaced: only the file and the workers' copies remain. */
		seg_free(ctx, old, false);
	}
	b->seg = f;
	b->offset = 0;
	(void)pthread_mutex_unlock(&ctx->lock);
	return GPUX_OK;
}
