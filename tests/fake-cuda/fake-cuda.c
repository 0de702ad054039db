/* SPDX-License-Identifier: MIT */
/* tests/fake-cuda/fake-cuda.c: a libcuda.so.1 without a GPU, for testing the CUDA back end in CI. */
#include <ctype.h>
#include <errno.h>
#include <elf.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "fake-cuda.h"
#include "fake-sweep.h"

/*
 * Enough of the Driver API for gpux-worker, reached through cuGetProcAddress_v2 as the real
 * one is. Device memory is host memory; streams run their work at once but complete at the
 * time their kernels would have ("spin" kernels take their time), so events are not ready
 * before then. A few kernels are carried out for real, by name, on that memory:
 *
 *   saxpy(u64 n, f32 a, f32 *x, f32 *y, f32 *out)   add1(u64 n, f32 *in, f32 *out)
 *   append(u32 v, u32 *log): log[1 + log[0]++] = v (the order kernels ran in)
 *   spin(u32 ms)   fault()   (an illegal address: the context is broken from then on)
 *   slowfault(u32 ms): keeps its stream busy for ms, then the context is broken (an illegal
 *   address, reported from then on by every call of the context, event queries and
 *   synchronisations among them), each time it runs: a kernel's own bug, not a failure
 *   injected once (GPUX_FAKE_CUDA_FAIL)
 *   where(u32 *out): out[0] = the stream's priority, out[1] = the SMs its kernels run on
 *
 * Parameters come from PTX (".entry name(.param .u64 ...)") or from a cubin's .nv.info.<name>
 * section (its KPARAM_INFO attributes: ordinal, offset and size of each parameter). A cubin's
 * variables (cuModuleGetGlobal) are its symbols of objects, with their initial bytes; a
 * kernel's attributes are fixed numbers, each its own (fake_attrs[]). Graphs (fake-graph.c)
 * are chains of kernel nodes run in order.
 *
 * Environment: GPUX_FAKE_CUDA_DEVICES (1), GPUX_FAKE_CUDA_MEM (bytes of "device" memory,
 * 1 GiB), GPUX_FAKE_CUDA_KERNEL_NS (how long a kernel keeps its stream busy, 5000),
 * GPUX_FAKE_CUDA_INIT_MS (how long cuInit takes, as a real driver's start-up does: 0),
 * GPUX_FAKE_CUDA_FAIL="function:N:code" (the Nth call of that function returns code; a sticky
 * code breaks the context as a fault would; with GPUX_FAKE_CUDA_FAIL_ONCE=path, only in a
 * process that finds no such file, which the failure creates: a restarted worker runs clean),
 * GPUX_FAKE_CUDA_REFUSE_SPIN=1 (cuEventSynchronize
 * of an event made without CU_EVENT_BLOCKING_SYNC, which a real driver busy-waits through,
 * fails with CUDA_ERROR_NOT_PERMITTED: a waiter must never burn a CPU for a long kernel),
 * GPUX_FAKE_CUDA_REGISTER_MS (how long cuMemHostRegister takes: 0),
 * GPUX_FAKE_CUDA_FAULT_HOLD_MS (how long a fault()'s launch takes to return once the context
 * is broken: 0), GPUX_FAKE_CUDA_COPY_BACK_MS (how long cuMemcpyDtoHAsync takes: 0; the fake carries
 * out a copy as it is enqueued, so a slow one holds its caller, and a fault meanwhile, a
 * slowfault's on another stream, fails it before it lands: a copy back cut short),
 * GPUX_FAKE_CUDA_LOG (a file that gets a line per registration, "register PID BYTES", and one per
 * copy that reads or writes pages still being registered, "copy-while-registering PID BYTES"),
 * GPUX_FAKE_CUDA_SWEEP=file (fake-sweep.h: calls counted and one failed, for a sweep over every
 * entry point and call), GPUX_FAKE_CUDA_PRIORITIES="least,greatest" (the streams' priorities,
 * "0,-5"), GPUX_FAKE_CUDA_NO_GREEN=1 (a driver without green contexts: no such entry points).
 */

#define MIN(a, b) ((a) < (b) ? (a) : (b))

pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
CUresult fake_sticky = CUDA_SUCCESS;
static size_t mem_used, mem_total = 1ull << 30;
static struct fake_alloc *allocs;
static char fail_fn[64];
static unsigned fail_at, fail_calls;
static CUresult fail_code;
static const char *fail_once; /* a file the failure creates; where it is, no failure */
static int ndevices = 1;
static bool refuse_spin;
/* Words streams are still to write (f_write_value()). */
static unsigned writes_pending;
/* When a slowfault launched breaks the context (CLOCK_MONOTONIC ns); 0: none launched. */
static uint64_t fault_at;
/* How long a kernel the fake does not know keeps its stream busy. */
static uint64_t kernel_ns = 5000;
static bool initialized;
/* The sweep's file, mapped; NULL without one. */
static struct fake_sweep *sweep;
/* Objects alive (enum fake_obj). */
static int live[FAKE_OBJS];
/* Host memory registered (cuMemHostRegister), to refuse overlaps and unknown unregisters. */
struct fake_reg {
	struct fake_reg *next;
	char *p;
	size_t len;
};
static struct fake_reg *regs;
/* Host ranges being registered now (cuMemHostRegister), for GPUX_FAKE_CUDA_LOG. */
#define REGISTERING_MAX 16
static struct {
	const uint8_t *p;
	size_t len;
} registering[REGISTERING_MAX];
static unsigned register_ms;
static unsigned copy_back_ms;
static unsigned fault_hold_ms;

/* A line in $GPUX_FAKE_CUDA_LOG, if it names one: "what PID BYTES". */
static void log_line(const char *what, size_t bytes)
{
	const char *path = getenv("GPUX_FAKE_CUDA_LOG");
	char line[128];
	int fd, n;

	if (!path)
		return;
	n = snprintf(line, sizeof(line), "%s %d %zu\n", what, (int)getpid(), bytes);
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	(void)write(fd, line, (size_t)n);
	(void)close(fd);
}

/* Host memory a copy (or gpux's copy-in kernel) reads or writes: logged when it is still
 * being registered, which the worker must wait for. */
static void host_touch(const void *p, size_t n)
{
	const uint8_t *a = p;
	bool hit = false;

	(void)pthread_mutex_lock(&fake_lock);
	for (unsigned i = 0; i < REGISTERING_MAX; i++)
		hit |= registering[i].len && a < registering[i].p + registering[i].len &&
		       registering[i].p < a + n;
	(void)pthread_mutex_unlock(&fake_lock);
	if (hit)
		log_line("copy-while-registering", n);
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* A slowfault's time has come: the context is broken from now on. Under fake_lock. */
static void late_fault(void)
{
	if (fault_at && fake_sticky == CUDA_SUCCESS && now_ns() >= fault_at)
		fake_sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
}

/* Whether the device is through the work up to *at (an event's time, a stream's), and if not
 * how long it has left (*ret_left, ns, unless NULL): judged under fake_lock with the fault, so work
 * that ends as a slowfault breaks the context is never seen done (the clock read before
 * late_fault(): past *at, it is past the fault too). */
static CUresult reached(const uint64_t *at, uint64_t *ret_left)
{
	CUresult r;
	uint64_t now;

	(void)pthread_mutex_lock(&fake_lock);
	now = now_ns();
	late_fault();
	r = fake_sticky != CUDA_SUCCESS ? fake_sticky
	    : now >= *at                ? CUDA_SUCCESS
					: CUDA_ERROR_NOT_READY;
	if (ret_left)
		*ret_left = *at > now ? *at - now : 0;
	(void)pthread_mutex_unlock(&fake_lock);
	return r;
}

/* Waits until the device is through the work up to *at; a fault elsewhere breaks the wait
 * too, as on a real device: looked at every ms. */
static CUresult wait_reached(const uint64_t *at)
{
	uint64_t left;
	CUresult r;

	while ((r = reached(at, &left)) == CUDA_ERROR_NOT_READY)
		(void)usleep((useconds_t)MIN(left / 1000 + 1, 1000));
	return r;
}

static bool is_sticky(CUresult r)
{
	return r == CUDA_ERROR_ILLEGAL_ADDRESS || r == CUDA_ERROR_LAUNCH_FAILED ||
	       r == CUDA_ERROR_MISALIGNED_ADDRESS || r == CUDA_ERROR_INVALID_PC ||
	       r == CUDA_ERROR_ILLEGAL_INSTRUCTION || r == CUDA_ERROR_HARDWARE_STACK_ERROR;
}

/* The entry points (the table at the end): how many, the name of each, the index of one. */
static size_t entry_count(void);
static const char *entry_name(size_t i);
static size_t entry_index(const char *fn);

/* Count a call of fn for the sweep; whether it is the one to fail. */
static bool sweep_hit(const char *fn)
{
	uint32_t n, zero = 0;
	size_t i;

	if (!sweep)
		return false;
	i = entry_index(fn);
	if (i == entry_count()) {
		/* An entry point missing from the fake's own table: the fake's bug. */
		(void)fprintf(stderr, "fake libcuda: %s is not in the table\n", fn);
		abort();
	}
	n = __atomic_add_fetch(&sweep->fns[i].calls, 1, __ATOMIC_SEQ_CST);
	return n == __atomic_load_n(&sweep->fail_at, __ATOMIC_SEQ_CST) &&
	       strncmp(sweep->fail_fn, fn, sizeof(sweep->fail_fn)) == 0 &&
	       __atomic_compare_exchange_n(&sweep->fired, &zero, 1, false, __ATOMIC_SEQ_CST,
					   __ATOMIC_SEQ_CST);
}

CUresult fake_enter(const char *fn, bool ctx)
{
	CUresult r = CUDA_SUCCESS;

	(void)pthread_mutex_lock(&fake_lock);
	late_fault();
	if (sweep_hit(fn)) {
		r = (CUresult)sweep->fail_code;
		if (is_sticky(r))
			fake_sticky = r;
	} else if (fail_at && strcmp(fn, fail_fn) == 0 && ++fail_calls == fail_at) {
		r = fail_code;
		if (is_sticky(r))
			fake_sticky = r;
		if (fail_once) {
			int fd = open(fail_once, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);

			if (fd >= 0)
				(void)close(fd);
		}
	} else if (ctx && fake_sticky != CUDA_SUCCESS) {
		r = fake_sticky;
	}
	(void)pthread_mutex_unlock(&fake_lock);
	return r;
}

CUresult fake_sticky_get(void)
{
	CUresult r;

	(void)pthread_mutex_lock(&fake_lock);
	late_fault();
	r = fake_sticky;
	(void)pthread_mutex_unlock(&fake_lock);
	return r;
}

void fake_obj_add(enum fake_obj o, int delta)
{
	(void)__atomic_add_fetch(&live[o], delta, __ATOMIC_SEQ_CST);
}

void fake_bad_release(const char *fn)
{
	(void)fprintf(stderr, "fake libcuda: %s of something not handed out, or released already\n",
		      fn);
	if (sweep)
		(void)__atomic_add_fetch(&sweep->bad_releases, 1, __ATOMIC_SEQ_CST);
}

/* The sweep's file, mapped as the fake is loaded (before any entry point is called). */
__attribute__((constructor)) static void sweep_open(void)
{
	const char *path = getenv("GPUX_FAKE_CUDA_SWEEP");
	struct fake_sweep *sw;
	int fd;

	if (!path || !*path)
		return;
	fd = open(path, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		(void)fprintf(stderr, "fake libcuda: %s: %s\n", path, strerror(errno));
		abort();
	}
	sw = mmap(NULL, sizeof(*sw), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	(void)close(fd);
	if (sw == MAP_FAILED) {
		(void)fprintf(stderr, "fake libcuda: mmap %s: %s\n", path, strerror(errno));
		abort();
	}
	/* Every process writes the same names, in the table's order. */
	for (size_t i = 0; i < entry_count() && i < FAKE_SWEEP_FNS; i++)
		(void)snprintf(sw->fns[i].name, sizeof(sw->fns[i].name), "%s", entry_name(i));
	sw->nfns = (uint32_t)entry_count();
	__atomic_store_n(&sw->magic, FAKE_SWEEP_MAGIC, __ATOMIC_SEQ_CST);
	sweep = sw;
}

/* A process that exits: what it never let go of. */
__attribute__((destructor)) static void leak_check(void)
{
	static const char *const what[FAKE_OBJS] = {
		[FAKE_STREAM] = "streams",
		[FAKE_EVENT] = "events",
		[FAKE_MODULE] = "modules",
		[FAKE_MEM] = "device allocations",
		[FAKE_HOST_REG] = "host registrations",
		[FAKE_GRAPH] = "graphs",
		[FAKE_GRAPH_EXEC] = "graph execs",
		[FAKE_GREEN] = "green contexts",
	};
	char text[256];
	size_t len = 0;

	for (unsigned o = 0; o < FAKE_OBJS; o++) {
		int n = __atomic_load_n(&live[o], __ATOMIC_SEQ_CST);

		if (n != 0 && len < sizeof(text))
			len += (size_t)snprintf(text + len, sizeof(text) - len, "%s%d %s",
						len ? ", " : "", n, what[o]);
	}
	if (len == 0)
		return;
	(void)fprintf(stderr, "fake libcuda: process %d exited with %s not released\n",
		      (int)getpid(), text);
	if (sweep) {
		(void)snprintf(sweep->leak_what, sizeof(sweep->leak_what), "%s", text);
		(void)__atomic_add_fetch(&sweep->leaks, 1, __ATOMIC_SEQ_CST);
	}
}

static CUresult f_init(unsigned flags)
{
	const char *e;

	ENTER("cuInit");
	(void)pthread_mutex_lock(&fake_lock);
	if (!initialized) {
		if ((e = getenv("GPUX_FAKE_CUDA_DEVICES")))
			ndevices = atoi(e);
		if ((e = getenv("GPUX_FAKE_CUDA_MEM")))
			mem_total = strtoull(e, NULL, 10);
		if ((e = getenv("GPUX_FAKE_CUDA_KERNEL_NS")))
			kernel_ns = strtoull(e, NULL, 10);
		refuse_spin = getenv("GPUX_FAKE_CUDA_REFUSE_SPIN") != NULL;
		if ((e = getenv("GPUX_FAKE_CUDA_REGISTER_MS")))
			register_ms = (unsigned)strtoul(e, NULL, 10);
		if ((e = getenv("GPUX_FAKE_CUDA_COPY_BACK_MS")))
			copy_back_ms = (unsigned)strtoul(e, NULL, 10);
		if ((e = getenv("GPUX_FAKE_CUDA_FAULT_HOLD_MS")))
			fault_hold_ms = (unsigned)strtoul(e, NULL, 10);
		if ((e = getenv("GPUX_FAKE_CUDA_INIT_MS")))
			(void)usleep((useconds_t)strtoul(e, NULL, 10) * 1000);
		if ((e = getenv("GPUX_FAKE_CUDA_FAIL"))) {
			char fn[64];
			unsigned at;
			int code;
			fail_once = getenv("GPUX_FAKE_CUDA_FAIL_ONCE");
			if (sscanf(e, "%63[^:]:%u:%d", fn, &at, &code) == 3 &&
			    (!fail_once || access(fail_once, F_OK) != 0)) {
				memcpy(fail_fn, fn, sizeof(fail_fn));
				fail_at = at;
				fail_code = (CUresult)code;
			}
		}
		initialized = true;
	}
	(void)pthread_mutex_unlock(&fake_lock);
	return ndevices > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE;
}

static CUresult f_driver_version(int *v)
{
	ENTER_AS("cuDriverGetVersion", false);
	*v = CUDA_VERSION;
	return CUDA_SUCCESS;
}

static CUresult f_error_name(CUresult r, const char **s)
{
	static const struct {
		CUresult r;
		const char *name;
	} names[] = {
		{ CUDA_SUCCESS, "CUDA_SUCCESS" },
		{ CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE" },
		{ CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY" },
		{ CUDA_ERROR_INVALID_IMAGE, "CUDA_ERROR_INVALID_IMAGE" },
		{ CUDA_ERROR_NOT_FOUND, "CUDA_ERROR_NOT_FOUND" },
		{ CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY" },
		{ CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS" },
		{ CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES" },
		{ CUDA_ERROR_MISALIGNED_ADDRESS, "CUDA_ERROR_MISALIGNED_ADDRESS" },
		{ CUDA_ERROR_LAUNCH_FAILED, "CUDA_ERROR_LAUNCH_FAILED" },
		{ CUDA_ERROR_NOT_SUPPORTED, "CUDA_ERROR_NOT_SUPPORTED" },
	};

	ENTER_AS("cuGetErrorName", false);
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (names[i].r == r) {
			*s = names[i].name;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_VALUE;
}

static CUresult f_device_count(int *n)
{
	ENTER_AS("cuDeviceGetCount", false);
	*n = ndevices;
	return CUDA_SUCCESS;
}

static CUresult f_device_get(CUdevice *d, int i)
{
	ENTER_AS("cuDeviceGet", false);
	if (i < 0 || i >= ndevices)
		return CUDA_ERROR_INVALID_DEVICE;
	*d = i;
	return CUDA_SUCCESS;
}

static CUresult f_device_name(char *name, int len, CUdevice d)
{
	ENTER_AS("cuDeviceGetName", false);
	(void)snprintf(name, (size_t)len, "Fake CUDA device %d", d);
	return CUDA_SUCCESS;
}

static CUresult f_device_uuid(CUuuid *u, CUdevice d)
{
	ENTER_AS("cuDeviceGetUuid", false);
	memset(u->bytes, 0x5a, sizeof(u->bytes));
	u->bytes[0] = (char)d;
	return CUDA_SUCCESS;
}

static CUresult f_total_mem(size_t *b, CUdevice d)
{
	ENTER_AS("cuDeviceTotalMem", false);
	*b = mem_total;
	return CUDA_SUCCESS;
}

static CUresult f_attribute(int *v, CUdevice_attribute a, CUdevice d)
{
	ENTER_AS("cuDeviceGetAttribute", false);
	switch (a) {
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR:
		*v = 9;
		break;
	case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR:
		*v = 0;
		break;
	case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT:
		*v = (int)FAKE_SMS;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X:
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y:
		*v = 1024;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z:
		*v = 64;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X:
		*v = 0x7fffffff;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y:
	case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z:
		*v = 65535;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK:
		*v = 48 * 1024;
		break;
	case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN:
		*v = 227 * 1024;
		break;
	default:
		*v = 1;
		break;
	}
	return CUDA_SUCCESS;
}

static CUresult f_ctx_retain(CUcontext *c, CUdevice d)
{
	ENTER("cuDevicePrimaryCtxRetain");
	*c = (CUcontext)(uintptr_t)(0x1000 + d);
	return CUDA_SUCCESS;
}

static CUresult f_ctx_release(CUdevice d)
{
	return fake_enter("cuDevicePrimaryCtxRelease", false);
}

static CUresult f_ctx_set_current(CUcontext c)
{
	ENTER_AS("cuCtxSetCurrent", false);
	return CUDA_SUCCESS;
}

static CUresult f_ctx_sync(void)
{
	ENTER("cuCtxSynchronize");
	return CUDA_SUCCESS;
}

static CUresult f_mem_info(size_t *free_b, size_t *total)
{
	ENTER("cuMemGetInfo");
	(void)pthread_mutex_lock(&fake_lock);
	*free_b = mem_total - mem_used;
	*total = mem_total;
	(void)pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

static CUresult f_stream_create(CUstream *s, unsigned flags)
{
	ENTER("cuStreamCreate");
	*s = calloc(1, sizeof(struct fake_stream));
	if (!*s)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fake_obj_add(FAKE_STREAM, 1);
	return CUDA_SUCCESS;
}

static CUresult f_stream_destroy(CUstream s)
{
	CUresult r = fake_enter("cuStreamDestroy", false);

	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	free(s);
	fake_obj_add(FAKE_STREAM, -1);
	return r;
}

static CUresult f_stream_sync(CUstream s)
{
	struct fake_stream *st = (struct fake_stream *)s;

	ENTER("cuStreamSynchronize");
	return wait_reached(&st->ready_at);
}

/* Work queued later on s starts after the event: s is busy until then at least. */
static CUresult f_stream_wait_event(CUstream s, CUevent e, unsigned flags)
{
	struct fake_stream *st = (struct fake_stream *)s;
	struct fake_event *ev = (struct fake_event *)e;

	ENTER("cuStreamWaitEvent");
	(void)pthread_mutex_lock(&fake_lock);
	if (ev->at > st->ready_at)
		st->ready_at = ev->at;
	(void)pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

static CUresult f_event_create(CUevent *e, unsigned flags)
{
	struct fake_event *ev;

	ENTER("cuEventCreate");
	ev = calloc(1, sizeof(*ev));
	if (!ev)
		return CUDA_ERROR_OUT_OF_MEMORY;
	ev->flags = flags;
	*e = (CUevent)ev;
	fake_obj_add(FAKE_EVENT, 1);
	return CUDA_SUCCESS;
}

static CUresult f_event_destroy(CUevent e)
{
	CUresult r = fake_enter("cuEventDestroy", false);

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	free(e);
	fake_obj_add(FAKE_EVENT, -1);
	return r;
}

static CUresult f_event_record(CUevent e, CUstream s)
{
	struct fake_event *ev = (struct fake_event *)e;
	struct fake_stream *st = (struct fake_stream *)s;
	uint64_t now = now_ns();

	ENTER("cuEventRecord");
	(void)pthread_mutex_lock(&fake_lock);
	ev->at = st->ready_at > now ? st->ready_at : now;
	(void)pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

/* A word a stream writes once it is through its work (cuStreamWriteValue64), unless a fault
 * came first: by a thread of its own, as the device writes it with nobody asking. */
struct fake_write {
	uint64_t *addr, value, at;
};

static void *write_later(void *arg)
{
	struct fake_write *w = arg;
	struct timespec ts = { .tv_sec = (time_t)(w->at / 1000000000u),
			       .tv_nsec = (long)(w->at % 1000000000u) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
	(void)pthread_mutex_lock(&fake_lock);
	late_fault();
	if (fake_sticky == CUDA_SUCCESS)
		__atomic_store_n(w->addr, w->value, __ATOMIC_RELEASE);
	writes_pending--;
	(void)pthread_mutex_unlock(&fake_lock);
	free(w);
	return NULL;
}

static CUresult f_write_value(CUstream s, CUdeviceptr addr, cuuint64_t value, unsigned flags)
{
	struct fake_stream *st = (struct fake_stream *)s;
	struct fake_write *w;
	pthread_attr_t attr;
	pthread_t t;
	int e;

	ENTER("cuStreamWriteValue64");
	w = malloc(sizeof(*w));
	if (!w)
		return CUDA_ERROR_OUT_OF_MEMORY;
	(void)pthread_mutex_lock(&fake_lock);
	*w = (struct fake_write){ .addr = (uint64_t *)(uintptr_t)addr,
				  .value = value,
				  .at = st->ready_at };
	writes_pending++;
	(void)pthread_mutex_unlock(&fake_lock);
	(void)pthread_attr_init(&attr);
	(void)pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	e = pthread_create(&t, &attr, write_later, w);
	(void)pthread_attr_destroy(&attr);
	if (e != 0) {
		(void)pthread_mutex_lock(&fake_lock);
		writes_pending--;
		(void)pthread_mutex_unlock(&fake_lock);
		free(w);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	return CUDA_SUCCESS;
}

/* A word written in stream order (cuStreamWriteValue32): the fake carries out a stream's
 * copies as they are enqueued, so the word is written now, before what follows it; nothing
 * once the context is broken. */
static CUresult f_write_value32(CUstream s, CUdeviceptr addr, cuuint32_t value, unsigned flags)
{
	ENTER("cuStreamWriteValue32");
	__atomic_store_n((uint32_t *)(uintptr_t)addr, value, __ATOMIC_SEQ_CST);
	return CUDA_SUCCESS;
}

static CUresult f_event_query(CUevent e)
{
	struct fake_event *ev = (struct fake_event *)e;

	ENTER("cuEventQuery");
	return reached(&ev->at, NULL);
}

static CUresult f_event_sync(CUevent e)
{
	struct fake_event *ev = (struct fake_event *)e;

	ENTER("cuEventSynchronize");
	if (refuse_spin && !(ev->flags & CU_EVENT_BLOCKING_SYNC))
		return CUDA_ERROR_NOT_PERMITTED;
	return wait_reached(&ev->at);
}

static CUresult f_elapsed(float *ms, CUevent a, CUevent b)
{
	const struct fake_event *x = (const struct fake_event *)a,
				*y = (const struct fake_event *)b;

	ENTER("cuEventElapsedTime");
	/* As the driver does: events made without timing have none to give. */
	if ((x->flags | y->flags) & CU_EVENT_DISABLE_TIMING)
		return CUDA_ERROR_INVALID_HANDLE;
	*ms = (float)((double)(y->at - x->at) / 1e6);
	return CUDA_SUCCESS;
}

/* As the driver: a range that overlaps one registered already is refused. */
static CUresult f_host_register(void *p, size_t len, unsigned flags)
{
	unsigned slot = REGISTERING_MAX;
	struct fake_reg *reg;

	ENTER("cuMemHostRegister");
	if (!p || !len)
		return CUDA_ERROR_INVALID_VALUE;
	reg = malloc(sizeof(*reg));
	if (!reg)
		return CUDA_ERROR_OUT_OF_MEMORY;
	(void)pthread_mutex_lock(&fake_lock);
	for (struct fake_reg *o = regs; o; o = o->next)
		if ((char *)p < o->p + o->len && o->p < (char *)p + len) {
			(void)pthread_mutex_unlock(&fake_lock);
			free(reg);
			return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
		}
	*reg = (struct fake_reg){ .next = regs, .p = p, .len = len };
	regs = reg;
	for (unsigned i = 0; i < REGISTERING_MAX && slot == REGISTERING_MAX; i++)
		if (!registering[i].len) {
			registering[i].p = p;
			registering[i].len = len;
			slot = i;
		}
	(void)pthread_mutex_unlock(&fake_lock);
	fake_obj_add(FAKE_HOST_REG, 1);
	(void)usleep(register_ms * 1000);
	(void)pthread_mutex_lock(&fake_lock);
	if (slot < REGISTERING_MAX)
		registering[slot].len = 0;
	(void)pthread_mutex_unlock(&fake_lock);
	log_line("register", len);
	return CUDA_SUCCESS;
}

static CUresult f_host_unregister(void *p)
{
	CUresult r = fake_enter("cuMemHostUnregister", false);
	struct fake_reg *found = NULL;
	bool none = false;

	(void)pthread_mutex_lock(&fake_lock);
	for (struct fake_reg **pp = &regs; *pp; pp = &(*pp)->next)
		if ((*pp)->p == p) {
			found = *pp;
			*pp = found->next;
			break;
		}
	(void)pthread_mutex_unlock(&fake_lock);
	if (!found) {
		fake_bad_release("cuMemHostUnregister");
		return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
	}
	free(found);
	fake_obj_add(FAKE_HOST_REG, -1);

	/* As the device's: a stream's writes to registered pages are done before they go. */
	while (!none) {
		(void)pthread_mutex_lock(&fake_lock);
		none = writes_pending == 0;
		(void)pthread_mutex_unlock(&fake_lock);
		if (!none)
			(void)usleep(100);
	}
	return r;
}

static CUresult f_host_devptr(CUdeviceptr *d, void *p, unsigned flags)
{
	ENTER("cuMemHostGetDevicePointer");
	*d = (CUdeviceptr)(uintptr_t)p;
	return CUDA_SUCCESS;
}

static CUresult f_htod(CUdeviceptr d, const void *h, size_t n, CUstream s)
{
	ENTER("cuMemcpyHtoDAsync");
	host_touch(h, n);
	memcpy((void *)(uintptr_t)d, h, n);
	return CUDA_SUCCESS;
}

static CUresult f_dtoh(void *h, CUdeviceptr d, size_t n, CUstream s)
{
	CUresult r;

	ENTER("cuMemcpyDtoHAsync");
	if (copy_back_ms) {
		(void)usleep(copy_back_ms * 1000);
		r = fake_sticky_get();
		if (r != CUDA_SUCCESS)
			return r;
	}
	host_touch(h, n);
	memcpy(h, (void *)(uintptr_t)d, n);
	return CUDA_SUCCESS;
}

static CUresult f_default_pool(CUmemoryPool *p, CUdevice d)
{
	ENTER("cuDeviceGetDefaultMemPool");
	*p = (CUmemoryPool)(uintptr_t)(0x2000 + d);
	return CUDA_SUCCESS;
}

static CUresult f_pool_set(CUmemoryPool p, CUmemPool_attribute a, void *v)
{
	ENTER("cuMemPoolSetAttribute");
	return CUDA_SUCCESS;
}

/* What a pool holds: the fake gives freed memory back at once, so none is kept unused. */
static CUresult f_pool_get(CUmemoryPool p, CUmemPool_attribute a, void *v)
{
	ENTER("cuMemPoolGetAttribute");
	if (a == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT || a == CU_MEMPOOL_ATTR_USED_MEM_CURRENT) {
		(void)pthread_mutex_lock(&fake_lock);
		*(cuuint64_t *)v = mem_used;
		(void)pthread_mutex_unlock(&fake_lock);
		return CUDA_SUCCESS;
	}
	return CUDA_ERROR_NOT_SUPPORTED;
}

static CUresult f_pool_trim(CUmemoryPool p, size_t keep)
{
	ENTER("cuMemPoolTrimTo");
	return CUDA_SUCCESS;
}

static CUresult f_alloc(CUdeviceptr *d, size_t n, CUmemoryPool pool, CUstream s)
{
	struct fake_alloc *a;

	ENTER("cuMemAllocFromPoolAsync");
	(void)pthread_mutex_lock(&fake_lock);
	if (mem_used + n > mem_total) {
		(void)pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	a = calloc(1, sizeof(*a));
	if (a)
		a->p = malloc(n ? n : 1);
	if (!a || !a->p) {
		free(a);
		(void)pthread_mutex_unlock(&fake_lock);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	/* Uninitialised, as device memory is: poison it. */
	memset(a->p, 0xa5, n);
	a->len = n;
	a->next = allocs;
	allocs = a;
	mem_used += n;
	(void)pthread_mutex_unlock(&fake_lock);
	fake_obj_add(FAKE_MEM, 1);
	*d = (CUdeviceptr)(uintptr_t)a->p;
	return CUDA_SUCCESS;
}

static CUresult f_free(CUdeviceptr d, CUstream s)
{
	CUresult r = fake_enter("cuMemFreeAsync", true);

	(void)pthread_mutex_lock(&fake_lock);
	for (struct fake_alloc **pp = &allocs; *pp; pp = &(*pp)->next)
		if ((*pp)->p == (void *)(uintptr_t)d) {
			struct fake_alloc *a = *pp;
			*pp = a->next;
			mem_used -= a->len;
			free(a->p);
			free(a);
			(void)pthread_mutex_unlock(&fake_lock);
			fake_obj_add(FAKE_MEM, -1);
			return r;
		}
	(void)pthread_mutex_unlock(&fake_lock);
	fake_bad_release("cuMemFreeAsync");
	return CUDA_ERROR_INVALID_VALUE;
}

/* A fatbin's first cubin that is not compressed (header: magic, version, header size, size of
 * the rest; entries: kind at 0, header size at 4, payload size at 8, flags at 40). */
static const char *fatbin_cubin(const char *p)
{
	uint64_t end, off, size, flags;
	uint32_t hsize;
	uint16_t head, kind;

	memcpy(&head, p + 6, 2);
	memcpy(&end, p + 8, 8);
	end += head;
	for (off = head; off < end; off += hsize + size) {
		memcpy(&kind, p + off, 2);
		memcpy(&hsize, p + off + 4, 4);
		memcpy(&size, p + off + 8, 8);
		memcpy(&flags, p + off + 40, 8);
		if (kind == 2 && !(flags & 0xa000))
			return p + off + hsize;
	}
	return NULL;
}

static CUresult f_module_load(CUmodule *m, const void *image)
{
	const char *p = image;
	struct fake_mod *mod;
	uint32_t magic;

	ENTER("cuModuleLoadData");
	memcpy(&magic, p, sizeof(magic));
	if (magic == 0xba55ed50u && !(p = fatbin_cubin(p)))
		return CUDA_ERROR_NO_BINARY_FOR_GPU;
	mod = calloc(1, sizeof(*mod));
	if (!mod)
		return CUDA_ERROR_OUT_OF_MEMORY;
	if (memcmp(p,
		   "\x7f"
		   "ELF",
		   4) == 0) {
		/* A cubin: its size is in its ELF header (section headers end it). */
		uint64_t shoff;
		uint16_t shentsize, shnum;
		memcpy(&shoff, p + 0x28, 8);
		memcpy(&shentsize, p + 0x3a, 2);
		memcpy(&shnum, p + 0x3c, 2);
		mod->len = shoff + (uint64_t)shentsize * shnum;
	} else if (strstr(p, ".version") && strstr(p, ".entry")) {
		mod->len = strlen(p);
		mod->ptx = true;
	} else {
		free(mod);
		return CUDA_ERROR_INVALID_IMAGE;
	}
	mod->image = malloc(mod->len + 1);
	if (!mod->image) {
		free(mod);
		return CUDA_ERROR_OUT_OF_MEMORY;
	}
	memcpy(mod->image, p, mod->len);
	mod->image[mod->len] = 0;
	*m = (CUmodule)mod;
	fake_obj_add(FAKE_MODULE, 1);
	return CUDA_SUCCESS;
}

static CUresult f_module_unload(CUmodule m)
{
	struct fake_mod *mod = (struct fake_mod *)m;
	CUresult r = fake_enter("cuModuleUnload", false);

	if (!mod)
		return CUDA_ERROR_INVALID_HANDLE;
	fake_obj_add(FAKE_MODULE, -1);
	for (unsigned i = 0; i < mod->nfns; i++)
		free(mod->fns[i]);
	for (unsigned i = 0; i < mod->nglobals; i++)
		free(mod->globals[i].p);
	free(mod->image);
	free(mod);
	return r;
}

static size_t ptx_type_size(const char *t)
{
	if (!strncmp(t, ".u64", 4) || !strncmp(t, ".s64", 4) || !strncmp(t, ".b64", 4) ||
	    !strncmp(t, ".f64", 4))
		return 8;
	if (!strncmp(t, ".u32", 4) || !strncmp(t, ".s32", 4) || !strncmp(t, ".b32", 4) ||
	    !strncmp(t, ".f32", 4))
		return 4;
	if (!strncmp(t, ".u16", 4) || !strncmp(t, ".s16", 4) || !strncmp(t, ".b16", 4) ||
	    !strncmp(t, ".f16", 4))
		return 2;
	return 1;
}

/* The parameters of ".entry name( .param .type n_0, .param .align A .b8 n_1[S], ... )". */
static void ptx_params(const char *entry, struct fake_fn *fn)
{
	const char *p = strchr(entry, '(');
	const char *end = p ? strchr(p, ')') : NULL;
	size_t off = 0;

	fn->nparams = 0;
	while (p && end && (p = strstr(p, ".param")) && p < end && fn->nparams < MAX_PARAMS) {
		size_t size, align;
		const char *b;

		p += 6;
		while (isspace((unsigned char)*p))
			p++;
		if (!strncmp(p, ".align", 6)) {
			align = strtoul(p + 6, (char **)&p, 10);
			while (isspace((unsigned char)*p))
				p++;
			b = strchr(p, '[');
			size = b && b < end ? strtoul(b + 1, NULL, 10) : ptx_type_size(p);
		} else {
			size = ptx_type_size(p);
			align = size;
		}
		off = (off + align - 1) / align * align;
		fn->size[fn->nparams] = size;
		fn->offset[fn->nparams] = off;
		off += size;
		fn->nparams++;
	}
}

/* A cubin's section named `name`: its bytes and size, or NULL. The fake trusts the cubin (the
 * worker checked it). */
static const uint8_t *cubin_section(const struct fake_mod *mod, const char *name, size_t *ret_size)
{
	Elf64_Ehdr h;
	Elf64_Shdr strtab;

	memcpy(&h, mod->image, sizeof(h));
	memcpy(&strtab, mod->image + h.e_shoff + (size_t)h.e_shstrndx * sizeof(Elf64_Shdr),
	       sizeof(strtab));
	for (unsigned i = 0; i < h.e_shnum; i++) {
		Elf64_Shdr sh;

		memcpy(&sh, mod->image + h.e_shoff + (size_t)i * sizeof(sh), sizeof(sh));
		if (strcmp(mod->image + strtab.sh_offset + sh.sh_name, name) == 0) {
			*ret_size = sh.sh_size;
			return (const uint8_t *)mod->image + sh.sh_offset;
		}
	}
	return NULL;
}

/*
 * The parameters of a cubin's kernel: the KPARAM_INFO attributes (format 4, attribute 0x17:
 * index, ordinal, offset, and the size in bits 18-31 of the last word) of .nv.info.<name>.
 */
static void cubin_params(const struct fake_mod *mod, const char *name, struct fake_fn *fn)
{
	char sec[300];
	size_t size = 0, off = 0;
	const uint8_t *p;

	(void)snprintf(sec, sizeof(sec), ".nv.info.%s", name);
	p = cubin_section(mod, sec, &size);
	if (!p)
		return;
	fn->nparams = 0;
	while (off + 2 <= size) {
		uint8_t format = p[off], attr = p[off + 1];
		uint16_t len;

		if (format != 4) {
			/* Formats 1-3 carry no length: 2 bytes, or 4 with a 16-bit value. */
			off += format == 1 ? 2 : 4;
			continue;
		}
		memcpy(&len, p + off + 2, sizeof(len));
		if (attr == 0x17 && len >= 12 && off + 4 + 12 <= size) {
			uint16_t ordinal, offset;
			uint32_t word;

			memcpy(&ordinal, p + off + 8, 2);
			memcpy(&offset, p + off + 10, 2);
			memcpy(&word, p + off + 12, 4);
			if (ordinal < MAX_PARAMS) {
				fn->size[ordinal] = (word >> 18) & 0x3fff;
				fn->offset[ordinal] = offset;
				if (ordinal + 1 > fn->nparams)
					fn->nparams = ordinal + 1;
			}
		}
		off += 4 + len;
	}
}

static CUresult f_get_function(CUfunction *f, CUmodule m, const char *name)
{
	struct fake_mod *mod = (struct fake_mod *)m;
	struct fake_fn *fn;
	char pat[300];
	const char *entry;

	ENTER("cuModuleGetFunction");
	for (unsigned i = 0; i < mod->nfns; i++)
		if (strcmp(mod->fns[i]->name, name) == 0) {
			*f = (CUfunction)mod->fns[i];
			return CUDA_SUCCESS;
		}
	if (mod->ptx) {
		(void)snprintf(pat, sizeof(pat), ".entry %s(", name);
		entry = strstr(mod->image, pat);
	} else {
		(void)snprintf(pat, sizeof(pat), ".text.%s", name);
		entry = memmem(mod->image, mod->len, pat, strlen(pat) + 1);
	}
	if (!entry || mod->nfns == 64 || strlen(name) >= sizeof(fn->name))
		return CUDA_ERROR_NOT_FOUND;
	fn = calloc(1, sizeof(*fn));
	if (!fn)
		return CUDA_ERROR_OUT_OF_MEMORY;
	memcpy(fn->name, name, strlen(name) + 1);
	fn->nparams = -1;
	fn->max_dyn_shared = 48 * 1024;
	if (mod->ptx)
		ptx_params(entry, fn);
	else
		cubin_params(mod, name, fn);
	mod->fns[mod->nfns++] = fn;
	*f = (CUfunction)fn;
	return CUDA_SUCCESS;
}

/* A kernel's attributes: numbers a test can tell apart (its static shared memory is 0, which
 * launches are checked against). */
const struct fake_attr fake_attrs[] = {
	{ CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024 },
	{ CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, 0 },
	{ CU_FUNC_ATTRIBUTE_NUM_REGS, 23 },
	{ CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES, 44 },
	{ CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, 8 },
	{ CU_FUNC_ATTRIBUTE_PTX_VERSION, 80 },
	{ CU_FUNC_ATTRIBUTE_BINARY_VERSION, 90 },
	{ CU_FUNC_ATTRIBUTE_CACHE_MODE_CA, 1 },
	{ CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 25 },
	{ CU_FUNC_ATTRIBUTE_MAX, 0 },
};

static CUresult f_func_attr(int *v, CUfunction_attribute a, CUfunction f)
{
	ENTER("cuFuncGetAttribute");
	for (unsigned i = 0; fake_attrs[i].a != CU_FUNC_ATTRIBUTE_MAX; i++)
		if (fake_attrs[i].a == a) {
			*v = fake_attrs[i].v;
			return CUDA_SUCCESS;
		}
	return CUDA_ERROR_INVALID_VALUE;
}

/* The object symbol `name` of a cubin: a copy of its bytes (zeros for .nv.global's). */
static struct fake_global *cubin_global(struct fake_mod *mod, const char *name)
{
	struct fake_global *g;
	Elf64_Ehdr h;
	Elf64_Shdr symtab = { 0 }, strtab, sec;

	memcpy(&h, mod->image, sizeof(h));
	for (unsigned i = 0; i < h.e_shnum && symtab.sh_type != SHT_SYMTAB; i++)
		memcpy(&symtab, mod->image + h.e_shoff + (size_t)i * sizeof(symtab),
		       sizeof(symtab));
	if (symtab.sh_type != SHT_SYMTAB || mod->nglobals == 64 || strlen(name) >= sizeof(g->name))
		return NULL;
	memcpy(&strtab, mod->image + h.e_shoff + (size_t)symtab.sh_link * sizeof(strtab),
	       sizeof(strtab));
	for (size_t off = 0; off + sizeof(Elf64_Sym) <= symtab.sh_size; off += sizeof(Elf64_Sym)) {
		Elf64_Sym s;

		memcpy(&s, mod->image + symtab.sh_offset + off, sizeof(s));
		if (ELF64_ST_TYPE(s.st_info) != STT_OBJECT || s.st_shndx == SHN_UNDEF ||
		    s.st_shndx >= h.e_shnum || s.st_size == 0 ||
		    strcmp(mod->image + strtab.sh_offset + s.st_name, name) != 0)
			continue;
		memcpy(&sec, mod->image + h.e_shoff + (size_t)s.st_shndx * sizeof(sec),
		       sizeof(sec));
		g = &mod->globals[mod->nglobals];
		g->p = calloc(1, s.st_size);
		if (!g->p)
			return NULL;
		if (sec.sh_type == SHT_PROGBITS && s.st_value + s.st_size <= sec.sh_size)
			memcpy(g->p, mod->image + sec.sh_offset + s.st_value, s.st_size);
		memcpy(g->name, name, strlen(name) + 1);
		g->size = s.st_size;
		mod->nglobals++;
		return g;
	}
	return NULL;
}

static CUresult f_get_global(CUdeviceptr *dptr, size_t *bytes, CUmodule m, const char *name)
{
	struct fake_mod *mod = (struct fake_mod *)m;
	struct fake_global *g = NULL;

	ENTER("cuModuleGetGlobal");
	for (unsigned i = 0; i < mod->nglobals && !g; i++)
		if (strcmp(mod->globals[i].name, name) == 0)
			g = &mod->globals[i];
	if (!g && !mod->ptx)
		g = cubin_global(mod, name);
	if (!g)
		return CUDA_ERROR_NOT_FOUND;
	if (dptr)
		*dptr = (CUdeviceptr)(uintptr_t)g->p;
	if (bytes)
		*bytes = g->size;
	return CUDA_SUCCESS;
}

static CUresult f_func_set_attr(CUfunction f, CUfunction_attribute a, int v)
{
	struct fake_fn *fn = (struct fake_fn *)f;

	ENTER("cuFuncSetAttribute");
	if (a == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
		if (v > 227 * 1024)
			return CUDA_ERROR_INVALID_VALUE;
		fn->max_dyn_shared = v;
	}
	return CUDA_SUCCESS;
}

static CUresult f_param_info(CUfunction f, size_t i, size_t *off, size_t *size)
{
	struct fake_fn *fn = (struct fake_fn *)f;

	ENTER("cuFuncGetParamInfo");
	if (fn->nparams < 0)
		return CUDA_ERROR_NOT_SUPPORTED;
	if (i >= (size_t)fn->nparams)
		return CUDA_ERROR_INVALID_VALUE;
	*off = fn->offset[i];
	*size = fn->size[i];
	return CUDA_SUCCESS;
}

#define P(type, i) (*(type *)params[(i)])

int fake_param_sizes(const struct fake_fn *fn, size_t *sizes)
{
	static const struct {
		const char *name;
		int n;
		size_t sizes[5];
	} known[] = {
		{ "saxpy", 5, { 8, 4, 8, 8, 8 } },
		{ "add1", 3, { 8, 8, 8 } },
		{ "spin", 1, { 4 } },
		{ "append", 2, { 4, 8 } },
	};

	if (fn->nparams >= 0) {
		memcpy(sizes, fn->size, (size_t)fn->nparams * sizeof(*sizes));
		return fn->nparams;
	}
	for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
		if (strcmp(fn->name, known[i].name) == 0) {
			memcpy(sizes, known[i].sizes, (size_t)known[i].n * sizeof(*sizes));
			return known[i].n;
		}
	return 0;
}

#define P(type, i) (*(type *)params[(i)])

CUresult fake_run_kernel(struct fake_fn *fn, unsigned gx, unsigned bx, struct fake_stream *st,
			 void **params)
{
	uint64_t busy = kernel_ns, now = now_ns();
	bool late = false;

	if (strcmp(fn->name, "saxpy") == 0) {
		uint64_t n = P(uint64_t, 0);
		float a = P(float, 1);
		const float *x = P(float *, 2), *y = P(float *, 3);
		float *out = P(float *, 4);
		for (uint64_t i = 0; i < n && i < (uint64_t)gx * bx; i++)
			out[i] = a * x[i] + y[i];
	} else if (strcmp(fn->name, "add1") == 0) {
		uint64_t n = P(uint64_t, 0);
		const float *in = P(float *, 1);
		float *out = P(float *, 2);
		for (uint64_t i = 0; i < n && i < (uint64_t)gx * bx; i++)
			out[i] = in[i] + 1;
	} else if (strcmp(fn->name, "append") == 0) {
		uint32_t *log = P(uint32_t *, 1);
		log[1 + log[0]++] = P(uint32_t, 0);
	} else if (strcmp(fn->name, "spin") == 0) {
		busy = (uint64_t)P(uint32_t, 0) * 1000000ull;
	} else if (strcmp(fn->name, "slowfault") == 0) {
		busy = (uint64_t)P(uint32_t, 0) * 1000000ull;
		late = true;
	} else if (strcmp(fn->name, "where") == 0) {
		uint32_t *out = P(uint32_t *, 0);

		out[0] = (uint32_t)st->prio;
		out[1] = st->sms ? st->sms : FAKE_SMS;
	} else if (strcmp(fn->name, "gpux_copy_in") == 0) {
		/* gpux's own (worker/cuda/cuda-copyin.c): its table's ranges, from client pages. */
		const uint8_t *t = params[0];
		uint32_t n;

		memcpy(&n, t, sizeof(n));
		for (uint32_t i = 0; i < n && i < 8; i++) {
			uint64_t dst, src, len;

			memcpy(&dst, t + 8 + 8 * i, 8);
			memcpy(&src, t + 72 + 8 * i, 8);
			memcpy(&len, t + 136 + 8 * i, 8);
			host_touch((const void *)(uintptr_t)src, len);
			memcpy((void *)(uintptr_t)dst, (const void *)(uintptr_t)src, len);
		}
	} else if (strcmp(fn->name, "fault") == 0) {
		/* Reported later, as a real fault is: at the next synchronisation. */
		(void)pthread_mutex_lock(&fake_lock);
		fake_sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
		(void)pthread_mutex_unlock(&fake_lock);
		/* Its caller, descheduled say, does not get back before others see the fault. */
		if (fault_hold_ms)
			(void)usleep(fault_hold_ms * 1000);
	}
	(void)pthread_mutex_lock(&fake_lock);
	st->ready_at = (st->ready_at > now ? st->ready_at : now) + busy;
	/* It breaks the context as its stream gets through it. */
	if (late && (!fault_at || st->ready_at < fault_at))
		fault_at = st->ready_at;
	(void)pthread_mutex_unlock(&fake_lock);
	return CUDA_SUCCESS;
}

static CUresult f_launch(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
			 unsigned by, unsigned bz, unsigned shared, CUstream s, void **params,
			 void **extra)
{
	struct fake_fn *fn = (struct fake_fn *)f;

	ENTER("cuLaunchKernel");
	if ((uint64_t)bx * by * bz > 1024 || (int)shared > fn->max_dyn_shared)
		return CUDA_ERROR_INVALID_VALUE;
	return fake_run_kernel(fn, gx, bx, (struct fake_stream *)s, params);
}

static const struct {
	const char *name;
	void *fn;
} table[] = {
	{ "cuGetProcAddress_v2", NULL },
	{ "cuInit", f_init },
	{ "cuDriverGetVersion", f_driver_version },
	{ "cuGetErrorName", f_error_name },
	{ "cuDeviceGetCount", f_device_count },
	{ "cuDeviceGet", f_device_get },
	{ "cuDeviceGetName", f_device_name },
	{ "cuDeviceGetUuid", f_device_uuid },
	{ "cuDeviceTotalMem", f_total_mem },
	{ "cuDeviceGetAttribute", f_attribute },
	{ "cuDevicePrimaryCtxRetain", f_ctx_retain },
	{ "cuDevicePrimaryCtxRelease", f_ctx_release },
	{ "cuCtxSetCurrent", f_ctx_set_current },
	{ "cuCtxSynchronize", f_ctx_sync },
	{ "cuMemGetInfo", f_mem_info },
	{ "cuStreamCreate", f_stream_create },
	{ "cuStreamDestroy", f_stream_destroy },
	{ "cuStreamSynchronize", f_stream_sync },
	{ "cuStreamWaitEvent", f_stream_wait_event },
	{ "cuEventCreate", f_event_create },
	{ "cuEventDestroy", f_event_destroy },
	{ "cuEventRecord", f_event_record },
	{ "cuEventQuery", f_event_query },
	{ "cuStreamWriteValue64", f_write_value },
	{ "cuStreamWriteValue32", f_write_value32 },
	{ "cuEventSynchronize", f_event_sync },
	{ "cuEventElapsedTime", f_elapsed },
	{ "cuMemHostRegister", f_host_register },
	{ "cuMemHostUnregister", f_host_unregister },
	{ "cuMemHostGetDevicePointer", f_host_devptr },
	{ "cuMemcpyHtoDAsync", f_htod },
	{ "cuMemcpyDtoHAsync", f_dtoh },
	{ "cuDeviceGetDefaultMemPool", f_default_pool },
	{ "cuMemPoolSetAttribute", f_pool_set },
	{ "cuMemPoolGetAttribute", f_pool_get },
	{ "cuMemPoolTrimTo", f_pool_trim },
	{ "cuMemAllocFromPoolAsync", f_alloc },
	{ "cuMemFreeAsync", f_free },
	{ "cuModuleLoadData", f_module_load },
	{ "cuModuleUnload", f_module_unload },
	{ "cuModuleGetFunction", f_get_function },
	{ "cuModuleGetGlobal", f_get_global },
	{ "cuFuncGetAttribute", f_func_attr },
	{ "cuFuncSetAttribute", f_func_set_attr },
	{ "cuFuncGetParamInfo", f_param_info },
	{ "cuLaunchKernel", f_launch },
	{ "cuGraphCreate", fake_graph_create },
	{ "cuGraphDestroy", fake_graph_destroy },
	{ "cuGraphAddKernelNode", fake_graph_add_kernel },
	{ "cuGraphInstantiateWithFlags", fake_graph_instantiate },
	{ "cuGraphExecDestroy", fake_exec_destroy },
	{ "cuGraphExecKernelNodeSetParams", fake_exec_set_kernel },
	{ "cuGraphLaunch", fake_graph_launch },
	{ "cuCtxGetStreamPriorityRange", fake_prio_range },
	{ "cuStreamCreateWithPriority", fake_stream_create_prio },
	{ "cuStreamGetPriority", fake_stream_get_prio },
	{ "cuDeviceGetDevResource", fake_dev_resource },
	{ "cuDevSmResourceSplitByCount", fake_sm_split },
	{ "cuDevResourceGenerateDesc", fake_res_desc },
	{ "cuGreenCtxCreate", fake_green_create },
	{ "cuGreenCtxDestroy", fake_green_destroy },
	{ "cuGreenCtxStreamCreate", fake_green_stream },
};

_Static_assert(sizeof(table) / sizeof(table[0]) <= FAKE_SWEEP_FNS, "a sweep counts every entry");

static size_t entry_count(void)
{
	return sizeof(table) / sizeof(table[0]);
}

static const char *entry_name(size_t i)
{
	return table[i].name;
}

static size_t entry_index(const char *fn)
{
	size_t i;

	for (i = 0; i < entry_count() && strcmp(table[i].name, fn) != 0; i++)
		;
	return i;
}

__attribute__((visibility("default"))) CUresult
cuGetProcAddress_v2(const char *symbol, void **pfn, int version, cuuint64_t flags,
		    CUdriverProcAddressQueryResult *status)
{
	const char *no_green = getenv("GPUX_FAKE_CUDA_NO_GREEN");

	ENTER_AS("cuGetProcAddress_v2", false);
	for (size_t i = 1; i < sizeof(table) / sizeof(table[0]); i++)
		if (strcmp(table[i].name, symbol) == 0 &&
		    !(no_green && *no_green &&
		      (strstr(symbol, "Green") || strstr(symbol, "Resource")))) {
			*pfn = table[i].fn;
			if (status)
				*status = CU_GET_PROC_ADDRESS_SUCCESS;
			return CUDA_SUCCESS;
		}
	*pfn = NULL;
	if (status)
		*status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
	return CUDA_ERROR_NOT_FOUND;
}

__attribute__((visibility("default"))) CUresult cuDriverGetVersion(int *v)
{
	return f_driver_version(v);
}
