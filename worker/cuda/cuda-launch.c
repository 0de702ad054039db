/* SPDX-License-Identifier: MIT */
/* worker/cuda/cuda-launch.c: the CUDA back end's launches: batches as graphs, requests on their own. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "cuda-dev.h"
#include "macro.h"
#include "spin.h"

/*
 * The loop thread hands each slot the requests it took in a round, in order. Runs of plain
 * kernel launches (arguments that need no copy, no timing), whichever clients they are of, go
 * to the device as one CUDA graph: a chain of 2, 4, ... 64 kernel nodes, made once per slot
 * and size, whose nodes are given each request's kernel and parameters before the graph is
 * launched (a node given the same as last time is left alone). In-process on an H200, one
 * thread launching such graphs with every node's parameters set started 1.24 M kernels/s;
 * launching them one by one, 0.23 M/s. A graph takes several clients' requests as the slot's
 * queues took turns: with hundreds of clients, each with a few requests in flight, graphs of
 * one client's would hold a few each. Which node of a graph broke the device the driver does
 * not say: a fault in a graph of several clients is blamed on none of them, and their
 * requests run again, each alone (worker/cuda/cuda-slot.c). Any other request (copies in and
 * out, timing events) is enqueued on its own.
 * Each graph, or request on its own, is a group that ends with one event, which the slot's
 * waiter waits for (worker/cuda/cuda-slot.c).
 */

#define DEFAULT_SHARED (48u * 1024u)
/* Host-device copies go at most this fast (bytes per ns): 60 GB/s, above what PCIe 5 and an
 * H200 give (55 GB/s), so that a waiter that sleeps for a copy wakes before it ends. */
#define COPY_BYTES_PER_NS 60u
/* A request whose copies need at most this much device memory in all takes it from its slot's
 * scratch memory: the stream runs its requests one after the other, so each may use all of it
 * with no allocation (stream-ordered or not) and no free. Scratch grows in powers of two from
 * SCRATCH_MIN; 8 slots hold 32 MiB at most. Larger copies take 70 us or more, next to which a
 * temporary from the pool costs little. */
#define SCRATCH_MAX (4u << 20)
#define SCRATCH_MIN (1u << 20)
/* Each argument's place in it, as cuMemAlloc aligns. */
#define SCRATCH_ALIGN 256u
/* Parameter bytes a graph node remembers, to tell that a request gives it the same again. */
#define NODE_PARAMS_KEPT 256u

/* What a graph node was last given. */
struct cuda_node {
	struct cuda_module *mod;
	CUfunction fn;
	uint32_t grid[3], block[3], shared;
	uint32_t len; /* bytes of parameters; UINT32_MAX: more than kept, set every time */
	uint8_t params[NODE_PARAMS_KEPT];
};

struct cuda_graph {
	CUgraph graph;
	CUgraphExec exec;
	unsigned n;
	CUgraphNode nodes[CUDA_GRAPH_MAX];
	struct cuda_node set[CUDA_GRAPH_MAX];
};

/* ---- arguments ---- */

/* The device address of an argument that needs no copy: the client's pages mapped, a device
 * buffer's memory, or a cached input's copy. */
static CUdeviceptr arg_direct(const struct wrk_arg *a)
{
	switch (a->kind) {
	case GPUX_ARG_MAPPED:
		return a->map->dev_addr + a->offset;
	case GPUX_ARG_DBUF:
		return (CUdeviceptr)(uintptr_t)a->dbuf->ptr + a->offset;
	default:
		return (CUdeviceptr)(uintptr_t)a->centry->ptr;
	}
}

/* The device pointers of the arguments that need no copy, as the kernel's parameters. */
static void args_direct(struct wrk_req *r)
{
	for (unsigned i = 0; i < r->nargs; i++) {
		struct wrk_arg *a = &r->args[i];

		if (a->kind == GPUX_ARG_SCALAR)
			continue;
		a->dev = (void *)(uintptr_t)arg_direct(a);
		r->params[i] = &a->dev;
	}
}

/*
 * Whether a request can be a node of a graph: a kernel launch whose arguments all need no
 * copy (scalars, mapped buffers, device buffers, cached inputs already uploaded), without
 * timing events or more dynamic shared memory than every kernel may have.
 */
static bool graphable(const struct wrk_req *r)
{
	if (r->kind != REQ_LAUNCH || r->timed || r->shared_bytes > DEFAULT_SHARED)
		return false;
	for (unsigned i = 0; i < r->nargs; i++) {
		const struct wrk_arg *a = &r->args[i];

		if (a->kind == GPUX_ARG_SCALAR || a->kind == GPUX_ARG_MAPPED ||
		    a->kind == GPUX_ARG_DBUF)
			continue;
		if (!a->centry || a->centry->ready)
			return false;
	}
	return true;
}

/* ---- marks (worker/core/marks.c) ---- */

/* Whether a request changes memory in place as it runs: a copy, a mapped argument, a device
 * buffer (kept in host memory, or lost with the worker anyway). */
static bool in_place(const struct wrk_req *r)
{
	if (r->kind == REQ_COPY)
		return true;
	for (unsigned i = 0; i < r->nargs; i++)
		if (r->args[i].kind == GPUX_ARG_MAPPED || r->args[i].kind == GPUX_ARG_DBUF)
			return true;
	return false;
}

/* As it is handed to the device: past its point of no return if it works in place, else it
 * may run again until its copies back begin (enqueue()). */
static void mark_launch(struct wrk_req *r)
{
	wrk_mark(r, in_place(r) ? IPC_MARK_STARTED : IPC_MARK_LAUNCHED);
}

/*
 * Around a request's copies back, in stream order: before them its STARTED mark, written by
 * the device when the stream gets there (a fault before leaves the request LAUNCHED: it may
 * run again); after them DONE, for a client that reads it (a fault after leaves the request
 * ended well: its results are in its client's memory, where they stay). Where the device will
 * not write them (no cuStreamWriteValue32, or it refused once: logged), STARTED is marked
 * now, as the copies are enqueued, and DONE when the request is seen to end. A sticky error
 * is returned: the device is gone.
 */
static CUresult mark_copies(struct cuda_dev *d, struct wrk_req *r, CUstream st, uint32_t state)
{
	_cleanup_(freep) char *msg = NULL;
	uint64_t addr;
	uint32_t value;
	bool sticky;
	CUresult e;

	if (!d->cu.cuStreamWriteValue32 || d->marks_refused ||
	    !wrk_mark_dev(r, state, &addr, &value)) {
		if (state == IPC_MARK_STARTED)
			wrk_mark(r, IPC_MARK_STARTED);
		return CUDA_SUCCESS;
	}
	e = d->cu.cuStreamWriteValue32(st, (CUdeviceptr)addr, value, 0);
	if (e == CUDA_SUCCESS)
		return e;
	(void)wrk_cu_err(e, &sticky);
	if (sticky)
		return e;
	msg = cuda_msg(d, "cuStreamWriteValue32", e);
	wrk_log(d->w, "%s: copies back are marked as they are enqueued",
		msg ? msg : "out of memory");
	d->marks_refused = true;
	if (state == IPC_MARK_STARTED)
		wrk_mark(r, IPC_MARK_STARTED);
	return CUDA_SUCCESS;
}

/* ---- one request on its own ---- */

/* A copy between a shared range (args[0], registered) and a device buffer (args[1]). */
static CUresult enqueue_copy(struct cuda_dev *d, struct wrk_req *r, CUstream st, char **ret_msg)
{
	struct wrk_arg *h = &r->args[0], *dv = &r->args[1];
	CUdeviceptr p = arg_direct(dv);
	CUresult e = h->kind == GPUX_ARG_IN ? d->cu.cuMemcpyHtoDAsync(p, h->host, h->len, st)
					    : d->cu.cuMemcpyDtoHAsync(h->host, p, h->len, st);

	if (e != CUDA_SUCCESS)
		*ret_msg = strdup("copy");
	return e;
}

/*
 * Stream-ordered device memory; when there is none, cached inputs nobody uses go first, then
 * this tries once more.
 */
static CUresult pool_alloc(struct cuda_dev *d, CUdeviceptr *p, uint64_t len, CUstream st)
{
	CUresult e = d->cu.cuMemAllocFromPoolAsync(p, len, d->pool, st);

	if (e == CUDA_ERROR_OUT_OF_MEMORY && wrk_dcache_reclaim(d->w) > 0) {
		(void)d->cu.cuStreamSynchronize(d->aux);
		e = d->cu.cuMemAllocFromPoolAsync(p, len, d->pool, st);
	}
	return e;
}

/* Whether an argument is copied through device memory that the request alone uses (IN, OUT
 * and INOUT ranges, but cached inputs). */
static bool arg_copied(const struct wrk_arg *a)
{
	return (a->kind == GPUX_ARG_IN || a->kind == GPUX_ARG_OUT || a->kind == GPUX_ARG_INOUT) &&
	       !a->centry;
}

/* The slot's scratch, grown to hold a request's copies if they fit in SCRATCH_MAX; false: they
 * take temporaries from the pool. */
static bool scratch_fits(struct cuda_dev *d, struct cuda_slot *s, const struct wrk_req *r)
{
	uint64_t need = 0, len = SCRATCH_MIN;

	for (unsigned i = 0; i < r->nargs; i++)
		if (arg_copied(&r->args[i]))
			need += ALIGN_UP(r->args[i].len, (uint64_t)SCRATCH_ALIGN);
	if (need == 0 || need > SCRATCH_MAX)
		return false;
	if (need <= s->scratch_len)
		return true;
	/* What runs before on the stream still uses the old one: freed in stream order. */
	if (s->scratch)
		(void)d->cu.cuMemFreeAsync(s->scratch, s->stream);
	s->scratch = 0;
	s->scratch_len = 0;
	while (len < need)
		len *= 2;
	if (pool_alloc(d, &s->scratch, len, s->stream) != CUDA_SUCCESS) {
		s->scratch = 0;
		return false;
	}
	s->scratch_len = len;
	return true;
}

/* ---- graphs ---- */

/* The parameters' bytes, one after the other, or UINT32_MAX when they are more than kept. */
static uint32_t params_pack(const struct wrk_req *r, uint8_t *buf)
{
	uint32_t len = 0;

	for (unsigned i = 0; i < r->nargs; i++) {
		const struct wrk_arg *a = &r->args[i];
		uint32_t size = a->kind == GPUX_ARG_SCALAR ? a->size : (uint32_t)sizeof(void *);

		if (len + size > NODE_PARAMS_KEPT)
			return UINT32_MAX;
		memcpy(buf + len, r->params[i], size);
		len += size;
	}
	return len;
}

/* What node k of the graph is to be given for r; whether that is what it has already. */
static bool node_same(const struct cuda_node *n, const struct cuda_node *want)
{
	return n->fn == want->fn && n->len != UINT32_MAX && n->len == want->len &&
	       memcmp(n->grid, want->grid, sizeof(n->grid)) == 0 &&
	       memcmp(n->block, want->block, sizeof(n->block)) == 0 && n->shared == want->shared &&
	       memcmp(n->params, want->params, n->len) == 0;
}

/* What the driver is given for a node holding n, its parameters' values at `params`. */
static CUDA_KERNEL_NODE_PARAMS node_params(const struct cuda_node *n, void **params)
{
	return (CUDA_KERNEL_NODE_PARAMS){
		.func = n->fn,
		.gridDimX = n->grid[0],
		.gridDimY = n->grid[1],
		.gridDimZ = n->grid[2],
		.blockDimX = n->block[0],
		.blockDimY = n->block[1],
		.blockDimZ = n->block[2],
		.sharedMemBytes = n->shared,
		.kernelParams = params,
	};
}

static void node_of(struct wrk_req *r, struct cuda_node *ret, CUDA_KERNEL_NODE_PARAMS *ret_p)
{
	ret->mod = r->mod->handle;
	ret->fn = r->kernel->info.fn;
	memcpy(ret->grid, r->grid, sizeof(ret->grid));
	memcpy(ret->block, r->block, sizeof(ret->block));
	ret->shared = r->shared_bytes;
	ret->len = params_pack(r, ret->params);
	*ret_p = node_params(ret, r->nargs ? r->params : NULL);
}

static void graph_free(struct cuda_dev *d, struct cuda_graph *g)
{
	if (!g)
		return;
	if (g->exec)
		(void)d->cu.cuGraphExecDestroy(g->exec);
	if (g->graph)
		(void)d->cu.cuGraphDestroy(g->graph);
	free(g);
}

/*
 * A chain of n kernel nodes, instantiated: the first given `first` (with its parameters
 * `first_p`) where that is not NULL, every other r's launch.
 */
static struct cuda_graph *graph_new(struct cuda_dev *d, unsigned n, const struct cuda_node *first,
				    const CUDA_KERNEL_NODE_PARAMS *first_p, struct wrk_req *r,
				    CUresult *err)
{
	struct cuda_graph *g = calloc(1, sizeof(*g));
	struct cuda_node rn;
	CUDA_KERNEL_NODE_PARAMS p;
	CUresult e;

	if (!g) {
		*err = CUDA_ERROR_OUT_OF_MEMORY;
		return NULL;
	}
	g->n = n;
	node_of(r, &rn, &p);
	e = d->cu.cuGraphCreate(&g->graph, 0);
	for (unsigned i = 0; i < n && e == CUDA_SUCCESS; i++) {
		bool own = i == 0 && first;

		e = d->cu.cuGraphAddKernelNode(&g->nodes[i], g->graph, i ? &g->nodes[i - 1] : NULL,
					       i ? 1 : 0, own ? first_p : &p);
		g->set[i] = own ? *first : rn;
	}
	if (e == CUDA_SUCCESS)
		e = d->cu.cuGraphInstantiateWithFlags(&g->exec, g->graph, 0);
	if (e != CUDA_SUCCESS) {
		graph_free(d, g);
		*err = e;
		return NULL;
	}
	return g;
}

/* Give node i of the graph `want` (its parameters p), unless it holds that already. */
static CUresult node_give(struct cuda_dev *d, struct cuda_graph *gr, unsigned i,
			  const struct cuda_node *want, const CUDA_KERNEL_NODE_PARAMS *p)
{
	CUresult e;

	if (node_same(&gr->set[i], want))
		return CUDA_SUCCESS;
	e = d->cu.cuGraphExecKernelNodeSetParams(gr->exec, gr->nodes[i], p);
	if (e == CUDA_SUCCESS)
		gr->set[i] = *want;
	return e;
}

/* Give node i of the graph r's launch, unless it holds that already. */
static CUresult node_set(struct cuda_dev *d, struct cuda_graph *gr, unsigned i, struct wrk_req *r)
{
	struct cuda_node want;
	CUDA_KERNEL_NODE_PARAMS p;

	node_of(r, &want, &p);
	return node_give(d, gr, i, &want, &p);
}

/*
 * Bytes copied in just before a kernel, at most, for the kernel to go as a graph: on an H200
 * (driver 580) a graph launched behind a 64 KiB copy in ended 4.5 µs later than the same
 * kernel launched with cuLaunchKernel (16.4 against 11.9 µs for the copy and the kernel),
 * behind 4 KiB sooner (IN 4 KiB + kernel 1.07-1.27 of the in-process rate, against 0.96-0.97
 * with cuLaunchKernel). Copies out after the kernel cost it nothing. More copied in goes by
 * the copy-in kernel where it can (cuda-dev.h), in one graph with the kernel.
 */
#define GRAPH_AFTER_COPY_MAX 4096u

/*
 * Start r's kernel on the slot's stream: through the slot's graph of one node (cuda-dev.h says
 * why), set to r's launch where it holds another's, or with cuLaunchKernel() where a graph
 * cannot take it (more dynamic shared memory than every kernel may have, or `graph` false: more
 * than GRAPH_AFTER_COPY_MAX bytes copied in just before) or fails to be made or set, so that
 * the device says what is wrong with the launch.
 */
static CUresult kernel_launch(struct cuda_dev *d, struct cuda_slot *s, struct wrk_req *r,
			      bool graph)
{
	const struct wrk_kernel_info *ki = &r->kernel->info;
	struct cuda_graph *gr = s->graphs[0];
	CUresult e;

	if (graph && !s->green && r->shared_bytes <= DEFAULT_SHARED) {
		if (!gr)
			gr = s->graphs[0] = graph_new(d, 1, NULL, NULL, r, &e);
		if (gr && node_set(d, gr, 0, r) == CUDA_SUCCESS)
			return d->cu.cuGraphLaunch(gr->exec, s->stream);
		/* Not made, or what its node holds is not known: made again when next needed. */
		graph_free(d, gr);
		s->graphs[0] = NULL;
	}
	return d->cu.cuLaunchKernel(ki->fn, r->grid[0], r->grid[1], r->grid[2], r->block[0],
				    r->block[1], r->block[2], r->shared_bytes, s->stream, r->params,
				    NULL);
}

/* Threads of a block of the copy-in kernel, and its blocks for a range at most: 512 blocks of
 * 256 copy 2 MiB with one load each. */
#define COPYIN_THREADS 256u
#define COPYIN_BLOCKS_MAX 512u

/* A request's copies in, for the copy-in kernel, where they come from on the host, and which
 * argument each is. */
struct copyin {
	struct cuda_copyin t;
	void *host[CUDA_COPYIN_RANGES];
	unsigned arg[CUDA_COPYIN_RANGES];
};

/*
 * The copy-in kernel, if r's copies in are to go by it (cuda-dev.h says when): all into the
 * slot's scratch (`scratch`), each from pages the device sees, 16-byte aligned. Else, or while
 * the kernel is not loaded (yet), NULL.
 */
static CUfunction copyin_wanted(struct cuda_dev *d, const struct wrk_req *r, bool scratch)
{
	uint64_t bytes = 0;
	unsigned n = 0;

	if (!scratch || r->shared_bytes > DEFAULT_SHARED)
		return NULL;
	for (unsigned i = 0; i < r->nargs; i++) {
		const struct wrk_arg *a = &r->args[i];

		if (!arg_copied(a) || a->kind == GPUX_ARG_OUT)
			continue;
		if (++n > CUDA_COPYIN_RANGES || !a->map->dev_addr ||
		    (a->map->dev_addr + a->offset) % 16 != 0)
			return NULL;
		bytes += a->len;
	}
	if (bytes <= GRAPH_AFTER_COPY_MAX || bytes > CUDA_COPYIN_MAX)
		return NULL;
	return cuda_copyin_fn(d);
}

/*
 * Start r's copies in (c) and its kernel as the slot's graph of two nodes, the copy-in
 * kernel's and r's. Where that graph cannot be made or set, the copies go by
 * cuMemcpyHtoDAsync and the kernel by cuLaunchKernel, as they would without the copy-in kernel.
 */
static CUresult copyin_launch(struct cuda_dev *d, struct cuda_slot *s, struct wrk_req *r,
			      CUfunction fn, struct copyin *c, char **ret_msg)
{
	struct cuda_graph *gr = s->graph_in;
	const uint64_t per_block = 16u * COPYIN_THREADS;
	uint64_t most = 0, blocks;
	struct cuda_node want = { .fn = fn, .block = { COPYIN_THREADS, 1, 1 } };
	void *params[] = { &c->t };
	CUDA_KERNEL_NODE_PARAMS p;
	CUresult e;

	for (unsigned i = 0; i < c->t.n; i++)
		most = MAX(most, c->t.len[i]);
	/* A 16-byte load for each thread, at most COPYIN_BLOCKS_MAX blocks (they loop). */
	blocks = (most + per_block - 1) / per_block;
	want.grid[0] = (uint32_t)MIN(MAX(blocks, 1u), COPYIN_BLOCKS_MAX);
	want.grid[1] = c->t.n;
	want.grid[2] = 1;
	want.len = sizeof(c->t);
	memcpy(want.params, &c->t, sizeof(c->t));
	p = node_params(&want, params);
	if (!gr)
		gr = s->graph_in = graph_new(d, 2, &want, &p, r, &e);
	if (gr && node_give(d, gr, 0, &want, &p) == CUDA_SUCCESS &&
	    node_set(d, gr, 1, r) == CUDA_SUCCESS) {
		e = d->cu.cuGraphLaunch(gr->exec, s->stream);
		if (e == CUDA_SUCCESS)
			d->w->stats.copyin_requests++;
		else
			*ret_msg = strdup("launch");
		return e;
	}
	/* Not made, or what its nodes hold is not known: made again when next needed. */
	graph_free(d, gr);
	s->graph_in = NULL;
	for (unsigned i = 0; i < c->t.n; i++) {
		e = d->cu.cuMemcpyHtoDAsync(c->t.dst[i], c->host[i], c->t.len[i], s->stream);
		if (e != CUDA_SUCCESS) {
			*ret_msg = wrk_strdup_printf("argument %u: copy to the device", c->arg[i]);
			return e;
		}
	}
	e = kernel_launch(d, s, r, false);
	if (e != CUDA_SUCCESS)
		*ret_msg = strdup("launch");
	return e;
}

/*
 * Enqueue the copies in, the launch, the copies out. Returns the first failure (what failed
 * in *ret_msg); what was enqueued before it still runs and is waited for.
 */
static CUresult enqueue(struct cuda_dev *d, struct wrk_req *r, struct cuda_group *g,
			struct cuda_slot *s, char **ret_msg)
{
	struct wrk_kernel_info *ki = &r->kernel->info;
	CUstream st = s->stream;
	bool scratch = scratch_fits(d, s, r);
	CUfunction copier = s->green ? NULL : copyin_wanted(d, r, scratch);
	struct copyin c;
	uint64_t used = 0, in_bytes = 0;
	bool back = false;
	CUresult e;

	/* Unused ranges zero: the node's parameters are compared as bytes (node_same()). */
	if (copier)
		memset(&c.t, 0, sizeof(c.t));

	for (unsigned i = 0; i < r->nargs; i++) {
		struct wrk_arg *a = &r->args[i];
		CUdeviceptr p = 0;

		switch (a->kind) {
		case GPUX_ARG_SCALAR:
			continue;
		case GPUX_ARG_MAPPED:
		case GPUX_ARG_DBUF:
			p = arg_direct(a);
			break;
		default:
			if (a->centry) {
				/* A cached input: wait for its upload, if that still runs. */
				if (a->centry->ready) {
					e = d->cu.cuStreamWaitEvent(st, (CUevent)a->centry->ready,
								    0);
					if (e != CUDA_SUCCESS) {
						*ret_msg = wrk_strdup_printf(
							"argument %u: waiting for its "
							"upload",
							i);
						return e;
					}
				}
				p = arg_direct(a);
				break;
			}
			if (scratch) {
				p = s->scratch + used;
				used += ALIGN_UP(a->len, (uint64_t)SCRATCH_ALIGN);
			} else {
				e = pool_alloc(d, &p, a->len, st);
				if (e != CUDA_SUCCESS) {
					*ret_msg = wrk_strdup_printf(
						"argument %u: %llu bytes of device "
						"memory",
						i, (unsigned long long)a->len);
					return e;
				}
				g->temp[g->ntemp++] = p;
			}
			if (a->kind != GPUX_ARG_OUT && copier) {
				c.t.dst[c.t.n] = p;
				c.t.src[c.t.n] = a->map->dev_addr + a->offset;
				c.t.len[c.t.n] = a->len;
				c.arg[c.t.n] = i;
				c.host[c.t.n++] = a->host;
			} else if (a->kind != GPUX_ARG_OUT) {
				in_bytes += a->len;
				e = d->cu.cuMemcpyHtoDAsync(p, a->host, a->len, st);
				if (e != CUDA_SUCCESS) {
					*ret_msg = wrk_strdup_printf(
						"argument %u: copy to the device", i);
					return e;
				}
			}
			break;
		}
		a->dev = (void *)(uintptr_t)p;
		r->params[i] = &a->dev;
	}
	/* A kernel's dynamic shared memory limit, raised once to what it was asked for. */
	if (r->shared_bytes > DEFAULT_SHARED && r->shared_bytes > ki->shared_optin) {
		e = d->cu.cuFuncSetAttribute(ki->fn,
					     CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
					     (int)r->shared_bytes);
		if (e != CUDA_SUCCESS) {
			*ret_msg = strdup("raising the kernel's dynamic shared memory");
			return e;
		}
		ki->shared_optin = r->shared_bytes;
	}
	if (copier) {
		e = copyin_launch(d, s, r, copier, &c, ret_msg);
		if (e != CUDA_SUCCESS)
			return e;
	} else {
		e = kernel_launch(d, s, r, in_bytes <= GRAPH_AFTER_COPY_MAX);
		if (e != CUDA_SUCCESS) {
			*ret_msg = strdup("launch");
			return e;
		}
	}
	for (unsigned i = 0; i < r->nargs; i++) {
		struct wrk_arg *a = &r->args[i];

		if ((a->kind != GPUX_ARG_OUT && a->kind != GPUX_ARG_INOUT) || a->centry)
			continue;
		if (!back) {
			back = true;
			e = mark_copies(d, r, st, IPC_MARK_STARTED);
			if (e != CUDA_SUCCESS) {
				*ret_msg = strdup("marking the copies back");
				return e;
			}
		}
		e = d->cu.cuMemcpyDtoHAsync(a->host, (CUdeviceptr)(uintptr_t)a->dev, a->len, st);
		if (e != CUDA_SUCCESS) {
			*ret_msg = wrk_strdup_printf("argument %u: copy from the device", i);
			return e;
		}
	}
	if (back && r->mark_done) {
		e = mark_copies(d, r, st, IPC_MARK_DONE);
		if (e != CUDA_SUCCESS) {
			*ret_msg = strdup("marking the copies back");
			return e;
		}
	}
	return CUDA_SUCCESS;
}

/* The bytes a request copies between host and device. */
static uint64_t copy_bytes(const struct wrk_req *r)
{
	uint64_t n = 0;

	if (r->kind == REQ_COPY)
		return r->args[0].len;
	for (unsigned i = 0; i < r->nargs; i++) {
		const struct wrk_arg *a = &r->args[i];

		if (arg_copied(a))
			n += a->kind == GPUX_ARG_INOUT ? 2 * a->len : a->len;
	}
	return n;
}

/*
 * Whether g (r alone), to be held by the loop thread, has its stream write its seq to the
 * slot's end word after its event (cuda-dev.h), so that the loop sees its end without asking
 * the driver. On an H200 (driver 580), A/B against events alone (gpux bench, worker against
 * worker): the empty kernel round trip 6.64-6.90 µs against 7.47-7.79, a 4 KiB copy to a
 * device buffer 0.51-0.54 GB/s against 0.48-0.53; on a machine with two H200s, no gain (0.3 µs
 * lost in two pairs of three). cuStreamWriteValue64 costs the loop 0.9 µs, against 0.19 for
 * the event: only where the loop will hold the group, nothing else in flight.
 */
static bool end_word(struct cuda_dev *d, struct cuda_slot *s, struct cuda_group *g,
		     const struct wrk_req *r)
{
	CUdeviceptr word = d->ends_dev + g->slot * CUDA_END_WORD_STRIDE * sizeof(uint64_t);
	_cleanup_(freep) char *msg = NULL;
	bool sticky;
	CUresult e;

	if (!d->ends || d->ends_refused || !cuda_group_will_hold(d, g))
		return false;
	e = d->cu.cuStreamWriteValue64(s->stream, word, g->seq, 0);
	if (e == CUDA_SUCCESS)
		return true;
	/* A sticky error is the context's: the waiter sees it through the event. */
	(void)wrk_cu_err(e, &sticky);
	if (sticky)
		return false;
	/* Else the device will not: ends go by events from now on. */
	msg = cuda_msg(d, "cuStreamWriteValue64", e);
	wrk_log(d->w, "%s: ends are seen through events only", msg ? msg : "out of memory");
	d->ends_refused = true;
	return false;
}

static void launch_one(struct cuda_dev *d, struct cuda_slot *s, struct wrk_req *r)
{
	struct cuda_group *g;
	char *what = NULL;
	CUresult e = CUDA_SUCCESS;

	g = cuda_group_get(d, &e);
	if (!g) {
		cuda_group_abandon(d, s, r, e, "cuEventCreate");
		return;
	}
	g->reqs[0] = r;
	g->n = 1;
	g->slot = (unsigned)(s - d->slots);
	g->seq = atomic_fetch_add(&d->seq, 1) + 1;
	g->fin = r->timed ? g->end : g->done;
	g->copy_ns = copy_bytes(r) / COPY_BYTES_PER_NS;
	cuda_launch_begin(d, g);
	e = r->timed ? d->cu.cuEventRecord(g->start, s->stream) : CUDA_SUCCESS;
	if (e != CUDA_SUCCESS) {
		what = strdup("cuEventRecord");
	} else if (!wrk_req_cancelled(r)) {
		/* (A cancelled one, of a client gone, queues no work: it ends in its turn.) */
		mark_launch(r);
		e = r->kind == REQ_COPY ? enqueue_copy(d, r, s->stream, &what)
					: enqueue(d, r, g, s, &what);
		r->launched = e == CUDA_SUCCESS;
	}
	if (e != CUDA_SUCCESS) {
		/* Copies already queued may still read or write the client's pages: the request
		 * ends only after the stream has passed them. */
		r->sticky = cuda_group_fail(d, g, 0, e, what ? what : "enqueue", false);
		free(what);
	}
	for (unsigned i = 0; i < g->ntemp; i++)
		(void)d->cu.cuMemFreeAsync(g->temp[i], s->stream);
	e = d->cu.cuEventRecord(g->fin, s->stream);
	if (e != CUDA_SUCCESS) {
		cuda_group_end_now(d, g, e);
		return;
	}
	g->word = end_word(d, s, g, r);
	cuda_group_launched(d, s, g);
}

/*
 * Launch n requests (a power of two, at least 2) as one graph, with one event after it. Any
 * node that cannot be given its request makes them all go on their own, where the device says
 * what is wrong with that one.
 */
static void launch_graph(struct cuda_dev *d, struct cuda_slot *s, struct wrk_req *const *reqs,
			 unsigned n)
{
	unsigned k = (unsigned)__builtin_ctz(n);
	struct cuda_graph *gr;
	struct cuda_group *g;
	CUresult e = CUDA_SUCCESS;
	bool sticky;

	for (unsigned i = 0; i < n; i++)
		args_direct(reqs[i]);
	gr = s->graphs[k];
	if (!gr)
		gr = s->graphs[k] = graph_new(d, n, NULL, NULL, reqs[0], &e);
	g = gr ? cuda_group_get(d, &e) : NULL;
	if (!g)
		goto one_by_one;
	for (unsigned i = 0; i < n; i++) {
		if (node_set(d, gr, i, reqs[i]) != CUDA_SUCCESS) {
			/* What the node holds now is not known (nor, so, which module it needs
			 * loaded): the graph goes, and is made again when next needed. */
			graph_free(d, gr);
			s->graphs[k] = NULL;
			cuda_group_put(d, g);
			goto one_by_one;
		}
	}
	memcpy(g->reqs, reqs, n * sizeof(*reqs));
	g->n = n;
	g->slot = (unsigned)(s - d->slots);
	g->seq = atomic_fetch_add(&d->seq, 1) + 1;
	g->fin = g->done;
	g->word = false;
	for (unsigned i = 0; i < n; i++)
		mark_launch(reqs[i]);
	cuda_launch_begin(d, g);
	e = d->cu.cuGraphLaunch(gr->exec, s->stream);
	if (e != CUDA_SUCCESS) {
		(void)wrk_cu_err(e, &sticky);
		if (!sticky) {
			/* Nothing ran: each on its own, where the device says which it refuses. */
			cuda_launch_end(d);
			cuda_group_put(d, g);
			goto one_by_one;
		}
		for (unsigned i = 0; i < n; i++)
			reqs[i]->sticky = cuda_group_fail(d, g, i, e, "graph launch", false);
	} else {
		d->w->stats.graph_launches++;
		d->w->stats.graph_requests += n;
		for (unsigned i = 0; i < n; i++)
			reqs[i]->launched = true;
	}
	e = d->cu.cuEventRecord(g->fin, s->stream);
	if (e != CUDA_SUCCESS)
		cuda_group_end_now(d, g, e);
	else
		cuda_group_launched(d, s, g);
	return;
one_by_one:
	for (unsigned i = 0; i < n; i++)
		launch_one(d, s, reqs[i]);
}

/* A run of graphable requests: graphs of 64, 32, ... 2, and one on its own. */
static void launch_run(struct cuda_dev *d, struct cuda_slot *s, struct wrk_req *const *reqs,
		       unsigned n)
{
	while (n > 0) {
		unsigned m = 1u << (31 - __builtin_clz(MIN(n, CUDA_GRAPH_MAX)));

		if (m == 1)
			launch_one(d, s, reqs[0]);
		else
			launch_graph(d, s, reqs, m);
		reqs += m;
		n -= m;
	}
}

void cuda_launch(void *dv, unsigned slot, struct wrk_req *first, unsigned n)
{
	struct cuda_dev *d = dv;
	struct cuda_slot *s = &d->slots[slot];
	struct wrk_req *run[CUDA_GRAPH_MAX], *r = first, *next;
	unsigned nrun = 0;

	for (unsigned k = 0; k < n; k++, r = next) {
		/* A green context's stream launches one by one: whether a graph's kernel nodes keep
		 * to the stream's SMs, the driver's documentation does not say. */
		bool g = !s->green && graphable(r) && !wrk_req_cancelled(r);

		next = r->next;
		if (nrun && (!g || nrun == CUDA_GRAPH_MAX)) {
			launch_run(d, s, run, nrun);
			nrun = 0;
		}
		if (g)
			run[nrun++] = r;
		else
			launch_one(d, s, r);
	}
	launch_run(d, s, run, nrun);
}

/* A graph of the slot's, if one of its nodes last held a kernel of m, goes. */
static void graph_forget(struct cuda_dev *d, struct cuda_graph **gp, struct cuda_module *m)
{
	struct cuda_graph *g = *gp;
	bool uses = false;

	for (unsigned j = 0; g && j < g->n && !uses; j++)
		uses = g->set[j].mod == m;
	if (uses) {
		graph_free(d, g);
		*gp = NULL;
	}
}

void cuda_graphs_forget(struct cuda_dev *d, struct cuda_module *m)
{
	for (unsigned i = 0; i < d->nslots; i++) {
		for (unsigned k = 0; k < CUDA_GRAPH_SIZES; k++)
			graph_forget(d, &d->slots[i].graphs[k], m);
		graph_forget(d, &d->slots[i].graph_in, m);
	}
}

void cuda_slot_graphs_free(struct cuda_dev *d, struct cuda_slot *s)
{
	for (unsigned k = 0; k < CUDA_GRAPH_SIZES; k++) {
		graph_free(d, s->graphs[k]);
		s->graphs[k] = NULL;
	}
	graph_free(d, s->graph_in);
	s->graph_in = NULL;
}
