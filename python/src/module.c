/* SPDX-License-Identifier: MIT */
/* python/src/module.c: the gpux._gpux extension: its module, errors and Context. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pygpux.h"

#include <structmember.h>

PyTypeObject *pyx_ContextType;
PyObject *pyx_np_generic;
PyObject *pyx_future_type;
PyObject *pyx_device_array_type;

/* Exception classes by -status, from the package (gpux/_errors.py), and their base. */
#define ERRORS_MAX 32
static PyObject *errors[ERRORS_MAX];
static PyObject *error_base;

PyObject *pyx_raise(gpux_status st, const char *detail)
{
	PyObject *cls = st < 0 && -st < ERRORS_MAX && errors[-st] ? errors[-st] : error_base;
	PyObject *exc, *text;

	if (!cls) {
		PyErr_Format(PyExc_RuntimeError, "gpux: %s", gpux_strerror(st));
		return NULL;
	}
	/* The detail may quote bytes that are not UTF-8 (a compiler's log quotes the source):
	 * decoded as the log of a loaded module is, so that the error stays gpux's. */
	detail = detail ? detail : "";
	text = PyUnicode_DecodeUTF8(detail, (Py_ssize_t)strlen(detail), "replace");
	if (!text)
		return NULL;
	exc = PyObject_CallFunction(cls, "iN", (int)st, text);
	if (exc) {
		PyErr_SetObject(cls, exc);
		Py_DECREF(exc);
	}
	return NULL;
}

/* The statuses a failed attempt to reach gpuxd gives. */
static bool connect_status(gpux_status st)
{
	return st == GPUX_E_CONNECT || st == GPUX_E_PERM || st == GPUX_E_PROTO ||
	       st == GPUX_E_VERSION || st == GPUX_E_STOPPING;
}

PyObject *pyx_raise_call(gpux_status st, const char *what)
{
	return pyx_raise_with(st, what, gpux_connect_error());
}

PyObject *pyx_raise_with(gpux_status st, const char *what, const char *why)
{
	char detail[1024];

	if (!connect_status(st))
		why = "";
	if (!*why)
		return pyx_raise(st, what);
	if (!what)
		return pyx_raise(st, why);
	(void)snprintf(detail, sizeof(detail), "%s: %s", what, why);
	return pyx_raise(st, detail);
}

static void notify(pyx_Context *ctx)
{
	uint64_t one = 1;

	for (unsigned i = 0; i < PYX_NOTIFY_MAX; i++) {
		int fd = atomic_load(&ctx->notify_fd[i]);

		if (fd >= 0)
			(void)!write(fd, &one, sizeof(one));
	}
}

void pyx_blocking_enter(pyx_Context *ctx)
{
	if (atomic_fetch_add(&ctx->blocking, 1) == 0)
		notify(ctx);
}

void pyx_blocking_leave(pyx_Context *ctx)
{
	if (atomic_fetch_sub(&ctx->blocking, 1) == 1)
		notify(ctx);
}

/* gpux.get_context, which makes the process's default context on first use. */
static PyObject *default_context;

pyx_Context *pyx_context_arg(PyObject *o)
{
	if (!o || o == Py_None) {
		if (!default_context) {
			PyErr_SetString(PyExc_RuntimeError, "import gpux, not gpux._gpux");
			return NULL;
		}
		o = PyObject_CallNoArgs(default_context);
		if (!o)
			return NULL;
	} else {
		Py_INCREF(o);
	}
	if (Py_TYPE(o) != pyx_ContextType) {
		Py_DECREF(o);
		PyErr_SetString(PyExc_TypeError, "context: expected a gpux.Context");
		return NULL;
	}
	return (pyx_Context *)o;
}

int pyx_add_type(PyObject *m, PyType_Spec *spec, PyTypeObject **ret)
{
	PyObject *t = PyType_FromSpec(spec);
	const char *dot;

	if (!t)
		return -1;
	dot = strrchr(spec->name, '.');
	if (PyModule_AddObject(m, dot ? dot + 1 : spec->name, t) < 0) {
		Py_DECREF(t);
		return -1;
	}
	Py_INCREF(t);
	*ret = (PyTypeObject *)t;
	return 0;
}

/* ---- Context ---- */

/*
 * The live contexts. A thread of the parent in a blocking call at fork() is not in the child,
 * nor are the watchers that the eventfds belong to: the child starts with neither counted,
 * whatever forked it (os.fork(), or C code that Python's own fork hooks never see).
 */
static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static pyx_Context *live;
static bool atfork_registered;

static void live_lock_take(void)
{
	(void)pthread_mutex_lock(&live_lock);
}

static void live_lock_give(void)
{
	(void)pthread_mutex_unlock(&live_lock);
}

static void live_after_fork_child(void)
{
	pyx_job_after_fork();
	for (pyx_Context *c = live; c; c = c->next) {
		/* The helper threads are the parent's; so are the orphans' requests (the child
		 * waits for none of them: its connection is its own). */
		atomic_store(&c->jobs, 0);
		atomic_store(&c->blocking, 0);
		for (unsigned i = 0; i < PYX_NOTIFY_MAX; i++)
			atomic_store(&c->notify_fd[i], -1);
	}
	(void)pthread_mutex_unlock(&live_lock);
}

/* Connecting, which may start a gpuxd and wait for it (30 s at most), on a helper thread. */
struct connect_job {
	struct pyx_job job;
	char *socket;
	gpux_status st;
	gpux_ctx *ctx;
	char why[1024];
};

static void connect_run(struct pyx_job *job)
{
	struct connect_job *c = (struct connect_job *)job;

	c->st = gpux_connect(c->socket, &c->ctx);
	(void)snprintf(c->why, sizeof(c->why), "%s", c->st < 0 ? gpux_connect_error() : "");
}

static void connect_discard(struct pyx_job *job)
{
	struct connect_job *c = (struct connect_job *)job;

	if (c->st == GPUX_OK)
		gpux_disconnect(c->ctx);
	free(c->socket);
	free(c);
}

/* The default queues' options (GIL released for the call). */
static int set_default_queue(pyx_Context *self, const struct gpux_queue_opts *opts)
{
	gpux_status st;

	Py_BEGIN_ALLOW_THREADS st = gpux_set_default_queue(self->ctx, opts);
	Py_END_ALLOW_THREADS if (st < 0)
	{
		pyx_raise_call(st, "the default queue's options");
		return -1;
	}
	return 0;
}

static PyObject *context_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *names[] = { "socket", "priority", "share", NULL };
	PyObject *priority = NULL;
	struct gpux_queue_opts opts;
	unsigned int share = 0;
	const char *socket = NULL;
	struct connect_job *c;
	pyx_Context *self;
	gpux_ctx *ctx;
	gpux_status st;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|z$OI", names, &socket, &priority, &share) ||
	    pyx_queue_opts(priority, share, &opts) < 0)
		return NULL;
	c = calloc(1, sizeof(*c));
	if (!c || (socket && !(c->socket = strdup(socket)))) {
		free(c);
		return PyErr_NoMemory();
	}
	c->job.run = connect_run;
	c->job.discard = connect_discard;
	if (pyx_job_run(&c->job) == PYX_E_SIGNAL)
		return NULL; /* the helper disconnects what it got */
	st = c->st;
	ctx = c->ctx;
	if (st < 0) {
		pyx_raise(st, c->why);
		free(c->socket);
		free(c);
		return NULL;
	}
	free(c->socket);
	free(c);
	self = PyObject_GC_New(pyx_Context, type);
	if (!self) {
		Py_BEGIN_ALLOW_THREADS gpux_disconnect(ctx);
		Py_END_ALLOW_THREADS return NULL;
	}
	self->weakrefs = NULL;
	self->ctx = ctx;
	self->orphans = NULL;
	atomic_init(&self->blocking, 0);
	atomic_init(&self->jobs, 0);
	for (unsigned i = 0; i < PYX_NOTIFY_MAX; i++)
		atomic_init(&self->notify_fd[i], -1);
	live_lock_take();
	self->prev = NULL;
	self->next = live;
	if (live)
		live->prev = self;
	live = self;
	live_lock_give();
	PyObject_GC_Track((PyObject *)self);
	if ((opts.flags || opts.share) && set_default_queue(self, &opts) < 0) {
		Py_DECREF(self);
		return NULL;
	}
	return (PyObject *)self;
}

static PyObject *context_set_default_queue(pyx_Context *self, PyObject *args, PyObject *kw)
{
	static char *names[] = { "priority", "share", NULL };
	PyObject *priority = NULL;
	struct gpux_queue_opts opts;
	unsigned int share = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|OI", names, &priority, &share) ||
	    pyx_queue_opts(priority, share, &opts) < 0 || set_default_queue(self, &opts) < 0)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *context_priority_limits(pyx_Context *self, PyObject *unused)
{
	int32_t max, def;
	gpux_status st;

	Py_BEGIN_ALLOW_THREADS st = gpux_priority_limits(self->ctx, &max, &def);
	Py_END_ALLOW_THREADS if (st < 0) return pyx_raise_call(st, NULL);
	return Py_BuildValue("(ii)", (int)max, (int)def);
}

static int context_traverse(pyx_Context *self, visitproc visit, void *arg)
{
	Py_VISIT(Py_TYPE((PyObject *)self));
	Py_VISIT(self->orphans);
	return 0;
}

/* The orphans hold the context: a cycle, broken here (each waits for its request's end). */
static int context_clear(pyx_Context *self)
{
	Py_CLEAR(self->orphans);
	return 0;
}

static void context_dealloc(pyx_Context *self)
{
	PyTypeObject *type = Py_TYPE((PyObject *)self);

	PyObject_GC_UnTrack((PyObject *)self);
	if (self->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)self);
	Py_CLEAR(self->orphans);
	live_lock_take();
	if (self->prev)
		self->prev->next = self->next;
	else
		live = self->next;
	if (self->next)
		self->next->prev = self->prev;
	live_lock_give();
	/* Every object made from it holds a reference: none is left; a load given up on may
	 * still run on a helper thread. */
	pyx_jobs_wait(self);
	Py_BEGIN_ALLOW_THREADS gpux_disconnect(self->ctx);
	Py_END_ALLOW_THREADS PyObject_GC_Del(self);
	Py_DECREF(type);
}

static PyObject *context_device_count(pyx_Context *self, PyObject *unused)
{
	uint32_t n;

	Py_BEGIN_ALLOW_THREADS n = gpux_device_count(self->ctx);
	Py_END_ALLOW_THREADS return PyLong_FromUnsignedLong(n);
}

static PyObject *context_device_info(pyx_Context *self, PyObject *arg)
{
	struct gpux_device_info info;
	unsigned long dev = PyLong_AsUnsignedLong(arg);
	gpux_status st;
	char uuid[33];

	if (dev == (unsigned long)-1 && PyErr_Occurred())
		return NULL;
	if (dev >= UINT32_MAX)
		return pyx_raise(GPUX_E_NODEV, "no such device");
	Py_BEGIN_ALLOW_THREADS pyx_blocking_enter(self);
	st = gpux_device_info(self->ctx, (uint32_t)dev, &info);
	pyx_blocking_leave(self);
	Py_END_ALLOW_THREADS if (st < 0) return pyx_raise_call(st, NULL);
	for (unsigned i = 0; i < 16; i++)
		(void)snprintf(uuid + 2 * i, 3, "%02x", info.uuid[i]);
	info.name[sizeof(info.name) - 1] = 0;
	return Py_BuildValue("{s:I,s:I,s:I,s:(II),s:I,s:K,s:s,s:s}", "index", info.index, "backend",
			     info.backend, "state", info.state, "compute_capability", info.cc_major,
			     info.cc_minor, "multiprocessors", info.sm_count, "memory",
			     (unsigned long long)info.mem_total, "uuid", uuid, "name", info.name);
}

static PyObject *context_affinity(pyx_Context *self, PyObject *arg)
{
	uint64_t filter[GPUX_AFFINITY_BITS / 64];
	unsigned long dev = PyLong_AsUnsignedLong(arg);
	gpux_status st;

	if (dev == (unsigned long)-1 && PyErr_Occurred())
		return NULL;
	if (dev >= UINT32_MAX)
		return pyx_raise(GPUX_E_NODEV, "no such device");
	Py_BEGIN_ALLOW_THREADS pyx_blocking_enter(self);
	st = gpux_device_affinity(self->ctx, (uint32_t)dev, filter);
	pyx_blocking_leave(self);
	Py_END_ALLOW_THREADS if (st < 0) return pyx_raise_call(st, NULL);
	return PyBytes_FromStringAndSize((const char *)filter, sizeof(filter));
}

static PyObject *context_fd(pyx_Context *self, PyObject *unused)
{
	gpux_status st;
	int fd;

	Py_BEGIN_ALLOW_THREADS st = gpux_fd(self->ctx, &fd);
	Py_END_ALLOW_THREADS if (st < 0) return pyx_raise_call(st, NULL);
	return PyLong_FromLong(fd);
}

static PyObject *context_trim(pyx_Context *self, PyObject *unused)
{
	Py_BEGIN_ALLOW_THREADS gpux_buf_trim(self->ctx);
	Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyObject *context_process(pyx_Context *self, PyObject *unused)
{
	gpux_status st;

	if (self->orphans)
		pyx_orphans_reap(self);
	Py_BEGIN_ALLOW_THREADS pyx_blocking_enter(self);
	st = gpux_process(self->ctx);
	pyx_blocking_leave(self);
	Py_END_ALLOW_THREADS if (st < 0) return pyx_raise_call(st, NULL);
	Py_RETURN_NONE;
}

/* process() for the watchers, who check every future they watch after it: uncounted, so
 * that it does not wake them again. Its errors fail the requests themselves. */
static PyObject *context_take_in(pyx_Context *self, PyObject *unused)
{
	Py_BEGIN_ALLOW_THREADS(void) gpux_process(self->ctx);
	Py_END_ALLOW_THREADS Py_RETURN_NONE;
}

static PyObject *context_set_notify_fd(pyx_Context *self, PyObject *args)
{
	unsigned int slot;
	int fd;

	if (!PyArg_ParseTuple(args, "Ii", &slot, &fd))
		return NULL;
	if (slot >= PYX_NOTIFY_MAX) {
		PyErr_SetString(PyExc_ValueError, "no such notify slot");
		return NULL;
	}
	atomic_store(&self->notify_fd[slot], fd < 0 ? -1 : fd);
	Py_RETURN_NONE;
}

static PyObject *context_blocking(pyx_Context *self, void *unused)
{
	return PyLong_FromLong(atomic_load(&self->blocking));
}

static PyObject *context_orphans(pyx_Context *self, void *unused)
{
	if (self->orphans)
		pyx_orphans_reap(self);
	return PyLong_FromSsize_t(self->orphans ? PyList_Size(self->orphans) : 0);
}

/* No call into the library: in a forked child, that would connect. */
static PyObject *context_repr(pyx_Context *self)
{
	return PyUnicode_FromFormat("<gpux Context at %p>", (void *)self);
}

static PyMethodDef context_methods[] = {
	{ "device_count", (PyCFunction)context_device_count, METH_NOARGS,
	  "device_count() -> int: the number of devices gpuxd serves." },
	{ "device_info", (PyCFunction)context_device_info, METH_O,
	  "device_info(index) -> dict: what gpuxd knows of a device now." },
	{ "affinity", (PyCFunction)context_affinity, METH_O,
	  "affinity(index) -> bytes: the device's affinity filter now, which cache entries "
	  "(user, content key) it holds (gpux.affinity_holds tests it)." },
	{ "fd", (PyCFunction)context_fd, METH_NOARGS,
	  "fd() -> int: polls readable when completions may have arrived (then process()). "
	  "Owned by the context; another one after fork()." },
	{ "process", (PyCFunction)context_process, METH_NOARGS,
	  "process(): take in every completion that has arrived, without blocking." },
	{ "trim", (PyCFunction)context_trim, METH_NOARGS,
	  "trim(): let go of the memory of freed buffers that libgpuxclient keeps, registered "
	  "with the devices, for the next ones (up to 64 MiB)." },
	{ "set_default_queue", (PyCFunction)(void (*)(void))context_set_default_queue,
	  METH_VARARGS | METH_KEYWORDS,
	  "set_default_queue(priority=None, share=0): the default queues' priority (-1 to 2; "
	  "None: gpuxd's default) and compute share (percent of the SMs; 0: all), from their "
	  "next request on." },
	{ "priority_limits", (PyCFunction)context_priority_limits, METH_NOARGS,
	  "priority_limits() -> (int, int): the highest priority gpuxd lets this context's "
	  "queues have, and theirs by default." },
	{ "_take_in", (PyCFunction)context_take_in, METH_NOARGS,
	  "_take_in(): process(), not told to the watchers, errors ignored (theirs)." },
	{ "_set_notify_fd", (PyCFunction)context_set_notify_fd, METH_VARARGS,
	  "_set_notify_fd(slot, fd): an eventfd written when a blocking call starts or ends "
	  "(-1: none); slot 0 or 1, one for each watcher." },
	{ 0 },
};

static PyGetSetDef context_getset[] = {
	{ "_blocking", (getter)context_blocking, NULL, "threads in a blocking call", NULL },
	{ "_orphans", (getter)context_orphans, NULL,
	  "requests of interrupted calls still running (the finished ones let go of first)", NULL },
	{ 0 },
};

static PyMemberDef context_members[] = {
	{ "__weaklistoffset__", T_PYSSIZET, offsetof(pyx_Context, weakrefs), READONLY, NULL },
	{ 0 },
};

static PyType_Slot context_slots[] = {
	{ Py_tp_new, context_new },
	{ Py_tp_dealloc, context_dealloc },
	{ Py_tp_traverse, context_traverse },
	{ Py_tp_clear, context_clear },
	{ Py_tp_repr, context_repr },
	{ Py_tp_methods, context_methods },
	{ Py_tp_getset, context_getset },
	{ Py_tp_members, context_members },
	{ Py_tp_doc, "Context(socket=None, *, priority=None, share=0): a connection to gpuxd "
		     "(started when none runs); priority and share: its default queues' "
		     "(set_default_queue())." },
	{ 0, NULL },
};

static PyType_Spec context_spec = {
	.name = "gpux._gpux.Context",
	.basicsize = sizeof(pyx_Context),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.slots = context_slots,
};

/* ---- module ---- */

static PyObject *mod_strerror(PyObject *m, PyObject *arg)
{
	long st = PyLong_AsLong(arg);

	if (st == -1 && PyErr_Occurred())
		return NULL;
	return PyUnicode_FromString(gpux_strerror((gpux_status)st));
}

static PyObject *mod_version(PyObject *m, PyObject *unused)
{
	return PyUnicode_FromString(gpux_version());
}

/* _register(base, {status: class}, numpy.generic, get_context, Future): the package's part. */
static PyObject *mod_register(PyObject *m, PyObject *args)
{
	PyObject *base, *map, *generic, *getctx, *future, *key, *value;
	Py_ssize_t pos = 0;

	if (!PyArg_ParseTuple(args, "OO!OOO", &base, &PyDict_Type, &map, &generic, &getctx,
			      &future))
		return NULL;
	while (PyDict_Next(map, &pos, &key, &value)) {
		long st = PyLong_AsLong(key);

		if (st == -1 && PyErr_Occurred())
			return NULL;
		if (st >= 0 || -st >= ERRORS_MAX)
			continue;
		Py_INCREF(value);
		Py_XDECREF(errors[-st]);
		errors[-st] = value;
	}
	Py_INCREF(base);
	Py_XDECREF(error_base);
	error_base = base;
	Py_INCREF(generic);
	Py_XDECREF(pyx_np_generic);
	pyx_np_generic = generic;
	Py_INCREF(getctx);
	Py_XDECREF(default_context);
	default_context = getctx;
	Py_INCREF(future);
	Py_XDECREF(pyx_future_type);
	pyx_future_type = future;
	Py_RETURN_NONE;
}

/* affinity_holds(filter, uid, key): gpux_affinity_holds() of bytes from Context.affinity()
 * and Buffer.key(). */
static PyObject *mod_affinity_holds(PyObject *m, PyObject *args)
{
	uint64_t filter[GPUX_AFFINITY_BITS / 64];
	const char *f, *k;
	Py_ssize_t flen, klen;
	unsigned int uid;

	if (!PyArg_ParseTuple(args, "y#Iy#", &f, &flen, &uid, &k, &klen))
		return NULL;
	if (flen != (Py_ssize_t)sizeof(filter) || klen != GPUX_KEY_SIZE) {
		PyErr_Format(PyExc_ValueError, "a filter of %zu bytes and a key of %u",
			     sizeof(filter), GPUX_KEY_SIZE);
		return NULL;
	}
	memcpy(filter, f, sizeof(filter));
	return PyBool_FromLong(gpux_affinity_holds(filter, uid, (const uint8_t *)k));
}

/* _set_device_array(cls): the package's DeviceArray, taken as an argument by its _arg. */
static PyObject *mod_set_device_array(PyObject *m, PyObject *cls)
{
	if (!PyType_Check(cls)) {
		PyErr_SetString(PyExc_TypeError, "a class");
		return NULL;
	}
	Py_INCREF(cls);
	Py_XDECREF(pyx_device_array_type);
	pyx_device_array_type = cls;
	Py_RETURN_NONE;
}

static PyMethodDef mod_methods[] = {
	{ "_set_device_array", mod_set_device_array, METH_O, NULL },
	{ "affinity_holds", mod_affinity_holds, METH_VARARGS,
	  "affinity_holds(filter, uid, key) -> bool: whether an affinity filter (of any host) "
	  "holds a content key for that user; rarely true wrongly, never false wrongly." },
	{ "strerror", mod_strerror, METH_O, "strerror(status) -> str" },
	{ "version", mod_version, METH_NOARGS, "version() -> str: libgpuxclient's version" },
	{ "_register", mod_register, METH_VARARGS, NULL },
	{ 0 },
};

static struct PyModuleDef moddef = {
	PyModuleDef_HEAD_INIT,
	.m_name = "gpux._gpux",
	.m_doc = "The binding of libgpuxclient (include/gpux/gpux.h); use the gpux package.",
	.m_size = -1,
	.m_methods = mod_methods,
};

PyMODINIT_FUNC PyInit__gpux(void);

PyMODINIT_FUNC PyInit__gpux(void)
{
	PyObject *m = PyModule_Create(&moddef);

	if (!m)
		return NULL;
	if (pyx_job_init() < 0) {
		Py_DECREF(m);
		return NULL;
	}
	/* Once per process: its prepare handler would wait for itself the second time. */
	if (!atfork_registered) {
		if (pthread_atfork(live_lock_take, live_lock_give, live_after_fork_child) != 0) {
			Py_DECREF(m);
			return PyErr_NoMemory();
		}
		atfork_registered = true;
	}
	if (pyx_add_type(m, &context_spec, &pyx_ContextType) < 0 || pyx_buffer_init_types(m) < 0 ||
	    pyx_launch_init_types(m) < 0 || pyx_request_init_types(m) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
