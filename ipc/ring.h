/* SPDX-License-Identifier: MIT */
/* ipc/ring.h: rings of messages in shared memory beside a channel's socket. */
#pragma once

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/*
 * A message on a channel's socket costs a system call at each end and, when the receiver
 * sleeps, a wake-up. Beside the socket, the worker gives each client a shared area (a memfd
 * it creates and seals against resizing) holding two rings of framed messages (ipc/proto.h
 * encodings) that carry no fds: one from the client to the worker, one back. A sender puts
 * a message on its ring when it has no fds and fits, and on the socket otherwise; the socket
 * stays for fds, for wake-ups and for liveness. The worker writes to a client's ring only
 * once the client has shown that it uses them (a record, or IPC_KICK): a client that ignores
 * the offer is served by the socket alone.
 *
 * Order across the two paths: each record carries the number of messages its sender had
 * sent on the socket before it. The receiver takes a record only once it has taken that many
 * socket messages, and before it takes socket message k, every record stamped k or less.
 *
 * Wake-ups: while the receiver looks at a ring without sleeping it sets the ring's `polling`
 * word. A sender that, after publishing a record, finds `polling` clear and the receiver
 * caught up with everything before that record, sends IPC_KICK on the socket. Each side
 * writes its own word, then reads the other's (sequentially consistent), so a record is never
 * left unseen by a receiver that went to sleep.
 *
 * The area is shared with the peer, so its reader trusts nothing in it: indices are checked
 * against the reader's own copies, every record is bounded and copied out before it is
 * parsed, and a ring found impossible is an error that drops the peer.
 */

#define IPC_RING_SIZE (32u * 1024u)           /* data bytes of each ring */
#define IPC_RING_REC_MAX (IPC_RING_SIZE / 4u) /* a record's bytes; a larger message: socket */

enum {
	IPC_RING_UP = 0,   /* client -> worker */
	IPC_RING_DOWN = 1, /* worker -> client */
};

/* One ring's control words, each on a cache line of its own. */
struct ipc_ring_ctl {
	_Alignas(64) _Atomic uint32_t tail;    /* written by the producer: bytes published */
	_Alignas(64) _Atomic uint32_t head;    /* written by the consumer: bytes taken */
	_Alignas(64) _Atomic uint32_t polling; /* written by the consumer: 1 while it spins */
};

/* The shared area. */
struct ipc_rings {
	struct ipc_ring_ctl ctl[2];
	_Alignas(64) uint8_t data[2][IPC_RING_SIZE];
};

#define IPC_RINGS_BYTES sizeof(struct ipc_rings)

/* A record: this header, `len` message bytes, padding to 8. */
struct ipc_ring_rec {
	uint32_t len; /* IPC_RING_PAD: nothing more fits before the end; go on at the start */
	uint32_t seq; /* socket messages the producer had sent before this record */
};

#define IPC_RING_PAD UINT32_MAX

/* One end of one ring: its own position, never read back from the shared area. */
struct ipc_ring {
	struct ipc_ring_ctl *ctl;
	uint8_t *data;
	uint32_t pos; /* producer: bytes published; consumer: bytes taken */
};

/* The worker's side: a sealed memfd of IPC_RINGS_BYTES, zeroed, mapped. */
int ipc_rings_create(int *ret_fd, struct ipc_rings **ret_addr);

/* Either side: this end of ring `which` (IPC_RING_UP or IPC_RING_DOWN). */
void ipc_ring_init(struct ipc_ring *r, struct ipc_rings *area, unsigned which);

/*
 * Producer: publish message `msg` (len bytes, at least 1) stamped `seq`. Returns 1 when the
 * consumer must be kicked, 0 when not, -EMSGSIZE when the record is larger than
 * IPC_RING_REC_MAX, -ENOSPC when the ring is too full now (use the socket), -EPROTO when the
 * consumer's head is impossible, -EINVAL for an empty message.
 */
int ipc_ring_put(struct ipc_ring *r, const void *msg, uint32_t len, uint32_t seq);

/*
 * Consumer: copy the next record's message into buf (cap bytes) when its stamp is at most
 * `seq_ok` (socket messages taken so far), and take it. Returns its length, 0 when there is
 * none yet, or -EBADMSG when the ring is corrupt.
 */
int ipc_ring_get(struct ipc_ring *r, void *buf, uint32_t cap, uint32_t seq_ok);

/* Consumer: whether something was published that is not taken yet. */
bool ipc_ring_pending(const struct ipc_ring *r);

/*
 * Consumer: where the producer has published up to now, and whether what is left to take
 * starts before such a mark. Taking "everything published before socket message k arrived"
 * is taking while ipc_ring_before(r, mark), with mark read when it arrived: bounded, whatever
 * the producer publishes meanwhile.
 */
uint32_t ipc_ring_published(const struct ipc_ring *r);
bool ipc_ring_before(const struct ipc_ring *r, uint32_t mark);

/*
 * Consumer: say whether it spins on the ring. After turning it off, look once more
 * (ipc_ring_pending()) before sleeping: a record published meanwhile came without a kick.
 */
void ipc_ring_set_polling(struct ipc_ring *r, bool on);
