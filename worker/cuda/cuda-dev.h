/* SPDX-License-Identifier: MIT */
/* worker/cuda/cuda-dev.h: the CUDA back end's device, shared by its device part and its launch part. */
#pragma once

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "compiler.h"
#include "cuda-driver.h"
#include "wrk.h"

struct cuda_dev;
struct cuda_group;
struct cuda_graph;

/*
 * Requests launched as one CUDA graph at most; graphs of 1, 2, 4, ... up to this many nodes.
 * Even one request alone goes as a graph when it can: on an H200 (driver 580) cuGraphLaunch
 * of a graph of one kernel node costs 1.4-1.7 µs of the launching thread, cuLaunchKernel of
 * the same kernel 3.2-3.6 µs, and the round trip of an empty kernel is 5.8-6.8 µs against
 * 7.8-8.9 (gpux-bench-base costs, docs/PERFORMANCE-LOG.md).
 */
#define CUDA_GRAPH_MAX 64u
#define CUDA_GRAPH_SIZES 7u

/* A stream, the requests launched on it in groups, and the thread that waits for them. */
struct cuda_slot {
	struct cuda_dev *d;
	CUstream stream;
	bool green; /* a green context's stream (a compute share): no graphs (cuda-launch.c) */
	/* How long its waiter spins: the worker's spin_ns, spin_urgent_ns above priority 0 */
	uint64_t spin_ns;
	pthread_t waiter;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct cuda_group *head, *tail; /* launched, not ended, in order */
	/* Groups in head..tail: what a waiter about to sleep spins on. Counted down only once
	 * a group's requests are handed to the loop: a loop that finds every slot at 0 has every
	 * end before it, and may answer a group it holds (cuda_group_launched()) in order. */
	atomic_uint queued;
	atomic_bool looking; /* its waiter saw a group end that is still its first (look()) */
	bool stop;
	/* graphs[k]: a chain of 2^k kernel nodes (graphs[0]: one request's kernel); loop thread;
	 * each made when first needed */
	struct cuda_graph *graphs[CUDA_GRAPH_SIZES];
	/* a request's copies in, by the copy-in kernel, then its kernel (loop thread) */
	struct cuda_graph *graph_in;
	CUdeviceptr scratch; /* for its requests' copies, one request at a time (loop thread) */
	uint64_t scratch_len;
};

/*
 * Copies in that go by a kernel of gpux's own (worker/cuda/cuda-copyin.c) in one graph with the
 * request's kernel, rather than cuMemcpyHtoDAsync and the kernel behind it: at most
 * CUDA_COPYIN_RANGES of them, of more than GRAPH_AFTER_COPY_MAX and at most CUDA_COPYIN_MAX
 * bytes in all. On an H200 (driver 580), a 64 KiB copy in and a kernel took 11.4-12.3 µs so,
 * 12.7-18.2 µs with the copy engine; 128 KiB 12.8-13.9 against 19.8-20.5; 256 KiB 15.4-16.3
 * against 20.7-21.9; 512 KiB the same both ways (docs/PERFORMANCE-LOG.md).
 */
#define CUDA_COPYIN_RANGES 8u
#define CUDA_COPYIN_MAX (256u << 10)

/* What gpux_copy_in is given: range i goes from src[i] (the device's view of the client's
 * pages) to dst[i] (device memory), len[i] bytes. */
struct cuda_copyin {
	uint32_t n, pad;
	uint64_t dst[CUDA_COPYIN_RANGES];
	uint64_t src[CUDA_COPYIN_RANGES];
	uint64_t len[CUDA_COPYIN_RANGES];
};

enum { COPYIN_NONE, COPYIN_LOADING, COPYIN_READY, COPYIN_FAILED };

/*
 * A green context: some of the device's SMs, for the streams of queues with a compute share
 * (worker/cuda/cuda-slot.c). Modules stay the primary context's: a green context's streams
 * belong to the primary context (cuStreamGetCtx_v2 says so), whose functions, memory and
 * events they use as the primary context's own streams do; only where a kernel runs differs.
 */
struct cuda_green {
	CUgreenCtx g;
	unsigned want;  /* the SMs asked for (its key) */
	unsigned group; /* which group of the split of the device's SMs by `want` */
	unsigned sms;   /* the SMs it got */
};

/* 64-bit words from one slot's end word to the next (struct cuda_dev): a cache line each. */
#define CUDA_END_WORD_STRIDE 8u

struct cuda_dev {
	struct wrk *w;
	struct cu_driver cu;
	CUdevice dev;
	CUcontext ctx;
	bool ctx_retained;
	CUmemoryPool pool;
	int cc_major, cc_minor;
	char arch[16];
	uint32_t nvrtc_version;
	struct wrk_toolkit tk; /* what CUDA C++ may include; empty without Landlock */
	struct wrk_compiler compiler;
	struct cuda_slot slots[WRK_SLOTS_MAX];
	unsigned nslots;
	CUstream aux; /* allocations and uploads that belong to no request */
	pthread_mutex_t free_lock;
	struct cuda_group *free_groups;
	atomic_uint_fast64_t seq; /* groups launched so far */
	pthread_mutex_t fault_lock;
	uint64_t culprit; /* the seq of the group a sticky error is blamed on; 0: none yet */
	/* Odd while the loop thread launches a group that is not yet its slot's (nor held), and
	 * that group: cuda_launch_begin(), culprit() waits for it. */
	atomic_uint_fast64_t launch_turn;
	_Atomic(const struct cuda_group *) launching;
	struct cuda_group *held; /* a lone group whose end the loop thread looks at */
	uint64_t held_until;     /* when it goes to its waiter if not ended */
	/*
	 * A word for each slot (CUDA_END_WORD_STRIDE apart) in host memory the device sees, to
	 * which the slot's stream writes a group's seq once it is through (cuStreamWriteValue64),
	 * where the loop thread will hold the group: it reads the word instead of asking the
	 * driver (cuEventQuery, 1.5 µs a look). NULL: ends are seen through events only.
	 */
	_Atomic uint64_t *ends;
	CUdeviceptr ends_dev;
	bool ends_refused;  /* cuStreamWriteValue64 failed once: events only */
	bool marks_refused; /* cuStreamWriteValue32 failed once: copies back marked as enqueued */
	/* The copy-in kernel, loaded by a thread of its own once the context is made. */
	atomic_int copyin_state; /* COPYIN_*; copyin_fn is there once READY */
	bool copyin_started;     /* copyin_thread is to be joined */
	pthread_t copyin_thread;
	CUmodule copyin_mod;
	CUfunction copyin_fn;
	/* Priorities and shares (worker/cuda/cuda-slot.c): the device's stream priorities, its
	 * SMs where green contexts split them (green_ok), the green contexts made. */
	int prio_least, prio_greatest;
	bool green_ok;
	CUdevResource sm_res;
	struct cuda_green greens[WRK_CLASS_SLOTS_MAX];
	unsigned ngreens;
	unsigned green_reuse; /* turns of the green contexts of one size, once all are made */
};

struct cuda_module {
	CUmodule mod;
	struct wrk_knames *names;
};

/* Requests that end together: a graph's, or one request enqueued on its own. */
struct cuda_group {
	struct cuda_group *next; /* in its slot's list, or the free list */
	struct wrk_req *reqs[CUDA_GRAPH_MAX];
	unsigned n;
	unsigned slot;
	uint64_t seq;       /* launch order, across slots */
	CUevent start, end; /* timing events, around a request that asked for its device time */
	CUevent done;       /* without timing (a twelfth of the cost): after any other group */
	CUevent fin;        /* end or done: what the waiter waits for */
	uint64_t copy_ns;   /* how long its copies take at least: the waiter sleeps through that */
	bool word;          /* its stream writes seq to its slot's end word after its event */
	unsigned ntemp;
	CUdeviceptr temp[IPC_ARGS_MAX];
};

/* "what: CUDA_ERROR_NAME" for a completion's message. */
char *cuda_msg(struct cuda_dev *d, const char *what, CUresult r);

/* worker/cuda/cuda-launch.c */
void cuda_launch(void *dev, unsigned slot, struct wrk_req *first, unsigned n);
/* A module goes: graphs whose nodes last held one of its kernels go too (loop thread). */
void cuda_graphs_forget(struct cuda_dev *d, struct cuda_module *m);
void cuda_slot_graphs_free(struct cuda_dev *d, struct cuda_slot *s);

/* worker/cuda/cuda-copyin.c */
/* Load the copy-in kernel on a thread of its own (the context made). */
void cuda_copyin_start(struct cuda_dev *d);
/* The copy-in kernel, or NULL while it is not loaded (or could not be). */
CUfunction cuda_copyin_fn(struct cuda_dev *d);
/* Wait for its load, and let it go. */
void cuda_copyin_stop(struct cuda_dev *d);

/* worker/cuda/cuda-slot.c */
gpux_status cuda_slot_open(void *dev, unsigned slot, struct wrk_stream *st, char **ret_msg);
/* The device's stream priorities and green contexts, for wrk_sched_device() (open()). */
void cuda_sched_probe(struct cuda_dev *d);
/* Stop the waiters, let go of the streams, graphs and groups. */
void cuda_slots_close(struct cuda_dev *d);
/* A group from the free list, or a new one with its events; NULL, and *err says why. */
struct cuda_group *cuda_group_get(struct cuda_dev *d, CUresult *err);
void cuda_group_put(struct cuda_dev *d, struct cuda_group *g);
/* Hand a launched group to its slot's waiter. */
void cuda_group_push(struct cuda_slot *s, struct cuda_group *g);
/* Whether cuda_group_launched() will hold g, launched now (loop thread). */
bool cuda_group_will_hold(const struct cuda_dev *d, const struct cuda_group *g);
/*
 * The loop thread is about to launch g's work (begin) or g is its slot's, held, or ended
 * (end). In between, g is on no slot for culprit() to see, yet its fault may already reach
 * another group's waiter: culprit() waits for the end.
 */
void cuda_launch_begin(struct cuda_dev *d, const struct cuda_group *g);
void cuda_launch_end(struct cuda_dev *d);
/* A group launched: held by the loop thread when nothing else is in flight, else pushed; the
 * launch's end (cuda_launch_end()). */
void cuda_group_launched(struct cuda_dev *d, struct cuda_slot *s, struct cuda_group *g);
/* The held group, if any, to its waiter (loop thread). */
void cuda_held_release(struct cuda_dev *d);
/* The loop thread's look at the held group's end (wrk_backend_ops.poll). */
bool cuda_poll(void *dev, bool sleeping);
/*
 * Request i of group g failed with e (what: where); `ran`: g's work had been launched (any
 * error its waiter sees; one the loop thread meets after g's launch). Returns whether the
 * context is gone.
 */
bool cuda_group_fail(struct cuda_dev *d, struct cuda_group *g, unsigned i, CUresult e,
		     const char *what, bool ran);
/* A request without a group (none could be made): it ends with the error, in its turn. */
void cuda_group_abandon(struct cuda_dev *d, struct cuda_slot *s, struct wrk_req *r, CUresult e,
			const char *what);
/* A group whose event could not be recorded (e): its requests end now, once its stream is done
 * if e left the context working, else with e; the launch's end (cuda_launch_end()). */
void cuda_group_end_now(struct cuda_dev *d, struct cuda_group *g, CUresult e);
