/* SPDX-License-Identifier: MIT */
/* python/src/buffer.c: shared Buffers (and the map of their memory), DeviceBuffers, Queues. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pygpux.h"

#include <structmember.h>

PyTypeObject *pyx_BufferType, *pyx_DeviceBufferType, *pyx_QueueType;

/*
 * Every live Buffer's memory, sorted by address, so that any object exporting memory (a numpy
 * array, a view of one, a memoryview) is traced to its Buffer at a launch without walking
 * bases. Buffers' ranges never overlap: each is its own pages. Guarded by the GIL.
 */
struct range {
	uintptr_t lo, hi;
	pyx_Buffer *buf;
};

static struct range *ranges;
static size_t nranges, cap_ranges;

/* The index of the last range starting at or below p, or -1. */
static ptrdiff_t range_at(uintptr_t p)
{
	ptrdiff_t lo = 0, hi = (ptrdiff_t)nranges - 1, found = -1;

	while (lo <= hi) {
		ptrdiff_t mid = lo + (hi - lo) / 2;

		if (ranges[mid].lo <= p) {
			found = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return found;
}

static int range_add(pyx_Buffer *b)
{
	uintptr_t lo = (uintptr_t)b->data;
	size_t at;

	if (nranges == cap_ranges) {
		size_t cap = cap_ranges ? 2 * cap_ranges : 64;
		struct range *r = realloc(ranges, cap * sizeof(*r));

		if (!r) {
			PyErr_NoMemory();
			return -1;
		}
		ranges = r;
		cap_ranges = cap;
	}
	at = (size_t)(range_at(lo) + 1);
	memmove(&ranges[at + 1], &ranges[at], (nranges - at) * sizeof(*ranges));
	ranges[at] = (struct range){ lo, lo + (uintptr_t)b->size, b };
	nranges++;
	return 0;
}

static void range_remove(pyx_Buffer *b)
{
	ptrdiff_t at = range_at((uintptr_t)b->data);

	if (at < 0 || ranges[at].buf != b)
		return;
	memmove(&ranges[at], &ranges[at + 1], (nranges - (size_t)at - 1) * sizeof(*ranges));
	nranges--;
}

pyx_Buffer *pyx_buffer_find(const void *p, size_t len)
{
	ptrdiff_t at = range_at((uintptr_t)p);

	if (at < 0 || (uintptr_t)p + len > ranges[at].hi)
		return NULL;
	return ranges[at].buf;
}

/* ---- Buffer ---- */

static PyObject *buffer_wrap(PyTypeObject *type, pyx_Context *ctx, gpux_buf *buf)
{
	pyx_Buffer *self = PyObject_GC_New(pyx_Buffer, type);

	if (!self) {
		Py_BEGIN_ALLOW_THREADS gpux_buf_free(buf);
		Py_END_ALLOW_THREADS return NULL;
	}
	self->weakrefs = NULL;
	Py_INCREF((PyObject *)ctx);
	self->ctx = ctx;
	self->buf = buf;
	self->data = gpux_buf_data(buf);
	self->size = (Py_ssize_t)gpux_buf_size(buf);
	self->frozen = false;
	self->exported = false;
	PyObject_GC_Track((PyObject *)self);
	if (range_add(self) < 0) {
		Py_DECREF(self);
		return NULL;
	}
	return (PyObject *)self;
}

/* Types that hold only their Context: the context's own clear breaks a cycle through it. */
static int ctx_holder_traverse(PyObject *self, visitproc visit, void *arg, pyx_Context *ctx)
{
	Py_VISIT(Py_TYPE(self));
	Py_VISIT((PyObject *)ctx);
	return 0;
}

static int buffer_traverse(pyx_Buffer *self, visitproc visit, void *arg)
{
	return ctx_holder_traverse((PyObject *)self, visit, arg, self->ctx);
}

static PyObject *buffer_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *names[] = { "size", "context", NULL };
	PyObject *ctx_obj = NULL, *res;
	pyx_Context *ctx;
	Py_ssize_t size;
	gpux_buf *buf;
	gpux_status st;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "n|O", names, &size, &ctx_obj))
		return NULL;
	if (size <= 0) {
		PyErr_SetString(PyExc_ValueError, "a buffer has at least one byte");
		return NULL;
	}
	ctx = pyx_context_arg(ctx_obj);
	if (!ctx)
		return NULL;
	Py_BEGIN_ALLOW_THREADS st = gpux_buf_alloc(ctx->ctx, (size_t)size, &buf);
	Py_END_ALLOW_THREADS res = st < 0 ? pyx_raise_call(st, "cannot allocate a shared buffer")
					  : buffer_wrap(type, ctx, buf);
	Py_DECREF(ctx);
	return res;
}

static PyObject *buffer_import(PyObject *cls, PyObject *args)
{
	PyObject *ctx_obj = NULL;
	pyx_Context *ctx;
	pyx_Buffer *self;
	gpux_buf *buf;
	gpux_status st;
	bool frozen = false;
	int fd;

	if (!PyArg_ParseTuple(args, "i|O", &fd, &ctx_obj))
		return NULL;
	ctx = pyx_context_arg(ctx_obj);
	if (!ctx)
		return NULL;
	Py_BEGIN_ALLOW_THREADS st = gpux_buf_import(ctx->ctx, fd, &buf);
	if (st == GPUX_OK) {
		int sfd, seals;
		uint64_t off;

		/* A frozen memfd gives a frozen buffer: its pages are mapped read-only. */
		if (gpux_buf_fd(buf, &sfd, &off) == GPUX_OK) {
			seals = fcntl(sfd, F_GET_SEALS);
			frozen = seals >= 0 && (seals & F_SEAL_WRITE);
		}
	}
	Py_END_ALLOW_THREADS self =
		st < 0 ? (pyx_raise_call(st, "cannot import the shared buffer"), NULL)
		       : (pyx_Buffer *)buffer_wrap((PyTypeObject *)cls, ctx, buf);
	Py_DECREF(ctx);
	if (self) {
		self->frozen = frozen;
		/* Another process's memory: it maps it too. */
		self->exported = true;
	}
	return (PyObject *)self;
}

static void buffer_dealloc(pyx_Buffer *self)
{
	PyTypeObject *type = Py_TYPE((PyObject *)self);

	PyObject_GC_UnTrack((PyObject *)self);
	if (self->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)self);
	if (self->buf) {
		range_remove(self);
		Py_BEGIN_ALLOW_THREADS gpux_buf_free(self->buf);
		Py_END_ALLOW_THREADS
	}
	Py_XDECREF((PyObject *)self->ctx);
	PyObject_GC_Del(self);
	Py_DECREF(type);
}

static PyObject *buffer_repr(pyx_Buffer *self)
{
	return PyUnicode_FromFormat("<gpux Buffer of %zd bytes at %p%s>", self->size,
				    (void *)self->data, self->frozen ? ", frozen" : "");
}

static int buffer_getbuffer(pyx_Buffer *self, Py_buffer *view, int flags)
{
	return PyBuffer_FillInfo(view, (PyObject *)self, self->data, self->size, self->frozen,
				 flags);
}

static PyObject *buffer_freeze(pyx_Buffer *self, PyObject *unused)
{
	gpux_status st;

	if (self->frozen)
		Py_RETURN_NONE;
	Py_BEGIN_ALLOW_THREADS st = gpux_buf_freeze(self->buf);
	Py_END_ALLOW_THREADS if (st < 0) return pyx_raise_call(st, "cannot freeze the buffer");
	self->frozen = true;
	Py_RETURN_NONE;
}

static PyObject *buffer_fd(pyx_Buffer *self, PyObject *unused)
{
	uint64_t off;
	gpux_status st;
	int fd;

	Py_BEGIN_ALLOW_THREADS st = gpux_buf_fd(self->buf, &fd, &off);
	Py_END_ALLOW_THREADS if (st < 0) return pyx_raise_call(st, NULL);
	self->exported = true;
	return Py_BuildValue("(iK)", fd, (unsigned long long)off);
}

static PyObject *buffer_key(pyx_Buffer *self, PyObject *args)
{
	unsigned long long off = 0, size = 0;
	uint8_t key[GPUX_KEY_SIZE];
	gpux_status st;

	if (!PyArg_ParseTuple(args, "|KK", &off, &size))
		return NULL;
	Py_BEGIN_ALLOW_THREADS st = gpux_buf_key(self->buf, off, size, key);
	Py_END_ALLOW_THREADS if (st < 0) return pyx_raise(
		st,
		self->frozen ? "not within the buffer" : "only a frozen buffer has a content key");
	return PyBytes_FromStringAndSize((const char *)key, sizeof(key));
}

static PyObject *buffer_address(pyx_Buffer *self, void *unused)
{
	return PyLong_FromVoidPtr(self->data);
}

static PyObject *buffer_size(pyx_Buffer *self, void *unused)
{
	return PyLong_FromSsize_t(self->size);
}

static PyObject *buffer_frozen(pyx_Buffer *self, void *unused)
{
	return PyBool_FromLong(self->frozen);
}

static PyObject *buffer_exported(pyx_Buffer *self, void *unused)
{
	return PyBool_FromLong(self->exported);
}

static PyObject *buffer_context(pyx_Buffer *self, void *unused)
{
	Py_INCREF((PyObject *)self->ctx);
	return (PyObject *)self->ctx;
}

static PyMethodDef buffer_methods[] = {
	{ "freeze", (PyCFunction)buffer_freeze, METH_NOARGS,
	  "freeze(): the bytes can never change again (the pages become read-only here)." },
	{ "fd", (PyCFunction)buffer_fd, METH_NOARGS,
	  "fd() -> (fd, offset): the memfd holding the bytes (borrowed) and their offset in it." },
	{ "key", (PyCFunction)buffer_key, METH_VARARGS,
	  "key(offset=0, size=0) -> bytes: the content key of a frozen buffer's bytes (size 0: "
	  "to the end), under which device caches keep them, the same on every host." },
	{ "_import", buffer_import, METH_VARARGS | METH_CLASS,
	  "_import(fd, context=None) -> Buffer: the whole of another process's gpux memfd." },
	{ 0 },
};

static PyGetSetDef buffer_getset[] = {
	{ "address", (getter)buffer_address, NULL, "the address of the first byte", NULL },
	{ "size", (getter)buffer_size, NULL, "bytes", NULL },
	{ "frozen", (getter)buffer_frozen, NULL, "whether freeze() was called", NULL },
	{ "exported", (getter)buffer_exported, NULL,
	  "whether fd() handed its memfd out (another process may map it)", NULL },
	{ "context", (getter)buffer_context, NULL, "the Context it belongs to", NULL },
	{ 0 },
};

static PyMemberDef buffer_members[] = {
	{ "__weaklistoffset__", T_PYSSIZET, offsetof(pyx_Buffer, weakrefs), READONLY, NULL },
	{ 0 },
};

static PyType_Slot buffer_slots[] = {
	{ Py_tp_new, buffer_new },
	{ Py_tp_dealloc, buffer_dealloc },
	{ Py_tp_traverse, buffer_traverse },
	{ Py_tp_repr, buffer_repr },
	{ Py_tp_methods, buffer_methods },
	{ Py_tp_getset, buffer_getset },
	{ Py_tp_members, buffer_members },
	{ Py_bf_getbuffer, buffer_getbuffer },
	{ Py_tp_doc, "Buffer(size, context=None): bytes in shared memory that kernels use in "
		     "place; gpux.empty() and friends make numpy arrays of them." },
	{ 0, NULL },
};

static PyType_Spec buffer_spec = {
	.name = "gpux._gpux.Buffer",
	.basicsize = sizeof(pyx_Buffer),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.slots = buffer_slots,
};

/* ---- DeviceBuffer ---- */

static PyObject *dbuf_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *names[] = { "size", "device", "context", "host", NULL };
	PyObject *ctx_obj = NULL, *exc;
	pyx_Context *ctx;
	pyx_DeviceBuffer *self;
	unsigned int device = 0;
	int host = 0;
	Py_ssize_t size;
	gpux_dbuf *dbuf;
	gpux_status st;
	char *why = NULL;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "n|IO$p", names, &size, &device, &ctx_obj,
					 &host))
		return NULL;
	if (size <= 0) {
		PyErr_SetString(PyExc_ValueError, "a device buffer has at least one byte");
		return NULL;
	}
	ctx = pyx_context_arg(ctx_obj);
	if (!ctx)
		return NULL;
	Py_BEGIN_ALLOW_THREADS pyx_blocking_enter(ctx);
	st = gpux_dbuf_alloc_ex(ctx->ctx, device, (size_t)size, host ? GPUX_DBUF_HOST : 0, &dbuf,
				&why);
	pyx_blocking_leave(ctx);
	Py_END_ALLOW_THREADS if (st < 0)
	{
		Py_DECREF(ctx);
		/* The worker's reason (the quota, the reserve) when it gave one. */
		exc = why ? pyx_raise(st, why)
			  : pyx_raise_call(st, "cannot allocate device memory");
		free(why);
		return exc;
	}
	self = PyObject_GC_New(pyx_DeviceBuffer, type);
	if (!self) {
		Py_BEGIN_ALLOW_THREADS gpux_dbuf_free(dbuf);
		Py_END_ALLOW_THREADS Py_DECREF(ctx);
		return NULL;
	}
	self->ctx = ctx;
	self->dbuf = dbuf;
	PyObject_GC_Track((PyObject *)self);
	return (PyObject *)self;
}

int pyx_device_arg(PyObject *o, uint32_t *ret)
{
	unsigned long v;

	if (!o || o == Py_None) {
		*ret = GPUX_ANY;
		return 0;
	}
	v = PyLong_AsUnsignedLong(o);
	if (PyErr_Occurred())
		return -1;
	if (v >= GPUX_ANY) {
		PyErr_SetString(PyExc_ValueError, "device: an index, or None");
		return -1;
	}
	*ret = (uint32_t)v;
	return 0;
}

/* A module's variable as a device buffer (gpux_module_global()): DeviceBuffer._global(module,
 * name, device=None). */
static PyObject *dbuf_global(PyObject *cls, PyObject *args)
{
	PyObject *mod_obj, *device_obj = NULL;
	pyx_DeviceBuffer *self;
	pyx_Module *mod;
	const char *name;
	uint32_t device;
	gpux_dbuf *dbuf;
	gpux_status st;

	if (!PyArg_ParseTuple(args, "O!s|O", pyx_ModuleType, &mod_obj, &name, &device_obj) ||
	    pyx_device_arg(device_obj, &device) < 0)
		return NULL;
	mod = (pyx_Module *)mod_obj;
	if (!*name || strlen(name) > PYX_NAME_MAX) {
		PyErr_Format(PyExc_ValueError, "a variable's name has 1 to %u bytes", PYX_NAME_MAX);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS pyx_blocking_enter(mod->ctx);
	st = gpux_module_global(mod->module, name, device, &dbuf);
	pyx_blocking_leave(mod->ctx);
	Py_END_ALLOW_THREADS if (st < 0)
	{
		char what[PYX_NAME_MAX + 64];

		(void)snprintf(what, sizeof(what),
			       st == GPUX_E_NOTFOUND ? "no variable \"%s\" in the "
						       "module"
						     : "variable \"%s\" of the module",
			       name);
		return pyx_raise_call(st, what);
	}
	self = PyObject_GC_New(pyx_DeviceBuffer, (PyTypeObject *)cls);
	if (!self) {
		Py_BEGIN_ALLOW_THREADS gpux_dbuf_free(dbuf);
		Py_END_ALLOW_THREADS return NULL;
	}
	Py_INCREF((PyObject *)mod->ctx);
	self->ctx = mod->ctx;
	self->dbuf = dbuf;
	PyObject_GC_Track((PyObject *)self);
	return (PyObject *)self;
}

static int dbuf_traverse(pyx_DeviceBuffer *self, visitproc visit, void *arg)
{
	return ctx_holder_traverse((PyObject *)self, visit, arg, self->ctx);
}

static void dbuf_dealloc(pyx_DeviceBuffer *self)
{
	PyTypeObject *type = Py_TYPE((PyObject *)self);

	PyObject_GC_UnTrack((PyObject *)self);
	Py_BEGIN_ALLOW_THREADS gpux_dbuf_free(self->dbuf);
	Py_END_ALLOW_THREADS Py_DECREF(self->ctx);
	PyObject_GC_Del(self);
	Py_DECREF(type);
}

static PyObject *dbuf_repr(pyx_DeviceBuffer *self)
{
	return PyUnicode_FromFormat("<gpux DeviceBuffer of %zu bytes on device %u>",
				    gpux_dbuf_size(self->dbuf), gpux_dbuf_device(self->dbuf));
}

static PyObject *dbuf_size(pyx_DeviceBuffer *self, void *unused)
{
	return PyLong_FromSize_t(gpux_dbuf_size(self->dbuf));
}

static PyObject *dbuf_device(pyx_DeviceBuffer *self, void *unused)
{
	return PyLong_FromUnsignedLong(gpux_dbuf_device(self->dbuf));
}

static PyObject *dbuf_context(pyx_DeviceBuffer *self, void *unused)
{
	Py_INCREF((PyObject *)self->ctx);
	return (PyObject *)self->ctx;
}

static PyGetSetDef dbuf_getset[] = {
	{ "size", (getter)dbuf_size, NULL, "bytes", NULL },
	{ "device", (getter)dbuf_device, NULL, "the device index", NULL },
	{ "context", (getter)dbuf_context, NULL, "the Context it belongs to", NULL },
	{ 0 },
};

static PyMethodDef dbuf_methods[] = {
	{ "_global", (PyCFunction)dbuf_global, METH_VARARGS | METH_CLASS,
	  "_global(module, name, device=None): a variable of a module (gpux_module_global())." },
	{ 0 },
};

static PyType_Slot dbuf_slots[] = {
	{ Py_tp_new, dbuf_new },
	{ Py_tp_methods, dbuf_methods },
	{ Py_tp_dealloc, dbuf_dealloc },
	{ Py_tp_traverse, dbuf_traverse },
	{ Py_tp_repr, dbuf_repr },
	{ Py_tp_getset, dbuf_getset },
	{ Py_tp_doc, "DeviceBuffer(size, device=0, context=None, *, host=False): memory on one "
		     "device that keeps its contents between requests (a kernel argument as "
		     "itself, or range()); host=True keeps it in host memory, where it survives "
		     "its worker's restart (kernels reach it over the bus)." },
	{ 0, NULL },
};

static PyType_Spec dbuf_spec = {
	.name = "gpux._gpux.DeviceBuffer",
	.basicsize = sizeof(pyx_DeviceBuffer),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.slots = dbuf_slots,
};

/* ---- Queue ---- */

int pyx_queue_opts(PyObject *priority, unsigned int share, struct gpux_queue_opts *ret)
{
	*ret = (struct gpux_queue_opts){ .size = sizeof(*ret), .share = share };
	if (priority && priority != Py_None) {
		long p = PyLong_AsLong(priority);

		if (p == -1 && PyErr_Occurred())
			return -1;
		if (p < GPUX_PRIORITY_MIN || p > GPUX_PRIORITY_MAX) {
			PyErr_Format(PyExc_ValueError, "priority: %ld is not from %d to %d", p,
				     GPUX_PRIORITY_MIN, GPUX_PRIORITY_MAX);
			return -1;
		}
		ret->flags = GPUX_QUEUE_PRIORITY;
		ret->priority = (int32_t)p;
	}
	if (share > GPUX_SHARE_MAX) {
		PyErr_Format(PyExc_ValueError, "share: %u is not a percentage", share);
		return -1;
	}
	return 0;
}

static PyObject *queue_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *names[] = { "device", "context", "priority", "share", NULL };
	PyObject *ctx_obj = NULL, *priority = NULL;
	struct gpux_queue_opts opts;
	unsigned int share = 0;
	pyx_Context *ctx;
	pyx_Queue *self;
	unsigned int device = 0;
	gpux_queue *q;
	gpux_status st;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "|IO$OI", names, &device, &ctx_obj, &priority,
					 &share) ||
	    pyx_queue_opts(priority, share, &opts) < 0)
		return NULL;
	ctx = pyx_context_arg(ctx_obj);
	if (!ctx)
		return NULL;
	Py_BEGIN_ALLOW_THREADS pyx_blocking_enter(ctx);
	st = gpux_queue_open_ex(ctx->ctx, device, &opts, &q);
	pyx_blocking_leave(ctx);
	Py_END_ALLOW_THREADS if (st < 0)
	{
		Py_DECREF(ctx);
		return pyx_raise_call(st, "cannot open a queue");
	}
	self = PyObject_GC_New(pyx_Queue, type);
	if (!self) {
		Py_BEGIN_ALLOW_THREADS gpux_queue_free(q);
		Py_END_ALLOW_THREADS Py_DECREF(ctx);
		return NULL;
	}
	self->ctx = ctx;
	self->queue = q;
	self->device = device;
	PyObject_GC_Track((PyObject *)self);
	return (PyObject *)self;
}

static int queue_traverse(pyx_Queue *self, visitproc visit, void *arg)
{
	return ctx_holder_traverse((PyObject *)self, visit, arg, self->ctx);
}

static void queue_dealloc(pyx_Queue *self)
{
	PyTypeObject *type = Py_TYPE((PyObject *)self);

	PyObject_GC_UnTrack((PyObject *)self);
	Py_BEGIN_ALLOW_THREADS gpux_queue_free(self->queue);
	Py_END_ALLOW_THREADS Py_DECREF(self->ctx);
	PyObject_GC_Del(self);
	Py_DECREF(type);
}

static PyObject *queue_repr(pyx_Queue *self)
{
	return PyUnicode_FromFormat("<gpux Queue on device %u>", self->device);
}

static PyObject *queue_device(pyx_Queue *self, void *unused)
{
	return PyLong_FromUnsignedLong(self->device);
}

static PyObject *queue_context(pyx_Queue *self, void *unused)
{
	Py_INCREF((PyObject *)self->ctx);
	return (PyObject *)self->ctx;
}

static PyGetSetDef queue_getset[] = {
	{ "device", (getter)queue_device, NULL, "the device index", NULL },
	{ "context", (getter)queue_context, NULL, "the Context it belongs to", NULL },
	{ 0 },
};

static PyType_Slot queue_slots[] = {
	{ Py_tp_new, queue_new },
	{ Py_tp_dealloc, queue_dealloc },
	{ Py_tp_traverse, queue_traverse },
	{ Py_tp_repr, queue_repr },
	{ Py_tp_getset, queue_getset },
	{ Py_tp_doc, "Queue(device=0, context=None, *, priority=None, share=0): requests on one "
		     "device that run in submission order (a CUDA stream); different queues may "
		     "overlap. priority: -1 (background) to 2 (latency-critical), None for the "
		     "default (gpuxd says the highest allowed); share: the percent of the device's "
		     "SMs its kernels may use (0: all)." },
	{ 0, NULL },
};

static PyType_Spec queue_spec = {
	.name = "gpux._gpux.Queue",
	.basicsize = sizeof(pyx_Queue),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.slots = queue_slots,
};

int pyx_buffer_init_types(PyObject *m)
{
	if (pyx_add_type(m, &buffer_spec, &pyx_BufferType) < 0 ||
	    pyx_add_type(m, &dbuf_spec, &pyx_DeviceBufferType) < 0 ||
	    pyx_add_type(m, &queue_spec, &pyx_QueueType) < 0)
		return -1;
	return 0;
}
