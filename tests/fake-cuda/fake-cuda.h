/* SPDX-License-Identifier: MIT */
/* tests/fake-cuda/fake-cuda.h: what the fake driver's files share. */
#pragma once

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cuda.h>

#define MAX_PARAMS 64
/* The device's SMs. */
#define FAKE_SMS 132u

struct fake_fn {
	char name[256];
	int nparams; /* -1: unknown */
	size_t size[MAX_PARAMS];
	size_t offset[MAX_PARAMS];
	int max_dyn_shared;
};

/* A cubin's variable (cuModuleGetGlobal), in host memory as all "device" memory is. */
struct fake_global {
	char name[256];
	void *p;
	size_t size;
};

struct fake_mod {
	char *image;
	size_t len;
	bool ptx;
	struct fake_fn *fns[64];
	unsigned nfns;
	struct fake_global globals[64];
	unsigned nglobals;
};

struct fake_stream {
	uint64_t ready_at; /* when the work queued so far is done */
	int prio;          /* its priority, as the device took it (fake-sched.c) */
	unsigned sms;      /* its green context's SMs; 0: the device's */
};

struct fake_event {
	uint64_t at;
	unsigned flags;
};

struct fake_alloc {
	struct fake_alloc *next;
	void *p;
	size_t len;
};

extern pthread_mutex_t fake_lock;
extern CUresult fake_sticky;

/*
 * The entry point fn is called: what it is to return before doing anything. The call is
 * counted for a sweep ($GPUX_FAKE_CUDA_SWEEP, fake-sweep.h), which may fail it; else the Nth
 * call of the function named in GPUX_FAKE_CUDA_FAIL fails; else, for an entry point of the
 * context (`ctx`), the context's sticky error, if any. Device queries, error names and the
 * like are not of the context: a fault leaves them working, as on a real device.
 */
CUresult fake_enter(const char *fn, bool ctx);

/* Whether the context is broken (no call counted). */
CUresult fake_sticky_get(void);

#define ENTER_AS(name, ctx)                                                                        \
	do {                                                                                       \
		CUresult _r = fake_enter(name, ctx);                                               \
		if (_r != CUDA_SUCCESS)                                                            \
			return _r;                                                                 \
	} while (0)
#define ENTER(name) ENTER_AS(name, true)

/*
 * The objects the fake hands out, counted while alive: a process that exits with some left
 * says so on stderr ("fake libcuda: ... not released") and to a sweep. A release always
 * releases: a failure asked for is returned after (a driver that reports an error from
 * cuStreamDestroy still lets go of the stream), so that the count says what the caller leaked.
 */
enum fake_obj {
	FAKE_STREAM,
	FAKE_EVENT,
	FAKE_MODULE,
	FAKE_MEM,
	FAKE_HOST_REG,
	FAKE_GRAPH,
	FAKE_GRAPH_EXEC,
	FAKE_GREEN,
	FAKE_OBJS,
};

void fake_obj_add(enum fake_obj o, int delta);

/* A release of something never handed out, or released already: said on stderr, counted. */
void fake_bad_release(const char *fn);

/* The attributes cuFuncGetAttribute gives every kernel, to CU_FUNC_ATTRIBUTE_MAX. */
struct fake_attr {
	CUfunction_attribute a;
	int v;
};
extern const struct fake_attr fake_attrs[];

/* The sizes of a kernel's parameters: from its PTX, else as the kernels the fake knows take
 * them; how many. */
int fake_param_sizes(const struct fake_fn *fn, size_t *sizes);

/* Carry out a launch on stream s (its checks done): what the kernels the fake knows do. */
CUresult fake_run_kernel(struct fake_fn *fn, unsigned gx, unsigned bx, struct fake_stream *st,
			 void **params);

/* fake-sched.c: stream priorities and green contexts, for cuGetProcAddress. */
CUresult fake_prio_range(int *least, int *greatest);
CUresult fake_stream_create_prio(CUstream *s, unsigned flags, int prio);
CUresult fake_stream_get_prio(CUstream s, int *prio);
CUresult fake_dev_resource(CUdevice dev, CUdevResource *r, CUdevResourceType type);
CUresult fake_sm_split(CUdevResource *result, unsigned *nb, const CUdevResource *input,
		       CUdevResource *remaining, unsigned flags, unsigned min_count);
CUresult fake_res_desc(CUdevResourceDesc *desc, CUdevResource *res, unsigned n);
CUresult fake_green_create(CUgreenCtx *g, CUdevResourceDesc desc, CUdevice dev, unsigned flags);
CUresult fake_green_destroy(CUgreenCtx g);
CUresult fake_green_stream(CUstream *s, CUgreenCtx g, unsigned flags, int prio);

/* fake-graph.c: the graph entry points, for cuGetProcAddress. */
CUresult fake_graph_create(CUgraph *g, unsigned flags);
CUresult fake_graph_destroy(CUgraph g);
CUresult fake_graph_add_kernel(CUgraphNode *n, CUgraph g, const CUgraphNode *deps, size_t ndeps,
			       const CUDA_KERNEL_NODE_PARAMS *p);
CUresult fake_graph_instantiate(CUgraphExec *e, CUgraph g, unsigned long long flags);
CUresult fake_exec_destroy(CUgraphExec e);
CUresult fake_exec_set_kernel(CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p);
CUresult fake_graph_launch(CUgraphExec e, CUstream s);
