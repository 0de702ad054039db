/* SPDX-License-Identifier: MIT */
/* client/cli.h: libgpuxclient's objects and the connection machinery they share. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/epoll.h>

#include <gpux/gpux.h>

#include "key.h"
#include "map.h"
#include "proto.h"
#include "ring.h"
#include "segment.h"
#include "status.h"

/* Requests one process keeps in flight per device before a submit waits for completions;
 * the worker's own limit (4096) and its send queue stay well above it. */
#define CLI_INFLIGHT_MAX 1024u
/*
 * Messages a channel's socket could not take yet wait in its outbox (client/outbox.c), so
 * that no thread blocks in sendmsg() with the lock held. Every call that a caller can repeat
 * without end waits (without the lock) while the outbox holds CLI_OUTBOX_WAIT bytes or
 * more, or CLI_OUTBOX_FDS_WAIT fds (its own copies, each one of this process's fds); one
 * call sends a bounded number of messages after it waited. So only a worker that leaves
 * CLI_OUTBOX_MAX or CLI_OUTBOX_FDS_MAX unread, far more than callers that wait can queue,
 * is treated as one that dropped the channel.
 */
#define CLI_OUTBOX_WAIT (2u * 1024u * 1024u)
#define CLI_OUTBOX_MAX (32u * 1024u * 1024u)
#define CLI_OUTBOX_FDS_WAIT 64u
#define CLI_OUTBOX_FDS_MAX 1024u
/* How long a call waits for a device that is (re)starting. */
#define CLI_DEVICE_WAIT_NS (30ULL * 1000000000ULL)
/* How often a library-made request (a module load, a queue's or a device buffer's making)
 * whose worker died before it answered is sent again, to the next worker. */
#define CLI_RESEND_MAX 3u
/* How often a wish for a channel that gpuxd's full socket refused is sent again. */
#define CLI_CHANNEL_RETRY_NS (10ULL * 1000000ULL)
/* How long a request waits for its channel's page of marks, which the worker offers as the
 * channel is attached (cli_marks_wait()). */
#define CLI_MARKS_WAIT_NS (50ULL * 1000000ULL)
/* How long connecting may take, an autospawned gpuxd's start included. */
#define CLI_CONNECT_NS (30ULL * 1000000000ULL)
/* Buffers up to this size share arena segments; larger ones get a segment each. */
#define CLI_ARENA_SIZE (4u * 1024u * 1024u)
#define CLI_ARENA_BUF_MAX (256u * 1024u)
#define CLI_PAGE 4096u
#define CLI_SEGMENTS_MAX 4096u
/* Freed buffers' segments a process keeps, registered at the workers, for its next buffers
 * (client/buf.c, seg_keep()): at most this many bytes, and this many segments. */
#define CLI_KEEP_BYTES (64u * 1024u * 1024u)
#define CLI_KEEP_MAX 16u

/*
 * Every handle starts with its type's magic (client/handle.c); a freed one says DEAD and
 * stays in its context's quarantine of the CLI_RETIRED_MAX most recently freed.
 */
#define CLI_BUF_MAGIC 0x66756278u   /* "xbuf" */
#define CLI_DBUF_MAGIC 0x66756264u  /* "dbuf" */
#define CLI_MOD_MAGIC 0x646f6d78u   /* "xmod" */
#define CLI_QUEUE_MAGIC 0x65757178u /* "xque" */
#define CLI_REQ_MAGIC 0x71657278u   /* "xreq" */
#define CLI_DEAD_MAGIC 0x64616564u  /* "dead" */
#define CLI_RETIRED_MAX 128u

/* Content keys of ranges of a frozen segment, for GPUX_ANY's affinity (computed once). */
#define CLI_SEG_KEYS 4u

struct cli_range_key {
	uint64_t offset, size;
	struct ipc_key key;
};

/* A memfd segment: an arena of small buffers, one large buffer, or one frozen buffer. */
struct cli_seg {
	struct cli_seg *prev, *next;
	uint64_t id;
	int fd;
	uint8_t *addr;
	uint64_t size;
	bool arena;
	bool frozen;
	uint64_t owner; /* cli_fork_gen of the process that made it */
	unsigned nbufs;
	bool reusable; /* made by this library for its buffers, its fd never handed out */
	uint64_t kept; /* freed and kept for a next buffer: when (ctx->keep_seq); 0: not */
	uint64_t used_pages[CLI_ARENA_SIZE / CLI_PAGE / 64]; /* arena: pages in use */
	/* Arena: pages in use at a fork(), never handed out again (a child may use them). */
	uint64_t forked_pages[CLI_ARENA_SIZE / CLI_PAGE / 64];
	uint64_t sent[IPC_DEVICES_MAX]; /* the channel (chan_gen) that has it, per device */
	struct cli_range_key keys[CLI_SEG_KEYS]; /* frozen */
	unsigned nkeys;
};

struct gpux_buf {
	uint32_t magic; /* first: see client/handle.c */
	gpux_ctx *ctx;
	struct cli_seg *seg;
	uint64_t offset;
	uint64_t size;
	struct cli_seg *arena; /* frozen out of an arena: the pages it still holds there */
	uint64_t arena_offset;
	struct gpux_buf *prev, *next;
};

struct gpux_dbuf {
	uint32_t magic; /* first: see client/handle.c */
	gpux_ctx *ctx;
	uint64_t id;
	uint32_t device;
	uint64_t size;
	uint64_t chan_gen; /* the channel whose worker holds it; gone with it (not `host`) */
	gpux_buf *host;    /* GPUX_DBUF_HOST: its memory, sent again to a restarted worker */
	uint64_t owner;    /* cli_fork_gen of the process that made it */
	bool read_only;    /* a module's variable in read-only memory (gpux_module_global()) */
	struct gpux_dbuf *prev, *next;
};

struct gpux_module {
	uint32_t magic; /* first: see client/handle.c */
	gpux_ctx *ctx;
	uint64_t id;
	uint32_t lang;
	uint8_t *code; /* inline code and extra block, or NULL when they live in code_fd */
	int code_fd;
	uint32_t code_len;
	uint32_t extra_len; /* headers and name expressions after the code (ipc/proto.h) */
	uint32_t nheaders, nnames;
	char *options;
	uint64_t sent[IPC_DEVICES_MAX];
	struct gpux_module_info info; /* from the worker that loaded it first */
	struct gpux_module *prev, *next;
};

/* A queue's priority and share as the worker is told them (gpux_queue_opts, checked). */
struct cli_qopts {
	bool set;       /* any given: a QUEUE_CONFIG follows the queue's opening */
	uint32_t flags; /* IPC_QUEUE_PRIORITY */
	int32_t priority;
	uint32_t share;
};

struct gpux_queue {
	uint32_t magic; /* first: see client/handle.c */
	gpux_ctx *ctx;
	uint32_t id;
	uint32_t device;
	uint64_t sent; /* chan_gen of its device's channel that opened it */
	struct cli_qopts opts;
	struct gpux_queue *prev, *next;
};

struct gpux_req {
	uint32_t magic; /* first: see client/handle.c */
	gpux_ctx *ctx;
	uint32_t id;
	uint32_t device;
	uint64_t chan_gen;
	uint64_t fork_gen;
	bool done;
	bool internal; /* a library-made request (module load, queue open) */
	gpux_status status;
	char *message;
	struct gpux_times times;
	struct ipc_mod_info mod_info; /* a module load's: what the worker said before its DONE */
	bool has_mod_info;
	/* A question's answer before its DONE: KERNEL_ATTRS or GLOBAL (answer_type; 0: none). */
	uint16_t answer_type;
	union {
		struct ipc_kernel_attrs kattrs;
		struct ipc_global_info global;
	} answer;
	struct gpux_req *prev, *next; /* all of the context's requests */
	/* Sent again after its worker died (client/replay.c): a SUBMIT or COPY. */
	bool word; /* holds word id % IPC_MARKS_PER_CLIENT of channel word_gen's marks */
	uint64_t word_gen;
	bool marked;       /* ... since before it was sent: the word is its own */
	bool any;          /* GPUX_ANY: it may go to another device */
	bool pending;      /* lost with its worker, in ctx->pending until it is sent again */
	uint8_t suspected; /* how often it was a suspect of a fault (client/replay.c) */
	uint8_t *wire;     /* the message as sent, kept to send again; NULL: never sent again */
	uint32_t wire_len;
	uint64_t seq;     /* the context's send order, kept when it is sent again */
	uint64_t lost_ns; /* when its worker died (pending) */
	struct gpux_req *pend_next;
};

/* A channel's shared rings (ipc/ring.h): mapped while the channel lasts, and while a reader
 * that spins on them still looks. */
struct cli_rings {
	struct ipc_segment seg;
	struct ipc_ring up, down;
	unsigned refs;
};

/* Messages for a channel, oldest first; what they hold in bytes (with their bookkeeping),
 * and in fds. */
struct cli_out_msg;
struct cli_outbox {
	struct cli_out_msg *head, *tail;
	size_t bytes;
	unsigned nfds;
};

struct cli_dev {
	struct gpux_device_info info;
	uint32_t generation; /* the worker's, from gpuxd */
	int chan_fd;
	uint64_t chan_gen; /* this library's number for the channel; never reused */
	struct ipc_status_page *status;
	struct ipc_launch_limits limits; /* from the status page; zeros: not known */
	unsigned inflight;
	/* 8 times the worker's count in flight, averaged over its reads, and when last read
	 * (pick_device()). */
	uint64_t any_load8, any_load_ns;
	struct cli_rings *rings; /* NULL until the worker offers them, or without */
	uint32_t sock_in;        /* messages taken from the channel's socket */
	uint32_t sock_out;       /* messages sent on it */
	char *dropped;           /* why the worker is dropping the channel (its last word) */
	/* The channel's page of the worker's marks (ipc/proto.h), read-only; NULL: none. */
	const uint32_t *marks;
	void *marks_map;
	size_t marks_len;
	uint64_t marks_used[IPC_MARKS_PER_CLIENT / 64]; /* words held by requests in flight */
	uint64_t marks_waited; /* chan_gen whose page was waited for (cli_marks_wait()) */
	bool want_channel;     /* it ended, the worker may live: ask gpuxd for a new one */
	struct cli_outbox out; /* what its socket could not take yet, in order */
	bool out_armed;        /* epoll watches the channel for room (EPOLLOUT) */
	uint64_t dq_sent;      /* chan_gen that has the default queue's options; 0: none */
};

/* Requests of ours that gpuxd killed for their deadline, to tell them from other deaths. */
#define CLI_KILLED_MAX 16u

struct gpux_ctx {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	gpux_ctx *prev, *next; /* all contexts, for fork handling */
	char *socket_path;     /* as given, or NULL for the default */
	char *path;            /* resolved */
	bool autospawn;
	bool served_shared; /* a shared gpuxd served us: when it goes, no private one replaces it */
	uint64_t fork_gen;
	bool connected;
	bool connecting;   /* a thread is connecting, the lock dropped while it waits */
	int connecting_fd; /* its socket, until the welcome is in */
	int sup_fd;
	int epfd;
	int wake_fd;
	bool reader;
	/*
	 * gpux_fd(), made at its first call: an epoll fd over epfd and news_fd. news_fd (an
	 * eventfd) is written when a call other than gpux_process() took in a completion that
	 * its caller does not learn of, so that an event loop comes back for it; `news` while it
	 * holds that, until gpux_process() reads it. Internal waits never see news_fd.
	 */
	int pub_epfd;
	int news_fd;
	bool news;
	/* Set only while the lock is held by a thread taking in: the request whose completion
	 * its caller learns of (gpux_test(), gpux_wait()), or all of them (gpux_process()). */
	const struct gpux_req *taking_for;
	bool processing;
	uint64_t client_id;
	uint32_t ndevices;
	struct cli_dev devs[IPC_DEVICES_MAX];
	uint64_t chan_counter;
	uint32_t next_req_id;
	uint64_t next_obj_id;
	uint32_t next_queue_id;
	uint32_t rr;
	uint32_t any_last;   /* the device of the last GPUX_ANY launch (0 at first) */
	struct ipc_map reqs; /* id -> struct gpux_req in flight */
	struct gpux_req *all_reqs;
	struct gpux_req *pending; /* lost with their workers, to send again, by seq */
	uint64_t send_seq;
	bool replaying;
	struct ipc_killed killed[CLI_KILLED_MAX];
	unsigned nkilled;
	struct cli_seg *segs;
	unsigned nsegs;
	struct cli_seg *freezing; /* frozen copies being made without the lock */
	uint64_t shared_bytes;    /* of all segs */
	uint64_t kept_bytes;      /* of the segs kept (seg_keep()) */
	unsigned nkept;
	uint64_t keep_seq;
	uint64_t quota_shared;         /* gpuxd's cap on shared_bytes, from its welcome */
	int8_t prio_max, prio_default; /* gpuxd's priority policy for us, from its welcome */
	struct cli_qopts dq;           /* the default queues' options (gpux_set_default_queue()) */
	bool urgent; /* a queue of a priority above 0: waits spin, however busy the machine */
	struct gpux_buf *bufs;
	struct gpux_dbuf *dbufs;
	struct gpux_module *modules;
	struct gpux_queue *queues;
	void *retired[CLI_RETIRED_MAX]; /* freed handles, kept to be recognized */
	unsigned nretired;
	uint8_t *rbuf;
	uint8_t *sbuf;
	uint8_t *ring_buf; /* IPC_RING_REC_MAX: a record taken from a ring */
};

/*
 * Errors: inside the library, functions return 0 (or a count) or -errno, and each exported
 * function turns that into its gpux_status once, with cli_status_from_errno(). A status a
 * peer answers with (a worker's DONE) is data: it is kept in the request, never returned
 * mixed with errno values.
 */

/* client/error.c */
/* The status of an exported function that failed with err (0: GPUX_OK). */
gpux_status cli_status_from_errno(int err);
/* The errno that cli_status_from_errno() turns into status; -EPROTO for one with none. */
int cli_errno_from_status(int32_t status);

/* The context's epoll ids (data.u64): gpuxd's socket, the wake-up eventfd, the channels. */
#define CLI_EP_SUP 1ull
#define CLI_EP_WAKE 2ull
#define CLI_EP_CHAN0 16ull /* + device index: that device's channel */

/* client/ctx.c */
extern uint64_t cli_fork_gen;
/* Lock held: be connected, in this process. The lock is dropped meanwhile (cli_connect()). */
int cli_ensure(gpux_ctx *ctx);
void cli_after_fork(gpux_ctx *ctx);
int cli_device_wait(gpux_ctx *ctx, uint32_t device, uint64_t deadline);
/* Lock held: ask gpuxd for new channels to the devices whose workers dropped ours. */
void cli_channels_request(gpux_ctx *ctx);

/* client/connect.c */
/*
 * Lock held: connect to gpuxd (starting a private one if need be) and say hello. The lock
 * is dropped while it waits, with ctx->connecting set; the caller makes sure no other thread
 * is connecting.
 */
int cli_connect(gpux_ctx *ctx);
/* Lock held: close gpuxd's socket and every channel, telling nobody. */
void cli_disconnect(gpux_ctx *ctx);
/* Say why this thread's connection failed (gpux_connect_error()); returns err. */
int cli_connect_fail(int err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* client/channel.c */
void cli_rings_unref(struct cli_rings *r);
void cli_dev_drop_rings(struct cli_dev *d);
/* In a child after fork(): let go of the parent's rings and status page, which were not
 * forked (MADV_DONTFORK). */
void cli_dev_forget_parent(struct cli_dev *d);
/* Lock held: gpuxd's news of a device (a DEVICE message), with its channel or without. */
void cli_device_msg(gpux_ctx *ctx, struct ipc_msg *msg);
void cli_pump(gpux_ctx *ctx);
/*
 * Device i's channel has not given its page of marks: read the channel until it does,
 * CLI_MARKS_WAIT_NS at most, once per channel (where the worker's page says it has marks).
 * Lock held.
 */
void cli_marks_wait(gpux_ctx *ctx, uint32_t i);
void cli_pump_events(gpux_ctx *ctx, const struct epoll_event *ev, int n);
bool cli_rings_take_all(gpux_ctx *ctx);
/*
 * Lock held: send a message (and fds, which the caller keeps) to device's worker, never
 * blocking: behind messages still waiting, or when the socket is full, it waits in the
 * channel's outbox and goes out as the worker reads. 0 once sent or queued (ordered before
 * whatever is sent after it), -EPIPE when the channel is gone, or another -errno.
 */
int cli_send(gpux_ctx *ctx, uint32_t device, const void *msg, size_t len, const int *fds,
	     unsigned nfds);
/*
 * Lock held: cli_send() of a message that may as well go later (a segment offered ahead of
 * its first use): sent only when the socket takes it at once with nothing waiting before it,
 * else -EAGAIN and nothing queued. So a call that does not wait for room (cli_room_wait())
 * never adds to the outbox, nor its fds.
 */
int cli_send_now(gpux_ctx *ctx, uint32_t device, const void *msg, size_t len, const int *fds,
		 unsigned nfds);
/*
 * Lock held: wait, the lock dropped meanwhile, until device's channel has room for a request
 * (fewer than CLI_INFLIGHT_MAX in flight, its outbox below CLI_OUTBOX_WAIT bytes and
 * CLI_OUTBOX_FDS_WAIT fds) or is gone. Every call that a caller can repeat without end waits
 * here before it sends. 0, or -EIO when waiting failed.
 */
int cli_room_wait(gpux_ctx *ctx, uint32_t device);
/*
 * Lock held: tell device's worker that an object it was given on channel `gen` (0: never
 * sent) is gone, when that channel is still this process's and open. A child after fork()
 * never speaks for its parent's objects.
 */
void cli_send_drop(gpux_ctx *ctx, uint32_t device, uint64_t gen, uint16_t type, const void *payload,
		   size_t len);

/* client/outbox.c */
/* Queue a message after those waiting, with copies of its fds (the caller keeps its own). */
int cli_outbox_push(struct cli_outbox *o, const void *msg, size_t len, const int *fds,
		    unsigned nfds);
/* Send what waits on fd, oldest first, without blocking: 0 once all is sent, -EAGAIN when
 * the socket is full again, or the error of the message that could not be sent (kept). */
int cli_outbox_flush(struct cli_outbox *o, int fd);
/* Drop what waits, closing its fds. */
void cli_outbox_clear(struct cli_outbox *o);
/* In a child after fork(): close the fds of what waits (the rest goes with the context). */
void cli_outbox_close_fds(struct cli_outbox *o);

/* client/wait.c */
/*
 * Returns 0 once pred() holds, -ETIMEDOUT at the deadline, -EIO if waiting itself failed.
 * `mine`: the request the caller waits for (its completion is no news for gpux_fd()), or NULL.
 */
int cli_wait_until(gpux_ctx *ctx, bool (*pred)(gpux_ctx *ctx, void *arg), void *arg,
		   const struct gpux_req *mine, uint64_t deadline);
void cli_wake(gpux_ctx *ctx);
/* Lock held: request r finished; tell gpux_fd()'s event loop unless the caller of the call
 * that took it in learns of it from that call. */
void cli_announce(gpux_ctx *ctx, const struct gpux_req *r);
/* Lock held: gpux_process() is looking at everything; what was announced is read. */
void cli_news_read(gpux_ctx *ctx);

/* client/handle.c */
/* Whether obj (NULL accepted) is a live handle of the type with `magic`. Any thread. */
bool cli_alive(const void *obj, uint32_t magic);
/* Lock held: obj, unlinked and emptied, becomes a dead handle in ctx's quarantine. */
void cli_retire(gpux_ctx *ctx, void *obj);
void cli_retired_free_all(gpux_ctx *ctx);

/* client/req.c */
struct gpux_req *cli_req_new(gpux_ctx *ctx, uint32_t device, bool internal);
void cli_req_finish(struct gpux_req *r, gpux_status status, const char *text, size_t len,
		    const struct gpux_times *t);
void cli_req_release(struct gpux_req *r);

/*
 * Lock held: send a message with no buffers to device's worker as a request and wait for
 * its answer. Returns 0, with *ret_status the worker's answer and *ret_gen the channel the
 * request took (and, when ret_msg is not NULL and the answer is a failure with a text, that
 * text in *ret_msg, to free), or -errno when it could not be sent.
 */
int cli_call(gpux_ctx *ctx, uint32_t device, uint16_t type, const void *payload, size_t len,
	     uint64_t *ret_gen, gpux_status *ret_status, char **ret_msg);
int cli_req_wait(struct gpux_req *r, uint64_t deadline);
void cli_reqs_lost(gpux_ctx *ctx, uint32_t device, uint64_t chan_gen);
void cli_reqs_free_all(gpux_ctx *ctx);

/* client/buf.c */
int cli_seg_sync(gpux_ctx *ctx, struct cli_seg *s, uint32_t device);
struct ipc_key cli_seg_key(struct cli_seg *s, uint64_t offset, uint64_t size);
void cli_bufs_free_all(gpux_ctx *ctx);
/* Lock held: free a buffer the library made for itself (a device buffer's host memory). */
void cli_buf_free(gpux_ctx *ctx, gpux_buf *b);
void cli_frozen_forget(gpux_ctx *ctx);
/* After fork(), in the child: the parent's kept segments (client/buf.c) are not this process's. */
void cli_kept_forget(gpux_ctx *ctx);
/* After fork(), in the parent (lock held): what its buffers hold now a child may use too. */
void cli_segs_forked(gpux_ctx *ctx);

/* client/dbuf.c */
void cli_dbufs_free_all(gpux_ctx *ctx);
/* Lock held: a device buffer made (its id, device, size and chan_gen set) is the context's. */
void cli_dbuf_add(gpux_ctx *ctx, gpux_dbuf *d);
/*
 * Lock held: a device buffer about to be used on its device's current channel. One kept in
 * host memory is sent to a worker that has not got it (a restarted one); else -ESTALE when
 * its worker is gone (GPUX_E_DBUF_LOST), -ECONNRESET in a child after fork().
 */
int cli_dbuf_sync(gpux_ctx *ctx, gpux_dbuf *d);

/* client/replay.c */
/* How often a request may be sent again: one that keeps dying with its workers is lost. */
#define CLI_REPLAY_MAX 2u
/* Lock held: the worker's MARKS message on device i's channel: its page of the marks. */
void cli_marks_take(gpux_ctx *ctx, uint32_t i, struct ipc_msg *msg);
void cli_marks_drop(struct cli_dev *d);
/*
 * Lock held: give r (a SUBMIT or COPY about to go to device's current channel) an id whose
 * word of the marks no other request in flight there holds, and take the word. Call before
 * encoding: r->id may change.
 */
int cli_req_word_take(gpux_ctx *ctx, struct gpux_req *r, uint32_t device);
/* Lock held: r leaves its channel (ended, released, lost): its word is free again. */
void cli_req_word_drop(gpux_ctx *ctx, struct gpux_req *r);
/* Keep r's message as sent (n bytes of msg), to send it again should its worker die. */
void cli_req_keep(struct gpux_req *r, const void *msg, size_t n);
/*
 * Lock held: r was in flight on a channel that ended. Either it may run again (it had not
 * begun to change this process's memory, and another's request killed the worker): then it
 * waits in ctx->pending and true is returned; or it is finished with why not, false.
 */
bool cli_req_lost(gpux_ctx *ctx, struct gpux_req *r);
/* Lock held: r leaves ctx->pending (finished, released). */
void cli_req_unpend(gpux_ctx *ctx, struct gpux_req *r);
/* Lock held: send what waits in ctx->pending where a worker takes it now, in order. */
void cli_replay(gpux_ctx *ctx);
/* Lock held: whether requests lost on device (not GPUX_ANY ones) still wait to go there:
 * later ones to that device must not overtake them. */
bool cli_replay_blocks(const gpux_ctx *ctx, uint32_t device);

/* client/module.c */
int cli_module_sync(gpux_ctx *ctx, gpux_module *m, uint32_t device);
void cli_modules_free_all(gpux_ctx *ctx);

/* client/queue.c */
/* Lock held: the queue a request goes to is open with its options on the device's current
 * channel (q NULL: the default queue's options are there, if it has any). */
int cli_queue_sync_for(gpux_ctx *ctx, gpux_queue *q, uint32_t device);
/* Lock held: ctx->urgent again, from the queues' and the default queue's priorities. */
void cli_urgent_update(gpux_ctx *ctx);
void cli_queues_free_all(gpux_ctx *ctx);
