/* SPDX-License-Identifier: MIT */
/* ipc/ring.c: rings of messages in shared memory: producer, consumer, checks. */
#include <errno.h>
#include <string.h>

#include "macro.h"
#include "ring.h"
#include "segment.h"

_Static_assert(IPC_RING_SIZE % 8 == 0 && (IPC_RING_SIZE & (IPC_RING_SIZE - 1)) == 0,
	       "a power of two: positions wrap at 2^32 in step with the ring");
_Static_assert(sizeof(struct ipc_ring_rec) == 8, "records are 8-aligned");

int ipc_rings_create(int *ret_fd, struct ipc_rings **ret_addr)
{
	void *addr;
	int fd, r;

	r = ipc_segment_create("gpux-rings", IPC_RINGS_BYTES, &fd);
	if (r < 0)
		return r;
	r = ipc_segment_map(fd, IPC_RINGS_BYTES, true, &addr);
	if (r < 0) {
		(void)safe_close(fd);
		return r;
	}
	*ret_fd = fd;
	*ret_addr = addr;
	return 0;
}

void ipc_ring_init(struct ipc_ring *r, struct ipc_rings *area, unsigned which)
{
	r->ctl = &area->ctl[which];
	r->data = area->data[which];
	r->pos = 0;
}

static uint32_t rec_bytes(uint32_t len)
{
	return (uint32_t)sizeof(struct ipc_ring_rec) + ALIGN_UP(len, 8u);
}

int ipc_ring_put(struct ipc_ring *r, const void *msg, uint32_t len, uint32_t seq)
{
	uint32_t head, used, off, to_end, need, size, start = r->pos;
	struct ipc_ring_rec rec = { .len = len, .seq = seq };

	if (len == 0)
		return -EINVAL;
	if (len > IPC_RING_REC_MAX - sizeof(rec))
		return -EMSGSIZE;
	size = rec_bytes(len);
	head = atomic_load_explicit(&r->ctl->head, memory_order_acquire);
	used = r->pos - head;
	if (used > IPC_RING_SIZE || head % 8 != 0)
		return -EPROTO;
	off = r->pos % IPC_RING_SIZE;
	to_end = IPC_RING_SIZE - off;
	/* A record never wraps: where it does not fit before the end, a pad fills the rest. */
	need = size <= to_end ? size : to_end + size;
	if (need > IPC_RING_SIZE - used)
		return -ENOSPC;
	if (size > to_end) {
		struct ipc_ring_rec pad = { .len = IPC_RING_PAD, .seq = seq };

		memcpy(r->data + off, &pad, sizeof(pad));
		r->pos += to_end;
		off = 0;
	}
	memcpy(r->data + off, &rec, sizeof(rec));
	memcpy(r->data + off + sizeof(rec), msg, len);
	r->pos += size;
	atomic_store(&r->ctl->tail, r->pos);
	/* Kick a consumer that neither spins nor has anything older left to take: it may be
	 * asleep. One that has older records will see this one after taking them. */
	if (atomic_load(&r->ctl->polling))
		return 0;
	return atomic_load(&r->ctl->head) == start ? 1 : 0;
}

int ipc_ring_get(struct ipc_ring *r, void *buf, uint32_t cap, uint32_t seq_ok)
{
	/* Read once: a producer that keeps publishing pads cannot keep this call going. */
	uint32_t tail = atomic_load(&r->ctl->tail);

	for (;;) {
		uint32_t avail = tail - r->pos, off = r->pos % IPC_RING_SIZE, size;
		struct ipc_ring_rec rec;

		if (avail == 0)
			return 0;
		if (avail > IPC_RING_SIZE || avail % 8 != 0 || avail < sizeof(rec))
			return -EBADMSG;
		/* Read once, into our own copy: the producer may write the shared bytes at will. */
		memcpy(&rec, r->data + off, sizeof(rec));
		if (rec.len == IPC_RING_PAD) {
			size = IPC_RING_SIZE - off;
			if (size > avail)
				return -EBADMSG;
			r->pos += size;
			atomic_store(&r->ctl->head, r->pos);
			continue;
		}
		if (rec.len == 0 || rec.len > IPC_RING_REC_MAX - sizeof(rec) || rec.len > cap)
			return -EBADMSG;
		size = rec_bytes(rec.len);
		if (size > avail || size > IPC_RING_SIZE - off)
			return -EBADMSG;
		if ((int32_t)(rec.seq - seq_ok) > 0)
			return 0;
		memcpy(buf, r->data + off + sizeof(rec), rec.len);
		r->pos += size;
		atomic_store(&r->ctl->head, r->pos);
		return (int)rec.len;
	}
}

bool ipc_ring_pending(const struct ipc_ring *r)
{
	return atomic_load(&r->ctl->tail) != r->pos;
}

uint32_t ipc_ring_published(const struct ipc_ring *r)
{
	return atomic_load(&r->ctl->tail);
}

bool ipc_ring_before(const struct ipc_ring *r, uint32_t mark)
{
	return (int32_t)(mark - r->pos) > 0;
}

void ipc_ring_set_polling(struct ipc_ring *r, bool on)
{
	atomic_store(&r->ctl->polling, on ? 1u : 0u);
}
