/* SPDX-License-Identifier: MIT */
/* gpux/gpux.h: the public API of libgpuxclient. */
#ifndef GPUX_GPUX_H
#define GPUX_GPUX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <gpux/host-kernel.h>
#include <gpux/version.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(GPUX_BUILDING_LIBRARY)
#define GPUX_EXPORT __attribute__((visibility("default")))
#else
#define GPUX_EXPORT
#endif

/* An anonymous union is C11 and C++; GCC and clang take it in C99 too, said so here to keep
 * -pedantic quiet. */
#if defined(__GNUC__)
#define GPUX_EXTENSION __extension__
#else
#define GPUX_EXTENSION
#endif

/*
 * How it works: a process connects to gpuxd (starting a private one when none listens),
 * allocates buffers in shared memory, loads modules and submits kernel launches that a
 * worker process runs on a GPU (or on the CPU, with the host back end). The process itself
 * never loads CUDA, so it may fork at any time: a child keeps using the objects it inherited,
 * gets its own connection on its first call, and the parent is not disturbed.
 *
 * Every function that can fail returns a gpux_status: GPUX_OK (0) or a negative code.
 * Out-parameters are named ret_* and are written only on success. All functions are
 * thread-safe; objects belong to the gpux_ctx they were made from and must not outlive it.
 *
 * Handles (gpux_buf, gpux_dbuf, gpux_module, gpux_queue, gpux_req) are checked when they are
 * passed in: one freed already, or of another type, gives GPUX_E_INVAL (0, NULL, "" or
 * GPUX_ANY from the functions that return those), and a second free of the same handle is
 * ignored. This is a help against mistakes, not a guarantee: the library recognizes the
 * last 128 handles freed in a context (it keeps their memory that long); an older freed
 * handle, a handle used after gpux_disconnect() of its context, a freed gpux_ctx, or a
 * pointer that never was a handle is undefined behaviour, as a double free() is. Using a
 * handle in one thread while another thread frees it is undefined too.
 */

typedef enum gpux_status {
	GPUX_OK = 0,
	GPUX_E_INVAL = -1,        /* an argument or request field is not valid */
	GPUX_E_NOMEM = -2,        /* out of host or device memory */
	GPUX_E_PROTO = -3,        /* the peer broke the protocol; the connection was dropped */
	GPUX_E_CONNECT = -4,      /* gpuxd could not be reached or started */
	GPUX_E_PERM = -5,         /* gpuxd refused this user */
	GPUX_E_NODEV = -6,        /* no such device, or the device has failed */
	GPUX_E_WORKER_LOST = -7,  /* the worker died while the request was in flight */
	GPUX_E_KERNEL_FAULT = -8, /* the kernel faulted (illegal address, ...); see the message */
	GPUX_E_TIMEOUT = -9,      /* the request ran past its deadline */
	GPUX_E_COMPILE = -10,     /* the module did not compile; the log is the message */
	GPUX_E_NOTFOUND = -11,    /* no kernel of that name in the module */
	GPUX_E_QUOTA = -12,       /* a per-client limit was reached */
	GPUX_E_AGAIN = -13,       /* not finished yet */
	GPUX_E_NODRIVER = -14,    /* the device's driver is missing or too old */
	GPUX_E_DEVICE = -15,      /* the device refused the work; see the message */
	GPUX_E_IO = -16,          /* a system call failed */
	GPUX_E_VERSION = -17,     /* gpuxd speaks no protocol version this library knows */
	GPUX_E_STOPPING = -18,  /* gpuxd is stopping: it finishes what it has, takes nothing new */
	GPUX_E_DBUF_LOST = -19, /* a device buffer was lost with its worker (it restarted) */
} gpux_status;

/* A short English text for a status code; never NULL. */
GPUX_EXPORT const char *gpux_strerror(gpux_status status);

/* The library's version as "major.minor.micro", as built. */
GPUX_EXPORT const char *gpux_version(void);

/* The objects, each made from a gpux_ctx (a connection). */
typedef struct gpux_ctx gpux_ctx;
typedef struct gpux_buf gpux_buf;
typedef struct gpux_dbuf gpux_dbuf;
typedef struct gpux_module gpux_module;
typedef struct gpux_queue gpux_queue;
typedef struct gpux_req gpux_req;

/* ---- connection and devices ---- */

#define GPUX_ANY UINT32_MAX /* a device index meaning: let gpux choose */

enum gpux_backend {
	GPUX_BACKEND_HOST = 1, /* kernels in C on the CPU */
	GPUX_BACKEND_CUDA = 2,
};

enum gpux_device_state {
	GPUX_DEVICE_STARTING = 1,
	GPUX_DEVICE_READY = 2,
	GPUX_DEVICE_RESTARTING = 3,
	GPUX_DEVICE_FAILED = 4, /* died too often; left out of GPUX_ANY */
};

struct gpux_device_info {
	uint32_t index;
	uint32_t backend;  /* enum gpux_backend */
	uint32_t state;    /* enum gpux_device_state */
	uint32_t cc_major; /* compute capability (CUDA); 0 on the host back end */
	uint32_t cc_minor;
	uint32_t sm_count; /* multiprocessors, or CPU threads on the host back end */
	uint64_t mem_total;
	uint8_t uuid[16];
	char name[64];
};

/*
 * Connect to gpuxd at socket_path; NULL means $GPUX_SOCKET, else the per-user default
 * ($XDG_RUNTIME_DIR/gpux/gpuxd.sock, else /tmp/gpux-<uid>/gpuxd.sock) when it exists, else
 * the system-wide gpuxd's socket (/run/gpux/gpuxd.sock) when it exists, else the per-user
 * default, where a private gpuxd is started when nobody listens (gpuxd --private, found in
 * $GPUX_DAEMON, beside this library, or where it was installed); it exits once its last
 * client is gone. A context that a shared (not private) gpuxd served never starts a private
 * one: when that gpuxd goes away, calls fail with GPUX_E_CONNECT until it is back.
 * Connecting (here, or again in a later call after gpuxd went away, or in a forked child's
 * first call) waits at most 30 s, the start of a private gpuxd included. Meanwhile the
 * context's other threads go on, fork() included; those that need gpuxd wait for this
 * connection.
 * On success *ret_ctx owns the connection; free it with gpux_disconnect(). On failure,
 * gpux_connect_error() says why.
 */
GPUX_EXPORT gpux_status gpux_connect(const char *socket_path, gpux_ctx **ret_ctx);

/*
 * Why the last attempt of this thread to reach gpuxd failed (gpux_connect(), or connecting
 * anew inside another call): one line that names the socket path tried and the reason (no
 * such socket, nobody listens, permission, refused by gpuxd and why, gpuxd stopping, the
 * gpuxd program not found or failed and where its log is). "" when the last attempt worked.
 * Owned by the library, valid in this thread until its next attempt; never NULL.
 */
GPUX_EXPORT const char *gpux_connect_error(void);

/* Close the connection and free every object still made from it. NULL is accepted. */
GPUX_EXPORT void gpux_disconnect(gpux_ctx *ctx);

/* The number of devices gpuxd serves (at least 1). */
GPUX_EXPORT uint32_t gpux_device_count(gpux_ctx *ctx);

/* What gpuxd knows of a device now. */
GPUX_EXPORT gpux_status gpux_device_info(gpux_ctx *ctx, uint32_t device,
					 struct gpux_device_info *ret_info);

/*
 * An fd that polls readable when completions may have arrived, or when messages that waited
 * for a worker to read can go out. Owned by ctx; valid until the next fork (the child gets
 * its own). An event loop waits for it to poll readable, calls gpux_process(), then looks at
 * each of its requests with gpux_req_done() (or gpux_test()):
 *
 *     poll fd readable -> gpux_process(ctx) -> for each request r: if gpux_req_done(r) ...
 *
 * No completion is missed that way: a completion that another call took in (gpux_test()
 * or gpux_wait() of another request, a submit that waited for room, another thread's call)
 * leaves the fd readable until the next gpux_process(). Only the completion of the request
 * that gpux_test() or gpux_wait() was asked about is told by that call's return alone.
 */
GPUX_EXPORT gpux_status gpux_fd(gpux_ctx *ctx, int *ret_fd);

/*
 * Take in every completion that has arrived, and send what waited for room, without
 * blocking. gpux_fd() stops polling readable for what it took in, and for what other calls
 * took in before: look at every outstanding request after it. It never connects: when the
 * connection to gpuxd is gone (its requests have ended with GPUX_E_WORKER_LOST), it takes in
 * nothing and returns GPUX_OK; the next call that needs gpuxd connects again.
 */
GPUX_EXPORT gpux_status gpux_process(gpux_ctx *ctx);

/* ---- shared buffers ---- */

/*
 * A buffer of `size` bytes in shared memory, zero-filled, that kernels read and write in
 * place (no copy between this process and gpux). Usable by children forked later. Its memory
 * is this process's (charged to its memory cgroup). GPUX_E_QUOTA, before any memory is
 * touched, when this connection's buffers would pass gpuxd's cap on shared memory per client
 * (gpuxd --quota-shared; small buffers share 4 MiB arenas, which count whole);
 * GPUX_E_NOMEM when the memory cannot be had.
 */
GPUX_EXPORT gpux_status gpux_buf_alloc(gpux_ctx *ctx, size_t size, gpux_buf **ret_buf);

/* The buffer's bytes, page-aligned; borrowed, valid until gpux_buf_free(). */
GPUX_EXPORT void *gpux_buf_data(gpux_buf *buf);

GPUX_EXPORT size_t gpux_buf_size(const gpux_buf *buf);

/*
 * Free a buffer. Requests still using it must be finished first. NULL is accepted; a handle
 * freed already is ignored (see above). Its memory is kept, still registered with the
 * devices, for this process's next buffer of a like size (at most twice as large), which
 * then is ready for the device at once: up to 64 MiB in 16 segments, the oldest let go
 * first, all of it before a new buffer would be refused for gpuxd --quota-shared. Memory
 * whose file was handed out (gpux_buf_fd()) is not kept, nor a child's parent's. A buffer
 * alive at a fork() may be used by the child after it is freed here: its memory is never
 * given to another buffer of this process.
 */
GPUX_EXPORT void gpux_buf_free(gpux_buf *buf);

/* Let go of the memory of freed buffers that gpux_buf_free() keeps. NULL is accepted. */
GPUX_EXPORT void gpux_buf_trim(gpux_ctx *ctx);

/*
 * Freeze a buffer: its bytes can never change again, in this process or any other (its
 * memory is sealed against writing; the data pointer stays the same and becomes read-only).
 * A frozen buffer can be an IN argument only, and a cached one (gpux_arg_cached): a worker
 * then keeps its bytes on the device and does not upload them again, for any request of
 * this user with the same bytes. Costs one copy of the buffer. Children forked before the
 * freeze keep seeing the bytes as they were. GPUX_E_QUOTA: a small buffer's frozen copy would
 * be one shared segment more than a process may have (4096), or pass gpuxd --quota-shared.
 */
GPUX_EXPORT gpux_status gpux_buf_freeze(gpux_buf *buf);

/*
 * The memfd that holds a buffer's bytes, and where in it they start, for handing the buffer to
 * another process of this user (SCM_RIGHTS, or a spawned child's inherited fds), which attaches
 * it with gpux_buf_import(). *ret_fd is borrowed: the buffer owns it (close-on-exec), and
 * gpux_buf_freeze() replaces it. Small buffers share a memfd, so the receiver can reach the
 * others in it as well.
 */
GPUX_EXPORT gpux_status gpux_buf_fd(gpux_buf *buf, int *ret_fd, uint64_t *ret_offset);

/*
 * A buffer over the whole of a gpux memfd from another process (see gpux_buf_fd()): the same
 * memory, read and written in place by this process's kernels. The fd stays the caller's (it is
 * duplicated). A frozen buffer's memfd gives a frozen buffer. GPUX_E_INVAL: fd is not a memfd
 * sealed against shrinking, as gpux makes them; GPUX_E_QUOTA: one shared segment too many (4096),
 * or more shared memory than gpuxd --quota-shared allows. Free it with gpux_buf_free().
 */
GPUX_EXPORT gpux_status gpux_buf_import(gpux_ctx *ctx, int fd, gpux_buf **ret_buf);

/*
 * Cache affinity beyond one host, for a scheduler that places work across machines where its
 * cached inputs already are (each host has its own gpuxd; see GPUX_ANY for one host).
 *
 * gpux_buf_key(): the content key of `size` bytes of a frozen buffer from `offset` (size 0:
 * to its end), the key under which a device cache keeps them: the same bytes give the same
 * key in any process, on any host. GPUX_E_INVAL: not frozen, or not within the buffer.
 *
 * gpux_device_affinity(): a copy of the device's affinity filter, which its worker rewrites
 * as cache entries come and go: a set of (user, key) pairs, GPUX_AFFINITY_BITS bits of
 * which each pair sets two. GPUX_E_NODEV: no such device, or it is not ready.
 *
 * gpux_affinity_holds(): whether a filter (from gpux_device_affinity(), possibly of another
 * host) holds a key for the user `uid`: never false for a pair the filter holds, rarely true
 * for one it does not (a guess for placement, not a promise: the entry may go meanwhile).
 * It needs no connection.
 */
#define GPUX_KEY_SIZE 16u
#define GPUX_AFFINITY_BITS 4096u
GPUX_EXPORT gpux_status gpux_buf_key(gpux_buf *buf, uint64_t offset, uint64_t size,
				     uint8_t ret_key[GPUX_KEY_SIZE]);
GPUX_EXPORT gpux_status gpux_device_affinity(gpux_ctx *ctx, uint32_t device,
					     uint64_t ret_filter[GPUX_AFFINITY_BITS / 64]);
GPUX_EXPORT bool gpux_affinity_holds(const uint64_t filter[GPUX_AFFINITY_BITS / 64], uint32_t uid,
				     const uint8_t key[GPUX_KEY_SIZE]);

/* ---- device buffers ---- */

/*
 * Memory of `size` bytes on one device that keeps its contents between requests: a
 * kernel's output can feed the next kernel without a trip through the host. Counted against
 * the per-client device quota, and against the user's over all its clients and devices
 * (GPUX_E_QUOTA). Freed with gpux_dbuf_free() or when this
 * process goes away. Lost if its worker dies (a fault, a deadline, even another client's):
 * requests using it then in flight end with GPUX_E_WORKER_LOST, and every later use
 * (gpux_submit(), gpux_dbuf_write(), gpux_dbuf_read()) returns GPUX_E_DBUF_LOST; free it and
 * allocate another, or keep it in host memory (GPUX_DBUF_HOST below).
 * Requests of different queues that use one device buffer are not ordered between them.
 */
GPUX_EXPORT gpux_status gpux_dbuf_alloc(gpux_ctx *ctx, uint32_t device, size_t size,
					gpux_dbuf **ret_dbuf);

/*
 * A device buffer kept in host memory: its bytes live in shared memory of this process's
 * (counted against gpuxd --quota-shared, not --quota-device), which kernels read and write in
 * place as they do a mapped argument's. So it survives its worker: after a restart it is
 * handed to the new worker with its contents (what requests running at the death wrote
 * may be half done), where a device buffer in device memory is lost (GPUX_E_DBUF_LOST).
 * The cost: on a GPU, kernels reach it over the bus (PCIe or NVLink-C2C, tens of GB/s)
 * rather than from device memory (TB/s), and a request using it never runs again after its
 * worker died once it began (its changes are in place).
 */
#define GPUX_DBUF_HOST 0x1u

/*
 * gpux_dbuf_alloc() with flags (GPUX_DBUF_HOST, or 0). When the worker refuses the buffer and
 * ret_msg is not NULL, *ret_msg says why (free() it): the quota, or the device-memory reserve
 * that device buffers never take (gpuxd --device-reserve: memory kept so that requests with
 * IN/OUT arguments still run when device buffers fill the device), GPUX_E_QUOTA or
 * GPUX_E_NOMEM as they apply.
 */
GPUX_EXPORT gpux_status gpux_dbuf_alloc_ex(gpux_ctx *ctx, uint32_t device, size_t size,
					   uint32_t flags, gpux_dbuf **ret_dbuf, char **ret_msg);

/* Free a device buffer. Requests still using it must be finished first. NULL is accepted;
 * a handle freed already is ignored (see above). */
GPUX_EXPORT void gpux_dbuf_free(gpux_dbuf *dbuf);

GPUX_EXPORT size_t gpux_dbuf_size(const gpux_dbuf *dbuf);
GPUX_EXPORT uint32_t gpux_dbuf_device(const gpux_dbuf *dbuf);

/*
 * Copy `size` bytes from a shared buffer into a device buffer (write) or back (read), as a
 * request in `queue` (NULL: the device's default queue), ordered with that queue's launches.
 */
GPUX_EXPORT gpux_status gpux_dbuf_write(gpux_dbuf *dst, uint64_t dst_offset, gpux_buf *src,
					uint64_t src_offset, uint64_t size, gpux_queue *queue,
					gpux_req **ret_req);
GPUX_EXPORT gpux_status gpux_dbuf_read(gpux_buf *dst, uint64_t dst_offset, gpux_dbuf *src,
				       uint64_t src_offset, uint64_t size, gpux_queue *queue,
				       gpux_req **ret_req);

/* ---- modules ---- */

enum gpux_lang {
	GPUX_LANG_CUDA = 1,  /* CUDA C++: NVRTC for a GPU, the C++ compiler on the host back end */
	GPUX_LANG_PTX = 2,   /* PTX text, NUL-terminated */
	GPUX_LANG_CUBIN = 3, /* a cubin or fatbin for the device */
	GPUX_LANG_HOST = 4,  /* C for the host back end (see gpux/host-kernel.h) */
};

/*
 * Load a module from `size` bytes of `code` in language `lang`, with compiler `options`
 * (space-separated, or NULL). The code is compiled once per machine and cached by its
 * content; later loads of the same code are fast. The module is loaded on one device now,
 * so that errors show at once, and on other devices the first time a request goes there.
 * On a compile error the status is GPUX_E_COMPILE and, when ret_log is not NULL, *ret_log
 * is the compiler's log (free() it); on success *ret_log is NULL or a warnings log.
 */
GPUX_EXPORT gpux_status gpux_module_load(gpux_ctx *ctx, uint32_t lang, const void *code,
					 size_t size, const char *options, gpux_module **ret_module,
					 char **ret_log);

/*
 * A header that a CUDA C++ module may #include by `name` ("util.cuh", "lib/vec.h"), as
 * nvrtcCreateProgram()'s headers are: looked for before the toolkit's own headers, which
 * every CUDA C++ module may include without options (cuda_fp16.h, cooperative_groups.h,
 * cuda/std/..., CUB's block-level headers).
 */
struct gpux_header {
	const char *name; /* 1 to 255 bytes */
	const char *text; /* NUL-terminated */
};

#define GPUX_MODULE_HEADERS_MAX 256u
#define GPUX_MODULE_NAMES_MAX 1024u

/* What gpux_module_load_ex() takes besides the code. Zero-fill it, then set size. */
struct gpux_module_opts {
	uint32_t size;                     /* sizeof(struct gpux_module_opts) */
	uint32_t nheaders;                 /* at most GPUX_MODULE_HEADERS_MAX */
	const char *options;               /* as gpux_module_load()'s, or NULL */
	const struct gpux_header *headers; /* nheaders of them (CUDA C++ only) */
	const char *const *names;          /* nnames name expressions (CUDA C++ only) */
	uint32_t nnames;                   /* at most GPUX_MODULE_NAMES_MAX */
	uint32_t reserved;                 /* 0 */
};

/*
 * gpux_module_load() with headers and name expressions. A name expression is how a kernel
 * template's instance is asked for ("fill<float>", "reduce<int, 256>"), as with NVRTC's
 * nvrtcAddNameExpression() or CuPy's name_expressions: each one listed here is compiled and
 * can then be the `kernel` of gpux_submit(); one that names no kernel is a compile error.
 * Instances a source instantiates explicitly ("template __global__ void fill<float>(...)")
 * need no listing. Kernels with C++ linkage are found by their plain or qualified name
 * ("saxpy", "ns::saxpy") or their mangled one; an overloaded name is GPUX_E_INVAL, with the
 * candidates in the request's message. Code, headers and names count against one limit
 * (64 MiB). opts may be NULL; a size this library does not know is GPUX_E_INVAL unless what
 * it does not know is zero.
 */
GPUX_EXPORT gpux_status gpux_module_load_ex(gpux_ctx *ctx, uint32_t lang, const void *code,
					    size_t size, const struct gpux_module_opts *opts,
					    gpux_module **ret_module, char **ret_log);

/* Where a module's image came from when gpux_module_load() loaded it. */
enum gpux_module_source {
	GPUX_MODULE_COMPILED = 1, /* compiled for this load */
	GPUX_MODULE_DISK = 2,     /* read from the worker's disk cache */
	GPUX_MODULE_MEMORY = 3,   /* the worker had it loaded already */
};

struct gpux_module_info {
	/* The cache key (XXH3-128 of the language, options, code, user, target and compiler
	 * versions): the disk cache keeps the image as <these 16 bytes in hex>.<cubin|so> in
	 * the worker's cache directory. */
	uint8_t key[16];
	uint32_t device;   /* the device whose worker loaded it first */
	uint32_t source;   /* enum gpux_module_source */
	uint64_t build_ns; /* that worker's time compiling (or reading) and loading it */
};

/*
 * What the worker that loaded the module said of it: its cache key, where it came from, the
 * time it took. GPUX_E_NOTFOUND when the worker did not say (a gpuxd older than this
 * library's protocol version 3 never does).
 */
GPUX_EXPORT gpux_status gpux_module_info(gpux_module *module, struct gpux_module_info *ret_info);

/* Unload a module. Requests still using it must be finished first. NULL is accepted; a
 * handle freed already is ignored (see above). */
GPUX_EXPORT void gpux_module_free(gpux_module *module);

/* ---- what a module holds: its kernels' attributes, its variables ---- */

/* An attribute that the device's back end cannot tell (registers on the host back end). */
#define GPUX_ATTR_UNKNOWN (-1)

/*
 * A kernel's attributes, as cuFuncGetAttribute() gives them on a GPU. On the host back end
 * only max_threads_per_block, max_dynamic_shared_size_bytes and nparams are known (and
 * shared_size_bytes for a kernel in C, which has none: 0); the others are GPUX_ATTR_UNKNOWN.
 */
struct gpux_kernel_attrs {
	int32_t max_threads_per_block; /* the most threads a block of this kernel may have */
	int32_t num_regs;              /* registers per thread */
	int32_t shared_size_bytes;     /* static shared memory per block */
	int32_t const_size_bytes;      /* constant memory the kernel's module declares */
	int32_t local_size_bytes;      /* local memory per thread */
	/* The most dynamic shared memory a launch may ask for: gpux raises the kernel's own limit
	 * (48 KiB on a GPU until raised) as launches need it, up to what the device allows. */
	int32_t max_dynamic_shared_size_bytes;
	int32_t ptx_version;    /* the PTX it was compiled from: major * 10 + minor */
	int32_t binary_version; /* the architecture of its binary: major * 10 + minor */
	int32_t cache_mode_ca;  /* 1: global loads cached in L1 too (-Xptxas -dlcm=ca) */
	int32_t preferred_shared_memory_carveout; /* percent; -1 also when none was set */
	int32_t nparams;                          /* parameters it declares */
	int32_t reserved[5];
};

/*
 * The attributes of `kernel` of a module (named as for gpux_submit()) on `device`: an index, or
 * GPUX_ANY for the device that loaded the module first. Waits for the worker's answer, and for
 * the module's build there if it was not loaded on that device yet. GPUX_E_NOTFOUND: no such
 * kernel (GPUX_E_INVAL: an overloaded name); the module's own failure to build there, as a
 * request would get it; GPUX_E_INVAL for a name of 0 or more than 255 bytes. A worker from
 * before this call (library 0.3) drops the connection that asks.
 */
GPUX_EXPORT gpux_status gpux_kernel_attrs(gpux_module *module, const char *kernel, uint32_t device,
					  struct gpux_kernel_attrs *ret_attrs);

/*
 * A variable of a module as a device buffer on `device` (an index, or GPUX_ANY for the device
 * that loaded the module first): in CUDA C++ a __device__ or __constant__ variable defined
 * at namespace scope, in C for the host back end one the module exports (GPUX_HOST_GLOBAL,
 * gpux/host-kernel.h). `name` is its symbol ("coeffs", "_ZN2ns6coeffsE") or its qualified C++
 * name ("ns::coeffs"), 1 to 255 bytes. The device buffer is the variable itself:
 * gpux_dbuf_size() is its size, gpux_dbuf_write() and gpux_dbuf_read() copy to and from it in
 * a queue's order (copies past its end are refused), and gpux_arg_dbuf() hands its address to
 * a kernel of any module on that device. On the host back end a variable in read-only memory
 * (a `const` one) cannot be written: gpux_dbuf_write() of it is GPUX_E_INVAL.
 *
 * The variable belongs to the module as the worker loaded it, which the processes of one user
 * that load the same code (with the same options, headers and names) share: they see the same
 * variables. Its value lasts while the worker keeps the module loaded (after its last
 * gpux_module_free() too, among the modules kept for the next load), and the device buffer
 * keeps it loaded there until gpux_dbuf_free(); it counts against no quota. Lost, as any
 * device buffer, when its worker dies. GPUX_E_NOTFOUND: no such variable; GPUX_E_INVAL: a name
 * of 0 or more than 255 bytes; GPUX_E_QUOTA: the connection has 4096 device buffers already.
 * A worker from before this call (library 0.3) drops the connection that asks.
 */
GPUX_EXPORT gpux_status gpux_module_global(gpux_module *module, const char *name, uint32_t device,
					   gpux_dbuf **ret_dbuf);

/* ---- queues ---- */

/*
 * A queue on one device: its requests run in submission order, while different queues may
 * run at the same time (a CUDA stream each). Every device also has a default queue, used
 * when a launch names none.
 */
GPUX_EXPORT gpux_status gpux_queue_open(gpux_ctx *ctx, uint32_t device, gpux_queue **ret_queue);

/*
 * Priorities. A queue of a higher priority has its requests taken from this process, handed
 * to the device and answered before those of lower ones, on streams of its own of a higher
 * CUDA stream priority (the device runs their kernels' blocks first as SMs come free; it
 * does not stop kernels already running); queues of one priority take turns, as always.
 * Priorities above 0 are for latency-critical work of a few requests at a time: their
 * requests are launched one by one, never held back to be batched, and a process with such
 * a queue looks for its answers for up to 2 ms before it sleeps ($GPUX_SPIN_US where set),
 * however busy the machine is: a CPU spent on the few latency-critical waits. A queue's
 * priority is 0 unless said otherwise, or what gpuxd gives the user by default; the highest a
 * user may ask for is gpuxd's to say (gpuxd --priority: by default 0 for other users, every
 * priority for gpuxd's own user and root): gpux_priority_limits(). -1 is below everything
 * else: background work.
 */
#define GPUX_PRIORITY_MIN (-1) /* background: after everything else */
#define GPUX_PRIORITY_MAX 2    /* latency-critical */

/*
 * Compute shares. A queue with a share runs its kernels on at most that part of the device's
 * SMs (a CUDA green context, CUDA 12.5 or later), so that a compute-bound client leaves the
 * rest free for others: give the bulk work a share, and latency-critical work finds SMs
 * free. A share is rounded up to what the device can split (8 SMs on an H100) and is a cap,
 * not a reservation: queues of the same share may run on the same SMs. Where the device
 * cannot split its SMs (no green contexts, the host back end), shares are taken and ignored:
 * gpux status says so. Launches of a queue with a share go one by one, never as graphs.
 */
#define GPUX_SHARE_MAX 100u
#define GPUX_QUEUE_PRIORITY 0x1u /* gpux_queue_opts.priority is given */

/* A queue's options. Zero-fill it, then set size and what is given. */
struct gpux_queue_opts {
	uint32_t size;        /* sizeof(struct gpux_queue_opts) */
	uint32_t flags;       /* GPUX_QUEUE_PRIORITY; without it, the default priority */
	int32_t priority;     /* GPUX_PRIORITY_MIN to GPUX_PRIORITY_MAX */
	uint32_t share;       /* percent of the device's SMs its kernels may use; 0: all of them */
	uint64_t reserved[2]; /* 0 */
};

/*
 * gpux_queue_open() with options (NULL: none). GPUX_E_PERM for a priority above what gpuxd
 * allows this user (gpux_priority_limits()); GPUX_E_INVAL for one out of range, a share
 * above GPUX_SHARE_MAX, or a size this library does not know unless what it does not know
 * is zero. After a worker's restart the queue is opened again with the same options.
 */
GPUX_EXPORT gpux_status gpux_queue_open_ex(gpux_ctx *ctx, uint32_t device,
					   const struct gpux_queue_opts *opts,
					   gpux_queue **ret_queue);

/*
 * The options of the default queues (every device's) of this context, from their next
 * request on; NULL: none (the default priority, every SM). Checked as gpux_queue_open_ex()
 * checks them. A context has them until it is freed, in children forked later too.
 */
GPUX_EXPORT gpux_status gpux_set_default_queue(gpux_ctx *ctx, const struct gpux_queue_opts *opts);

/* The highest priority gpuxd lets this context's queues have, and theirs when none is asked. */
GPUX_EXPORT gpux_status gpux_priority_limits(gpux_ctx *ctx, int32_t *ret_max, int32_t *ret_default);

/* Close a queue. Requests still in it must be finished first. NULL is accepted; a handle
 * freed already is ignored (see above). */
GPUX_EXPORT void gpux_queue_free(gpux_queue *queue);

/* ---- arguments ---- */

enum gpux_arg_kind {
	GPUX_ARG_SCALAR = 1, /* a value, copied at submission */
	GPUX_ARG_IN = 2,     /* a buffer range copied to the device before the launch */
	GPUX_ARG_OUT = 3,    /* a buffer range copied back from the device after it */
	GPUX_ARG_INOUT = 4,  /* both */
	GPUX_ARG_MAPPED = 5, /* the kernel reads and writes the buffer's own pages, no copy */
	GPUX_ARG_DBUF = 6,   /* a range of a device buffer (gpux_dbuf), which stays on the GPU */
};

/* Flag of an IN argument of a frozen buffer: keep its bytes on the device for next time. */
#define GPUX_ARG_CACHED 0x1u

struct gpux_arg {
	uint32_t kind; /* enum gpux_arg_kind */
	uint32_t flags;
	GPUX_EXTENSION union {
		gpux_buf *buf;     /* IN, OUT, INOUT, MAPPED */
		gpux_dbuf *dbuf;   /* DBUF */
		const void *value; /* SCALAR: `size` bytes, at most 256 */
	};
	uint64_t offset; /* into buf */
	uint64_t size;
};

static inline struct gpux_arg gpux_arg_buf(uint32_t kind, gpux_buf *buf, uint64_t offset,
					   uint64_t size)
{
	struct gpux_arg a = { kind, 0, { buf }, offset, size };
	return a;
}

static inline struct gpux_arg gpux_arg_in(gpux_buf *buf, uint64_t offset, uint64_t size)
{
	return gpux_arg_buf(GPUX_ARG_IN, buf, offset, size);
}

static inline struct gpux_arg gpux_arg_out(gpux_buf *buf, uint64_t offset, uint64_t size)
{
	return gpux_arg_buf(GPUX_ARG_OUT, buf, offset, size);
}

static inline struct gpux_arg gpux_arg_inout(gpux_buf *buf, uint64_t offset, uint64_t size)
{
	return gpux_arg_buf(GPUX_ARG_INOUT, buf, offset, size);
}

static inline struct gpux_arg gpux_arg_mapped(gpux_buf *buf, uint64_t offset, uint64_t size)
{
	return gpux_arg_buf(GPUX_ARG_MAPPED, buf, offset, size);
}

/* An IN argument of a frozen buffer whose bytes the device keeps for next time. */
static inline struct gpux_arg gpux_arg_cached(gpux_buf *buf, uint64_t offset, uint64_t size)
{
	struct gpux_arg a = gpux_arg_buf(GPUX_ARG_IN, buf, offset, size);
	a.flags = GPUX_ARG_CACHED;
	return a;
}

/* A range of a device buffer; the launch goes to that buffer's device. */
static inline struct gpux_arg gpux_arg_dbuf(gpux_dbuf *dbuf, uint64_t offset, uint64_t size)
{
	struct gpux_arg a = { GPUX_ARG_DBUF, 0, { NULL }, offset, size };
	a.dbuf = dbuf;
	return a;
}

static inline struct gpux_arg gpux_arg_scalar(const void *value, uint64_t size)
{
	struct gpux_arg a = { GPUX_ARG_SCALAR, 0, { NULL }, 0, size };
	a.value = value;
	return a;
}

/* A scalar argument from an lvalue: GPUX_ARG_VALUE(n) for `uint32_t n`. */
#define GPUX_ARG_VALUE(v) gpux_arg_scalar(&(v), sizeof(v))

/* ---- requests ---- */

struct gpux_launch {
	uint32_t grid[3];      /* blocks; a 0 is taken as 1 */
	uint32_t block[3];     /* threads per block; a 0 is taken as 1 */
	uint32_t shared_bytes; /* dynamic shared memory per block */
	uint32_t timeout_ms;   /* 0: gpuxd's default deadline */
	uint32_t device;       /* a device index, or GPUX_ANY (gpux chooses: the least busy ready
				* device, preferring one that holds the cached inputs, and the
				* device of the last GPUX_ANY launch while no other has a quarter
				* less to do; a device buffer argument decides it); ignored when
				* queue is set */
	uint32_t flags;        /* GPUX_LAUNCH_* */
	gpux_queue *queue;     /* NULL: the device's default queue */
};

/*
 * Measure the device's own time for the request (gpux_times.device_ns) with CUDA timing
 * events, which cost about 3 µs more per launch on an H200. Without it device_ns is 0 on a
 * GPU; the host back end always measures it.
 */
#define GPUX_LAUNCH_TIMED 0x1u

struct gpux_times {
	uint64_t queue_ns;  /* from arrival at the worker to the start of its work */
	uint64_t run_ns;    /* the worker's wall time for copies, launch and copies back */
	uint64_t device_ns; /* the device's own time for that work: see GPUX_LAUNCH_TIMED */
};

/*
 * Submit a launch of `kernel` in `module` with `nargs` arguments. Returns at once; the
 * request runs after the earlier ones of its queue. On success *ret_req is the request:
 * wait for it with gpux_wait() or gpux_test(), then gpux_req_free() it. Buffers named in
 * args must not be freed, nor their OUT ranges read, nor their IN ranges written, before the
 * request is finished: when its worker dies for another client's kernel (a fault, a
 * deadline), a request that had not begun to change this process's memory runs again on the
 * restarted worker (GPUX_ANY ones perhaps on another device), reading its inputs again; one
 * that had (a mapped argument or device buffer in use, results being copied back, a host
 * kernel begun) ends with GPUX_E_WORKER_LOST. A host kernel that writes an IN argument (handed
 * to it read-only) fails with GPUX_E_KERNEL_FAULT naming the argument; on a GPU such a write
 * goes to the worker's device copy, which is not copied back.
 * GPUX_E_INVAL, with nothing sent, for a launch its device cannot run: a grid or block
 * dimension past the device's limits (a grid dimension is at most 2^31 - 1 anywhere), more
 * threads per block or more dynamic shared memory than it allows. A kernel's own limits
 * (fewer threads, its static shared memory) are checked by the worker: the request then
 * ends with GPUX_E_INVAL and a message.
 */
GPUX_EXPORT gpux_status gpux_submit(gpux_module *module, const char *kernel,
				    const struct gpux_launch *launch, const struct gpux_arg *args,
				    uint32_t nargs, gpux_req **ret_req);

/*
 * Wait up to timeout_ms (-1: no limit) for a request to finish. Returns its status
 * (GPUX_OK, or why it failed), or GPUX_E_AGAIN if it is still running at the time limit.
 */
GPUX_EXPORT gpux_status gpux_wait(gpux_req *req, int64_t timeout_ms);

/*
 * gpux_wait() with no waiting: it takes in what has arrived, for every request. What it takes
 * in for other requests leaves gpux_fd() readable, so that an event loop comes back for it.
 */
GPUX_EXPORT gpux_status gpux_test(gpux_req *req);

/*
 * Whether the request has finished (its status is then gpux_test()'s), as far as what was
 * already taken in says: it takes nothing in and waits for nothing but the context's lock.
 * false for an invalid handle. For event loops, after gpux_process() (see gpux_fd()).
 */
GPUX_EXPORT bool gpux_req_done(gpux_req *req);

/* The finished request's detail text (compiler log, CUDA error, bad argument), or "". */
GPUX_EXPORT const char *gpux_req_message(gpux_req *req);

/* The finished request's timings. */
GPUX_EXPORT gpux_status gpux_req_times(gpux_req *req, struct gpux_times *ret_times);

/* The device the request was sent to. */
GPUX_EXPORT uint32_t gpux_req_device(gpux_req *req);

/*
 * Free a request. A request still running is waited for first, so that its buffers are
 * free to reuse afterwards. NULL is accepted; a handle freed already is ignored (see above).
 */
GPUX_EXPORT void gpux_req_free(gpux_req *req);

/* gpux_submit(), gpux_wait() with no time limit, gpux_req_free(): the request's status. */
GPUX_EXPORT gpux_status gpux_run(gpux_module *module, const char *kernel,
				 const struct gpux_launch *launch, const struct gpux_arg *args,
				 uint32_t nargs);

#ifdef __cplusplus
}
#endif

#endif
