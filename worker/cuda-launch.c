/* SPDX-License-Identifier: MIT */
/* worker/cuda-launch.c: the CUDA back end's streams: batches as graphs, launches, waiters, faults. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#include "cuda-dev.h"
#include "ipc/macro.h"
#include "ipc/spin.h"

/*
 * The loop thread hands each slot the requests it took in a round, in order. Runs of plain
 * kernel launches of one client (arguments that need no copy, no timing) go to the device as
 * one CUDA graph: a chain of 2, 4, ... 64 kernel nodes, made once per slot and size, whose
 * nodes are given each request's kernel and parameters before the graph is launched (a node
 * given the same as last time is left alone). In-process on an H200, one thread launching such
 * graphs with every node's parameters set started 1.24 M kernels/s; launching them one by one,
 * 0.23 M/s. Any other request (copies in and out, timing events) is enqueued on its own.
 * Each graph, or request on its own, is a group that ends with one event; one waiter thread
 * per slot waits for the groups in order (spinning briefly, then blocking) and reports their
 * requests' ends to the loop.
 */

#define DEFAULT_SHARED (48u * 1024u)
/* Between two looks at an event while spinning. */
#define QUERY_GAP_NS 600u
/* Host-device copies go at most this fast (bytes per ns): 60 GB/s, above what PCIe 5 and an
 * H200 give (55 GB/s), so that a waiter that sleeps for a copy wakes before it ends. */
#define COPY_BYTES_PER_NS 60u
/* A waiter sleeps through a long copy in naps this long at most until shortly before it should
 * end, then looks every NAP_FINE_NS until twice that time has passed (its timer slack is set
 * to 1 µs, so naps are about as long as asked). */
#define NAP_MAX_NS (200 * NSEC_PER_USEC)
#define NAP_EARLY_NS (30 * NSEC_PER_USEC)
#define NAP_FINE_NS (10 * NSEC_PER_USEC)
#define WAITER_TIMER_SLACK_NS 1000ul
/* Parameter bytes a graph node remembers, to tell that a request gives it the same again. */
#define NODE_PARAMS_KEPT 256u

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
	unsigned ntemp;
	CUdeviceptr temp[IPC_ARGS_MAX];
};

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

/*
 * Which group a sticky error is blamed on, decided once: every stream sees the error at about
 * the same time, so the first to see it tells nothing. A slot's groups run in order, so what
 * broke the device is a group that ran: each slot's oldest not ended (for a waiter, the one
 * it waited for is still its slot's first), and `mine` when its work was launched (a group
 * whose launch itself was refused ran nothing). Of those, the one launched last is taken; with
 * one slot (or one slot busy) that is exact, to the group: a graph holds one client's
 * requests. Nothing ran: `mine`.
 */
static uint64_t culprit(struct cuda_dev *d, const struct cuda_group *mine, bool mine_ran)
{
	uint64_t c;

	(void)pthread_mutex_lock(&d->fault_lock);
	if (!d->culprit) {
		uint64_t ran = mine_ran ? mine->seq : 0;

		for (unsigned i = 0; i < d->nslots; i++) {
			struct cuda_slot *s = &d->slots[i];

			(void)pthread_mutex_lock(&s->lock);
			if (s->head)
				ran = MAX(ran, s->head->seq);
			(void)pthread_mutex_unlock(&s->lock);
		}
		d->culprit = ran ? ran : mine->seq;
	}
	c = d->culprit;
	(void)pthread_mutex_unlock(&d->fault_lock);
	return c;
}

/*
 * Request i of group g failed with e (what: where); `ran`: g's work had been launched (any
 * error its waiter sees; one the loop thread meets after g's launch). Returns whether the
 * context is gone.
 */
static bool fail_req(struct cuda_dev *d, struct cuda_group *g, unsigned i, CUresult e,
		     const char *what, bool ran)
{
	struct wrk_req *r = g->reqs[i];
	bool sticky;
	int st = wrk_cu_err(e, &sticky);

	free(r->error);
	if (sticky && culprit(d, g, ran) != g->seq) {
		r->status = GPUX_E_WORKER_LOST;
		r->error = wrk_strdup_printf("another request broke the device: %s",
					     cu_err_name(&d->cu, e));
	} else if (g->n > 1) {
		/* Which node of a graph faulted, the device does not say; all were this client's. */
		r->status = st;
		r->error = wrk_strdup_printf("kernel \"%s\": %s: %s (one of %u kernels of this "
					     "process launched together)",
					     r->name, what, cu_err_name(&d->cu, e), g->n);
	} else {
		r->status = st;
		r->error = wrk_strdup_printf("kernel \"%s\": %s: %s", r->name, what,
					     cu_err_name(&d->cu, e));
	}
	return sticky;
}

/* ---- groups ---- */

static struct cuda_group *group_get(struct cuda_dev *d, CUresult *ret_err)
{
	struct cuda_group *g;
	CUresult r;

	(void)pthread_mutex_lock(&d->free_lock);
	g = d->free_groups;
	if (g)
		d->free_groups = g->next;
	(void)pthread_mutex_unlock(&d->free_lock);
	if (g)
		return g;
	g = calloc(1, sizeof(*g));
	if (!g) {
		*ret_err = CUDA_ERROR_OUT_OF_MEMORY;
		return NULL;
	}
	r = d->cu.cuEventCreate(&g->start, CU_EVENT_BLOCKING_SYNC);
	if (r == CUDA_SUCCESS)
		r = d->cu.cuEventCreate(&g->end, CU_EVENT_BLOCKING_SYNC);
	if (r == CUDA_SUCCESS)
		r = d->cu.cuEventCreate(&g->done, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING);
	if (r != CUDA_SUCCESS) {
		if (g->start)
			(void)d->cu.cuEventDestroy(g->start);
		if (g->end)
			(void)d->cu.cuEventDestroy(g->end);
		free(g);
		*ret_err = r;
		return NULL;
	}
	return g;
}

static void group_put(struct cuda_dev *d, struct cuda_group *g)
{
	g->n = 0;
	g->ntemp = 0;
	g->copy_ns = 0;
	(void)pthread_mutex_lock(&d->free_lock);
	g->next = d->free_groups;
	d->free_groups = g;
	(void)pthread_mutex_unlock(&d->free_lock);
}

static void group_free(struct cuda_dev *d, struct cuda_group *g)
{
	(void)d->cu.cuEventDestroy(g->start);
	(void)d->cu.cuEventDestroy(g->end);
	(void)d->cu.cuEventDestroy(g->done);
	free(g);
}

/*
 * A request without a group (none could be made): it ends with the error once what its slot
 * holds before it has ended (requests of a slot end in order), which is waited for here: this
 * is the rare way of an allocation that failed.
 */
static void group_abandon(struct cuda_dev *d, struct cuda_slot *s, struct wrk_req *r, CUresult e,
			  const char *what)
{
	bool sticky;

	free(r->error);
	r->status = wrk_cu_err(e, &sticky);
	r->error = wrk_strdup_printf("kernel \"%s\": %s: %s", r->name, what, cu_err_name(&d->cu, e));
	/* Its stream done, the slot's waiter hands over what it holds, then this one follows. */
	if (!sticky && d->cu.cuStreamSynchronize(s->stream) == CUDA_SUCCESS)
		while (atomic_load(&s->queued))
			(void)usleep(50);
	wrk_reqs_complete(&r, 1, sticky);
}

/* A group whose end cannot be waited for (the context is gone): its requests end now. */
static void group_end_now(struct cuda_dev *d, struct cuda_group *g, CUresult e)
{
	struct wrk_req *reqs[CUDA_GRAPH_MAX];
	unsigned n = g->n;

	for (unsigned i = 0; i < n; i++) {
		if (g->reqs[i]->status == 0)
			(void)fail_req(d, g, i, e, "cuEventRecord", g->reqs[i]->launched);
		reqs[i] = g->reqs[i];
	}
	group_put(d, g);
	wrk_reqs_complete(reqs, n, true);
}

/* Hand a launched group to its slot's waiter. */
static void group_push(struct cuda_slot *s, struct cuda_group *g)
{
	(void)pthread_mutex_lock(&s->lock);
	g->next = NULL;
	if (s->tail)
		s->tail->next = g;
	else
		s->head = g;
	s->tail = g;
	atomic_fetch_add(&s->queued, 1);
	(void)pthread_cond_signal(&s->cond);
	(void)pthread_mutex_unlock(&s->lock);
}

/* ---- arguments ---- */

/* The device pointers of the arguments that need no copy, as the kernel's parameters. */
static void args_direct(struct wrk_req *r)
{
	for (unsigned i = 0; i < r->nargs; i++) {
		struct wrk_arg *a = &r->args[i];

		switch (a->kind) {
		case GPUX_ARG_SCALAR:
			continue;
		case GPUX_ARG_MAPPED:
			a->dev = (void *)(uintptr_t)(a->map->dev_addr + a->offset);
			break;
		case GPUX_ARG_DBUF:
			a->dev = (uint8_t *)a->dbuf->ptr + a->offset;
			break;
		default:
			a->dev = a->centry->ptr;
			break;
		}
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

/* ---- one request on its own ---- */

/* A copy between a shared range (args[0], registered) and a device buffer (args[1]). */
static CUresult enqueue_copy(struct cuda_dev *d, struct wrk_req *r, CUstream st, char **ret_msg)
{
	struct wrk_arg *h = &r->args[0], *dv = &r->args[1];
	CUdeviceptr p = (CUdeviceptr)(uintptr_t)dv->dbuf->ptr + dv->offset;
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

/*
 * Enqueue the copies in, the launch, the copies out. Returns the first failure (what failed
 * in *ret_msg); what was enqueued before it still runs and is waited for.
 */
static CUresult enqueue(struct cuda_dev *d, struct wrk_req *r, struct cuda_group *g, CUstream st,
			char **ret_msg)
{
	struct wrk_kernel_info *ki = &r->kernel->info;
	CUresult e;

	for (unsigned i = 0; i < r->nargs; i++) {
		struct wrk_arg *a = &r->args[i];
		CUdeviceptr p = 0;

		switch (a->kind) {
		case GPUX_ARG_SCALAR:
			continue;
		case GPUX_ARG_MAPPED:
			p = a->map->dev_addr + a->offset;
			break;
		case GPUX_ARG_DBUF:
			p = (CUdeviceptr)(uintptr_t)a->dbuf->ptr + a->offset;
			break;
		default:
			if (a->centry) {
				/* A cached input: wait for its upload, if that still runs. */
				if (a->centry->ready) {
					e = d->cu.cuStreamWaitEvent(st, (CUevent)a->centry->ready, 0);
					if (e != CUDA_SUCCESS) {
						*ret_msg = wrk_strdup_printf("argument %u: waiting for its "
									     "upload", i);
						return e;
					}
				}
				p = (CUdeviceptr)(uintptr_t)a->centry->ptr;
				break;
			}
			e = pool_alloc(d, &p, a->len, st);
			if (e != CUDA_SUCCESS) {
				*ret_msg = wrk_strdup_printf("argument %u: %llu bytes of device memory",
							     i, (unsigned long long)a->len);
				return e;
			}
			g->temp[g->ntemp++] = p;
			if (a->kind != GPUX_ARG_OUT) {
				e = d->cu.cuMemcpyHtoDAsync(p, a->host, a->len, st);
				if (e != CUDA_SUCCESS) {
					*ret_msg = wrk_strdup_printf("argument %u: copy to the device", i);
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
		e = d->cu.cuFuncSetAttribute(ki->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
					     (int)r->shared_bytes);
		if (e != CUDA_SUCCESS) {
			*ret_msg = strdup("raising the kernel's dynamic shared memory");
			return e;
		}
		ki->shared_optin = r->shared_bytes;
	}
	e = d->cu.cuLaunchKernel(ki->fn, r->grid[0], r->grid[1], r->grid[2], r->block[0], r->block[1],
				 r->block[2], r->shared_bytes, st, r->params, NULL);
	if (e != CUDA_SUCCESS) {
		*ret_msg = strdup("launch");
		return e;
	}
	for (unsigned i = 0; i < r->nargs; i++) {
		struct wrk_arg *a = &r->args[i];

		if ((a->kind != GPUX_ARG_OUT && a->kind != GPUX_ARG_INOUT) || a->centry)
			continue;
		e = d->cu.cuMemcpyDtoHAsync(a->host, (CUdeviceptr)(uintptr_t)a->dev, a->len, st);
		if (e != CUDA_SUCCESS) {
			*ret_msg = wrk_strdup_printf("argument %u: copy from the device", i);
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

		if (a->centry)
			continue;
		if (a->kind == GPUX_ARG_IN || a->kind == GPUX_ARG_OUT)
			n += a->len;
		else if (a->kind == GPUX_ARG_INOUT)
			n += 2 * a->len;
	}
	return n;
}

static void launch_one(struct cuda_dev *d, struct cuda_slot *s, struct wrk_req *r)
{
	struct cuda_group *g;
	char *what = NULL;
	CUresult e = CUDA_SUCCESS;

	g = group_get(d, &e);
	if (!g) {
		group_abandon(d, s, r, e, "cuEventCreate");
		return;
	}
	g->reqs[0] = r;
	g->n = 1;
	g->slot = (unsigned)(s - d->slots);
	g->seq = atomic_fetch_add(&d->seq, 1) + 1;
	g->fin = r->timed ? g->end : g->done;
	g->copy_ns = copy_bytes(r) / COPY_BYTES_PER_NS;
	e = r->timed ? d->cu.cuEventRecord(g->start, s->stream) : CUDA_SUCCESS;
	if (e != CUDA_SUCCESS) {
		what = strdup("cuEventRecord");
	} else if (!wrk_req_cancelled(r)) {
		/* (A cancelled one, of a client gone, queues no work: it ends in its turn.) */
		e = r->kind == REQ_COPY ? enqueue_copy(d, r, s->stream, &what)
					: enqueue(d, r, g, s->stream, &what);
		r->launched = e == CUDA_SUCCESS;
	}
	if (e != CUDA_SUCCESS) {
		/* Copies already queued may still read or write the client's pages: the request
		 * ends only after the stream has passed them. */
		r->sticky = fail_req(d, g, 0, e, what ? what : "enqueue", false);
		free(what);
	}
	for (unsigned i = 0; i < g->ntemp; i++)
		(void)d->cu.cuMemFreeAsync(g->temp[i], s->stream);
	e = d->cu.cuEventRecord(g->fin, s->stream);
	if (e != CUDA_SUCCESS)
		group_end_now(d, g, e);
	else
		group_push(s, g);
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

static void node_of(struct wrk_req *r, struct cuda_node *ret, CUDA_KERNEL_NODE_PARAMS *ret_p)
{
	ret->mod = r->mod->handle;
	ret->fn = r->kernel->info.fn;
	memcpy(ret->grid, r->grid, sizeof(ret->grid));
	memcpy(ret->block, r->block, sizeof(ret->block));
	ret->shared = r->shared_bytes;
	ret->len = params_pack(r, ret->params);
	*ret_p = (CUDA_KERNEL_NODE_PARAMS){
		.func = ret->fn,
		.gridDimX = r->grid[0],
		.gridDimY = r->grid[1],
		.gridDimZ = r->grid[2],
		.blockDimX = r->block[0],
		.blockDimY = r->block[1],
		.blockDimZ = r->block[2],
		.sharedMemBytes = r->shared_bytes,
		.kernelParams = r->nargs ? r->params : NULL,
	};
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

/* A chain of n kernel nodes, each given r's launch, instantiated. */
static struct cuda_graph *graph_new(struct cuda_dev *d, unsigned n, struct wrk_req *r,
				    CUresult *ret_err)
{
	struct cuda_graph *g = calloc(1, sizeof(*g));
	CUDA_KERNEL_NODE_PARAMS p;
	CUresult e;

	if (!g) {
		*ret_err = CUDA_ERROR_OUT_OF_MEMORY;
		return NULL;
	}
	g->n = n;
	node_of(r, &g->set[0], &p);
	e = d->cu.cuGraphCreate(&g->graph, 0);
	for (unsigned i = 0; i < n && e == CUDA_SUCCESS; i++) {
		e = d->cu.cuGraphAddKernelNode(&g->nodes[i], g->graph, i ? &g->nodes[i - 1] : NULL,
					       i ? 1 : 0, &p);
		g->set[i] = g->set[0];
	}
	if (e == CUDA_SUCCESS)
		e = d->cu.cuGraphInstantiateWithFlags(&g->exec, g->graph, 0);
	if (e != CUDA_SUCCESS) {
		graph_free(d, g);
		*ret_err = e;
		return NULL;
	}
	return g;
}

/*
 * Launch n requests (a power of two, at least 2) as one graph, with one event after it. Any
 * node that cannot be given its request makes them all go on their own, where the device says
 * what is wrong with that one.
 */
static void launch_graph(struct cuda_dev *d, struct cuda_slot *s, struct wrk_req *const *reqs,
			 unsigned n)
{
	unsigned k = (unsigned)__builtin_ctz(n) - 1;
	struct cuda_graph *gr;
	struct cuda_group *g;
	CUresult e = CUDA_SUCCESS;

	for (unsigned i = 0; i < n; i++)
		args_direct(reqs[i]);
	gr = s->graphs[k];
	if (!gr)
		gr = s->graphs[k] = graph_new(d, n, reqs[0], &e);
	g = gr ? group_get(d, &e) : NULL;
	if (!g)
		goto one_by_one;
	for (unsigned i = 0; i < n; i++) {
		struct cuda_node want;
		CUDA_KERNEL_NODE_PARAMS p;

		node_of(reqs[i], &want, &p);
		if (node_same(&gr->set[i], &want))
			continue;
		e = d->cu.cuGraphExecKernelNodeSetParams(gr->exec, gr->nodes[i], &p);
		if (e != CUDA_SUCCESS) {
			/* What the node holds now is not known (nor, so, which module it needs
			 * loaded): the graph goes, and is made again when next needed. */
			graph_free(d, gr);
			s->graphs[k] = NULL;
			group_put(d, g);
			goto one_by_one;
		}
		gr->set[i] = want;
	}
	memcpy(g->reqs, reqs, n * sizeof(*reqs));
	g->n = n;
	g->slot = (unsigned)(s - d->slots);
	g->seq = atomic_fetch_add(&d->seq, 1) + 1;
	g->fin = g->done;
	e = d->cu.cuGraphLaunch(gr->exec, s->stream);
	if (e == CUDA_SUCCESS) {
		d->w->stats.graph_launches++;
		d->w->stats.graph_requests += n;
		for (unsigned i = 0; i < n; i++)
			reqs[i]->launched = true;
	} else {
		for (unsigned i = 0; i < n; i++)
			reqs[i]->sticky = fail_req(d, g, i, e, "graph launch", false);
	}
	e = d->cu.cuEventRecord(g->fin, s->stream);
	if (e != CUDA_SUCCESS)
		group_end_now(d, g, e);
	else
		group_push(s, g);
	return;
one_by_one:
	for (unsigned i = 0; i < n; i++)
		launch_one(d, s, reqs[i]);
}

/* A run of graphable requests of one client: graphs of 64, 32, ... 2, and one on its own. */
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
		bool g = graphable(r) && !wrk_req_cancelled(r);

		next = r->next;
		/* A graph holds one client's requests only: a fault in it is that client's. */
		if (nrun && (!g || nrun == CUDA_GRAPH_MAX || r->client != run[0]->client)) {
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

void cuda_graphs_forget(struct cuda_dev *d, struct cuda_module *m)
{
	for (unsigned i = 0; i < d->nslots; i++)
		for (unsigned k = 0; k < CUDA_GRAPH_SIZES; k++) {
			struct cuda_graph *g = d->slots[i].graphs[k];
			bool uses = false;

			for (unsigned j = 0; g && j < g->n && !uses; j++)
				uses = g->set[j].mod == m;
			if (uses) {
				graph_free(d, g);
				d->slots[i].graphs[k] = NULL;
			}
		}
}

/* ---- waiting ---- */

/*
 * Wait for a group's event. A group with copies longer than a spin naps through them and looks
 * closely around when they should end (a blocked wait wakes late: measured 0.2-0.4 ms on an
 * H200); any other looks briefly (the round trip of short kernels); then it blocks. Looks are
 * paced: each query takes a lock of the driver's that the launching thread needs (measured on
 * an H200: a thread querying without pause costs launches 23% of their rate).
 */
static CUresult wait_event(struct cuda_dev *d, struct cuda_group *g)
{
	uint64_t now = mono_ns(), until;
	CUevent ev = g->fin;
	CUresult r;

	/* Naps are a kind of spinning: not where threads must not spin (GPUX_SPIN_US=0). */
	if (d->w->spin_ns > 0 && g->copy_ns > d->w->spin_ns) {
		uint64_t coarse = now + g->copy_ns - MIN(g->copy_ns, NAP_EARLY_NS);
		uint64_t fine = now + 2 * g->copy_ns;
		bool told = false;

		while ((r = d->cu.cuEventQuery(ev)) == CUDA_ERROR_NOT_READY && now < fine) {
			uint64_t nap = now < coarse ? MIN(coarse - now, NAP_MAX_NS) : NAP_FINE_NS;
			struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)nap };

			if (now >= coarse && !told) {
				wrk_req_soon(g->reqs[0]);
				told = true;
			}
			(void)nanosleep(&ts, NULL);
			now = mono_ns();
		}
		if (r != CUDA_ERROR_NOT_READY)
			return r;
	}
	until = now + d->w->spin_ns;
	for (;;) {
		r = d->cu.cuEventQuery(ev);
		if (r != CUDA_ERROR_NOT_READY)
			return r;
		for (uint64_t next = now + QUERY_GAP_NS; (now = mono_ns()) < next;)
			cpu_relax();
		if (now >= until) {
			atomic_fetch_add(&d->w->blocking_waits, 1);
			return d->cu.cuEventSynchronize(ev);
		}
	}
}

/* A group's requests' ends, the event having said e: their times, or why they failed.
 * Returns whether the device is broken. */
static bool group_result(struct cuda_dev *d, struct cuda_group *g, CUresult e)
{
	uint64_t now = mono_ns();
	bool fatal = false;
	float ms = 0;

	for (unsigned i = 0; i < g->n; i++) {
		struct wrk_req *r = g->reqs[i];

		r->t_end = now;
		if (e == CUDA_SUCCESS) {
			if (r->timed && d->cu.cuEventElapsedTime(&ms, g->start, g->end) == CUDA_SUCCESS)
				r->device_ns = (uint64_t)((double)ms * 1e6);
		} else {
			r->sticky |= fail_req(d, g, i, e, "running", true);
		}
		fatal |= r->sticky;
	}
	return fatal;
}

/* Hand a group's requests to the loop and let the group go. */
static void group_complete(struct cuda_dev *d, struct cuda_group *g, bool fatal)
{
	struct wrk_req *reqs[CUDA_GRAPH_MAX];
	unsigned n = g->n;

	memcpy(reqs, g->reqs, n * sizeof(*reqs));
	group_put(d, g);
	wrk_reqs_complete(reqs, n, fatal);
}

/* Take the slot's groups up to `last` off its list (the loop thread appends meanwhile). */
static void slot_take(struct cuda_slot *s, struct cuda_group *last)
{
	(void)pthread_mutex_lock(&s->lock);
	s->head = last->next;
	if (!s->head)
		s->tail = NULL;
	(void)pthread_mutex_unlock(&s->lock);
}

static void *waiter_main(void *arg)
{
	struct cuda_slot *s = arg;
	struct cuda_dev *d = s->d;
	sigset_t all;

	sigfillset(&all);
	(void)pthread_sigmask(SIG_BLOCK, &all, NULL);
	(void)prctl(PR_SET_TIMERSLACK, WAITER_TIMER_SLACK_NS);
	(void)d->cu.cuCtxSetCurrent(d->ctx);
	for (;;) {
		struct cuda_group *g, *last;
		CUresult e;

		(void)pthread_mutex_lock(&s->lock);
		if (!s->head && !s->stop) {
			(void)pthread_mutex_unlock(&s->lock);
			wrk_spin_for_work(d->w, &s->queued);
			(void)pthread_mutex_lock(&s->lock);
		}
		while (!s->head && !s->stop)
			(void)pthread_cond_wait(&s->cond, &s->lock);
		g = s->head;
		last = s->tail;
		(void)pthread_mutex_unlock(&s->lock);
		if (!g)
			return NULL;
		/* Under load, many wait in line: when the newest is done, all are (one stream), and
		 * one query of the driver's stands for them all. */
		if (last != g && d->cu.cuEventQuery(last->fin) == CUDA_SUCCESS) {
			e = CUDA_SUCCESS;
		} else {
			last = g;
			e = wait_event(d, g);
		}
		if (e != CUDA_SUCCESS) {
			/* Its requests learn why while it is still its slot's first: that is where
			 * the culprit of a fault is looked for. */
			bool fatal = group_result(d, g, e);

			slot_take(s, g);
			atomic_fetch_sub(&s->queued, 1);
			group_complete(d, g, fatal);
			continue;
		}
		slot_take(s, last);
		for (;;) {
			struct cuda_group *next = g->next;
			bool end = g == last;

			atomic_fetch_sub(&s->queued, 1);
			group_complete(d, g, group_result(d, g, CUDA_SUCCESS));
			if (end)
				break;
			g = next;
		}
	}
}

/* ---- slots ---- */

int cuda_slot_open(void *dv, unsigned slot, char **ret_msg)
{
	struct cuda_dev *d = dv;
	struct cuda_slot *s = &d->slots[slot];
	CUresult r = d->cu.cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);
	int e;

	if (r != CUDA_SUCCESS) {
		*ret_msg = cuda_msg(d, "cuStreamCreate", r);
		return GPUX_E_DEVICE;
	}
	s->d = d;
	(void)pthread_mutex_init(&s->lock, NULL);
	(void)pthread_cond_init(&s->cond, NULL);
	d->nslots = MAX(d->nslots, slot + 1);
	e = pthread_create(&s->waiter, NULL, waiter_main, s);
	if (e != 0) {
		*ret_msg = wrk_strdup_printf("pthread_create: %s", strerror(e));
		return GPUX_E_NOMEM;
	}
	s->started = true;
	return 0;
}

void cuda_slots_close(struct cuda_dev *d)
{
	for (unsigned i = 0; i < d->nslots; i++) {
		struct cuda_slot *s = &d->slots[i];

		if (s->started) {
			(void)pthread_mutex_lock(&s->lock);
			s->stop = true;
			(void)pthread_cond_signal(&s->cond);
			(void)pthread_mutex_unlock(&s->lock);
			(void)pthread_join(s->waiter, NULL);
		}
		for (unsigned k = 0; k < CUDA_GRAPH_SIZES; k++)
			graph_free(d, s->graphs[k]);
		if (s->stream)
			(void)d->cu.cuStreamDestroy(s->stream);
	}
	while (d->free_groups) {
		struct cuda_group *g = d->free_groups;

		d->free_groups = g->next;
		group_free(d, g);
	}
}
