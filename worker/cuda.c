/* SPDX-License-Identifier: MIT */
/* worker/cuda.c: the CUDA back end: one device, its streams, zero-copy segments, launches, faults. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "compiler.h"
#include "cuda-driver.h"
#include "ipc/macro.h"
#include "ipc/spin.h"
#include "wrk.h"

/*
 * The worker's loop thread enqueues each request on its slot's stream: the IN and INOUT
 * ranges copied from the client's registered pages into temporaries from the device's
 * stream-ordered pool, the launch, the OUT and INOUT ranges copied back, the temporaries
 * freed, all between two events. One waiter thread per slot waits for those events in order
 * (spinning briefly, then blocking) and reports each completion to the loop.
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

const char wrk_cuda_options_re[] =
	"^(-D[A-Za-z_][A-Za-z0-9_]*(=[-A-Za-z0-9_.+*/()]*)?|-U[A-Za-z_][A-Za-z0-9_]*|"
	"--?use_fast_math|-lineinfo|--generate-line-info|-G|--device-debug|"
	"--?std=c\\+\\+(11|14|17|20)|--fmad=(true|false)|--ftz=(true|false)|"
	"--prec-div=(true|false)|--prec-sqrt=(true|false)|--maxrregcount=[0-9]+|"
	"--extra-device-vectorization|-dopt=(on|off)|--restrict|-default-device|"
	"--device-as-default-execution-space)$";

struct cuda_req {
	struct cuda_req *next; /* in its slot's waiting list, or the free list */
	struct wrk_req *r;
	uint64_t seq; /* launch order, across slots */
	CUevent start, end; /* timing events, around a request that asked for its device time */
	CUevent done;       /* without timing (a twelfth of the cost): after any other request */
	CUevent fin;        /* end or done: what the waiter waits for */
	uint64_t copy_ns;   /* how long its copies take at least: the waiter sleeps through that */
	unsigned ntemp;
	CUdeviceptr temp[IPC_ARGS_MAX];
};

struct cuda_dev;

struct cuda_slot {
	struct cuda_dev *d;
	CUstream stream;
	pthread_t waiter;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct cuda_req *head, *tail;
	atomic_uint queued; /* in head..tail: what a waiter about to sleep spins on */
	bool stop;
};

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
	struct wrk_compiler compiler;
	struct cuda_slot slots[WRK_SLOTS_MAX];
	unsigned nslots;
	CUstream aux; /* allocations and uploads that belong to no request */
	pthread_mutex_t free_lock;
	struct cuda_req *free_reqs;
	atomic_uint_fast64_t seq;       /* requests launched so far */
	atomic_uint_fast64_t launching; /* the seq of the one being enqueued now, or 0 */
	pthread_mutex_t fault_lock;
	uint64_t culprit; /* the seq of the request a sticky error is blamed on; 0: none yet */
};

struct cuda_module {
	CUmodule mod;
};

/* "what: CUDA_ERROR_NAME" for a completion's message. */
static char *cu_msg(struct cuda_dev *d, const char *what, CUresult r)
{
	return wrk_strdup_printf("%s: %s", what, cu_err_name(&d->cu, r));
}

/*
 * Which request a sticky error is blamed on, decided once: every stream sees the error at
 * about the same time, so the first to see it tells nothing. The newest request still in
 * flight is taken (the last kernel started is the likeliest to have faulted; with one
 * request in flight, it is exact).
 */
static uint64_t culprit(struct cuda_dev *d, uint64_t mine)
{
	uint64_t c;

	(void)pthread_mutex_lock(&d->fault_lock);
	if (!d->culprit) {
		d->culprit = MAX(mine, (uint64_t)atomic_load(&d->launching));
		for (unsigned i = 0; i < d->nslots; i++) {
			struct cuda_slot *s = &d->slots[i];

			(void)pthread_mutex_lock(&s->lock);
			for (struct cuda_req *cr = s->head; cr; cr = cr->next)
				d->culprit = MAX(d->culprit, cr->seq);
			(void)pthread_mutex_unlock(&s->lock);
		}
	}
	c = d->culprit;
	(void)pthread_mutex_unlock(&d->fault_lock);
	return c;
}

/* A request failed with e (what: where); returns whether the context is gone. */
static bool fail_req(struct cuda_dev *d, struct wrk_req *r, CUresult e, const char *what)
{
	struct cuda_req *cr = r->backend;
	bool sticky;
	int st = wrk_cu_err(e, &sticky);

	free(r->error);
	if (sticky && culprit(d, cr->seq) != cr->seq) {
		r->status = GPUX_E_WORKER_LOST;
		r->error = wrk_strdup_printf("another request broke the device: %s",
					     cu_err_name(&d->cu, e));
	} else {
		r->status = st;
		r->error = wrk_strdup_printf("kernel \"%s\": %s: %s", r->name, what,
					     cu_err_name(&d->cu, e));
	}
	return sticky;
}

/* ---- probe and open ---- */

static int attr(struct cu_driver *cu, CUdevice dev, CUdevice_attribute a)
{
	int v = 0;

	if (cu->cuDeviceGetAttribute(&v, a, dev) != CUDA_SUCCESS)
		return 0;
	return v;
}

static void device_info(struct cu_driver *cu, CUdevice dev, uint32_t index,
			struct ipc_device_info *info)
{
	CUuuid uuid;
	size_t mem = 0;

	memset(info, 0, sizeof(*info));
	info->index = index;
	info->backend = GPUX_BACKEND_CUDA;
	if (cu->cuDeviceGetName(info->name, sizeof(info->name) - 1, dev) != CUDA_SUCCESS)
		(void)snprintf(info->name, sizeof(info->name), "CUDA device %u", index);
	if (cu->cuDeviceGetUuid(&uuid, dev) == CUDA_SUCCESS)
		memcpy(info->uuid, uuid.bytes, sizeof(info->uuid));
	(void)cu->cuDeviceTotalMem(&mem, dev);
	info->mem_total = mem;
	info->cc_major = (uint32_t)attr(cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
	info->cc_minor = (uint32_t)attr(cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
	info->sm_count = (uint32_t)attr(cu, dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
	info->max_threads_per_block =
		(uint32_t)attr(cu, dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
}

static int driver_init(struct cu_driver *cu, char **ret_msg)
{
	bool sticky;
	CUresult r;
	int rc = cu_driver_load(cu, ret_msg);

	if (rc < 0)
		return rc;
	/*
	 * Lazy loading would load a kernel at its first launch, and that load synchronizes the
	 * whole context: queues would stop overlapping. Modules are loaded once per worker and
	 * cached, so load them whole. A user's own setting wins.
	 */
	(void)setenv("CUDA_MODULE_LOADING", "EAGER", 0);
	r = cu->cuInit(0);
	if (r != CUDA_SUCCESS) {
		*ret_msg = wrk_strdup_printf("cuInit: %s", cu_err_name(cu, r));
		rc = wrk_cu_err(r, &sticky);
		cu_driver_unload(cu);
		return rc == GPUX_E_NODRIVER ? rc : GPUX_E_NODEV;
	}
	return 0;
}

static int cuda_probe(struct ipc_device_info *ret, unsigned max, unsigned *ret_n, char **ret_msg)
{
	struct cu_driver cu;
	int count = 0, rc;

	*ret_n = 0;
	rc = driver_init(&cu, ret_msg);
	if (rc < 0)
		return rc;
	if (cu.cuDeviceGetCount(&count) != CUDA_SUCCESS)
		count = 0;
	for (int i = 0; i < count && (unsigned)i < max; i++) {
		CUdevice dev;

		if (cu.cuDeviceGet(&dev, i) != CUDA_SUCCESS)
			break;
		device_info(&cu, dev, (uint32_t)i, &ret[*ret_n]);
		(*ret_n)++;
	}
	cu_driver_unload(&cu);
	if (*ret_n == 0)
		*ret_msg = strdup("no CUDA device");
	return 0;
}

static void cuda_close(void *dv)
{
	struct cuda_dev *d = dv;

	if (!d)
		return;
	for (unsigned i = 0; i < d->nslots; i++) {
		struct cuda_slot *s = &d->slots[i];

		if (s->started) {
			(void)pthread_mutex_lock(&s->lock);
			s->stop = true;
			(void)pthread_cond_signal(&s->cond);
			(void)pthread_mutex_unlock(&s->lock);
			(void)pthread_join(s->waiter, NULL);
		}
		if (s->stream)
			(void)d->cu.cuStreamDestroy(s->stream);
	}
	while (d->free_reqs) {
		struct cuda_req *cr = d->free_reqs;
		d->free_reqs = cr->next;
		(void)d->cu.cuEventDestroy(cr->start);
		(void)d->cu.cuEventDestroy(cr->end);
		(void)d->cu.cuEventDestroy(cr->done);
		free(cr);
	}
	wrk_compiler_stop(&d->compiler);
	if (d->aux)
		(void)d->cu.cuStreamDestroy(d->aux);
	if (d->ctx_retained)
		(void)d->cu.cuDevicePrimaryCtxRelease(d->dev);
	cu_driver_unload(&d->cu);
	(void)pthread_mutex_destroy(&d->free_lock);
	(void)pthread_mutex_destroy(&d->fault_lock);
	free(d);
}

static int cuda_open(struct wrk *w, uint32_t device, void **ret_dev, struct ipc_device_info *ret_info,
		     struct wrk_limits *ret_limits, char **ret_msg)
{
	struct cuda_dev *d = calloc(1, sizeof(*d));
	cuuint64_t keep = UINT64_MAX;
	CUresult r;
	int rc;

	if (!d)
		return GPUX_E_NOMEM;
	d->w = w;
	d->compiler = (struct wrk_compiler)WRK_COMPILER_INIT;
	(void)pthread_mutex_init(&d->free_lock, NULL);
	(void)pthread_mutex_init(&d->fault_lock, NULL);
	rc = driver_init(&d->cu, ret_msg);
	if (rc < 0)
		goto err;
	r = d->cu.cuDeviceGet(&d->dev, (int)device);
	if (r == CUDA_SUCCESS)
		r = d->cu.cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
	if (r != CUDA_SUCCESS) {
		*ret_msg = cu_msg(d, "device", r);
		rc = GPUX_E_NODEV;
		goto err;
	}
	d->ctx_retained = true;
	/* The loop thread issues everything; other threads set the context as they start. */
	r = d->cu.cuCtxSetCurrent(d->ctx);
	if (r == CUDA_SUCCESS)
		r = d->cu.cuDeviceGetDefaultMemPool(&d->pool, d->dev);
	/* Memory freed to the pool stays there for the next request instead of going back. */
	if (r == CUDA_SUCCESS)
		r = d->cu.cuMemPoolSetAttribute(d->pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep);
	if (r == CUDA_SUCCESS)
		r = d->cu.cuStreamCreate(&d->aux, CU_STREAM_NON_BLOCKING);
	if (r != CUDA_SUCCESS) {
		*ret_msg = cu_msg(d, "context", r);
		rc = GPUX_E_DEVICE;
		goto err;
	}
	device_info(&d->cu, d->dev, device, ret_info);
	d->cc_major = (int)ret_info->cc_major;
	d->cc_minor = (int)ret_info->cc_minor;
	(void)snprintf(d->arch, sizeof(d->arch), "sm_%d%d", d->cc_major, d->cc_minor);
	d->nvrtc_version = wrk_nvrtc_version();
	*ret_limits = (struct wrk_limits){
		.max_threads_per_block = ret_info->max_threads_per_block,
		.max_block = { (uint32_t)attr(&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X),
			       (uint32_t)attr(&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y),
			       (uint32_t)attr(&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z) },
		.max_grid = { (uint32_t)attr(&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X),
			      (uint32_t)attr(&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y),
			      (uint32_t)attr(&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z) },
		.max_shared_per_block =
			(uint32_t)attr(&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
		.max_shared_per_block_optin = (uint32_t)attr(
			&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
	};
	*ret_dev = d;
	return 0;
err:
	cuda_close(d);
	return rc;
}

static uint64_t cuda_mem_free(void *dv)
{
	struct cuda_dev *d = dv;
	size_t free_b = 0, total = 0;

	if (d->cu.cuMemGetInfo(&free_b, &total) != CUDA_SUCCESS)
		return 0;
	return free_b;
}

/* ---- segments: registered once, so that copies are DMA from the client's pages ---- */

static int cuda_map_register(void *dv, struct wrk_mapping *m, char **ret_msg)
{
	struct cuda_dev *d = dv;
	unsigned flags = CU_MEMHOSTREGISTER_DEVICEMAP;
	bool sticky;
	CUresult r;

	if (m->seg.frozen)
		flags |= CU_MEMHOSTREGISTER_READ_ONLY;
	r = d->cu.cuMemHostRegister(m->seg.addr, m->seg.size, flags);
	if (r != CUDA_SUCCESS) {
		*ret_msg = cu_msg(d, "registering a shared segment", r);
		return wrk_cu_err(r, &sticky);
	}
	m->reg = m->seg.addr;
	return 0;
}

static void cuda_map_unregister(void *dv, struct wrk_mapping *m)
{
	struct cuda_dev *d = dv;

	(void)d->cu.cuMemHostUnregister(m->reg);
	m->reg = NULL;
}

/* ---- modules ---- */

static void cuda_target_key(void *dv, uint32_t lang, struct ipc_key_state *s)
{
	struct cuda_dev *d = dv;

	ipc_key_add(s, d->arch, strlen(d->arch));
	ipc_key_add_u64(s, (uint64_t)d->cu.version);
	if (lang == GPUX_LANG_CUDA)
		ipc_key_add_u64(s, d->nvrtc_version);
}

static int cuda_build(void *dv, const struct wrk_build *b, uint8_t **ret_image, size_t *ret_len,
		      char **ret_log)
{
	struct cuda_dev *d = dv;
	uint8_t *img;
	int rc;

	switch (b->lang) {
	case GPUX_LANG_CUDA:
		rc = wrk_options_check(wrk_cuda_options_re, b->options, ret_log);
		if (rc < 0)
			return rc;
		return wrk_compiler_build(&d->compiler, d->arch, b->code, b->code_len, b->options,
					  ret_image, ret_len, ret_log);
	case GPUX_LANG_PTX:
	case GPUX_LANG_CUBIN:
		/* Loaded as they are; PTX must end with a NUL, which is added if missing. */
		if (*b->options) {
			*ret_log = strdup("PTX and cubin modules take no options");
			return GPUX_E_INVAL;
		}
		img = malloc(b->code_len + 1);
		if (!img)
			return GPUX_E_NOMEM;
		memcpy(img, b->code, b->code_len);
		img[b->code_len] = 0;
		*ret_image = img;
		*ret_len = b->code_len + (b->lang == GPUX_LANG_PTX && b->code[b->code_len - 1] != 0);
		return 0;
	default:
		*ret_log = strdup("the CUDA back end runs CUDA C++, PTX and cubin modules");
		return GPUX_E_INVAL;
	}
}

static int cuda_module_load(void *dv, const uint8_t *image, size_t len, void **ret_mod,
			    char **ret_msg)
{
	struct cuda_dev *d = dv;
	struct cuda_module *m = calloc(1, sizeof(*m));
	bool sticky;
	CUresult r;

	if (!m)
		return GPUX_E_NOMEM;
	r = d->cu.cuCtxSetCurrent(d->ctx);
	if (r == CUDA_SUCCESS)
		r = d->cu.cuModuleLoadData(&m->mod, image);
	if (r != CUDA_SUCCESS) {
		free(m);
		*ret_msg = cu_msg(d, "loading the module", r);
		return wrk_cu_err(r, &sticky);
	}
	*ret_mod = m;
	return 0;
}

static void cuda_module_unload(void *dv, void *mod)
{
	struct cuda_dev *d = dv;
	struct cuda_module *m = mod;

	(void)d->cu.cuModuleUnload(m->mod);
	free(m);
}

static int cuda_kernel_get(void *dv, void *mod, const char *name, struct wrk_kernel_info *ret,
			   char **ret_msg)
{
	struct cuda_dev *d = dv;
	struct cuda_module *m = mod;
	CUfunction fn;
	int v;
	CUresult r = d->cu.cuModuleGetFunction(&fn, m->mod, name);

	if (r != CUDA_SUCCESS) {
		*ret_msg = wrk_strdup_printf("no kernel \"%s\" in the module (%s)", name,
					     cu_err_name(&d->cu, r));
		return GPUX_E_NOTFOUND;
	}
	ret->fn = fn;
	ret->nparams = -1;
	if (d->cu.cuFuncGetParamInfo) {
		size_t off, size;
		int32_t n = 0;

		while ((r = d->cu.cuFuncGetParamInfo(fn, (size_t)n, &off, &size)) == CUDA_SUCCESS) {
			if (n < (int32_t)IPC_ARGS_MAX)
				ret->param_size[n] = (uint32_t)size;
			n++;
		}
		/* Past the last parameter the driver says INVALID_VALUE; anything else means it
		 * cannot tell (a module without parameter information). */
		if (r == CUDA_ERROR_INVALID_VALUE)
			ret->nparams = n;
	}
	if (d->cu.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn) == CUDA_SUCCESS)
		ret->max_threads_per_block = (uint32_t)v;
	if (d->cu.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn) == CUDA_SUCCESS)
		ret->static_shared_bytes = (uint32_t)v;
	return 0;
}

/* ---- running ---- */

static void *waiter_main(void *arg);

static int cuda_slot_open(void *dv, unsigned slot, char **ret_msg)
{
	struct cuda_dev *d = dv;
	struct cuda_slot *s = &d->slots[slot];
	CUresult r = d->cu.cuStreamCreate(&s->stream, CU_STREAM_NON_BLOCKING);
	int e;

	if (r != CUDA_SUCCESS) {
		*ret_msg = cu_msg(d, "cuStreamCreate", r);
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

static struct cuda_req *cuda_req_get(struct cuda_dev *d, CUresult *ret_err)
{
	struct cuda_req *cr;
	CUresult r;

	(void)pthread_mutex_lock(&d->free_lock);
	cr = d->free_reqs;
	if (cr)
		d->free_reqs = cr->next;
	(void)pthread_mutex_unlock(&d->free_lock);
	if (cr)
		return cr;
	cr = calloc(1, sizeof(*cr));
	if (!cr) {
		*ret_err = CUDA_ERROR_OUT_OF_MEMORY;
		return NULL;
	}
	r = d->cu.cuEventCreate(&cr->start, CU_EVENT_BLOCKING_SYNC);
	if (r == CUDA_SUCCESS)
		r = d->cu.cuEventCreate(&cr->end, CU_EVENT_BLOCKING_SYNC);
	if (r == CUDA_SUCCESS)
		r = d->cu.cuEventCreate(&cr->done, CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING);
	if (r != CUDA_SUCCESS) {
		if (cr->start)
			(void)d->cu.cuEventDestroy(cr->start);
		if (cr->end)
			(void)d->cu.cuEventDestroy(cr->end);
		free(cr);
		*ret_err = r;
		return NULL;
	}
	return cr;
}

static void cuda_req_put(struct cuda_dev *d, struct cuda_req *cr)
{
	cr->r = NULL;
	cr->ntemp = 0;
	(void)pthread_mutex_lock(&d->free_lock);
	cr->next = d->free_reqs;
	d->free_reqs = cr;
	(void)pthread_mutex_unlock(&d->free_lock);
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
 * Enqueue the copies in, the launch, the copies out. Returns the first failure (what failed
 * in *ret_msg); what was enqueued before it still runs and is waited for.
 */
static CUresult enqueue(struct cuda_dev *d, struct wrk_req *r, struct cuda_req *cr, CUstream st,
			char **ret_msg)
{
	const struct wrk_kernel_info *ki = &r->kernel->info;
	CUresult e;

	for (unsigned i = 0; i < r->nargs; i++) {
		struct wrk_arg *a = &r->args[i];
		CUdeviceptr p = 0;

		switch (a->kind) {
		case GPUX_ARG_SCALAR:
			continue;
		case GPUX_ARG_MAPPED:
			e = d->cu.cuMemHostGetDevicePointer(&p, a->map->seg.addr, 0);
			if (e != CUDA_SUCCESS) {
				*ret_msg = wrk_strdup_printf("argument %u: mapping its buffer", i);
				return e;
			}
			p += a->offset;
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
			cr->temp[cr->ntemp++] = p;
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
	if (r->shared_bytes > DEFAULT_SHARED) {
		e = d->cu.cuFuncSetAttribute(ki->fn, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
					     (int)r->shared_bytes);
		if (e != CUDA_SUCCESS) {
			*ret_msg = strdup("raising the kernel's dynamic shared memory");
			return e;
		}
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

static int cuda_launch(void *dv, struct wrk_req *r, char **ret_msg)
{
	struct cuda_dev *d = dv;
	struct cuda_slot *s = &d->slots[r->slot];
	struct cuda_req *cr;
	char *what = NULL;
	bool sticky = false;
	CUresult e = CUDA_SUCCESS;

	cr = cuda_req_get(d, &e);
	if (!cr) {
		*ret_msg = cu_msg(d, "cuEventCreate", e);
		return wrk_cu_err(e, &sticky);
	}
	cr->r = r;
	cr->seq = atomic_fetch_add(&d->seq, 1) + 1;
	/* In flight from now on, for blaming a fault, though in no slot's list yet. */
	atomic_store(&d->launching, cr->seq);
	r->backend = cr;
	cr->fin = r->timed ? cr->end : cr->done;
	cr->copy_ns = copy_bytes(r) / COPY_BYTES_PER_NS;
	e = r->timed ? d->cu.cuEventRecord(cr->start, s->stream) : CUDA_SUCCESS;
	if (e != CUDA_SUCCESS) {
		atomic_store(&d->launching, 0);
		cuda_req_put(d, cr);
		*ret_msg = cu_msg(d, "cuEventRecord", e);
		return wrk_cu_err(e, &sticky);
	}
	e = r->kind == REQ_COPY ? enqueue_copy(d, r, s->stream, &what)
				: enqueue(d, r, cr, s->stream, &what);
	if (e != CUDA_SUCCESS) {
		/* Copies already queued may still read or write the client's pages: the request
		 * ends only after the stream has passed them. */
		r->sticky = fail_req(d, r, e, what ? what : "enqueue");
		free(what);
	}
	for (unsigned i = 0; i < cr->ntemp; i++)
		(void)d->cu.cuMemFreeAsync(cr->temp[i], s->stream);
	e = d->cu.cuEventRecord(cr->fin, s->stream);
	if (e != CUDA_SUCCESS) {
		/* Nothing to wait for: the context is gone. */
		if (r->status == 0)
			r->sticky = fail_req(d, r, e, "cuEventRecord");
		atomic_store(&d->launching, 0);
		cuda_req_put(d, cr);
		wrk_req_complete(r, true);
		return 0;
	}
	(void)pthread_mutex_lock(&s->lock);
	cr->next = NULL;
	if (s->tail)
		s->tail->next = cr;
	else
		s->head = cr;
	s->tail = cr;
	atomic_fetch_add(&s->queued, 1);
	(void)pthread_cond_signal(&s->cond);
	(void)pthread_mutex_unlock(&s->lock);
	atomic_store(&d->launching, 0);
	return 0;
}

/*
 * Wait for an event. A request with copies longer than a spin naps through them and looks
 * closely around when they should end (a blocked wait wakes late: measured 0.2-0.4 ms on an
 * H200); any other looks briefly (the round trip of short kernels); then it blocks. Looks are
 * paced: each query takes a lock of the driver's that the launching thread needs (measured on
 * an H200: a thread querying without pause costs launches 23% of their rate).
 */
static CUresult wait_event(struct cuda_dev *d, struct cuda_req *cr)
{
	uint64_t now = mono_ns(), until;
	CUevent ev = cr->fin;
	CUresult r;

	/* Naps are a kind of spinning: not where threads must not spin (GPUX_SPIN_US=0). */
	if (d->w->spin_ns > 0 && cr->copy_ns > d->w->spin_ns) {
		uint64_t coarse = now + cr->copy_ns - MIN(cr->copy_ns, NAP_EARLY_NS);
		uint64_t fine = now + 2 * cr->copy_ns;
		bool told = false;

		while ((r = d->cu.cuEventQuery(ev)) == CUDA_ERROR_NOT_READY && now < fine) {
			uint64_t nap = now < coarse ? MIN(coarse - now, NAP_MAX_NS) : NAP_FINE_NS;
			struct timespec ts = { .tv_sec = 0, .tv_nsec = (long)nap };

			if (now >= coarse && !told) {
				wrk_req_soon(cr->r);
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
		if (now >= until)
			return d->cu.cuEventSynchronize(ev);
	}
}

static void finish(struct cuda_dev *d, struct cuda_req *cr, CUresult e)
{
	struct wrk_req *r = cr->r;
	bool sticky = false;
	float ms = 0;

	r->t_end = mono_ns();
	if (e == CUDA_SUCCESS) {
		if (r->timed && d->cu.cuEventElapsedTime(&ms, cr->start, cr->end) == CUDA_SUCCESS)
			r->device_ns = (uint64_t)((double)ms * 1e6);
	} else {
		sticky = fail_req(d, r, e, "running");
	}
	cuda_req_put(d, cr);
	wrk_req_complete(r, sticky || r->sticky);
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
		struct cuda_req *cr, *last;
		CUresult e;

		(void)pthread_mutex_lock(&s->lock);
		if (!s->head && !s->stop) {
			(void)pthread_mutex_unlock(&s->lock);
			wrk_spin_for_work(d->w, &s->queued);
			(void)pthread_mutex_lock(&s->lock);
		}
		while (!s->head && !s->stop)
			(void)pthread_cond_wait(&s->cond, &s->lock);
		cr = s->head;
		last = s->tail;
		(void)pthread_mutex_unlock(&s->lock);
		if (!cr)
			return NULL;
		/* Under load, many wait in line: when the newest is done, all are (one stream), and
		 * one query of the driver's stands for them all. */
		if (last != cr && d->cu.cuEventQuery(last->fin) == CUDA_SUCCESS) {
			e = CUDA_SUCCESS;
		} else {
			last = cr;
			e = wait_event(d, cr);
		}
		/* The loop thread appends behind them meanwhile: take them off under the lock. */
		(void)pthread_mutex_lock(&s->lock);
		s->head = last->next;
		if (!s->head)
			s->tail = NULL;
		(void)pthread_mutex_unlock(&s->lock);
		for (;;) {
			struct cuda_req *next = cr->next;
			bool end = cr == last;

			atomic_fetch_sub(&s->queued, 1);
			finish(d, cr, e);
			if (end)
				break;
			cr = next;
		}
	}
}

/* ---- memory that outlives requests ---- */

static int cuda_dev_alloc(void *dv, uint64_t size, void **ret_ptr, char **ret_msg)
{
	struct cuda_dev *d = dv;
	CUdeviceptr p = 0;
	bool sticky;
	CUresult e = d->cu.cuMemAllocFromPoolAsync(&p, size, d->pool, d->aux);

	if (e == CUDA_SUCCESS)
		e = d->cu.cuStreamSynchronize(d->aux);
	if (e != CUDA_SUCCESS) {
		*ret_msg = wrk_strdup_printf("%llu bytes of device memory: %s",
					     (unsigned long long)size, cu_err_name(&d->cu, e));
		return wrk_cu_err(e, &sticky);
	}
	*ret_ptr = (void *)(uintptr_t)p;
	return 0;
}

static void cuda_dev_free(void *dv, void *ptr)
{
	struct cuda_dev *d = dv;

	(void)d->cu.cuMemFreeAsync((CUdeviceptr)(uintptr_t)ptr, d->aux);
}

static int cuda_upload(void *dv, void *dst, const void *src, uint64_t len, void **ret_ready,
		       char **ret_msg)
{
	struct cuda_dev *d = dv;
	CUevent ev = NULL;
	bool sticky;
	CUresult e = d->cu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);

	if (e == CUDA_SUCCESS)
		e = d->cu.cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, len, d->aux);
	if (e == CUDA_SUCCESS)
		e = d->cu.cuEventRecord(ev, d->aux);
	if (e != CUDA_SUCCESS) {
		if (ev)
			(void)d->cu.cuEventDestroy(ev);
		*ret_msg = cu_msg(d, "upload", e);
		return wrk_cu_err(e, &sticky);
	}
	*ret_ready = ev;
	return 0;
}

static void cuda_ready_wait(void *dv, void *ready)
{
	struct cuda_dev *d = dv;

	(void)d->cu.cuEventSynchronize((CUevent)ready);
}

static void cuda_ready_free(void *dv, void *ready)
{
	struct cuda_dev *d = dv;

	(void)d->cu.cuEventDestroy((CUevent)ready);
}

const struct wrk_backend_ops wrk_backend_cuda = {
	.name = "cuda",
	.backend = GPUX_BACKEND_CUDA,
	.probe = cuda_probe,
	.open = cuda_open,
	.close = cuda_close,
	.map_register = cuda_map_register,
	.map_unregister = cuda_map_unregister,
	.target_key = cuda_target_key,
	.image_ext = "cubin",
	.build = cuda_build,
	.module_load = cuda_module_load,
	.module_unload = cuda_module_unload,
	.kernel_get = cuda_kernel_get,
	.slot_open = cuda_slot_open,
	.launch = cuda_launch,
	.dev_alloc = cuda_dev_alloc,
	.dev_free = cuda_dev_free,
	.upload = cuda_upload,
	.ready_wait = cuda_ready_wait,
	.ready_free = cuda_ready_free,
	.mem_free = cuda_mem_free,
};
