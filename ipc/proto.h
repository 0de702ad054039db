/* SPDX-License-Identifier: MIT */
/* ipc/proto.h: the wire protocol between libgpuxclient, gpuxd and gpux-worker. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto-schema.h"

/*
 * Every message is one SOCK_SEQPACKET record: a 16-byte header, then `len` bytes of payload,
 * with `nfds` fds passed beside it (SCM_RIGHTS). The peers always run on one host, so fields
 * are in host byte order. Fixed parts are fixed-width with explicit padding; the format is
 * versioned at hello and only ever extended (new types, new flags, fields in reserved space).
 *
 * A decoder checks everything (type, exact or minimum size, every count, length and offset
 * against the received size and against the limits below, the number of fds) before any
 * field is used, and works on the receiver's private copy of the bytes.
 */

#define IPC_MAGIC 0x5847u /* "GX" */
/*
 * 2: shared rings (IPC_RINGS, IPC_KICK), IPC_LAUNCH_TIMED, the status page's `gone`.
 * 3: IPC_CHANNEL_REQ; a DONE without an id on a channel says why the worker ends it; the
 *    shared-memory quota in WELCOME; the device's launch limits in the status page.
 *    MOD_LOAD carries a CUDA C++ module's headers and name expressions.
 *    Draining (IPC_DRAIN, IPC_E_STOPPING), IPC_MOD_INFO, WELCOME's flags, STATUS in pages,
 *    and in ipc_stats what metrics need: requests by status, latency and queue histograms,
 *    memory by user, versions. Later, as types and fields a peer of this version without them
 *    never sends: IPC_QUEUE_CONFIG (a worker without it refuses it as any unknown type), the
 *    priority policy in ATTACH and WELCOME (their reserved space, 0 before), ipc_stats' sched;
 *    IPC_SUBMIT_ALONE, which a library sends only after a worker's status page said
 *    IPC_FAULT_UNKNOWN, which only a worker that takes the flag writes; IPC_SUBMIT_MARK_DONE,
 *    sent only where the status page's `features` say IPC_STATUS_MARK_DONE (0 before).
 * The header, IPC_HELLO and IPC_DONE keep their layout and numbers in every version, so a
 * hello is parsed whatever version its header says, and a peer with no version in common is
 * refused with a DONE in its own version, which it can read.
 */
#define IPC_VERSION_MIN 3u
#define IPC_VERSION 3u

#define IPC_MSG_MAX (64u * 1024u) /* a whole message, header included */
#define IPC_PAYLOAD_MAX (IPC_MSG_MAX - sizeof(struct ipc_hdr))
#define IPC_FDS_MAX 4u      /* fds with one message */
#define IPC_ARGS_MAX 64u    /* kernel arguments */
#define IPC_SCALAR_MAX 256u /* bytes of one scalar argument */
#define IPC_SCALAR_DATA_MAX (IPC_ARGS_MAX * (IPC_SCALAR_MAX + 8u)) /* all of them, aligned */
#define IPC_KERNEL_NAME_MAX 255u                                   /* bytes of a kernel name */
#define IPC_OPTIONS_MAX 4096u                                      /* bytes of compiler options */
#define IPC_INLINE_CODE_MAX (32u * 1024u)  /* larger code travels in a sealed memfd */
#define IPC_CODE_MAX (64u * 1024u * 1024u) /* code, headers and name expressions together */
#define IPC_MOD_HEADERS_MAX 256u           /* headers of one module */
#define IPC_MOD_NAMES_MAX 1024u            /* name expressions of one module */
#define IPC_HEADER_NAME_MAX 255u           /* bytes of a header's name */
#define IPC_TEXT_MAX (16u * 1024u)         /* completion text (a compile log is cut there) */
#define IPC_DEVICES_MAX 64u
/* Channels a worker holds at once, one per client: gpuxd's --max-clients is at most this. */
#define IPC_WORKER_CLIENTS_MAX 16384u
#define IPC_GRID_MAX 0x7fffffffu

struct ipc_hdr {
	uint16_t magic;
	uint8_t version;
	uint8_t flags;
	uint16_t type;
	uint16_t nfds; /* fds that travel with the message */
	uint32_t len;  /* payload bytes after the header */
	uint32_t id;   /* chosen by the sender of a request, echoed by its reply; 0: no reply */
};
_Static_assert(sizeof(struct ipc_hdr) == 16, "wire ABI");

/* The messages, by number (ipc/proto-schema.h says what each is). */
#define IPC_TYPE_ENUM_(T, num, ...) IPC_##T = (num),
enum ipc_type { IPC_MESSAGES(IPC_TYPE_ENUM_) IPC_TYPE_MAX_ };

/* The wire's own codes, from ipc/proto-schema.h's tables. */
#define IPC_CODE_ENUM_(wire, pub, value, ...) wire = (value),
enum ipc_status_code { IPC_STATUSES(IPC_CODE_ENUM_) };
enum ipc_backend { IPC_BACKENDS(IPC_CODE_ENUM_) };
enum ipc_device_state { IPC_DEVICE_STATES(IPC_CODE_ENUM_) };
enum ipc_lang { IPC_LANGS(IPC_CODE_ENUM_) };
enum ipc_arg_kind { IPC_ARG_KINDS(IPC_CODE_ENUM_) };
enum ipc_mod_source { IPC_MOD_SOURCES(IPC_CODE_ENUM_) };

#define IPC_COUNT_(...) +1
/* Statuses go from IPC_OK (0) down to IPC_STATUS_MIN, every value between taken. */
enum { IPC_STATUS_COUNT = 0 IPC_STATUSES(IPC_COUNT_) };
#define IPC_STATUS_MIN (1 - IPC_STATUS_COUNT)

#define IPC_ARG_CACHED 0x1u   /* ipc_arg.flags: an IN argument whose bytes the worker may keep */
#define IPC_LAUNCH_TIMED 0x1u /* ipc_submit.flags: measure the device's own time */
/* ipc_submit.flags: run with nothing else in flight on the device. The library sends it only
 * with a request that may have broken the last worker's device (client/replay.c); a worker
 * honours it IPC_MARKS_PER_CLIENT times per channel, then ignores it (worker/core/queue.c). */
#define IPC_SUBMIT_ALONE 0x2u
/* ipc_submit.flags: the library reads IPC_MARK_DONE in the request's mark. It sends it only to a
 * worker whose status page says IPC_STATUS_MARK_DONE; to others, and to libraries that do not
 * send it, a request that ended well is STARTED, as before. */
#define IPC_SUBMIT_MARK_DONE 0x4u

/* Queues' priorities: IPC_PRIO_MIN (background) to IPC_PRIO_MAX (latency-critical), 0 by
 * default; a worker keeps one level of each. Compute shares: percent of the device's SMs. */
#define IPC_PRIO_MIN (-1)
#define IPC_PRIO_MAX 2
#define IPC_PRIO_LEVELS (IPC_PRIO_MAX - IPC_PRIO_MIN + 1)
#define IPC_SHARE_MAX 100u
#define IPC_QUEUE_PRIORITY 0x1u /* ipc_queue_config.flags: priority given (else the default) */

/* Shared by READY, DEVICE and STATUS. */
struct ipc_device_info {
	uint32_t index;
	uint32_t backend; /* enum ipc_backend */
	uint32_t cc_major;
	uint32_t cc_minor;
	uint32_t sm_count;
	uint32_t max_threads_per_block;
	uint64_t mem_total;
	uint8_t uuid[16];
	char name[64]; /* NUL-terminated; a decoder enforces it */
};
_Static_assert(sizeof(struct ipc_device_info) == 112, "wire ABI");

#define IPC_HELLO_ADMIN 0x1u /* status queries only: no channels */

struct ipc_hello {
	uint32_t min_version;
	uint32_t max_version;
	uint32_t flags;
	uint32_t reserved;
};
_Static_assert(sizeof(struct ipc_hello) == 16, "wire ABI");

#define IPC_WELCOME_PRIVATE 0x1u /* a private gpuxd (--private), which a client may restart */

struct ipc_welcome {
	uint32_t version;
	uint32_t ndevices;
	uint64_t client_id;
	uint64_t quota_shared; /* shared-buffer bytes this client may have (3) */
	uint32_t flags;        /* IPC_WELCOME_* (3) */
	int8_t prio_max;       /* the highest priority its queues may have (3, later; see ATTACH) */
	int8_t prio_default;   /* theirs when it names none */
	uint16_t reserved;
};
_Static_assert(sizeof(struct ipc_welcome) == 32, "wire ABI");

#define IPC_DEVICE_CHANNEL 0x1u /* two fds follow: the channel and the status page */
#define IPC_DEVICE_NFDS(m) (((m)->flags & IPC_DEVICE_CHANNEL) ? 2u : 0u)

struct ipc_device {
	struct ipc_device_info info;
	uint32_t state; /* enum ipc_device_state */
	uint32_t generation;
	uint32_t flags;
	uint32_t reserved;
};
_Static_assert(sizeof(struct ipc_device) == 128, "wire ABI");

/* Made ahead for a forked child (supervisor/spares.c): no client's yet, until ADOPT. */
#define IPC_ATTACH_SPARE 0x1u

/*
 * gpuxd's priority policy for the client (gpuxd --priority): the highest priority its queues
 * may have, and theirs when it names none, each IPC_PRIO_MIN to IPC_PRIO_MAX with
 * prio_default <= prio_max. Both 0 (the reserved space of before): priority 0 only.
 */
struct ipc_attach {
	uint64_t client_id;
	uint32_t uid;
	uint32_t gid;
	uint32_t pid;
	int8_t prio_max;
	int8_t prio_default;
	uint16_t flags; /* IPC_ATTACH_* (0 before) */
};
_Static_assert(sizeof(struct ipc_attach) == 24, "wire ABI");

/* The client attached as client_id (made ahead for a forked child) is now the process pid's. */
struct ipc_adopt {
	uint64_t client_id;
	uint32_t pid;
	uint32_t reserved;
};
_Static_assert(sizeof(struct ipc_adopt) == 16, "wire ABI");

struct ipc_ready {
	struct ipc_device_info info;
};

#define IPC_SEG_FROZEN 0x1u /* sealed against writing: the bytes never change */

struct ipc_seg_add {
	uint64_t seg_id;
	uint64_t size;
	uint32_t flags;
	uint32_t reserved;
};
_Static_assert(sizeof(struct ipc_seg_add) == 24, "wire ABI");

struct ipc_seg_drop {
	uint64_t seg_id;
};

#define IPC_MOD_CODE_FD 0x1u /* the code is in a sealed memfd, not inline */
#define IPC_MOD_LOAD_NFDS(m) (((m)->flags & IPC_MOD_CODE_FD) ? 1u : 0u)

struct ipc_mod_load {
	uint64_t mod_id;
	uint32_t lang; /* enum ipc_lang */
	uint32_t flags;
	uint32_t options_len;
	uint32_t code_len;
	uint32_t extra_len; /* 3: the headers and name expressions after the code (CUDA only) */
	uint32_t nheaders;
	uint32_t nnames;
	uint32_t reserved;
	/* then options_len bytes of options, then code_len bytes of code and extra_len bytes of
	 * headers and names, unless CODE_FD (then both are in the memfd, in that order) */
};
_Static_assert(sizeof(struct ipc_mod_load) == 40, "wire ABI");

/*
 * A CUDA C++ module's extra block: nheaders records { uint32_t name_len, text_len; name;
 * text } (a header the source may #include by that name), then nnames records
 * { uint32_t len; expression } (a name expression: "fill<float>"), unaligned, NUL-free.
 * A header's name has 1 to IPC_HEADER_NAME_MAX bytes, an expression 1 to
 * IPC_KERNEL_NAME_MAX (it is asked for as a kernel's name).
 */
struct ipc_mod_item {
	const char *name; /* a header's name, or a name expression */
	uint32_t name_len;
	const char *text; /* text_len bytes, not NUL-terminated; NULL: a name expression */
	uint32_t text_len;
};

struct ipc_mod_extra_cursor {
	const uint8_t *p;
	size_t left;
	uint32_t headers, names; /* still to come */
};

void ipc_mod_extra_begin(struct ipc_mod_extra_cursor *c, const void *p, size_t len,
			 uint32_t nheaders, uint32_t nnames);
/* The next item: 1, 0 at the end (every byte used), or -EBADMSG. *ret borrows the block. */
int ipc_mod_extra_next(struct ipc_mod_extra_cursor *c, struct ipc_mod_item *ret);
/* A whole block well formed: 0 or -EBADMSG. */
int ipc_mod_extra_check(const void *p, size_t len, uint32_t nheaders, uint32_t nnames);

struct ipc_mod_drop {
	uint64_t mod_id;
};

struct ipc_queue_msg {
	uint32_t queue;
	uint32_t flags;
};

/*
 * An open queue's priority and compute share, or the default queue's (queue 0), which holds
 * from the queue's next request on. Answered by a DONE when it has an id; without one the
 * worker takes it as it may (a priority above the client's highest is lowered to that).
 */
struct ipc_queue_config {
	uint32_t queue;
	int32_t priority; /* IPC_PRIO_MIN to IPC_PRIO_MAX; with IPC_QUEUE_PRIORITY only */
	uint32_t share;   /* percent of the device's SMs its kernels may run on; 0: every SM */
	uint32_t flags;   /* IPC_QUEUE_PRIORITY */
};
_Static_assert(sizeof(struct ipc_queue_config) == 16, "wire ABI");

struct ipc_dbuf_alloc {
	uint64_t dbuf_id;
	uint64_t size;
	uint32_t flags; /* none yet: 0 */
	uint32_t reserved;
};
_Static_assert(sizeof(struct ipc_dbuf_alloc) == 24, "wire ABI");

struct ipc_dbuf_free {
	uint64_t dbuf_id;
};
_Static_assert(sizeof(struct ipc_dbuf_free) == 8, "wire ABI");

enum ipc_copy_dir {
	IPC_COPY_TO_DBUF = 1,
	IPC_COPY_FROM_DBUF = 2,
};

/* Ordered in its queue like a launch. */
struct ipc_copy {
	uint64_t dbuf_id;
	uint64_t dbuf_offset;
	uint64_t seg_id;
	uint64_t seg_offset;
	uint64_t size;
	uint32_t dir; /* enum ipc_copy_dir */
	uint32_t queue;
	uint32_t flags; /* none yet: 0 */
	uint32_t reserved;
};
_Static_assert(sizeof(struct ipc_copy) == 56, "wire ABI");

struct ipc_submit {
	uint64_t mod_id;
	uint32_t queue;
	uint32_t nargs;
	uint32_t grid[3];
	uint32_t block[3];
	uint32_t shared_bytes;
	uint32_t timeout_ms;
	uint32_t flags;
	uint32_t name_len;
	uint32_t data_len;
	uint32_t reserved;
	/* then nargs struct ipc_arg, then name_len bytes of kernel name, then data_len bytes of
	 * scalar data that SCALAR arguments point into with (offset, size) */
};
_Static_assert(sizeof(struct ipc_submit) == 64, "wire ABI");

struct ipc_arg {
	uint32_t kind;  /* enum ipc_arg_kind */
	uint32_t flags; /* IPC_ARG_CACHED (IN only) */
	uint64_t ref;   /* segment id for buffer kinds, device buffer id for DBUF */
	uint64_t offset;
	uint64_t size;
};
_Static_assert(sizeof(struct ipc_arg) == 32, "wire ABI");

/*
 * Answers request `id` of the header. A DONE with id 0 on a channel is the worker's last word
 * before it closes the channel: why (status and text) it drops this client.
 */
struct ipc_done {
	int32_t status; /* enum ipc_status_code */
	uint32_t text_len;
	uint64_t queue_ns;
	uint64_t run_ns;
	uint64_t device_ns;
	/* then text_len bytes of text */
};
_Static_assert(sizeof(struct ipc_done) == 32, "wire ABI");

/* Sent, with the MOD_LOAD's id, just before the DONE of a MOD_LOAD that succeeded. */
struct ipc_mod_info {
	uint64_t key_lo; /* the module's cache key (basic/key.h) */
	uint64_t key_hi;
	uint64_t build_ns; /* the worker's time compiling or reading it; 0 from memory */
	uint32_t source;   /* enum ipc_mod_source */
	uint32_t reserved;
};
_Static_assert(sizeof(struct ipc_mod_info) == 32, "wire ABI");

/*
 * KERNEL_ATTRS_REQ and GLOBAL_REQ: a kernel or a variable of the client's module mod_id, by
 * name. A GLOBAL_REQ binds the variable to the client's device buffer id dbuf_id (one it does
 * not use yet); a KERNEL_ATTRS_REQ has none (0).
 */
struct ipc_sym_req {
	uint64_t mod_id;
	uint64_t dbuf_id;
	uint32_t name_len;                  /* 1 to IPC_KERNEL_NAME_MAX */
	uint32_t flags;                     /* none yet: 0 */
	char name[IPC_KERNEL_NAME_MAX + 1]; /* name_len bytes without NUL, then a NUL */
};
_Static_assert(sizeof(struct ipc_sym_req) == 280, "wire ABI");

/* A kernel's attribute the back end cannot tell. */
#define IPC_ATTR_UNKNOWN (-1)

/* Sent, with the KERNEL_ATTRS_REQ's id, just before its DONE: as gpux.h's gpux_kernel_attrs. */
struct ipc_kernel_attrs {
	int32_t max_threads_per_block;
	int32_t num_regs;
	int32_t shared_size_bytes;
	int32_t const_size_bytes;
	int32_t local_size_bytes;
	int32_t max_dynamic_shared_size_bytes;
	int32_t ptx_version;
	int32_t binary_version;
	int32_t cache_mode_ca;
	int32_t preferred_shared_memory_carveout;
	int32_t nparams;
	int32_t reserved[5]; /* 0 */
};
_Static_assert(sizeof(struct ipc_kernel_attrs) == 64, "wire ABI");

#define IPC_GLOBAL_READ_ONLY 0x1u /* in memory the device cannot write (the host's .rodata) */

/* Sent, with the GLOBAL_REQ's id, just before its DONE: the device buffer's size. */
struct ipc_global_info {
	uint64_t size;
	uint32_t flags; /* IPC_GLOBAL_* */
	uint32_t reserved;
};
_Static_assert(sizeof(struct ipc_global_info) == 16, "wire ABI");

/* With one fd: the rings' memfd. */
struct ipc_rings_offer {
	uint32_t size;  /* IPC_RINGS_BYTES; a client that finds another ignores the offer */
	uint32_t flags; /* none yet: 0 */
};
_Static_assert(sizeof(struct ipc_rings_offer) == 8, "wire ABI");

/*
 * Marks: where a client can tell, once its worker is gone, which of its requests had passed
 * their point of no return (client/replay.c). Each client has a page of its worker's marks
 * memfd (sealed against writes but the worker's own mapping: the client maps it read-only),
 * IPC_MARKS_PER_CLIENT words, where the worker (or, in stream order, the device) writes
 * (id & IPC_MARK_ID_MASK) | state << IPC_MARK_STATE_SHIFT at word id % IPC_MARKS_PER_CLIENT
 * before request `id` takes the step its state names. So a client keeps at most one request
 * in flight per word, and its request ids below 2^30.
 */
#define IPC_MARKS_PER_CLIENT 1024u
#define IPC_MARKS_PAGE (IPC_MARKS_PER_CLIENT * 4u)
#define IPC_MARK_ID_MASK 0x3fffffffu
#define IPC_MARK_STATE_SHIFT 30
/* Handed to the device (CUDA), which may have run it, but nothing copied back yet. */
#define IPC_MARK_LAUNCHED 1u
/* Past its point of no return: it began to change the client's memory (a host kernel, a
 * mapped or in-place argument, the copy of its results back), or it ended in error. */
#define IPC_MARK_STARTED 2u
/* Ended well: its results are all in the client's memory (written by the device after its
 * copies back, in stream order, or by the worker when it ended GPUX_OK). */
#define IPC_MARK_DONE 3u
#define IPC_MARK(id, state) (((id)&IPC_MARK_ID_MASK) | ((uint32_t)(state) << IPC_MARK_STATE_SHIFT))
/* Pages in a worker's marks memfd (16 MiB): one per client with requests, that many at once. */
#define IPC_MARKS_PAGES 4096u

/* With one fd: the worker's marks memfd, of which page `index` is this client's. */
struct ipc_marks_offer {
	uint32_t index;
	uint32_t flags; /* none yet: 0 */
};
_Static_assert(sizeof(struct ipc_marks_offer) == 8, "wire ABI");

/*
 * A device buffer kept in host memory: the range of a shared segment of the client's, which
 * kernels use in place (a mapped argument's way) and which outlives the worker. Answered by
 * DONE when it has an id.
 */
struct ipc_dbuf_host {
	uint64_t dbuf_id;
	uint64_t size;
	uint64_t seg_id;
	uint64_t seg_offset;
};
_Static_assert(sizeof(struct ipc_dbuf_host) == 32, "wire ABI");

/*
 * Answered by a DEVICE with a new channel when the worker of that generation is ready (it lets
 * go of the client's earlier channel, if it still has one). Otherwise not answered: a later
 * worker hands every client a channel when it is ready, and a death is announced to all.
 */
struct ipc_channel_req {
	uint32_t device;
	uint32_t generation; /* of the worker whose channel was lost; 0: whichever runs */
};
_Static_assert(sizeof(struct ipc_channel_req) == 8, "wire ABI");

/* STATUS comes in pages: this asks for the page that starts at device `first`. */
struct ipc_status_req {
	uint32_t flags;
	uint32_t first;
};
_Static_assert(sizeof(struct ipc_status_req) == 8, "wire ABI");

/*
 * Request times are counted in buckets whose upper bounds are ipc_hist_bounds_ns[] (the last
 * bucket has none): see ipc/metrics.h.
 */
#define IPC_HIST_BUCKETS 24u

struct ipc_hist {
	uint64_t count[IPC_HIST_BUCKETS]; /* each bucket's own count, not cumulative */
	uint64_t sum_ns;
};
_Static_assert(sizeof(struct ipc_hist) == 200, "wire ABI");

/* Finished requests are counted by status: by_status[-status], IPC_OK first. */
#define IPC_STATUS_CODES 32u
_Static_assert(IPC_STATUS_COUNT <= IPC_STATUS_CODES, "by_status has a counter for every status");

/* Memory that one user's clients hold on a worker. */
#define IPC_USAGE_UIDS 16u
#define IPC_USAGE_OTHERS UINT32_MAX /* the last entry's uid when more users than entries */

struct ipc_usage {
	uint32_t uid;
	uint32_t reserved;
	uint64_t shared_bytes; /* their shared segments, mapped (and registered) by the worker */
	uint64_t device_bytes; /* their device buffers */
};
_Static_assert(sizeof(struct ipc_usage) == 24, "wire ABI");

/* A level's streams had no priority given (none made yet, or no device priorities). */
#define IPC_STREAM_PRIO_NONE INT32_MIN
#define IPC_SHARE_NOTE_MAX 64u

/* A worker's priorities and compute shares (worker/core/queue.c), for gpux status. */
struct ipc_sched {
	/* The CUDA stream priority of each level's streams (IPC_PRIO_MIN's first) as the device
	 * took it, or IPC_STREAM_PRIO_NONE; the device's range (both 0: none, the host). */
	int32_t stream_prio[IPC_PRIO_LEVELS];
	int32_t stream_prio_least, stream_prio_greatest;
	uint64_t launches[IPC_PRIO_LEVELS]; /* requests started, by their queue's level */
	uint32_t share_sms;     /* the SMs compute shares are cut from; 0: no shares here */
	uint32_t share_unit;    /* a share is a multiple of this many SMs ... */
	uint32_t share_min;     /* ... and at least this many */
	uint32_t share_streams; /* streams of queues with a share (a green context's) */
	uint32_t prio_streams;  /* streams of queues of a priority other than 0, without a share */
	uint32_t share_ctxs;    /* green contexts made */
	char share_note[IPC_SHARE_NOTE_MAX]; /* why there are no compute shares, or "" */
};
_Static_assert(sizeof(struct ipc_sched) == 144, "wire ABI");

/* A worker's counters, kept in its status page and copied into STATUS. */
struct ipc_stats {
	uint64_t requests_done;
	uint64_t requests_failed;
	uint64_t inflight;
	uint64_t clients;
	uint64_t segments;
	uint64_t segment_bytes;
	uint64_t mem_free;
	uint64_t modules_loaded;
	uint64_t module_mem_hits;
	uint64_t module_disk_hits;
	uint64_t module_compiles;
	uint64_t cache_hits;
	uint64_t cache_misses;
	uint64_t cache_bytes;
	uint64_t cache_entries;
	uint64_t cache_evictions;
	uint64_t dbuf_bytes;
	/* How requests were handed on: a slow mode (wake-ups instead of spinning) shows here. */
	uint64_t graph_launches; /* groups of requests launched as one CUDA graph */
	uint64_t graph_requests; /* the requests in them */
	uint64_t loop_sleeps;    /* times the worker's loop went to sleep: a wake-up each */
	uint64_t kicks_sent;     /* IPC_KICKs to clients that were not looking at their ring */
	uint64_t socket_msgs;    /* client messages that came by the socket, not the ring */
	uint64_t blocking_waits; /* a waiter stopped spinning for a request's end and napped */
	uint64_t slot_waits;     /* a queue waited in line for room in its slot */
	uint64_t launches;       /* launch requests finished (copies are not launches) */
	uint64_t build_ns;       /* time spent compiling modules and reading them from disk */
	uint64_t by_status[IPC_STATUS_CODES];
	struct ipc_hist latency; /* from a request's arrival at the worker to its completion */
	struct ipc_hist queue;   /* from its arrival to the start of its work */
	struct ipc_usage usage[IPC_USAGE_UIDS]; /* entries with no bytes are free */
	uint32_t driver_version;  /* CUDA: cuDriverGetVersion() (13000 is 13.0); 0 on the host */
	uint32_t nvrtc_version;   /* major * 1000 + minor * 10, as driver_version; 0: none */
	char driver[32];          /* the kernel driver's release ("580.95.05"), or "" */
	uint64_t loop_waits;      /* requests whose end the loop itself saw, launched alone */
	uint64_t copyin_requests; /* requests whose copies in went by gpux's copy-in kernel */
	uint64_t clients_active;  /* clients whose rings the loop looks at (worker/core/active.h) */
	uint64_t clients_busy;    /* clients with requests in flight */
	struct ipc_sched sched;   /* priorities and compute shares */
};
_Static_assert(sizeof(struct ipc_stats) == 1464, "wire ABI");

struct ipc_dev_status {
	struct ipc_device_info info;
	uint32_t state; /* enum ipc_device_state */
	uint32_t pid;
	uint32_t generation;
	uint32_t restarts;
	uint32_t deaths_recent; /* within the failure window */
	uint32_t launch_rate;   /* launches finished per second, over the last second or so */
	struct ipc_stats stats;
};
_Static_assert(sizeof(struct ipc_dev_status) == 1600, "wire ABI");

#define IPC_STATUS_STOPPING 0x1u /* gpuxd is draining: it takes no new clients or requests */

struct ipc_status {
	uint32_t ndevices; /* in all; this page holds devices [first, first + count) */
	uint32_t nclients;
	uint64_t uptime_ns;
	uint64_t clients_total;
	uint64_t clients_refused;
	char loop[16];    /* the supervisor's event loop: "io_uring" or "epoll" */
	char version[16]; /* gpuxd's version, NUL-terminated */
	uint32_t first;
	uint32_t count;
	uint32_t flags;
	uint32_t spares; /* connections made ahead for clients' forked children (0 before) */
			 /* then count struct ipc_dev_status */
};
_Static_assert(sizeof(struct ipc_status) == 80, "wire ABI");

/*
 * gpux top's question: gpuxd's clients whose id is above `after`, by id, a page at a time
 * (from 0, then from the last id of each page, until a page comes short).
 */
struct ipc_clients_req {
	uint64_t after;
	uint32_t flags; /* none yet */
	uint32_t reserved;
};
_Static_assert(sizeof(struct ipc_clients_req) == 16, "wire ABI");

/* The answer: `count` struct ipc_client_info after this, by id. */
struct ipc_clients {
	uint32_t total; /* the clients the asker is shown, in all (gpuxd's owner sees every
			 * user's, another user its own) */
	uint32_t count;
	uint32_t flags;
	uint32_t reserved;
};
_Static_assert(sizeof(struct ipc_clients) == 16, "wire ABI");

/* A client of gpuxd, with what its workers' tables say of it (ipc/status.h). */
struct ipc_client_info {
	uint64_t id;
	uint32_t pid;
	uint32_t uid;
	uint64_t connected_ns; /* since its hello */
	uint64_t requests;     /* ended, on every device */
	uint64_t shared_bytes; /* of its shared segments, the most one worker maps */
	uint64_t device_bytes; /* of its device buffers, on every device */
	uint32_t inflight;     /* its requests queued or running, on every device */
	uint32_t channels;     /* workers that serve it */
};
_Static_assert(sizeof(struct ipc_client_info) == 56, "wire ABI");

#define IPC_CLIENTS_PAGE                                                                           \
	((IPC_PAYLOAD_MAX - sizeof(struct ipc_clients)) / sizeof(struct ipc_client_info))

/* The most devices one STATUS page holds. */
#define IPC_STATUS_PAGE_DEVS                                                                       \
	((IPC_PAYLOAD_MAX - sizeof(struct ipc_status)) / sizeof(struct ipc_dev_status))

enum ipc_kill_reason {
	IPC_KILL_TIMEOUT = 1,
};

struct ipc_killed {
	uint32_t device;
	uint32_t reason;
	uint32_t req_id;
	uint32_t generation;
};

/* A received message: its header, a borrowed view of its payload, and the fds it carried. */
struct ipc_msg {
	struct ipc_hdr hdr;
	const uint8_t *payload;
	size_t len;
	int fds[IPC_FDS_MAX];
	unsigned nfds;
};

/* Decoded variable-length messages. Pointers borrow the message's payload. */
struct ipc_mod_load_msg {
	struct ipc_mod_load m;
	const char *options; /* m.options_len bytes, not NUL-terminated */
	const uint8_t *code; /* m.code_len + m.extra_len bytes (checked), or NULL with CODE_FD */
};

struct ipc_submit_msg {
	struct ipc_submit m;
	struct ipc_arg args[IPC_ARGS_MAX];
	char name[IPC_KERNEL_NAME_MAX + 1]; /* NUL-terminated copy */
	const uint8_t *data;                /* m.data_len bytes */
};

struct ipc_done_msg {
	struct ipc_done m;
	const char *text; /* m.text_len bytes, not NUL-terminated */
};

struct ipc_status_msg {
	struct ipc_status m;
	const uint8_t *devs; /* m.count struct ipc_dev_status, possibly unaligned */
};

struct ipc_clients_msg {
	struct ipc_clients m;
	const uint8_t *rows; /* m.count struct ipc_client_info, possibly unaligned */
};

/*
 * Check a received record of `len` bytes that came with `nfds` fds and fill *ret: the header
 * is valid, its length matches what arrived and its fd count matches the fds. Returns 0 or
 * -EBADMSG (bad magic, length or fd count), -EPROTONOSUPPORT (version), -EMSGSIZE.
 * The fds are not touched; the caller owns them either way.
 */
int ipc_msg_parse(const void *buf, size_t len, const int *fds, unsigned nfds, struct ipc_msg *ret);

/*
 * Decoders, one per message type: ipc_decode_<name>(msg, ret) (ipc_decode_<name>(msg) for a
 * message of no payload) returns 0 and fills *ret, or -EBADMSG when msg is not a valid one
 * of that type; *ret is written only on success. The fds stay the caller's either way.
 */
#define IPC_DECODE_FIXED_(name, decoded)                                                           \
	int ipc_decode_##name(const struct ipc_msg *msg, struct ipc_##decoded *ret);
#define IPC_DECODE_VAR_ IPC_DECODE_FIXED_
#define IPC_DECODE_EMPTY_(name, decoded) int ipc_decode_##name(const struct ipc_msg *msg);
#define IPC_DECODE_DECL_(T, num, name, label, fixed, decoded, fds, shape)                          \
	IPC_DECODE_##shape##_(name, decoded)
IPC_MESSAGES(IPC_DECODE_DECL_)

/* QUEUE_OPEN or QUEUE_CLOSE, as `type` says. */
int ipc_decode_queue(const struct ipc_msg *msg, uint16_t type, struct ipc_queue_msg *ret);
/* Why ipc_decode_submit() refuses msg, in a few words (static text), or NULL if it does not. */
const char *ipc_submit_refusal(const struct ipc_msg *msg);

/* A whole KICK message: a header, nothing after it. */
extern const struct ipc_hdr ipc_kick;

/* Read device i (first + i) of a decoded STATUS page (the payload need not be aligned). */
void ipc_status_dev(const struct ipc_status_msg *msg, uint32_t i, struct ipc_dev_status *ret);
/* Read client i of a decoded CLIENTS page. */
void ipc_clients_row(const struct ipc_clients_msg *msg, uint32_t i, struct ipc_client_info *ret);

/*
 * Encoding: build a message in `buf` of `cap` bytes from its fixed part and up to four
 * variable parts. Returns the message's length, or -EMSGSIZE when it would not fit in cap or
 * in IPC_MSG_MAX. nfds is what the caller will pass beside it.
 */
struct ipc_part {
	const void *data;
	size_t len;
};

int ipc_encode(void *buf, size_t cap, uint16_t type, uint32_t id, unsigned nfds, const void *fixed,
	       size_t fixed_len, const struct ipc_part *parts, unsigned nparts);

/*
 * Encoders of the messages of one shape: ipc_encode_<name>(buf, cap, id, m) for a FIXED one
 * (m its payload), ipc_encode_<name>(buf, cap, id) for an EMPTY one. The number of fds to
 * pass beside it is the schema's (ipc/proto-schema.h). Returns what ipc_encode() does.
 */
#define IPC_ENCODE_FIXED_(name, fixed)                                                             \
	int ipc_encode_##name(void *buf, size_t cap, uint32_t id, const struct ipc_##fixed *m);
#define IPC_ENCODE_EMPTY_(name, fixed) int ipc_encode_##name(void *buf, size_t cap, uint32_t id);
#define IPC_ENCODE_VAR_(name, fixed)
#define IPC_ENCODE_DECL_(T, num, name, label, fixed, decoded, fds, shape)                          \
	IPC_ENCODE_##shape##_(name, fixed)
IPC_MESSAGES(IPC_ENCODE_DECL_)

/* Encoders for the variable-length messages, checking their limits as decoders do. A
 * MOD_LOAD's code is m->code_len + m->extra_len bytes: the code, then its extra block. */
int ipc_encode_mod_load(void *buf, size_t cap, uint32_t id, const struct ipc_mod_load *m,
			const char *options, const void *code);
int ipc_encode_submit(void *buf, size_t cap, uint32_t id, const struct ipc_submit *m,
		      const struct ipc_arg *args, const char *name, const void *data);
int ipc_encode_done(void *buf, size_t cap, uint32_t id, const struct ipc_done *m, const char *text);
/* A STATUS page: m->count devices from devs (device m->first first). */
int ipc_encode_status(void *buf, size_t cap, uint32_t id, const struct ipc_status *m,
		      const struct ipc_dev_status *devs);
/* A CLIENTS page: m->count clients from rows, by id. */
int ipc_encode_clients(void *buf, size_t cap, uint32_t id, const struct ipc_clients *m,
		       const struct ipc_client_info *rows);

/* Whether `status` is a status of this version: IPC_OK or one of its errors. */
bool ipc_status_valid(int status);

/* A short English text for a status (gpux_strerror() is this); "unknown status" if none. */
const char *ipc_status_text(int status);

/* A short name for a status, as a metric's label: "ok", "worker_lost", ...; or "unknown". */
const char *ipc_status_name(int status);

/* Name of a message type, for daemons' logs. */
const char *ipc_type_name(uint16_t type);
