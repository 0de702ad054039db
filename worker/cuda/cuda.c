/* SPDX-License-Identifier: MIT */
/* worker/cuda/cuda.c: the CUDA back end: one device, its context, memory, zero-copy segments, modules. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "compile-sandbox.h"
#include "cubin.h"
#include "cuda-dev.h"
#include "cuda-image.h"
#include "knames.h"
#include "macro.h"

const char wrk_cuda_options_re[] =
	"^(-D[A-Za-z_][A-Za-z0-9_]*(=[-A-Za-z0-9_.+*/()]*)?|-U[A-Za-z_][A-Za-z0-9_]*|"
	"--?use_fast_math|-lineinfo|--generate-line-info|-G|--device-debug|"
	"--?std=c\\+\\+(11|14|17|20)|--fmad=(true|false)|--ftz=(true|false)|"
	"--prec-div=(true|false)|--prec-sqrt=(true|false)|--maxrregcount=[0-9]+|"
	"--extra-device-vectorization|-dopt=(on|off)|--restrict|-default-device|"
	"--device-as-default-execution-space)$";

/* How long a worker waits for its compiler's warm-up before it says it is ready anyway. */
#define COMPILER_WARM_WAIT_NS (10 * NSEC_PER_SEC)

char *cuda_msg(struct cuda_dev *d, const char *what, CUresult r)
{
	return wrk_strdup_printf("%s: %s", what, cu_err_name(&d->cu, r));
}

/* A failure's status. A sticky error broke the context, whichever call met it: the worker
 * goes and is restarted. None of the calls here runs a kernel, so such an error is another
 * request's doing: the one that met it is lost with the worker (not answered: its client
 * sends it again, client/replay.c), never told it faulted (on two H200s an innocent's kernel
 * lookup met a neighbour's illegal address, and the innocent was told KERNEL_FAULT). */
static gpux_status cuda_status(struct cuda_dev *d, CUresult r)
{
	bool sticky;
	gpux_status st = wrk_cu_err(r, &sticky);

	if (!sticky)
		return st;
	wrk_device_broken(d->w);
	return GPUX_E_WORKER_LOST;
}

/* ---- probe and open ---- */

/* A device attribute; 0 when it cannot be read, the first such failure kept in *err. */
static int attr(struct cu_driver *cu, CUdevice dev, CUdevice_attribute a, CUresult *err)
{
	int v = 0;
	CUresult r = cu->cuDeviceGetAttribute(&v, a, dev);

	if (r != CUDA_SUCCESS) {
		if (*err == CUDA_SUCCESS)
			*err = r;
		return 0;
	}
	return v;
}

/* What is said of the device. Its name and uuid have stand-ins; the first failure to read its
 * memory or an attribute is kept in *err. */
static void device_info(struct cu_driver *cu, CUdevice dev, uint32_t index,
			struct ipc_device_info *info, CUresult *err)
{
	CUuuid uuid;
	size_t mem = 0;
	CUresult r;

	memset(info, 0, sizeof(*info));
	info->index = index;
	info->backend = GPUX_BACKEND_CUDA;
	if (cu->cuDeviceGetName(info->name, sizeof(info->name) - 1, dev) != CUDA_SUCCESS)
		(void)snprintf(info->name, sizeof(info->name), "CUDA device %u", index);
	if (cu->cuDeviceGetUuid(&uuid, dev) == CUDA_SUCCESS)
		memcpy(info->uuid, uuid.bytes, sizeof(info->uuid));
	r = cu->cuDeviceTotalMem(&mem, dev);
	if (r != CUDA_SUCCESS && *err == CUDA_SUCCESS)
		*err = r;
	info->mem_total = mem;
	info->cc_major = (uint32_t)attr(cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, err);
	info->cc_minor = (uint32_t)attr(cu, dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, err);
	info->sm_count = (uint32_t)attr(cu, dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, err);
	info->max_threads_per_block =
		(uint32_t)attr(cu, dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, err);
}

static gpux_status driver_init(struct cu_driver *cu, char **ret_msg)
{
	bool sticky;
	CUresult r;
	gpux_status rc = cu_driver_load(cu, ret_msg);

	if (rc < 0)
		return rc;
	/*
	 * Lazy loading would load a kernel at its first launch, and that load synchronizes the
	 * whole context: queues would stop overlapping. Modules are loaded once per worker and
	 * cached, so load them whole. A user's own setting wins.
	 */
	(void)setenv("CUDA_MODULE_LOADING", "EAGER", 0);
	/*
	 * Streams share the device's hardware queues (8 by default): past 8 streams, work on one
	 * waits behind another's that shares its queue, whatever their priorities. A worker has
	 * its slots' streams (8 by default), one for uploads, and streams of other priorities
	 * and shares: 16 queues. Each costs the context's creation time (measured on an H200:
	 * 0.10-0.12 s with 8, 0.47-0.52 s with 32, in a worker restarted after a fault 0.36-0.52
	 * s with 16 against 0.81-0.87 s with 32), which a worker restarted after a client's
	 * fault makes everybody wait for; 32 kept no latency-critical round trip shorter than 16.
	 * A user's own setting wins.
	 */
	(void)setenv("CUDA_DEVICE_MAX_CONNECTIONS", "16", 0);
	r = cu->cuInit(0);
	if (r != CUDA_SUCCESS) {
		*ret_msg = wrk_strdup_printf("cuInit: %s", cu_err_name(cu, r));
		rc = wrk_cu_err(r, &sticky);
		cu_driver_unload(cu);
		return rc == GPUX_E_NODRIVER ? rc : GPUX_E_NODEV;
	}
	return 0;
}

static gpux_status cuda_probe(struct ipc_device_info *ret, unsigned max, unsigned *ret_n,
			      char **ret_msg)
{
	struct cu_driver cu;
	gpux_status rc;
	int count = 0;

	*ret_n = 0;
	rc = driver_init(&cu, ret_msg);
	if (rc < 0)
		return rc;
	if (cu.cuDeviceGetCount(&count) != CUDA_SUCCESS)
		count = 0;
	for (int i = 0; i < count && (unsigned)i < max; i++) {
		/* What the probe cannot read, the worker reads again as it starts. */
		CUresult unread = CUDA_SUCCESS;
		CUdevice dev;

		if (cu.cuDeviceGet(&dev, i) != CUDA_SUCCESS)
			break;
		device_info(&cu, dev, (uint32_t)i, &ret[*ret_n], &unread);
		(*ret_n)++;
	}
	cu_driver_unload(&cu);
	if (*ret_n == 0)
		*ret_msg = strdup("no CUDA device");
	return 0;
}

/* The slots' end words (cuda-dev.h): a page of host memory the device sees. Without it, or
 * cuStreamWriteValue64, ends are seen through events only. */
#define ENDS_BYTES 4096u
_Static_assert(WRK_SLOTS_MAX *CUDA_END_WORD_STRIDE * sizeof(uint64_t) <= ENDS_BYTES,
	       "every slot's end word in the page");

static void ends_open(struct cuda_dev *d)
{
	_cleanup_(freep) char *msg = NULL;
	CUdeviceptr dp;
	CUresult r;
	void *p;

	if (!d->cu.cuStreamWriteValue64 || posix_memalign(&p, ENDS_BYTES, ENDS_BYTES) != 0)
		return;
	memset(p, 0, ENDS_BYTES);
	r = d->cu.cuMemHostRegister(p, ENDS_BYTES, CU_MEMHOSTREGISTER_DEVICEMAP);
	if (r == CUDA_SUCCESS) {
		r = d->cu.cuMemHostGetDevicePointer(&dp, p, 0);
		if (r != CUDA_SUCCESS)
			(void)d->cu.cuMemHostUnregister(p);
	}
	if (r != CUDA_SUCCESS) {
		free(p);
		msg = cuda_msg(d, "the end words' page", r);
		wrk_log(d->w, "%s: ends are seen through events only", msg ? msg : "out of memory");
		return;
	}
	d->ends = p;
	d->ends_dev = dp;
}

static void ends_close(struct cuda_dev *d)
{
	if (!d->ends)
		return;
	(void)d->cu.cuMemHostUnregister((void *)d->ends);
	free((void *)d->ends);
	d->ends = NULL;
}

static void cuda_close(void *dv)
{
	struct cuda_dev *d = dv;

	if (!d)
		return;
	cuda_slots_close(d);
	ends_close(d);
	cuda_copyin_stop(d);
	wrk_compiler_stop(&d->compiler);
	wrk_compiler_forget_pch(&d->compiler);
	if (d->aux)
		(void)d->cu.cuStreamDestroy(d->aux);
	if (d->ctx_retained)
		(void)d->cu.cuDevicePrimaryCtxRelease(d->dev);
	cu_driver_unload(&d->cu);
	(void)pthread_mutex_destroy(&d->free_lock);
	(void)pthread_mutex_destroy(&d->fault_lock);
	free(d);
}

static gpux_status cuda_open(struct wrk *w, uint32_t device, void **ret_dev,
			     struct ipc_device_info *ret_info, struct wrk_limits *ret_limits,
			     char **ret_msg)
{
	struct cuda_dev *d = calloc(1, sizeof(*d));
	cuuint64_t keep = UINT64_MAX;
	uint64_t t0 = mono_ns(), t_driver, t_ctx, t_nvrtc, t_warm = 0;
	CUresult r;
	gpux_status rc;

	if (!d)
		return GPUX_E_NOMEM;
	d->w = w;
	d->compiler = (struct wrk_compiler)WRK_COMPILER_INIT;
	d->compiler.memory = w->opts.compile_memory;
	d->compiler.timeout_ns = w->opts.compile_timeout_ms * NSEC_PER_MSEC;
	(void)pthread_mutex_init(&d->free_lock, NULL);
	(void)pthread_mutex_init(&d->fault_lock, NULL);
	/* NVRTC warms up in its helper while the driver starts (measured: cuInit 210 ms and the
	 * context 113 ms on an H200); a helper that fails to start is tried again at the first
	 * compile. */
	{
		char *msg = NULL;

		if (wrk_compiler_spawn(&d->compiler, &msg) < 0)
			wrk_log(w, "%s", msg ? msg : "cannot start the compiler");
		free(msg);
	}
	rc = driver_init(&d->cu, ret_msg);
	if (rc < 0)
		goto err;
	t_driver = mono_ns();
	r = d->cu.cuDeviceGet(&d->dev, (int)device);
	if (r == CUDA_SUCCESS)
		r = d->cu.cuDevicePrimaryCtxRetain(&d->ctx, d->dev);
	if (r != CUDA_SUCCESS) {
		*ret_msg = cuda_msg(d, "device", r);
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
		*ret_msg = cuda_msg(d, "context", r);
		rc = GPUX_E_DEVICE;
		goto err;
	}
	t_ctx = mono_ns();
	device_info(&d->cu, d->dev, device, ret_info, &r);
	d->cc_major = (int)ret_info->cc_major;
	d->cc_minor = (int)ret_info->cc_minor;
	(void)snprintf(d->arch, sizeof(d->arch), "sm_%d%d", d->cc_major, d->cc_minor);
	t_nvrtc = mono_ns();
	d->nvrtc_version = wrk_nvrtc_probe(&d->tk);
	t_nvrtc = mono_ns() - t_nvrtc;
	/* Without Landlock the helper can read no header at all: then modules include none. */
	if (wrk_compile_sandbox_landlock_abi() == 0) {
		if (d->nvrtc_version)
			wrk_log(w,
				"this kernel has no Landlock: CUDA C++ modules cannot include the "
				"toolkit's headers");
		d->tk.ndirs = 0;
	}
	wrk_compiler_pch_dir(&d->compiler, w->opts.cache_dir);
	wrk_compiler_target(&d->compiler, (unsigned)(d->cc_major * 10 + d->cc_minor), &d->tk);
	wrk_driver_versions(w, (uint32_t)d->cu.version, d->nvrtc_version);
	*ret_limits = (struct wrk_limits){
		.max_threads_per_block = ret_info->max_threads_per_block,
		.max_block = { (uint32_t)attr(&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X,
					      &r),
			       (uint32_t)attr(&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y,
					      &r),
			       (uint32_t)attr(&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z,
					      &r) },
		.max_grid = { (uint32_t)attr(&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X,
					     &r),
			      (uint32_t)attr(&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y,
					     &r),
			      (uint32_t)attr(&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z,
					     &r) },
		.max_shared_per_block = (uint32_t)attr(
			&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, &r),
		.max_shared_per_block_optin = (uint32_t)attr(
			&d->cu, d->dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, &r),
	};
	/* A worker that does not know its device's memory or limits (it would refuse every
	 * launch, or take 0 for its device quota) does not start: gpuxd starts it again. */
	if (r != CUDA_SUCCESS) {
		*ret_msg = cuda_msg(d, "the device's attributes", r);
		rc = GPUX_E_DEVICE;
		goto err;
	}
	cuda_sched_probe(d);
	ends_open(d);
	cuda_copyin_start(d);
	/* The device is ready once its compiler is too (NVRTC's load and first compile take
	 * longer than the driver's start on a fresh machine): a client's first compile finds
	 * it warm. Not a restarted worker's: its clients' requests, run again, wait for it, and
	 * their modules are in the caches. */
	if (!w->opts.restart) {
		t_warm = mono_ns();
		wrk_compiler_wait_warm(&d->compiler, t_warm + COMPILER_WARM_WAIT_NS);
		t_warm = mono_ns() - t_warm;
	}
	wrk_log(w,
		"device %u opened in %llu ms: the driver %llu, its context %llu, NVRTC's version "
		"%llu, the compiler's warm-up %llu",
		device, (unsigned long long)((mono_ns() - t0) / NSEC_PER_MSEC),
		(unsigned long long)((t_driver - t0) / NSEC_PER_MSEC),
		(unsigned long long)((t_ctx - t_driver) / NSEC_PER_MSEC),
		(unsigned long long)(t_nvrtc / NSEC_PER_MSEC),
		(unsigned long long)(t_warm / NSEC_PER_MSEC));
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

/* What an allocation could get: free memory, and what the pool keeps without using it (its
 * release threshold keeps what temporaries freed); UINT64_MAX when the driver cannot say. */
static uint64_t cuda_mem_room(void *dv)
{
	struct cuda_dev *d = dv;
	cuuint64_t reserved = 0, used = 0;
	size_t free_b = 0, total = 0;
	uint64_t room;
	CUresult r = d->cu.cuMemGetInfo(&free_b, &total);

	if (r != CUDA_SUCCESS) {
		(void)cuda_status(d, r);
		return UINT64_MAX;
	}
	room = free_b;
	if (d->cu.cuMemPoolGetAttribute(d->pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved) ==
		    CUDA_SUCCESS &&
	    d->cu.cuMemPoolGetAttribute(d->pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used) ==
		    CUDA_SUCCESS &&
	    reserved > used)
		room += reserved - used;
	return room;
}

/* ---- segments: registered once, so that copies are DMA from the client's pages ---- */

static gpux_status cuda_map_register(void *dv, struct wrk_mapping *m, char **ret_msg)
{
	struct cuda_dev *d = dv;
	unsigned flags = CU_MEMHOSTREGISTER_DEVICEMAP;
	CUdeviceptr p = 0;
	CUresult r;

	if (m->seg.frozen)
		flags |= CU_MEMHOSTREGISTER_READ_ONLY;
	/*
	 * The segment's pages are not yet in this process's page tables (nor, those the client
	 * never touched, anywhere), and registering faults them in one by one: faulted in first,
	 * by several threads for a large segment (worker/core/populate.c), a 1 MiB segment
	 * registered in 0.17 ms rather than 0.41; a program's fresh IN and OUT buffers of 64 and
	 * 256 MiB are ready by the time it has written its input (gpux bench fresh on an H200:
	 * their first launch 1.02-1.08 times their second, against 4.2-6.1 with one thread).
	 */
	wrk_populate(&d->w->reg.populate, m->seg.addr, m->seg.size, !m->seg.frozen);
	/* On the registration thread (register_off_loop), which has no context yet. */
	r = d->cu.cuCtxSetCurrent(d->ctx);
	if (r == CUDA_SUCCESS)
		r = d->cu.cuMemHostRegister(m->seg.addr, m->seg.size, flags);
	if (r != CUDA_SUCCESS) {
		*ret_msg = cuda_msg(d, "registering a shared segment", r);
		return cuda_status(d, r);
	}
	/* Mapped arguments point at these pages themselves: their device address, once. */
	r = d->cu.cuMemHostGetDevicePointer(&p, m->seg.addr, 0);
	if (r != CUDA_SUCCESS) {
		(void)d->cu.cuMemHostUnregister(m->seg.addr);
		*ret_msg = cuda_msg(d, "the device address of a shared segment", r);
		return cuda_status(d, r);
	}
	m->reg = m->seg.addr;
	m->dev_addr = p;
	return 0;
}

static void cuda_map_unregister(void *dv, struct wrk_mapping *m)
{
	struct cuda_dev *d = dv;

	(void)d->cu.cuMemHostUnregister(m->reg);
	m->reg = NULL;
	m->dev_addr = 0;
}

/* ---- modules ---- */

static void cuda_target_key(void *dv, uint32_t lang, struct ipc_key_state *s)
{
	struct cuda_dev *d = dv;

	/* Images hold their kernels' names since this tag (worker/compile/cuda-image.h). */
	ipc_key_add(s, "cuda-image-1", 12);
	ipc_key_add(s, d->arch, strlen(d->arch));
	ipc_key_add_u64(s, (uint64_t)d->cu.version);
	if (lang == GPUX_LANG_CUDA) {
		ipc_key_add_u64(s, d->nvrtc_version);
		/* The toolkit's headers that an #include finds. */
		for (unsigned i = 0; i < d->tk.ndirs; i++)
			ipc_key_add(s, d->tk.dirs[i], strlen(d->tk.dirs[i]));
	}
}

static gpux_status cuda_build(void *dv, const struct wrk_build *b, uint8_t **ret_image,
			      size_t *ret_len, char **ret_log)
{
	struct cuda_dev *d = dv;
	gpux_status st;
	int rc;

	switch (b->lang) {
	case GPUX_LANG_CUDA:
		st = wrk_options_check(wrk_cuda_options_re, b->options, ret_log);
		if (st < 0)
			return st;
		return wrk_compiler_build(&d->compiler, b, ret_image, ret_len, ret_log);
	case GPUX_LANG_PTX:
	case GPUX_LANG_CUBIN:
		if (*b->options) {
			*ret_log = strdup("PTX and cubin modules take no options");
			return GPUX_E_INVAL;
		}
		/* The driver believes every size inside a cubin: none reaches it unchecked. */
		if (b->lang == GPUX_LANG_CUBIN) {
			rc = wrk_cubin_check(b->code, b->code_len,
					     (unsigned)(d->cc_major * 10 + d->cc_minor), ret_log);
			if (rc < 0)
				return GPUX_E_INVAL;
		}
		/* PTX must end with a NUL: the driver reads it as a string. */
		if (b->lang == GPUX_LANG_PTX && b->code[b->code_len - 1] != 0) {
			_cleanup_(freep) uint8_t *ptx = malloc(b->code_len + 1);

			if (!ptx)
				return GPUX_E_NOMEM;
			memcpy(ptx, b->code, b->code_len);
			ptx[b->code_len] = 0;
			rc = wrk_cuimage_pack(ptx, b->code_len + 1, NULL, 0, 0, ret_image, ret_len);
		} else {
			rc = wrk_cuimage_pack(b->code, b->code_len, NULL, 0, 0, ret_image, ret_len);
		}
		return rc < 0 ? GPUX_E_NOMEM : 0;
	default:
		*ret_log = strdup("the CUDA back end runs CUDA C++, PTX and cubin modules");
		return GPUX_E_INVAL;
	}
}

static void cuda_module_unload(void *dv, void *mod)
{
	struct cuda_dev *d = dv;
	struct cuda_module *m = mod;

	if (m->mod) {
		cuda_graphs_forget(d, m);
		(void)d->cu.cuModuleUnload(m->mod);
	}
	wrk_knames_free(m->names);
	free(m);
}

static gpux_status cuda_module_load(void *dv, const uint8_t *image, size_t len, void **ret_mod,
				    char **ret_msg)
{
	struct cuda_dev *d = dv;
	struct cuda_module *m;
	struct wrk_cuimage img;
	CUresult e;
	int r;

	if (wrk_cuimage_parse(image, len, &img) < 0) {
		*ret_msg = strdup("not a module image of this worker");
		return GPUX_E_INVAL;
	}
	m = calloc(1, sizeof(*m));
	r = m ? wrk_knames_new(&img, WRK_CLIENT_MOD_BYTES, &m->names) : -ENOMEM;
	if (r < 0) {
		free(m);
		if (r != -E2BIG)
			return GPUX_E_NOMEM;
		*ret_msg =
			wrk_strdup_printf("the module's kernel names take more than the %llu MiB "
					  "a client's modules may",
					  WRK_CLIENT_MOD_BYTES / MiB);
		return GPUX_E_QUOTA;
	}
	e = d->cu.cuCtxSetCurrent(d->ctx);
	if (e == CUDA_SUCCESS)
		e = d->cu.cuModuleLoadData(&m->mod, img.code);
	if (e != CUDA_SUCCESS) {
		m->mod = NULL;
		cuda_module_unload(d, m);
		*ret_msg = cuda_msg(d, "loading the module", e);
		return cuda_status(d, e);
	}
	*ret_mod = m;
	return 0;
}

static uint64_t cuda_module_bytes(void *dv, void *mod)
{
	struct cuda_module *m = mod;

	return wrk_knames_bytes(m->names);
}

/*
 * A kernel by the name its programmer wrote (worker/compile/knames.h): a name expression the module
 * was compiled with, else the symbol itself (extern "C", or mangled), else the one C++
 * function of that name.
 */
static gpux_status kernel_find(struct cuda_dev *d, struct cuda_module *m, const char *name,
			       CUfunction *ret, char **ret_msg)
{
	const char *sym = wrk_knames_lowered(m->names, name);
	CUresult r = d->cu.cuModuleGetFunction(ret, m->mod, sym ? sym : name);
	int rc;

	if (r == CUDA_ERROR_NOT_FOUND && !sym) {
		rc = wrk_knames_match(m->names, name, &sym, ret_msg);
		if (rc < 0)
			return rc == -ENOTUNIQ ? GPUX_E_INVAL : GPUX_E_NOTFOUND;
		r = d->cu.cuModuleGetFunction(ret, m->mod, sym);
	}
	if (r == CUDA_ERROR_NOT_FOUND) {
		*ret_msg = wrk_strdup_printf("no kernel \"%s\" in the module (%s)", name,
					     cu_err_name(&d->cu, r));
		return GPUX_E_NOTFOUND;
	}
	/* Not a missing kernel: the driver could not look (out of memory, a broken device). */
	if (r != CUDA_SUCCESS) {
		*ret_msg = wrk_strdup_printf("kernel \"%s\": cuModuleGetFunction: %s", name,
					     cu_err_name(&d->cu, r));
		return cuda_status(d, r);
	}
	return 0;
}

static gpux_status cuda_kernel_get(void *dv, void *mod, const char *name,
				   struct wrk_kernel_info *ret, char **ret_msg)
{
	struct cuda_dev *d = dv;
	struct cuda_module *m = mod;
	CUfunction fn;
	int v;
	CUresult r;
	gpux_status rc = kernel_find(d, m, name, &fn, ret_msg);

	if (rc < 0)
		return rc;
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
	if (d->cu.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, fn) ==
	    CUDA_SUCCESS)
		ret->max_threads_per_block = (uint32_t)v;
	if (d->cu.cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, fn) == CUDA_SUCCESS)
		ret->static_shared_bytes = (uint32_t)v;
	return 0;
}

/* ---- memory that outlives requests ---- */

/* ---- what a module holds: its kernels' attributes, its variables ---- */

static gpux_status cuda_kernel_attrs(void *dv, void *mod, const struct wrk_kernel_info *k,
				     struct ipc_kernel_attrs *ret, char **ret_msg)
{
#define ATTR_(a, field)                                                                            \
	{                                                                                          \
		CU_FUNC_ATTRIBUTE_##a, offsetof(struct ipc_kernel_attrs, field), #a                \
	}
	static const struct {
		CUfunction_attribute a;
		size_t offset;
		const char *name;
	} attrs[] = {
		ATTR_(MAX_THREADS_PER_BLOCK, max_threads_per_block),
		ATTR_(NUM_REGS, num_regs),
		ATTR_(SHARED_SIZE_BYTES, shared_size_bytes),
		ATTR_(CONST_SIZE_BYTES, const_size_bytes),
		ATTR_(LOCAL_SIZE_BYTES, local_size_bytes),
		ATTR_(PTX_VERSION, ptx_version),
		ATTR_(BINARY_VERSION, binary_version),
		ATTR_(CACHE_MODE_CA, cache_mode_ca),
		ATTR_(PREFERRED_SHARED_MEMORY_CARVEOUT, preferred_shared_memory_carveout),
	};
#undef ATTR_
	struct cuda_dev *d = dv;
	uint32_t optin = d->w->limits.max_shared_per_block_optin;

	for (unsigned i = 0; i < ARRAY_SIZE(attrs); i++) {
		int32_t v = IPC_ATTR_UNKNOWN;
		int got = 0;
		CUresult r = d->cu.cuFuncGetAttribute(&got, attrs[i].a, (CUfunction)k->fn);

		/* A driver that does not know one leaves it unknown. */
		if (r == CUDA_SUCCESS)
			v = MAX(got, IPC_ATTR_UNKNOWN);
		else if (r != CUDA_ERROR_INVALID_VALUE && r != CUDA_ERROR_NOT_SUPPORTED) {
			*ret_msg = wrk_strdup_printf("cuFuncGetAttribute(%s): %s", attrs[i].name,
						     cu_err_name(&d->cu, r));
			return cuda_status(d, r);
		}
		memcpy((char *)ret + attrs[i].offset, &v, sizeof(v));
	}
	/* What a launch may ask for: gpux raises the kernel's limit as launches need it. */
	if (ret->shared_size_bytes >= 0 && (uint32_t)ret->shared_size_bytes <= optin)
		ret->max_dynamic_shared_size_bytes =
			(int32_t)MIN(optin - (uint32_t)ret->shared_size_bytes, (uint32_t)INT32_MAX);
	ret->nparams = k->nparams >= 0 ? k->nparams : IPC_ATTR_UNKNOWN;
	return 0;
}

static gpux_status cuda_global_get(void *dv, void *mod, const char *name, void **ret_ptr,
				   uint64_t *ret_size, bool *ret_read_only, char **ret_msg)
{
	struct cuda_dev *d = dv;
	struct cuda_module *m = mod;
	char sym[2 * IPC_KERNEL_NAME_MAX + 16];
	CUdeviceptr p = 0;
	size_t size = 0;
	CUresult r = d->cu.cuModuleGetGlobal(&p, &size, m->mod, name);

	/* A qualified name ("ns::x"): the symbol the compiler gave it. */
	if (r == CUDA_ERROR_NOT_FOUND && strstr(name, "::") &&
	    wrk_knames_variable(name, sym, sizeof(sym)) == 0)
		r = d->cu.cuModuleGetGlobal(&p, &size, m->mod, sym);
	/* A name the driver takes for no variable's (a function's) is none either. */
	if (r == CUDA_ERROR_NOT_FOUND || r == CUDA_ERROR_INVALID_VALUE ||
	    (r == CUDA_SUCCESS && size == 0)) {
		*ret_msg = wrk_strdup_printf("no variable \"%s\" in the module (a __device__ or "
					     "__constant__ one defined at namespace scope)",
					     name);
		return GPUX_E_NOTFOUND;
	}
	if (r != CUDA_SUCCESS) {
		*ret_msg = wrk_strdup_printf("variable \"%s\": cuModuleGetGlobal: %s", name,
					     cu_err_name(&d->cu, r));
		return cuda_status(d, r);
	}
	*ret_ptr = (void *)(uintptr_t)p;
	*ret_size = size;
	*ret_read_only = false;
	return 0;
}

static gpux_status cuda_dev_alloc(void *dv, uint64_t size, void **ret_ptr, char **ret_msg)
{
	struct cuda_dev *d = dv;
	CUdeviceptr p = 0;
	CUresult e = d->cu.cuMemAllocFromPoolAsync(&p, size, d->pool, d->aux);

	if (e == CUDA_SUCCESS) {
		e = d->cu.cuStreamSynchronize(d->aux);
		/* Allocated, but not known to be there: given back. */
		if (e != CUDA_SUCCESS)
			(void)d->cu.cuMemFreeAsync(p, d->aux);
	}
	if (e != CUDA_SUCCESS) {
		*ret_msg = wrk_strdup_printf("%llu bytes of device memory: %s",
					     (unsigned long long)size, cu_err_name(&d->cu, e));
		return cuda_status(d, e);
	}
	*ret_ptr = (void *)(uintptr_t)p;
	return 0;
}

static void cuda_dev_free(void *dv, void *ptr)
{
	struct cuda_dev *d = dv;

	(void)d->cu.cuMemFreeAsync((CUdeviceptr)(uintptr_t)ptr, d->aux);
}

static gpux_status cuda_upload(void *dv, void *dst, const void *src, uint64_t len, void **ret_ready,
			       char **ret_msg)
{
	struct cuda_dev *d = dv;
	CUevent ev = NULL;
	CUresult e = d->cu.cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING);

	if (e == CUDA_SUCCESS)
		e = d->cu.cuMemcpyHtoDAsync((CUdeviceptr)(uintptr_t)dst, src, len, d->aux);
	if (e == CUDA_SUCCESS)
		e = d->cu.cuEventRecord(ev, d->aux);
	if (e != CUDA_SUCCESS) {
		if (ev)
			(void)d->cu.cuEventDestroy(ev);
		*ret_msg = cuda_msg(d, "upload", e);
		return cuda_status(d, e);
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
	.register_off_loop = true,
	.map_unregister = cuda_map_unregister,
	.target_key = cuda_target_key,
	.image_ext = "cubin",
	.build = cuda_build,
	.module_load = cuda_module_load,
	.module_unload = cuda_module_unload,
	.module_bytes = cuda_module_bytes,
	.kernel_get = cuda_kernel_get,
	.kernel_attrs = cuda_kernel_attrs,
	.global_get = cuda_global_get,
	.slot_open = cuda_slot_open,
	.launch = cuda_launch,
	.poll = cuda_poll,
	.dev_alloc = cuda_dev_alloc,
	.dev_free = cuda_dev_free,
	.upload = cuda_upload,
	.ready_wait = cuda_ready_wait,
	.ready_free = cuda_ready_free,
	.mem_free = cuda_mem_free,
	.mem_room = cuda_mem_room,
};
