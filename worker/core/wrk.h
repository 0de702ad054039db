/* SPDX-License-Identifier: MIT */
/* worker/core/wrk.h: the worker's objects: clients, segments, modules, queues, requests. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "active.h"
#include "backend.h"
#include "key.h"
#include "ledger.h"
#include "loop.h"
#include "map.h"
#include "options.h"
#include "populate.h"
#include "proto.h"
#include "ring.h"
#include "segment.h"
#include "status.h"

/* Exit codes gpuxd tells apart. */
#define WRK_EXIT_OK 0
#define WRK_EXIT_INIT 1  /* could not start: no device, no driver */
#define WRK_EXIT_FAULT 3 /* a sticky device error: restart me */

/* Per-client limits on what a client can make the worker hold. */
#define WRK_CLIENT_SEGS_MAX 4096u
#define WRK_CLIENT_MODS_MAX 1024u
#define WRK_CLIENT_QUEUES_MAX 64u
#define WRK_CLIENT_DBUFS_MAX 4096u
#define WRK_CLIENT_INFLIGHT_MAX 4096u
/* Device-cache entries of all users: the byte budget alone let 8-byte inputs make millions. */
#define WRK_CACHE_ENTRIES_MAX 16384u
/* How stale the free memory in the status page may get while requests complete. */
#define MEM_FREE_MAX_AGE_NS (10ull * 1000 * 1000)
#define WRK_SLOTS_MAX IPC_STATUS_SLOTS
/* The modules a client holds: their images and kernel names (a module shared counts in full). */
#define WRK_CLIENT_MOD_BYTES (256ULL * 1024 * 1024)
/* Code waiting to be compiled, per client and in all. */
#define WRK_CLIENT_BUILD_BYTES (64ULL * 1024 * 1024)
#define WRK_BUILD_BYTES (512ULL * 1024 * 1024)
/* Modules nobody uses any more that stay loaded, most recently used first. */
#define WRK_MODULES_IDLE_MAX 256u

/* Content keys of ranges of a frozen mapping, computed once each. */
#define WRK_MAPPING_KEYS 4u

struct wrk_range_key {
	uint64_t offset, len;
	struct ipc_key key;
};

/* A mapped memfd, shared by every client that sent the same file (same inode). */
struct wrk_mapping {
	int refs;
	dev_t st_dev;
	ino_t st_ino;
	struct ipc_segment seg;
	/* Registered off the loop (worker/core/segment.c): requests using it wait meanwhile,
	 * and fail with reg_status (reg_error) when it could not be. */
	bool registering;
	gpux_status reg_status;
	char *reg_error;
	struct wrk_mapping *next_reg; /* in the registrar's lists */
	bool uncounted;               /* no more in its user's quota, the stats, the map of files */
	void *reg;                    /* the back end's registration */
	/* map_register() done; until it is, tried again at each use (wrk_segment_range()) */
	bool registered;
	uint64_t dev_addr; /* where the device sees the registered pages (CUDA); 0: nowhere */
	uint32_t uid;
	unsigned usage_slot; /* where its bytes are counted by user (wrk_usage_add()) */
	struct wrk_range_key keys[WRK_MAPPING_KEYS];
	unsigned nkeys;
};

/*
 * An entry of the device cache: the bytes of a frozen range on the device, shared by every
 * request of one user that names the same bytes (same length, same XXH3-128 of them,
 * computed here from the sealed memory, never taken from a client).
 */
struct wrk_centry {
	int refs; /* requests using it; idle (in the LRU list) at 0 */
	uint32_t uid;
	uint64_t len;
	struct ipc_key key;
	void *ptr;                  /* device memory */
	void *ready;                /* the back end's mark of its upload's end; NULL: done */
	struct wrk_mapping *source; /* held while the upload may still read it */
	uint64_t last_use;
	int ledger_row;           /* its user's in the ledger (ipc/ledger.h); -1: none */
	struct wrk_centry *hnext; /* in its hash chain */
	struct wrk_centry *lru_prev, *lru_next;
};

/* A user's shared memory mapped here: each mapping once, whichever clients share it. */
struct wrk_user {
	uint64_t shared_bytes;
	unsigned mappings;
};

/* A client's device buffer. */
struct wrk_dbuf {
	int refs;            /* the client's id, and each request using it */
	unsigned usage_slot; /* where its bytes are counted by user (wrk_usage_add()) */
	int ledger_row;      /* its user's in the ledger (ipc/ledger.h); -1: none */
	uint64_t size;
	void *ptr;
	struct wrk_client *client;
	/* A module's variable (worker/core/symbol.c): its module, held; no memory of its own. */
	struct wrk_module *global;
	bool read_only; /* copies into it are refused */
	/* Kept in host memory (IPC_DBUF_HOST): the client's segment it is a range of (from
	 * map_offset), held; ptr is where the device sees those pages, NULL until the segment's
	 * registration ends (wrk_dbuf_resolve()). map NULL: device memory of ours. */
	struct wrk_mapping *map;
	uint64_t map_offset;
};

/* A client's segment id: its mapping, or why it could not be attached. */
struct wrk_seg {
	struct wrk_mapping *map;
	gpux_status status; /* when map is NULL */
	char *error;
};

struct wrk_kernel {
	struct wrk_kernel *next;
	char *name;
	struct wrk_kernel_info info;
};

enum wrk_module_state {
	MOD_BUILDING,
	MOD_READY,
	MOD_FAILED,
};

/* A loaded module, shared by every client that loaded the same code (same key). */
struct wrk_module {
	int refs;
	struct ipc_key key;
	uint32_t lang;
	enum wrk_module_state state;
	gpux_status status; /* MOD_FAILED: why */
	char *log;          /* the compiler's log, or the load error */
	void *handle;
	struct wrk_kernel *kernels;
	struct wrk_module *lru_prev, *lru_next; /* in the idle list while refs == 0 */
	bool cached;                            /* in the worker's map by key */
	/* Job input while building. */
	uint8_t *code; /* code_len bytes, then extra_len of headers and name expressions */
	size_t code_len;
	size_t extra_len;
	uint32_t nheaders, nnames;
	char *options;
	uint8_t *image;
	size_t image_len;
	uint64_t bytes; /* charged to each client holding it: its code, once built its image and
			   names */
	bool from_disk;
	uint64_t build_ns;              /* compiling or reading it, and loading it */
	struct wrk_client *creator;     /* whose MOD_LOAD started the build, until it ends */
	struct wrk_module *next_done;   /* in the job list, then in the finished list */
	struct wrk_waiter *waiters;     /* MOD_LOAD replies owed when the build ends */
	struct wrk_question *questions; /* about its symbols, answered when the build ends */
};

/* A client's module id. */
struct wrk_modref {
	struct wrk_module *mod;
	uint64_t bytes; /* what the client is charged for it (mod_bytes) */
};

struct wrk_req;
struct wrk_waiter;

struct wrk_queue {
	uint32_t id;
	unsigned slot;
	int prio;        /* IPC_PRIO_MIN to IPC_PRIO_MAX */
	unsigned share;  /* percent of the device's SMs its kernels may use; 0: all */
	unsigned inslot; /* its requests handed to its slot and not ended */
	bool moving;     /* bound to another slot since: takes nothing until inslot is 0 */
	struct wrk_req *pending_head, *pending_tail; /* not launched yet, in order */
	struct wrk_client *client;
	bool waiting; /* in its slot's line of queues waiting for room */
	struct wrk_queue *wait_next;
	int refs;
};

struct wrk_client {
	int refs;
	struct wrk *w;
	struct ipc_conn *conn;
	uint64_t id;
	uint32_t uid, gid, pid;
	int prio_max, prio_default; /* gpuxd's priority policy for it (ATTACH) */
	/* The default queue's options, which it takes when it is made (QUEUE_CONFIG of queue 0). */
	int dq_prio;
	unsigned dq_share;
	struct ipc_map segs;   /* id -> struct wrk_seg */
	struct ipc_map mods;   /* id -> struct wrk_modref */
	struct ipc_map queues; /* id -> struct wrk_queue */
	struct ipc_map dbufs;  /* id -> struct wrk_dbuf */
	uint64_t dbuf_bytes;
	uint64_t shared_bytes; /* of the segments attached (each counts, shared or not) */
	uint64_t build_bytes;  /* code of this client's builds not done yet */
	uint64_t mod_bytes;    /* of the modules it holds (WRK_CLIENT_MOD_BYTES) */
	unsigned inflight;
	unsigned questions; /* waiting for a module's build (worker/core/symbol.c) */
	uint64_t requests;  /* ended, for gpux top */
	unsigned row;       /* its row in w->client_table, plus one; 0: none */
	bool gone;
	bool spare; /* made ahead for a forked child, nobody's yet (not in nclients) */
	/* gone, for the back end's threads: its requests not started yet must not start. */
	atomic_bool dropped;
	struct wrk_client *prev, *next;

	/* The shared rings beside the channel (ipc/ring.h); NULL: the socket only. */
	struct ipc_rings *rings;
	struct ipc_ring up, down;
	bool rings_used;     /* the client has used them: it reads its ring too */
	struct wrk_act act;  /* its place among the clients whose rings the loop looks at */
	bool ring_bad;       /* the client broke its ring: drop it */
	uint32_t sock_in;    /* socket messages taken */
	uint32_t sock_out;   /* socket messages sent */
	uint32_t marks_page; /* its page of the marks (worker/core/marks.c); WRK_NO_MARKS */
	unsigned alone;      /* its requests that run alone, IPC_MARKS_PER_CLIENT at most */
};

#define WRK_NO_MARKS UINT32_MAX

struct wrk_arg {
	uint32_t kind;
	uint32_t size; /* scalars: bytes; buffers: see len */
	uint64_t len;
	struct wrk_mapping *map;   /* buffers */
	uint64_t offset;           /* into the mapping, or the device buffer */
	void *host;                /* map->seg.addr + offset, or the scalar's bytes */
	void *dev;                 /* back end: the kernel's pointer for a buffer argument */
	struct wrk_centry *centry; /* a cached IN: its device copy */
	struct wrk_dbuf *dbuf;     /* DBUF */
};

enum wrk_req_kind {
	REQ_LAUNCH,
	REQ_COPY, /* args[0] is the shared range (IN or OUT), args[1] the device buffer's */
};

/* Scalar bytes a request keeps inline; more are allocated. */
#define WRK_REQ_DATA_INLINE 512u

struct wrk_req {
	enum wrk_req_kind kind;
	struct wrk_req *next;      /* in its queue's pending list, then its slot's list */
	struct wrk_req *next_done; /* in the completion list, or the free list */
	struct wrk_req *next_soon; /* in the list of requests about to end */
	struct wrk *w;
	struct wrk_client *client;
	struct wrk_queue *queue;
	struct wrk_module *mod;
	struct wrk_kernel *kernel;
	uint32_t id;
	unsigned slot;
	uint32_t grid[3], block[3];
	uint32_t shared_bytes;
	uint64_t timeout_ms;
	uint64_t t_arrive, t_start, t_end;
	uint64_t device_ns;
	gpux_status status;
	char *error;
	bool launched;  /* the back end queued all of its work (its waits for uploads too) */
	bool timed;     /* GPUX_LAUNCH_TIMED: measure device_ns */
	bool alone;     /* IPC_SUBMIT_ALONE, honoured: nothing else in flight while it runs */
	bool mark_done; /* IPC_SUBMIT_MARK_DONE: its client reads IPC_MARK_DONE */
	bool sticky;    /* the back end broke its device enqueueing it */
	void *backend;  /* the back end's per-request state */
	uint8_t *data;  /* scalar bytes: data_inline, or allocated */
	unsigned nargs;
	/* Only the first nargs of these are set: a request is reused without clearing them. */
	struct wrk_arg args[IPC_ARGS_MAX];
	void *params[IPC_ARGS_MAX];
	uint8_t data_inline[WRK_REQ_DATA_INLINE];
	char name[IPC_KERNEL_NAME_MAX + 1];
};

/*
 * Requests in flight on one slot (a stream) at most. Beyond it, queues wait in line and are
 * let in turn by turn as requests end, so that one busy client cannot put a thousand
 * requests between another's and the device. Deep enough to keep a GPU busy with empty
 * kernels between two rounds of the worker's loop.
 */
#define WRK_SLOT_DEPTH 256u
/*
 * The same for slots of priority 0 and below while a latency-critical client is active: less
 * of the busy clients' work between the loop's urgent turns. With 256, such a client's round
 * trip had p99 160 µs beside one busy client and 1317 beside 64; with 32, 30 and 395 (bench
 * prio, two H200s, one machine; 30-109 and 395-698 over four runs). Not because the driver
 * blocks launches onto a long queue: on an H200 with 1024 kernels queued on each of 8
 * streams, a launch took 18 µs at the 99.9th percentile.
 */
#define WRK_SLOT_DEPTH_BESIDE_URGENT 32u
/* Requests a waiting queue may put in its slot per turn while others wait too. */
#define WRK_QUEUE_TURN 16u
/* A slot's batch is handed over when it has this many, before the round of the loop ends
 * (the most a CUDA graph of the back end holds); this many while a latency-critical client
 * is active (a graph of 64 kernels takes the loop 35-50 µs to launch on an H200). */
#define WRK_BATCH_MAX 64u
#define WRK_BATCH_URGENT 16u

/*
 * Slots beyond the default ones (--slots, priority 0 and no share) are made as queues of
 * another priority or share need them, one per priority and share, at most this many, of
 * which those with a share leave room for one of each priority: shares that clients ask for
 * cannot take the streams of latency-critical queues.
 */
#define WRK_CLASS_SLOTS_MAX 16u
#define WRK_SHARE_SLOTS_MAX (WRK_CLASS_SLOTS_MAX - (IPC_PRIO_LEVELS - 1))

/* A stream slot: requests handed to it, in order. */
struct wrk_slot {
	int prio;       /* of the queues bound to it */
	unsigned share; /* their compute share, in SMs (struct wrk_stream); 0: none */
	struct wrk_req *head, *tail;
	struct wrk_req *unlaunched; /* from here to tail: taken this round, not handed over yet */
	unsigned nunlaunched;
	unsigned inflight;                       /* head..tail */
	struct wrk_queue *wait_head, *wait_tail; /* queues with work waiting for room, in turn */
	unsigned queues;                         /* bound to it, for choosing the least used */
};

struct wrk {
	struct ipc_worker_opts opts; /* its command line (ipc/options.h) */
	const struct wrk_backend_ops *be;
	void *dev;
	struct ipc_device_info info;
	struct wrk_limits limits;
	struct ipc_loop *loop;
	struct ipc_conn *control;
	struct ipc_watch *done_watch;
	struct ipc_watch *signal_watch;
	int done_fd; /* eventfd: completions and compile results are waiting */
	int signal_fd;
	struct ipc_status_page *status;
	struct ipc_client_table *client_table; /* gpux top's rows (ipc/status.h), or NULL */
	struct ipc_ledger *ledger;             /* NULL: no per-user cap (no gpuxd gave one) */
	struct ipc_ledger_caps ledger_caps;    /* this worker's caps (wrk_user_caps()) */
	bool disk_cache; /* opts.cache_dir exists, is ours and closed to others */
	bool stopping;
	bool draining;     /* gpuxd stops: finish what is here, refuse new work */
	bool status_dirty; /* counters changed since the status page was written */
	int exit_code;

	struct wrk_client *clients;
	unsigned nclients;
	unsigned nspares;         /* clients made ahead for forked children, not in nclients */
	struct wrk_active active; /* the clients whose rings the loop looks at (active.h) */
	unsigned clients_busy;    /* clients with requests in flight (the status page's busy) */
	unsigned busy_cap;        /* what the page says of them at most: the CPUs */
	struct ipc_map mappings;  /* st_ino ^ st_dev -> struct wrk_mapping, same uid only */
	struct ipc_map users;     /* uid -> struct wrk_user, while it has mappings */
	struct ipc_map modules;   /* key.lo -> struct wrk_module */
	struct ipc_map
		canon_keys; /* a code's key.lo -> its canonical form's (worker/core/module.c) */
	uint64_t build_bytes;
	struct wrk_module *idle_head, *idle_tail;
	unsigned nidle;
	struct wrk_slot slots[WRK_SLOTS_MAX];
	unsigned nslots;
	unsigned nslots_default;   /* the first ones: priority 0, no share */
	unsigned nslots_share;     /* of the others, those with a share */
	bool shares;               /* the back end splits SMs (wrk_sched_device()) */
	bool urgent_active;        /* a client above priority 0 is active (server.c) */
	bool class_refused;        /* a slot of another class could not be made: logged */
	struct wrk_req *free_reqs; /* ended requests kept for reuse */
	unsigned nfree_reqs;
	/* A request that runs alone (worker/core/queue.c): held, its queue's first waiting for
	 * the slots to empty; running, nothing else starts until it ends. */
	struct wrk_queue *alone_next;
	struct wrk_req *alone;

	/* The marks of requests' points of no return (worker/core/marks.c): the memfd, mapped
	 * and registered, and which of its pages clients hold. */
	struct wrk_mapping marks;
	uint64_t marks_used[IPC_MARKS_PAGES / 64];

	/* The device cache (worker/core/dcache.c). */
	struct ipc_map centries; /* hash of (uid, len, key) -> chain of struct wrk_centry */
	struct wrk_centry *cidle_head, *cidle_tail; /* refs == 0, most recently used first */
	struct ipc_timer *cache_timer;

	/* Filled by other threads, drained by the loop. */
	pthread_mutex_t done_lock;
	struct wrk_req *done_reqs;
	struct wrk_req *soon_reqs; /* see wrk_req_soon() */
	struct wrk_module *done_mods;
	atomic_bool done_any; /* done_reqs or done_mods: what a spinning loop looks at */
	struct wrk_req *done_urgent_reqs; /* those of slots of a priority above 0 */
	atomic_bool done_urgent;          /* done_urgent_reqs has some */
	/* Called between chunks of completions that wrk_drain_done() answers at once: the
	 * loop's urgent turn (worker/core/server.c); NULL: none. */
	void (*between)(struct wrk *w);
	atomic_uint_fast64_t
		blocking_waits;  /* a waiter stopped spinning for a request's end and napped */
	atomic_bool fatal;       /* a sticky device error: fail everything and exit */
	uint64_t spin_ns;        /* ipc_spin_ns(): for the loop and the back end's threads */
	uint64_t spin_urgent_ns; /* ipc_spin_urgent_ns(): the threads of latency-critical slots */
	uint64_t mem_checked_ns; /* when stats.mem_free was last asked of the back end */
	uint64_t awake_until;    /* a request should end by then: the loop stays awake */

	/* The thread that registers segments with the device (worker/core/segment.c). */
	struct {
		pthread_t thread;
		bool started, stop;
		pthread_mutex_t lock;
		pthread_cond_t cond;
		struct wrk_mapping *jobs_head, *jobs_tail, *done;
		int fd; /* eventfd: `done` holds some */
		struct ipc_watch *watch;
		unsigned pending; /* mappings registering (the loop's count) */
		unsigned failed;  /* live mappings whose registration failed */
		unsigned dbufs;   /* host-kept device buffers made while theirs was registering,
				   * with no device address yet */
		struct wrk_populate populate; /* its helpers (worker/core/populate.h) */
	} reg;

	/* The compile thread. */
	pthread_t compiler;
	bool compiler_started;
	pthread_mutex_t job_lock;
	pthread_cond_t job_cond;
	struct wrk_module *jobs_head, *jobs_tail;
	bool jobs_stop;

	struct ipc_stats stats;
};

/*
 * worker/core/error.c: the one place an errno becomes a status in the worker (and in its
 * compile helper). Inside, a function returns an int (>= 0, or -errno) or a gpux_status,
 * typed so, never both in one int: the ranges overlap (GPUX_E_INVAL is -1, -EPERM too), and
 * a status is what a client is answered (tests/test-error-domains.py checks the two apart).
 * -ENOMEM is GPUX_E_NOMEM; any other failure is `otherwise`, the status of what failed
 * (GPUX_E_IO for a system call, GPUX_E_INVAL for a client's message that cannot be used).
 * A refusal whose cause picks its status and its text together (a segment that is not what
 * it claims, a module too large) says both where the cause is known.
 */
gpux_status wrk_status_from_errno(int err, gpux_status otherwise);

/* worker/core/log.c; w may be NULL */
void wrk_log(struct wrk *w, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A line a client of user uid can cause: a few a second for each user (worker/core/log.c). */
void wrk_log_client(struct wrk *w, uint32_t uid, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
char *wrk_strdup_printf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* worker/core/server.c */
int wrk_server_start(struct wrk *w);
void wrk_client_drop(struct wrk_client *c);
/* Drop a client that broke the protocol, telling it why (a DONE without an id) first. */
void wrk_client_refuse(struct wrk_client *c, const char *why);
/* Kick a client that does not spin on its ring: something comes for it soon. */
void wrk_client_wake(struct wrk_client *c);
/* Send a message without fds: by the client's ring when it fits there, else its socket. */
void wrk_client_send(struct wrk_client *c, const void *buf, size_t len);
/* Answer request `id` (0: nobody waits for an answer) with a DONE and no times. */
void wrk_reply(struct wrk_client *c, uint32_t id, gpux_status status, const char *text);
void wrk_server_stop(struct wrk *w);

/* worker/core/request.c */
/* Write the counters to the status page, with the device's free memory asked anew. */
void wrk_status_publish(struct wrk *w);
/* Write the counters to the status page (free memory only when it is old). */
void wrk_status_refresh(struct wrk *w);
/* Handlers of client messages: they answer what they refuse; a negative return means the
 * message could not be read at all (worker/core/server.c decides what then). */
int wrk_submit(struct wrk_client *c, const struct ipc_msg *msg);
struct wrk_req *wrk_req_new(struct wrk_client *c, uint32_t id);
void wrk_req_fail(struct wrk_req *r, gpux_status status, char *error);
/* A request finished with `status`: done or failed, and by status (metrics:
 * gpux_requests_total). */
void wrk_count_finished(struct wrk *w, gpux_status status);
/* Free a request that never reached a slot, without an answer. */
void wrk_req_discard(struct wrk_req *r);
/* Check what needs the module: the kernel, its parameters, the launch's shape. */
gpux_status wrk_req_check(struct wrk_req *r, char **ret_msg);
void wrk_drain_done(struct wrk *w);
/* Take in only the requests of slots of a priority above 0 that ended (done_urgent_reqs). */
void wrk_drain_urgent(struct wrk *w);
/* The requests kept for reuse go (the worker stops). */
void wrk_reqs_free_cache(struct wrk *w);

/*
 * For a back end's thread about to sleep on its queue: look for up to spin_ns (the worker's
 * spin_ns, or spin_urgent_ns for a slot above priority 0) for *queued (kept beside the queue,
 * under its lock) to become non-zero. Lock not held.
 */
void wrk_spin_for_work(uint64_t spin_ns, atomic_uint *queued);
void wrk_client_unref(struct wrk_client *c);

/*
 * Any thread: whether r's client went away, or the worker gives up after a fault, so that
 * r's work, not started yet, must not start (sets r's status; end it with wrk_reqs_complete()
 * as any other). A back end asks before it starts each request's work, so that a dead
 * client's queue does not run on, and what a faulted worker has not started may run on the
 * next one.
 */
bool wrk_req_cancelled(struct wrk_req *r);

/*
 * Called by a back end, from any thread, when the work of n requests has finished (or
 * failed: r->status and r->error set), each slot's in the order they were handed over. A
 * sticky error also sets fatal.
 */
void wrk_reqs_complete(struct wrk_req *const *reqs, unsigned n, bool fatal);
/*
 * Any thread: a back end met a sticky error outside a request's launch (loading a module,
 * registering a segment, allocating device memory): the device can run nothing more, so the
 * worker fails what it has and exits to be restarted, as after a sticky error in a launch.
 */
void wrk_device_broken(struct wrk *w);
/*
 * Any thread: a back end met a sticky error while several requests that may have caused it
 * ran, and blames none (each ends GPUX_E_WORKER_LOST): the status page says a kernel broke the
 * device, which one is not known (IPC_FAULT_UNKNOWN). Before the requests complete.
 */
void wrk_fault_unknown(struct wrk *w);
/*
 * Any thread: r, long running, should end within tens of µs. The loop and r's client are
 * woken now and keep looking for a while (WRK_SOON_NS, the client its spin time), so that
 * its end costs no wake-up (two of them cost a 256 MiB copy 3 to 5 % of its rate). Before
 * r completes, at most once.
 */
#define WRK_SOON_NS (200ull * 1000)
void wrk_req_soon(struct wrk_req *r);

/* worker/core/queue.c */
/* The default slots (--slots): priority 0, no share. 0, or -ENODEV (logged). */
int wrk_slots_open(struct wrk *w);
/*
 * For a back end's open(): the device's stream priorities (the CUDA range, least and
 * greatest; both 0: none) and its compute shares (the SMs they are cut from, in units of
 * `unit` and at least `min` of them; share_sms 0: none, `note` says why).
 */
void wrk_sched_device(struct wrk *w, int32_t least, int32_t greatest, unsigned share_sms,
		      unsigned unit, unsigned min, const char *note);
int wrk_queue_msg(struct wrk_client *c, const struct ipc_msg *msg);
/* QUEUE_CONFIG: a queue's priority and share. */
int wrk_queue_config(struct wrk_client *c, const struct ipc_msg *msg);
/* Put a request, its arguments resolved, behind the earlier ones of its queue. */
void wrk_req_queue(struct wrk_client *c, struct wrk_req *r, uint32_t queue_id);
/* Move what a queue can start now into its slot (a module it waits for may be ready). */
void wrk_queue_kick(struct wrk_queue *q);
void wrk_queue_unref(struct wrk_queue *q);
/* A client goes: its queues' requests not started are dropped without an answer. */
void wrk_queues_free(struct wrk_client *c);
void wrk_kick_all(struct wrk *w);
/* Hand each slot's requests taken this round to the back end, in one batch per slot, the
 * slots of the highest priority first. */
void wrk_slots_flush(struct wrk *w);
/* The same for the slots of a priority above `prio` only. */
void wrk_slots_flush_above(struct wrk *w, int prio);
/* The same for one slot; false when it had nothing to hand over. */
bool wrk_slot_flush(struct wrk *w, unsigned slot);
/* A request handed to a slot has ended: take it off (the slot's first, but after a fault) and
 * publish what the slot runs now; waiting queues are let in when the round's batches go. */
void wrk_slot_end(struct wrk *w, struct wrk_req *r);
/* Fail every request not yet started (a fatal error, or stopping). */
void wrk_fail_all(struct wrk *w, gpux_status status, const char *why);
/* Whether any slot holds a request, handed to the back end or about to be. */
bool wrk_slots_busy(const struct wrk *w);

/* worker/core/module.c */
int wrk_modules_start(struct wrk *w);
void wrk_modules_stop(struct wrk *w);
int wrk_module_load(struct wrk_client *c, const struct ipc_msg *msg);
void wrk_module_drop(struct wrk_client *c, uint64_t mod_id);
void wrk_module_unref(struct wrk *w, struct wrk_module *m);
void wrk_modules_finish(struct wrk *w, struct wrk_module *done);
gpux_status wrk_module_kernel(struct wrk *w, struct wrk_module *m, const char *name,
			      struct wrk_kernel **ret, char **ret_msg);

/* Compiler options a module may have: each back end's compiler takes them in a fixed argv. */
#define WRK_OPTIONS_MAX 32u
/*
 * Check a module's options, split at blanks: at most WRK_OPTIONS_MAX, each one matching
 * `pattern` (an extended regular expression, anchored by the caller). GPUX_E_INVAL with a
 * log naming the culprit otherwise.
 */
gpux_status wrk_options_check(const char *pattern, const char *options, char **ret_log);
/* The options each back end's compiler takes (worker/host/host.c, worker/cuda/cuda.c). */
extern const char wrk_host_options_re[];
#ifdef GPUX_HAVE_CUDA
extern const char wrk_cuda_options_re[];
#endif

/* worker/core/dcache.c */
int wrk_dcache_start(struct wrk *w);
void wrk_dcache_stop(struct wrk *w);
struct wrk_centry *wrk_dcache_get(struct wrk_client *c, struct wrk_mapping *m, uint64_t offset,
				  uint64_t len);
void wrk_dcache_put(struct wrk *w, struct wrk_centry *e, bool waited);
uint64_t wrk_dcache_reclaim(struct wrk *w);
/* Evict the idle entries of user uid (they count against its cap over all workers). */
uint64_t wrk_dcache_reclaim_user(struct wrk *w, uint32_t uid);
/* be->dev_alloc(); when device memory runs out, cached inputs nobody uses go first. */
gpux_status wrk_dev_alloc(struct wrk *w, uint64_t len, void **ret_ptr, char **ret_msg);
/*
 * Whether `len` bytes more of memory that outlives requests (`what`: a device buffer, a cached
 * input) leave the device-memory reserve (opts.device_reserve) alone: GPUX_E_NOMEM with a
 * message naming the reserve when they would not.
 */
gpux_status wrk_dev_room(struct wrk *w, uint64_t len, const char *what, char **ret_msg);

/* worker/core/marks.c */
/* The marks' memfd, sealed against writes but ours, registered with the back end. */
int wrk_marks_start(struct wrk *w);
void wrk_marks_stop(struct wrk *w);
/* Give a new client a page of them (a MARKS message with the memfd), if one is free. */
void wrk_marks_give(struct wrk_client *c);
/* The client is freed: its page goes back (its requests have all ended). */
void wrk_marks_put(struct wrk_client *c);
/* Mark request r's state (IPC_MARK_*) where its client reads it after the worker's death. Any
 * thread; before the step the state names. */
void wrk_mark(struct wrk_req *r, uint32_t state);
/* Where the device writes r's mark, and the word: for a write in stream order (CUDA). False
 * when r's client has no page or the marks are not registered with the device. */
bool wrk_mark_dev(const struct wrk_req *r, uint32_t state, uint64_t *ret_addr, uint32_t *ret_value);
/* Whether r's mark says DONE (written by the device after its copies back, or at its end). */
bool wrk_mark_done(const struct wrk_req *r);

/* worker/core/dbuf.c */
int wrk_dbuf_msg(struct wrk_client *c, const struct ipc_msg *msg);
void wrk_dbuf_unref(struct wrk *w, struct wrk_dbuf *d);
void wrk_dbufs_free(struct wrk_client *c);
/*
 * A device buffer a request uses: 1 when it has its device address, 0 while its host-kept
 * segment is still being registered (the request waits), -1 with why when that segment's
 * registration failed.
 */
int wrk_dbuf_resolve(struct wrk *w, struct wrk_dbuf *d, gpux_status *ret_status, char **ret_msg);
int wrk_copy(struct wrk_client *c, const struct ipc_msg *msg);

/* worker/core/symbol.c */
/* KERNEL_ATTRS_REQ and GLOBAL_REQ; a negative return: the message does not decode. */
int wrk_symbol_msg(struct wrk_client *c, const struct ipc_msg *msg);
/* m's build ended (m->state says how): answer the questions that waited for it. */
void wrk_symbols_answer(struct wrk *w, struct wrk_module *m);

/* worker/core/usage.c */
/* A row of gpux top's table for a new client (none when the table is full or absent), and
 * back when it goes. */
void wrk_client_row_take(struct wrk_client *c);
void wrk_client_row_put(struct wrk_client *c);

/* Write the client's counters into its row, after they changed. */
static inline void wrk_client_row_update(struct wrk_client *c)
{
	struct ipc_client_row *row;

	if (!c->row)
		return;
	row = &c->w->client_table->rows[c->row - 1];
	__atomic_store_n(&row->requests, c->requests, __ATOMIC_RELAXED);
	__atomic_store_n(&row->inflight, (uint64_t)c->inflight, __ATOMIC_RELAXED);
	__atomic_store_n(&row->shared_bytes, c->shared_bytes, __ATOMIC_RELAXED);
	__atomic_store_n(&row->device_bytes, c->dbuf_bytes, __ATOMIC_RELAXED);
}

/*
 * Count bytes that a user's clients hold, shared or on the device: returns the entry (of the
 * status page's usage[]) they were counted in, which wrk_usage_sub() takes them back from.
 */
unsigned wrk_usage_add(struct wrk *w, uint32_t uid, uint64_t shared_bytes, uint64_t device_bytes);
void wrk_usage_sub(struct wrk *w, unsigned slot, uint64_t shared_bytes, uint64_t device_bytes);
/*
 * Device memory over all workers, for users other than gpuxd's and root: the caps from the
 * options and the device (wrk_user_caps(), once the device is open); a charge of `bytes` to
 * uid (*ret_row to credit it back to, -1 for gpuxd's user and root, who are not charged), or
 * GPUX_E_QUOTA with *ret_msg (to free) saying which cap it met; its credit.
 */
void wrk_user_caps(struct wrk *w);
gpux_status wrk_user_charge(struct wrk *w, uint32_t uid, uint64_t bytes, int *ret_row,
			    char **ret_msg);
void wrk_user_credit(struct wrk *w, int row, uint64_t bytes);
/* What the status page says the worker runs on: versions, and the kernel driver's release. */
void wrk_driver_versions(struct wrk *w, uint32_t driver_version, uint32_t nvrtc_version);
/* The kernel driver's release ("580.95.05") in a line of /proc/driver/nvidia/version, or "". */
void wrk_driver_release(const char *line, char *ret, size_t size);

/* worker/core/source.c */
/*
 * The canonical form of C or C++ source (see source.c: equal forms compile alike) into out,
 * which has room for len bytes (the form is never longer). Its length, or -EINVAL for a
 * source this reading does not follow exactly.
 */
ssize_t wrk_source_canon(const char *src, size_t len, char *out);

/* worker/core/segment.c */
/*
 * The mapping of a client's segment range, held (a reference for the caller), or NULL with
 * a status and message: no such segment, an unusable one, a range outside it, a write to a
 * frozen one. `arg` names the argument in the message.
 */
struct wrk_mapping *wrk_segment_range(struct wrk_client *c, uint64_t seg_id, uint64_t offset,
				      uint64_t len, bool write, unsigned arg,
				      gpux_status *ret_status, char **ret_msg);
int wrk_segment_add(struct wrk_client *c, const struct ipc_msg *msg);
void wrk_segment_drop(struct wrk_client *c, uint64_t seg_id);
void wrk_mapping_unref(struct wrk *w, struct wrk_mapping *m);
void wrk_segments_free(struct wrk_client *c);
/*
 * Whether a request's segments are registered: 1 yes, 0 not yet (it waits; the loop kicks
 * every queue when registrations end), or -1 with *ret_status and *ret_msg (to free) when one
 * could not be. No cost while nothing registers or failed to.
 */
int wrk_req_segments_ready(struct wrk_req *r, gpux_status *ret_status, char **ret_msg);
/* The registration thread (for a back end that registers off the loop), its results taken in
 * by the loop. 0 or -errno; stop lets what it started end. */
int wrk_segments_start(struct wrk *w);
void wrk_segments_stop(struct wrk *w);
