/* SPDX-License-Identifier: MIT */
/* python/src/pygpux.h: the gpux._gpux extension's objects, shared by its files. */
#pragma once

/* The stable ABI of CPython 3.11 and later: one build serves every later Python. */
#define Py_LIMITED_API 0x030b0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <gpux/gpux.h>

/* As the library's own limits (ipc/proto.h), which only the library checks. */
#define PYX_ARGS_MAX 64u
#define PYX_SCALAR_MAX 256u
#define PYX_NAME_MAX 255u                  /* bytes of a kernel, name expression or header name */
#define PYX_CODE_MAX (64u * 1024u * 1024u) /* code, headers and name expressions together */

/* The eventfds a context tells of calls that take in: its watcher thread's, and its loop's. */
#define PYX_NOTIFY_MAX 2

typedef struct pyx_Context {
	PyObject_HEAD PyObject *weakrefs;
	gpux_ctx *ctx;
	/* Threads in a call of this context that may take in completions (every call that
	 * waits for gpuxd or a worker, wait(0) and process() too); the watchers are told when
	 * it leaves 0 and when it comes back (notify_fd, -1: none), since such a thread takes
	 * in completions that they then do not see arrive on the context's fd. A forked child
	 * starts with none of either (module.c). */
	atomic_int blocking;
	atomic_int notify_fd[PYX_NOTIFY_MAX];
	/* Helper threads (job.c) still using ctx: the context is not freed under them. */
	atomic_int jobs;
	/* Requests whose call was interrupted (KeyboardInterrupt): list, or NULL. They hold the
	 * memory they use until they finish; later calls let go of the finished ones. */
	PyObject *orphans;
	struct pyx_Context *prev, *next; /* the live contexts, for that reset */
} pyx_Context;

typedef struct {
	PyObject_HEAD PyObject *weakrefs;
	pyx_Context *ctx;
	gpux_buf *buf;
	char *data;
	Py_ssize_t size;
	bool frozen;
	bool exported; /* fd() was asked for: another process may map the memory */
} pyx_Buffer;

typedef struct {
	PyObject_HEAD pyx_Context *ctx;
	gpux_dbuf *dbuf;
} pyx_DeviceBuffer;

typedef struct {
	PyObject_HEAD pyx_Context *ctx;
	gpux_queue *queue;
	uint32_t device;
} pyx_Queue;

typedef struct {
	PyObject_HEAD pyx_Context *ctx;
	gpux_module *module;
	PyObject *log; /* str: the compiler's warnings, or "" */
	uint32_t lang; /* enum gpux_lang */
} pyx_Module;

typedef struct {
	PyObject_HEAD PyObject *weakrefs;
	pyx_Module *module;
	char *name;
	PyObject *name_obj;
	PyObject *owner; /* what made it (a gpux.Module), kept alive with it: it pickles it */
	bool pycuda;     /* a SourceModule's: also takes PyCUDA's call, f(*args, block=...) */
} pyx_Kernel;

/* An argument wrapper: In(x), Out(x), ..., or a device buffer's range. */
typedef struct {
	PyObject_HEAD uint32_t kind; /* enum gpux_arg_kind */
	uint32_t flags;
	PyObject *obj;
	uint64_t offset, size; /* a range of a device buffer; size 0: all of it */
} pyx_Arg;

/*
 * An argument's memory, held while the library may use it: the buffer protocol keeps memory
 * valid only while it stays exported (a memoryview can be released, letting go of its
 * Buffer). In memory that is not gpux's, a temporary gpux buffer stands in for it.
 */
struct pyx_temp {
	gpux_buf *buf;  /* the temporary, or NULL: the argument's own gpux memory */
	Py_buffer view; /* held: gpux memory, or a temporary's to copy back (OUT, INOUT) */
	uint32_t arg;   /* the argument's index, for messages */
	bool held;
	bool copy_back;
};

/* A launch's arguments as the library takes them; temps hold the memory they point into. */
struct pyx_argv {
	uint32_t n;
	struct gpux_arg a[PYX_ARGS_MAX];
	unsigned ntemps;
	struct pyx_temp temps[PYX_ARGS_MAX];
	uint64_t scalars[PYX_ARGS_MAX][PYX_SCALAR_MAX / 8];
};

/* A message of the extension's own about a request that the worker ran (pyx_temps_finish). */
#define PYX_WHY_MAX 192

typedef struct {
	PyObject_HEAD pyx_Context *ctx;
	gpux_req *req;
	bool done;
	gpux_status status;
	PyObject *keep; /* the arguments, until the request is finished */
	unsigned ntemps;
	struct pyx_temp *temps; /* heap, ntemps */
	char why[PYX_WHY_MAX];  /* "" or, when the copy back failed, why (status INVAL) */
	bool orphan;            /* in its context's orphans: its end is waited for when it goes */
} pyx_Request;

/* A launch with its arguments resolved once, for calling again and again. */
typedef struct {
	PyObject_HEAD pyx_Kernel *kernel;
	PyObject *queue;
	PyObject *args; /* tuple: the argument objects */
	struct gpux_launch launch;
	struct pyx_argv *argv;
	unsigned nheld; /* argv's temps: views held until the Launch goes (its ntemps is 0) */
} pyx_Launch;

extern PyTypeObject *pyx_ContextType, *pyx_BufferType, *pyx_DeviceBufferType, *pyx_QueueType,
	*pyx_ModuleType, *pyx_KernelType, *pyx_ArgType, *pyx_RequestType, *pyx_LaunchType;

/* module.c */
/* Set the Python exception for a gpux status, with the worker's detail text (or NULL). */
PyObject *pyx_raise(gpux_status st, const char *detail);
/*
 * The same for the failure of a call into the library that this thread made just now, with
 * what failed (or NULL): where it failed to reach gpuxd, the library's reason joins it.
 */
PyObject *pyx_raise_call(gpux_status st, const char *what);
/* The same with the reason (gpux_connect_error()) of the thread that made the call. */
PyObject *pyx_raise_with(gpux_status st, const char *what, const char *why);
/* A call that may take in completions starts or ends in ctx: count it, and tell the
 * watchers at 0 (GIL released). */
void pyx_blocking_enter(pyx_Context *ctx);
void pyx_blocking_leave(pyx_Context *ctx);
/* A new reference to the context named (None or NULL: the process's default one). */
pyx_Context *pyx_context_arg(PyObject *o);
int pyx_add_type(PyObject *m, PyType_Spec *spec, PyTypeObject **ret);
extern PyObject *pyx_np_generic;        /* numpy.generic, once the package told us */
extern PyObject *pyx_future_type;       /* gpux.Future(request, context) */
extern PyObject *pyx_device_array_type; /* gpux.DeviceArray: an argument by its _arg */

/* buffer.c */
int pyx_buffer_init_types(PyObject *m);
/* A device argument of a module's question: None (GPUX_ANY: the module's first device) or an
 * index. 0, or -1 with an exception. */
int pyx_device_arg(PyObject *o, uint32_t *ret);
/* The live Buffer whose memory holds [p, p + len), or NULL (borrowed). */
pyx_Buffer *pyx_buffer_find(const void *p, size_t len);
/* A queue's options from the keywords priority (None: the default) and share: 0, or -1 with
 * the exception set. */
int pyx_queue_opts(PyObject *priority, unsigned int share, struct gpux_queue_opts *ret);

/* launch.c */
int pyx_launch_init_types(PyObject *m);
/*
 * Argument i, in memory that obj exports: a range of its gpux Buffer, or a temporary copy;
 * recorded in v's temps either way (kind 0: IN for read-only memory, else INOUT).
 */
int pyx_host_arg(pyx_Context *ctx, uint32_t i, PyObject *obj, uint32_t kind, uint32_t flags,
		 struct pyx_argv *v, struct gpux_arg *ret);
/* Resolve args (a tuple) for a kernel of ctx into argv; copies into temporaries made. */
int pyx_argv_fill(pyx_Context *ctx, PyObject *args, struct pyx_argv *argv);
/*
 * After the request ended with st: copy temporaries back (on success), free, release views.
 * Returns st, or GPUX_E_INVAL with why[PYX_WHY_MAX] said when an output's memory moved or
 * changed size meanwhile (a numpy array resized with refcheck=False): nothing is written there.
 */
gpux_status pyx_temps_finish(struct pyx_temp *temps, unsigned n, gpux_status st, char *why);
/* None of the temps will be copied back (their request was given up on). */
void pyx_temps_no_copy_back(struct pyx_temp *temps, unsigned n);
/* Visit the objects whose memory the held temps export (tp_traverse). */
int pyx_temps_traverse(struct pyx_temp *temps, unsigned n, visitproc visit, void *arg);

/* kernel.c */
int pyx_kernel_init_types(PyObject *m);

/* request.c */
int pyx_request_init_types(PyObject *m);
/* A Request for a submitted req, keeping `keep` and taking argv's temporaries. */
PyObject *pyx_request_new(pyx_Context *ctx, gpux_req *req, PyObject *keep, struct pyx_argv *argv);
/* The same, as a gpux.Future (what submissions return). */
PyObject *pyx_future_new(pyx_Context *ctx, gpux_req *req, PyObject *keep, struct pyx_argv *argv);
/*
 * Wait for req, up to ms (-1: no limit), the GIL held on entry and released meanwhile. In the
 * main thread, signals are taken every PYX_SIGNAL_SLICE_MS: returns req's status, GPUX_E_AGAIN
 * at the time limit, or PYX_E_SIGNAL with the exception a signal handler raised
 * (KeyboardInterrupt), the request going on.
 */
int pyx_wait(pyx_Context *ctx, gpux_req *req, int64_t ms);
/*
 * A call interrupted by a signal while req ran (the exception is set, and stays): req goes on,
 * holding keep and argv's temporaries (not copied back) until it finishes; the context lets go
 * of it then (pyx_orphans_reap).
 */
void pyx_orphan_add(pyx_Context *ctx, gpux_req *req, PyObject *keep, struct pyx_argv *argv);
/* Let go of the orphans that finished. */
void pyx_orphans_reap(pyx_Context *ctx);

/* job.c */
/* How often a waiting call in the main thread takes signals (Ctrl-C). */
#define PYX_SIGNAL_SLICE_MS 20
/* A wait or job that a signal handler's exception interrupted (not a gpux_status). */
#define PYX_E_SIGNAL (-1000)
/* Whether this is the thread that runs Python's signal handlers. */
bool pyx_main_thread(void);
/* After fork() in the child: the forking thread is the main one (module.c's atfork). */
void pyx_job_after_fork(void);
int pyx_job_init(void);

/*
 * A library call that cannot be cut in slices (a module load, connecting), run where signals
 * can still be taken: on a helper thread while the main thread waits and takes signals; in
 * any other thread, in place. Embed it in the call's own struct, whose inputs it owns.
 */
struct pyx_job {
	void (*run)(struct pyx_job *job);     /* the call, without the GIL */
	void (*discard)(struct pyx_job *job); /* abandoned: let go of run()'s results and of the
					       * whole struct (on the helper thread) */
	pyx_Context *ctx; /* whose library context run() uses, or NULL; kept alive meanwhile */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	bool done, abandoned;
};

/*
 * Run job->run(job). 0: done, the job is still the caller's. PYX_E_SIGNAL: a signal handler
 * raised meanwhile (the exception is set); the job is the helper's now, which calls discard()
 * once run() returns. The GIL is held on entry and exit.
 */
int pyx_job_run(struct pyx_job *job);
/* Wait until no helper thread uses ctx (before it is freed); the GIL released. */
void pyx_jobs_wait(pyx_Context *ctx);
