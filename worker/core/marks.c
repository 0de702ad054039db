/* SPDX-License-Identifier: MIT */
/* worker/core/marks.c: requests' points of no return, marked where clients read them after the worker is gone. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "macro.h"
#include "segment.h"
#include "wrk.h"

/*
 * A client whose worker died tells which of its requests may run again on the next worker
 * (client/replay.c): those that had not begun to change its memory. So before a request takes
 * its irreversible step, the worker writes a mark into a page of shared memory that only the
 * worker writes and its client maps read-only (ipc/proto.h: IPC_MARK_*), and that the client
 * reads once the worker is gone:
 *
 * - the host back end marks a request STARTED before it runs it: host kernels work on the
 *   client's pages in place;
 * - the CUDA back end marks LAUNCHED a request whose buffers are copied as it enqueues it, and
 *   its stream writes STARTED (cuStreamWriteValue32) just before the copies back, so that one
 *   whose kernel ran but whose results were not copied may run again; one that works on
 *   memory in place (a mapped argument, a device buffer kept in host memory, a copy) is
 *   STARTED as it is enqueued;
 * - for a client that reads it (IPC_SUBMIT_MARK_DONE), the stream writes DONE after the copies
 *   back: a request whose results are all in its client's memory when the device breaks
 *   ended well, though the worker did not see it end; and culprit() does not suspect it;
 * - every request that ends is STARTED, whatever it did (its answer may go with the worker),
 *   or DONE where it ended well, for such a client.
 *
 * The pages are one memfd per worker (IPC_MARKS_PAGES of IPC_MARKS_PAGE bytes: 16 MiB),
 * mapped writable by the worker alone: sealed F_SEAL_FUTURE_WRITE before a client sees it, so
 * no client writes its page or another's, and none can make the worker read anything (it
 * only ever writes there). A client can read the others' pages (request ids and how far each
 * got), as the status page shows what each stream runs. A page is a client's from its attach
 * until its last request has ended (the device may write to it until then), and zeroed before
 * it is given again; past 4096 clients at once (a worker serves up to 16384), a client gets
 * none, and its requests never run again. The CUDA back end registers the memfd once: the
 * device writes there.
 */

#define NO_PAGE WRK_NO_MARKS

int wrk_marks_start(struct wrk *w)
{
	uint64_t size = (uint64_t)IPC_MARKS_PAGES * IPC_MARKS_PAGE;
	char *msg = NULL;
	gpux_status st;
	void *p;
	int fd, r;

	r = ipc_segment_create("gpux-marks", size, &fd);
	if (r < 0)
		return r;
	r = ipc_segment_map(fd, size, true, &p);
	/* From now on nobody maps it writable, nor writes it through a reopened fd. */
	if (r == 0 && fcntl(fd, F_ADD_SEALS, F_SEAL_FUTURE_WRITE | F_SEAL_SEAL) < 0) {
		r = -errno;
		(void)munmap(p, size);
	}
	if (r < 0) {
		(void)close(fd);
		return r;
	}
	w->marks.seg = (struct ipc_segment){ .fd = fd, .addr = p, .size = size };
	w->marks.refs = 1;
	/* The device cannot write them: copies back are marked as they are enqueued. */
	st = w->be->map_register(w->dev, &w->marks, &msg);
	if (st < 0) {
		wrk_log(w, "marks: %s: copies back are marked as they are enqueued",
			msg ? msg : ipc_status_text(st));
		free(msg);
	}
	return 0;
}

void wrk_marks_stop(struct wrk *w)
{
	if (!w->marks.seg.addr)
		return;
	if (w->marks.reg)
		w->be->map_unregister(w->dev, &w->marks);
	ipc_segment_done(&w->marks.seg);
	w->marks.seg = (struct ipc_segment)IPC_SEGMENT_INIT;
}

static uint32_t *page_of(const struct wrk_client *c)
{
	return (uint32_t *)((uint8_t *)c->w->marks.seg.addr +
			    (size_t)c->marks_page * IPC_MARKS_PAGE);
}

void wrk_marks_give(struct wrk_client *c)
{
	static uint8_t buf[64];
	struct wrk *w = c->w;
	struct ipc_marks_offer o = { 0 };
	int n;

	c->marks_page = NO_PAGE;
	if (!w->marks.seg.addr)
		return;
	for (uint32_t i = 0; i < IPC_MARKS_PAGES / 64 && c->marks_page == NO_PAGE; i++)
		if (~w->marks_used[i])
			c->marks_page = i * 64 + (uint32_t)__builtin_ctzll(~w->marks_used[i]);
	/* All taken (clients gone whose requests still run hold theirs): this client's requests
	 * are never run again. */
	if (c->marks_page == NO_PAGE)
		return;
	memset(page_of(c), 0, IPC_MARKS_PAGE);
	o.index = c->marks_page;
	n = ipc_encode_marks(buf, sizeof(buf), 0, &o);
	if (n < 0 || ipc_conn_send(c->conn, buf, (size_t)n, &w->marks.seg.fd, 1) < 0) {
		c->marks_page = NO_PAGE;
		return;
	}
	c->sock_out++;
	w->marks_used[o.index / 64] |= 1ull << (o.index % 64);
}

void wrk_marks_put(struct wrk_client *c)
{
	if (c->marks_page == NO_PAGE)
		return;
	c->w->marks_used[c->marks_page / 64] &= ~(1ull << (c->marks_page % 64));
	c->marks_page = NO_PAGE;
}

/* DONE only for a client that reads it (IPC_SUBMIT_MARK_DONE): to others it is STARTED. */
static uint32_t state_for(const struct wrk_req *r, uint32_t state)
{
	return state == IPC_MARK_DONE && !r->mark_done ? IPC_MARK_STARTED : state;
}

void wrk_mark(struct wrk_req *r, uint32_t state)
{
	const struct wrk_client *c = r->client;

	if (!c || c->marks_page == NO_PAGE)
		return;
	state = state_for(r, state);
	/* Before what the request does next (a fence orders this store before later ones; no
	 * full barrier at every request): a client reads the page once the worker is gone, and
	 * its death orders every store the worker made before whatever the client reads. */
	__atomic_store_n(&page_of(c)[r->id % IPC_MARKS_PER_CLIENT], IPC_MARK(r->id, state),
			 __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

bool wrk_mark_done(const struct wrk_req *r)
{
	const struct wrk_client *c = r->client;

	return c && r->mark_done && c->marks_page != NO_PAGE &&
	       __atomic_load_n(&page_of(c)[r->id % IPC_MARKS_PER_CLIENT], __ATOMIC_ACQUIRE) ==
		       IPC_MARK(r->id, IPC_MARK_DONE);
}

bool wrk_mark_dev(const struct wrk_req *r, uint32_t state, uint64_t *ret_addr, uint32_t *ret_value)
{
	const struct wrk_client *c = r->client;

	if (!c || c->marks_page == NO_PAGE || !c->w->marks.dev_addr)
		return false;
	*ret_addr = c->w->marks.dev_addr + (uint64_t)c->marks_page * IPC_MARKS_PAGE +
		    (uint64_t)(r->id % IPC_MARKS_PER_CLIENT) * sizeof(uint32_t);
	*ret_value = IPC_MARK(r->id, state_for(r, state));
	return true;
}
