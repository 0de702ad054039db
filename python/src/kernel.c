/* SPDX-License-Identifier: MIT */
/* python/src/kernel.c: Kernel calls (run, submit, prepare), prepared Launches, device copies. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pygpux.h"

#include <structmember.h>

/* What a call names besides the kernel; borrowed references. */
struct call {
	PyObject *grid, *block, *args, *shared, *queue, *device, *timeout;
	int timed;
	bool time_kernel; /* PyCUDA's: the call returns the kernel's time in seconds */
};

/* kernel(grid, block, args=(), *, shared_mem=0, queue=None, device=None, timeout=None,
 * timed=False); the common call, with two or three positional arguments, parses nothing. */
static int call_parse(PyObject *args, PyObject *kw, struct call *c)
{
	static char *names[] = { "grid",   "block",   "args",  "shared_mem", "queue",
				 "device", "timeout", "timed", NULL };
	Py_ssize_t n = PyTuple_Size(args);

	memset(c, 0, sizeof(*c));
	if (!kw && (n == 2 || n == 3)) {
		c->grid = PyTuple_GetItem(args, 0);
		c->block = PyTuple_GetItem(args, 1);
		c->args = n == 3 ? PyTuple_GetItem(args, 2) : NULL;
		return 0;
	}
	return PyArg_ParseTupleAndKeywords(args, kw, "OO|O$OOOOp", names, &c->grid, &c->block,
					   &c->args, &c->shared, &c->queue, &c->device, &c->timeout,
					   &c->timed)
		       ? 0
		       : -1;
}

/* keyword == name */
static bool kw_is(PyObject *key, const char *name)
{
	return PyUnicode_Check(key) && PyUnicode_CompareWithASCIIString(key, name) == 0;
}

/*
 * PyCUDA's call, f(*args, block=(x, y, z), grid=(x, y), shared=0, stream=None,
 * time_kernel=False), with gpux's own keywords beside: queue (stream's other name), device,
 * timeout, timed. Taken by a SourceModule's kernels when block is a keyword and args is not.
 */
static bool pycuda_call(PyObject *kw)
{
	PyObject *block, *args;

	if (!kw)
		return false;
	block = PyDict_GetItemString(kw, "block");
	args = PyDict_GetItemString(kw, "args");
	return block && !args;
}

static int pycuda_parse(PyObject *args, PyObject *kw, struct call *c)
{
	PyObject *key, *value;
	Py_ssize_t pos = 0;

	memset(c, 0, sizeof(*c));
	c->args = args;
	while (PyDict_Next(kw, &pos, &key, &value)) {
		int truth;

		if (kw_is(key, "block")) {
			c->block = value;
		} else if (kw_is(key, "grid")) {
			c->grid = value;
		} else if (kw_is(key, "shared")) {
			c->shared = value;
		} else if (kw_is(key, "stream") || kw_is(key, "queue")) {
			if (c->queue && value != Py_None) {
				PyErr_SetString(PyExc_TypeError, "stream and queue name one thing");
				return -1;
			}
			if (value != Py_None)
				c->queue = value;
		} else if (kw_is(key, "device")) {
			c->device = value;
		} else if (kw_is(key, "timeout")) {
			c->timeout = value;
		} else if (kw_is(key, "timed") || kw_is(key, "time_kernel")) {
			truth = PyObject_IsTrue(value);
			if (truth < 0)
				return -1;
			c->timed |= truth;
			if (kw_is(key, "time_kernel"))
				c->time_kernel = truth;
		} else if (kw_is(key, "texrefs")) {
			truth = PyObject_IsTrue(value);
			if (truth != 0) {
				if (truth > 0)
					PyErr_SetString(PyExc_TypeError,
							"texrefs: gpux has no texture references");
				return -1;
			}
		} else {
			PyErr_Format(
				PyExc_TypeError,
				"unexpected keyword argument %R (PyCUDA's call takes block, grid, "
				"shared, stream, time_kernel; gpux's also queue, device, timeout, "
				"timed)",
				key);
			return -1;
		}
	}
	return 0;
}

static int dim_value(PyObject *o, uint32_t *ret, const char *what)
{
	unsigned long long v = PyLong_AsUnsignedLongLong(o);

	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		PyErr_Format(PyExc_TypeError, "%s: expected positive integers", what);
		return -1;
	}
	if (v == 0 || v > UINT32_MAX) {
		PyErr_Format(PyExc_ValueError, "%s: each dimension is 1 to 2**32-1", what);
		return -1;
	}
	*ret = (uint32_t)v;
	return 0;
}

/* An int, or a tuple (or list) of one to three. */
static int dims(PyObject *o, uint32_t d[3], const char *what)
{
	Py_ssize_t n;

	d[0] = d[1] = d[2] = 1;
	if (PyLong_Check(o))
		return dim_value(o, &d[0], what);
	n = PySequence_Size(o);
	if (n < 1 || n > 3) {
		PyErr_Clear();
		PyErr_Format(PyExc_ValueError, "%s: an int or a tuple of 1 to 3 ints", what);
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *x = PySequence_GetItem(o, i);
		int r;

		if (!x)
			return -1;
		r = dim_value(x, &d[i], what);
		Py_DECREF(x);
		if (r < 0)
			return -1;
	}
	return 0;
}

static int call_launch(pyx_Context *ctx, const struct call *c, struct gpux_launch *l)
{
	memset(l, 0, sizeof(*l));
	l->device = GPUX_ANY;
	l->grid[0] = l->grid[1] = l->grid[2] = 1; /* PyCUDA's grid may be left out */
	if ((c->grid && dims(c->grid, l->grid, "grid") < 0) ||
	    dims(c->block, l->block, "block") < 0)
		return -1;
	if (c->shared && c->shared != Py_None) {
		unsigned long v = PyLong_AsUnsignedLong(c->shared);

		if (v == (unsigned long)-1 && PyErr_Occurred())
			return -1;
		if (v > UINT32_MAX) {
			PyErr_SetString(PyExc_ValueError, "shared_mem: too large");
			return -1;
		}
		l->shared_bytes = (uint32_t)v;
	}
	if (c->queue && c->queue != Py_None) {
		if (Py_TYPE(c->queue) != pyx_QueueType || ((pyx_Queue *)c->queue)->ctx != ctx) {
			PyErr_SetString(PyExc_TypeError,
					"queue: a gpux Queue of the kernel's context");
			return -1;
		}
		l->queue = ((pyx_Queue *)c->queue)->queue;
	}
	if (c->device && c->device != Py_None) {
		unsigned long v = PyLong_AsUnsignedLong(c->device);

		if (v == (unsigned long)-1 && PyErr_Occurred())
			return -1;
		if (v >= UINT32_MAX) {
			PyErr_SetString(PyExc_ValueError, "device: no such device");
			return -1;
		}
		l->device = (uint32_t)v;
	}
	if (c->timeout && c->timeout != Py_None) {
		double s = PyFloat_AsDouble(c->timeout);

		if (s == -1.0 && PyErr_Occurred())
			return -1;
		if (!(s > 0) || s * 1000.0 > UINT32_MAX) {
			PyErr_SetString(PyExc_ValueError, "timeout: seconds, above 0");
			return -1;
		}
		l->timeout_ms = (uint32_t)ceil(s * 1000.0);
	}
	if (c->timed)
		l->flags |= GPUX_LAUNCH_TIMED;
	return 0;
}

/* The arguments as a tuple (a new reference); their memory is held in the argv (temps). */
static PyObject *call_args(const struct call *c)
{
	if (!c->args || c->args == Py_None)
		return PyTuple_New(0);
	return PySequence_Tuple(c->args);
}

/*
 * Submit, wait and free, the GIL released once for all while the request is short; then the
 * temporaries' copies back. A longer wait takes signals (Ctrl-C): interrupted, the request
 * goes on as an orphan of the context, holding keep and the temporaries until it ends. A
 * failed request is kept for its message until the error is made.
 */
static PyObject *run_sync(pyx_Kernel *k, const struct gpux_launch *l, struct pyx_argv *v,
			  PyObject *keep, bool time_kernel)
{
	struct gpux_times times = { 0 };
	pyx_Context *ctx = k->module->ctx;
	const char *why = NULL;
	char own[PYX_WHY_MAX] = "";
	gpux_req *r = NULL;
	int st;

	if (ctx->orphans)
		pyx_orphans_reap(ctx);
	Py_BEGIN_ALLOW_THREADS pyx_blocking_enter(ctx);
	st = gpux_submit(k->module->module, k->name, l, v->a, v->n, &r);
	if (st == GPUX_OK)
		st = gpux_wait(r, PYX_SIGNAL_SLICE_MS);
	if (st < 0 && st != GPUX_E_AGAIN && r) {
		why = gpux_req_message(r);
	} else if (st >= 0) {
		if (time_kernel)
			(void)gpux_req_times(r, &times);
		gpux_req_free(r);
		r = NULL;
	}
	pyx_blocking_leave(ctx);
	Py_END_ALLOW_THREADS if (st == GPUX_E_AGAIN && r)
	{
		st = pyx_wait(ctx, r, -1);
		if (st == PYX_E_SIGNAL) {
			pyx_orphan_add(ctx, r, keep, v);
			v->ntemps = 0;
			return NULL;
		}
		Py_BEGIN_ALLOW_THREADS if (st < 0)
		{
			why = gpux_req_message(r);
		}
		else
		{
			if (time_kernel)
				(void)gpux_req_times(r, &times);
			gpux_req_free(r);
			r = NULL;
		}
		Py_END_ALLOW_THREADS
	}
	st = pyx_temps_finish(v->temps, v->ntemps, st, own);
	v->ntemps = 0;
	if (st >= 0 && time_kernel)
		return PyFloat_FromDouble((double)times.device_ns / 1e9);
	if (st >= 0)
		Py_RETURN_NONE;
	if (r) {
		pyx_raise(st, why);
		Py_BEGIN_ALLOW_THREADS gpux_req_free(r);
		Py_END_ALLOW_THREADS
	} else if (st == GPUX_E_INVAL && !why && *own) {
		pyx_raise(st, own);
	} else {
		pyx_raise_call(st, NULL);
	}
	return NULL;
}

static PyObject *submit(pyx_Kernel *k, const struct gpux_launch *l, PyObject *keep,
			struct pyx_argv *v)
{
	pyx_Context *ctx = k->module->ctx;
	gpux_req *r;
	gpux_status st;

	if (ctx->orphans)
		pyx_orphans_reap(ctx);
	Py_BEGIN_ALLOW_THREADS pyx_blocking_enter(ctx);
	st = gpux_submit(k->module->module, k->name, l, v->a, v->n, &r);
	pyx_blocking_leave(ctx);
	Py_END_ALLOW_THREADS if (st < 0)
	{
		(void)pyx_temps_finish(v->temps, v->ntemps, st, NULL);
		v->ntemps = 0;
		return pyx_raise_call(st, NULL);
	}
	return pyx_future_new(ctx, r, keep, v);
}

/* ---- Kernel ---- */

static PyObject *kernel_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *names[] = { "module", "name", "owner", "pycuda", NULL };
	PyObject *mod, *name, *owner = Py_None;
	pyx_Kernel *self;
	const char *utf8;
	Py_ssize_t len;
	int pycuda = 0;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "O!U|O$p", names, pyx_ModuleType, &mod, &name,
					 &owner, &pycuda))
		return NULL;
	utf8 = PyUnicode_AsUTF8AndSize(name, &len);
	if (!utf8)
		return NULL;
	if (len == 0 || len > 255 || strlen(utf8) != (size_t)len) {
		PyErr_SetString(PyExc_ValueError, "a kernel name has 1 to 255 bytes, no NUL");
		return NULL;
	}
	self = PyObject_GC_New(pyx_Kernel, type);
	if (!self)
		return NULL;
	self->name = strdup(utf8);
	if (!self->name) {
		PyObject_GC_Del(self);
		Py_DECREF(type);
		return PyErr_NoMemory();
	}
	self->weakrefs = NULL;
	Py_INCREF(mod);
	self->module = (pyx_Module *)mod;
	Py_INCREF(name);
	self->name_obj = name;
	Py_INCREF(owner);
	self->owner = owner;
	self->pycuda = pycuda;
	PyObject_GC_Track((PyObject *)self);
	return (PyObject *)self;
}

static int kernel_traverse(pyx_Kernel *self, visitproc visit, void *arg)
{
	Py_VISIT(Py_TYPE((PyObject *)self));
	Py_VISIT((PyObject *)self->module);
	Py_VISIT(self->owner);
	return 0;
}

/* What made it may be in a cycle with it (a Module subclass keeping its kernels): the kernel
 * needs only its _gpux module. */
static int kernel_clear(pyx_Kernel *self)
{
	PyObject *owner = self->owner;

	self->owner = Py_None;
	Py_INCREF(Py_None);
	Py_DECREF(owner);
	return 0;
}

static void kernel_dealloc(pyx_Kernel *self)
{
	PyTypeObject *type = Py_TYPE((PyObject *)self);

	PyObject_GC_UnTrack((PyObject *)self);
	if (self->weakrefs)
		PyObject_ClearWeakRefs((PyObject *)self);
	free(self->name);
	Py_DECREF(self->name_obj);
	Py_DECREF(self->owner);
	Py_DECREF(self->module);
	PyObject_GC_Del(self);
	Py_DECREF(type);
}

/* A call or submit(): parsed and resolved alike, then run and waited for, or submitted. */
static PyObject *kernel_launch(pyx_Kernel *self, PyObject *args, PyObject *kw, bool wait)
{
	struct gpux_launch l;
	struct pyx_argv v;
	struct call c;
	PyObject *tuple, *res;

	if (self->pycuda && pycuda_call(kw)) {
		if (pycuda_parse(args, kw, &c) < 0)
			return NULL;
		if (c.time_kernel && !wait) {
			PyErr_SetString(PyExc_TypeError, "time_kernel: for a call that waits (the "
							 "future's times say it otherwise)");
			return NULL;
		}
	} else if (call_parse(args, kw, &c) < 0) {
		return NULL;
	}
	if (call_launch(self->module->ctx, &c, &l) < 0)
		return NULL;
	tuple = call_args(&c);
	if (!tuple)
		return NULL;
	if (pyx_argv_fill(self->module->ctx, tuple, &v) < 0) {
		Py_DECREF(tuple);
		return NULL;
	}
	res = wait ? run_sync(self, &l, &v, tuple, c.time_kernel) : submit(self, &l, tuple, &v);
	Py_DECREF(tuple);
	return res;
}

static PyObject *kernel_call(pyx_Kernel *self, PyObject *args, PyObject *kw)
{
	return kernel_launch(self, args, kw, true);
}

static PyObject *kernel_submit(pyx_Kernel *self, PyObject *args, PyObject *kw)
{
	return kernel_launch(self, args, kw, false);
}

static PyObject *kernel_prepare(pyx_Kernel *self, PyObject *args, PyObject *kw)
{
	pyx_Launch *p;
	struct call c;

	if (call_parse(args, kw, &c) < 0)
		return NULL;
	p = PyObject_GC_New(pyx_Launch, pyx_LaunchType);
	if (!p)
		return NULL;
	p->nheld = 0;
	p->argv = PyMem_Malloc(sizeof(*p->argv));
	p->args = call_args(&c);
	Py_INCREF((PyObject *)self);
	p->kernel = self;
	p->queue = c.queue;
	Py_XINCREF(p->queue);
	PyObject_GC_Track((PyObject *)p);
	if (!p->argv || !p->args || call_launch(self->module->ctx, &c, &p->launch) < 0 ||
	    pyx_argv_fill(self->module->ctx, p->args, p->argv) < 0) {
		if (!p->argv)
			PyErr_NoMemory();
		PyMem_Free(p->argv);
		p->argv = NULL;
		Py_DECREF(p);
		return NULL;
	}
	for (unsigned i = 0; i < p->argv->ntemps; i++) {
		if (p->argv->temps[i].buf) {
			(void)pyx_temps_finish(p->argv->temps, p->argv->ntemps, GPUX_E_INVAL, NULL);
			PyMem_Free(p->argv);
			p->argv = NULL;
			Py_DECREF(p);
			PyErr_SetString(
				PyExc_ValueError,
				"prepare() takes arrays in gpux memory only (gpux.asarray)");
			return NULL;
		}
	}
	/* Its arguments' memory stays held until it goes, not only while a call runs. */
	p->nheld = p->argv->ntemps;
	p->argv->ntemps = 0;
	return (PyObject *)p;
}

static PyObject *kernel_name(pyx_Kernel *self, void *unused)
{
	Py_INCREF(self->name_obj);
	return self->name_obj;
}

static PyObject *kernel_module(pyx_Kernel *self, void *unused)
{
	Py_INCREF((PyObject *)self->module);
	return (PyObject *)self->module;
}

static PyObject *kernel_owner(pyx_Kernel *self, void *unused)
{
	Py_INCREF(self->owner);
	return self->owner;
}

static PyObject *kernel_pycuda(pyx_Kernel *self, void *unused)
{
	return PyBool_FromLong(self->pycuda);
}

/* _attributes(device=None): gpux_kernel_attrs()'s fields, in the order of gpux.h's struct. */
static PyObject *kernel_attributes(pyx_Kernel *self, PyObject *args)
{
	PyObject *device_obj = NULL;
	struct gpux_kernel_attrs a;
	uint32_t device;
	gpux_status st;

	if (!PyArg_ParseTuple(args, "|O", &device_obj) || pyx_device_arg(device_obj, &device) < 0)
		return NULL;
	Py_BEGIN_ALLOW_THREADS pyx_blocking_enter(self->module->ctx);
	st = gpux_kernel_attrs(self->module->module, self->name, device, &a);
	pyx_blocking_leave(self->module->ctx);
	Py_END_ALLOW_THREADS if (st < 0)
	{
		char what[PYX_NAME_MAX + 64];

		(void)snprintf(what, sizeof(what), "attributes of kernel \"%s\"", self->name);
		return pyx_raise_call(st, what);
	}
	return Py_BuildValue("(iiiiiiiiiii)", a.max_threads_per_block, a.num_regs,
			     a.shared_size_bytes, a.const_size_bytes, a.local_size_bytes,
			     a.max_dynamic_shared_size_bytes, a.ptx_version, a.binary_version,
			     a.cache_mode_ca, a.preferred_shared_memory_carveout, a.nparams);
}

static PyMethodDef kernel_methods[] = {
	{ "submit", (PyCFunction)(void (*)(void))kernel_submit, METH_VARARGS | METH_KEYWORDS,
	  "submit(grid, block, args=(), **options) -> gpux.Future: launch without waiting." },
	{ "prepare", (PyCFunction)(void (*)(void))kernel_prepare, METH_VARARGS | METH_KEYWORDS,
	  "prepare(grid, block, args=(), **options) -> Launch: arguments resolved once." },
	{ "_attributes", (PyCFunction)kernel_attributes, METH_VARARGS,
	  "_attributes(device=None) -> tuple: gpux_kernel_attrs()'s fields, in its order." },
	{ 0 },
};

static PyGetSetDef kernel_getset[] = {
	{ "name", (getter)kernel_name, NULL, "the kernel's name in its module", NULL },
	{ "module", (getter)kernel_module, NULL, "the module (gpux._gpux.Module)", NULL },
	{ "owner", (getter)kernel_owner, NULL, "what made it (a gpux.Module), or None", NULL },
	{ "pycuda", (getter)kernel_pycuda, NULL,
	  "whether it also takes PyCUDA's call, f(*args, block=..., grid=...)", NULL },
	{ 0 },
};

static PyMemberDef kernel_members[] = {
	{ "__weaklistoffset__", T_PYSSIZET, offsetof(pyx_Kernel, weakrefs), READONLY, NULL },
	{ 0 },
};

static PyObject *kernel_repr(pyx_Kernel *self)
{
	return PyUnicode_FromFormat("<gpux Kernel %R>", self->name_obj);
}

static PyType_Slot kernel_slots[] = {
	{ Py_tp_new, kernel_new },
	{ Py_tp_dealloc, kernel_dealloc },
	{ Py_tp_traverse, kernel_traverse },
	{ Py_tp_clear, kernel_clear },
	{ Py_tp_repr, kernel_repr },
	{ Py_tp_call, kernel_call },
	{ Py_tp_methods, kernel_methods },
	{ Py_tp_getset, kernel_getset },
	{ Py_tp_members, kernel_members },
	{ Py_tp_doc, "Kernel(module, name, owner=None); kernel(grid, block, args=(), *, "
		     "shared_mem=0, queue=None, device=None, timeout=None, timed=False) runs it "
		     "and waits." },
	{ 0, NULL },
};

static PyType_Spec kernel_spec = {
	.name = "gpux._gpux.Kernel",
	.basicsize = sizeof(pyx_Kernel),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.slots = kernel_slots,
};

/* ---- Launch ---- */

/*
 * No tp_clear: its requests in flight use its queue and the device buffers its arguments
 * hold. A cycle through it is broken at a Request (which waits for its end) or elsewhere.
 */
static int launch_traverse(pyx_Launch *self, visitproc visit, void *arg)
{
	Py_VISIT(Py_TYPE((PyObject *)self));
	Py_VISIT((PyObject *)self->kernel);
	Py_VISIT(self->queue);
	Py_VISIT(self->args);
	if (self->argv)
		return pyx_temps_traverse(self->argv->temps, self->nheld, visit, arg);
	return 0;
}

static void launch_dealloc(pyx_Launch *self)
{
	PyTypeObject *type = Py_TYPE((PyObject *)self);

	PyObject_GC_UnTrack((PyObject *)self);
	if (self->argv)
		(void)pyx_temps_finish(self->argv->temps, self->nheld, GPUX_OK, NULL);
	PyMem_Free(self->argv);
	Py_XDECREF(self->args);
	Py_XDECREF(self->queue);
	Py_DECREF(self->kernel);
	PyObject_GC_Del(self);
	Py_DECREF(type);
}

static PyObject *launch_call(pyx_Launch *self, PyObject *args, PyObject *kw)
{
	if (PyTuple_Size(args) != 0 || (kw && PyDict_Size(kw) != 0)) {
		PyErr_SetString(PyExc_TypeError, "a prepared launch takes no arguments");
		return NULL;
	}
	return run_sync(self->kernel, &self->launch, self->argv, (PyObject *)self, false);
}

/* The request keeps the Launch, which holds the arguments' memory. */
static PyObject *launch_submit(pyx_Launch *self, PyObject *unused)
{
	return submit(self->kernel, &self->launch, (PyObject *)self, self->argv);
}

static PyMethodDef launch_methods[] = {
	{ "submit", (PyCFunction)launch_submit, METH_NOARGS,
	  "submit() -> gpux.Future: launch without waiting." },
	{ 0 },
};

static PyObject *launch_repr(pyx_Launch *self)
{
	return PyUnicode_FromFormat("<gpux Launch of %R, grid (%u, %u, %u), block (%u, %u, %u)>",
				    self->kernel->name_obj, self->launch.grid[0],
				    self->launch.grid[1], self->launch.grid[2],
				    self->launch.block[0], self->launch.block[1],
				    self->launch.block[2]);
}

static PyType_Slot launch_slots[] = {
	{ Py_tp_dealloc, launch_dealloc },
	{ Py_tp_traverse, launch_traverse },
	{ Py_tp_repr, launch_repr },
	{ Py_tp_call, launch_call },
	{ Py_tp_methods, launch_methods },
	{ Py_tp_doc, "A launch with its arguments resolved once (Kernel.prepare): call it to run "
		     "and wait, or submit()." },
	{ 0, NULL },
};

static PyType_Spec launch_spec = {
	.name = "gpux._gpux.Launch",
	.basicsize = sizeof(pyx_Launch),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.slots = launch_slots,
};

/* ---- copies between shared and device buffers ---- */

/* _dbuf_copy(dbuf, to_device, host, dbuf_offset, size, queue) -> Request */
static PyObject *dbuf_copy(PyObject *m, PyObject *args)
{
	PyObject *dobj, *host, *qobj, *keep;
	unsigned long long off, size;
	int to_device;
	pyx_DeviceBuffer *d;
	struct pyx_argv v;
	struct gpux_arg a;
	gpux_queue *q = NULL;
	gpux_req *r;
	gpux_status st;

	if (!PyArg_ParseTuple(args, "O!pOKKO", pyx_DeviceBufferType, &dobj, &to_device, &host, &off,
			      &size, &qobj))
		return NULL;
	d = (pyx_DeviceBuffer *)dobj;
	if (qobj != Py_None) {
		if (Py_TYPE(qobj) != pyx_QueueType || ((pyx_Queue *)qobj)->ctx != d->ctx) {
			PyErr_SetString(PyExc_TypeError, "queue: a gpux Queue of the same context");
			return NULL;
		}
		q = ((pyx_Queue *)qobj)->queue;
	}
	if (d->ctx->orphans)
		pyx_orphans_reap(d->ctx);
	v.ntemps = 0;
	if (pyx_host_arg(d->ctx, 0, host, to_device ? GPUX_ARG_IN : GPUX_ARG_OUT, 0, &v, &a) < 0)
		return NULL;
	if (size == 0)
		size = a.size;
	if (size > a.size || off > gpux_dbuf_size(d->dbuf) ||
	    size > gpux_dbuf_size(d->dbuf) - off) {
		(void)pyx_temps_finish(v.temps, v.ntemps, GPUX_E_INVAL, NULL);
		PyErr_SetString(PyExc_ValueError, "the copy is outside the array or device buffer");
		return NULL;
	}
	keep = PyTuple_Pack(2, dobj, host);
	if (!keep) {
		(void)pyx_temps_finish(v.temps, v.ntemps, GPUX_E_INVAL, NULL);
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS pyx_blocking_enter(d->ctx);
	st = to_device ? gpux_dbuf_write(d->dbuf, off, a.buf, a.offset, size, q, &r)
		       : gpux_dbuf_read(a.buf, a.offset, d->dbuf, off, size, q, &r);
	pyx_blocking_leave(d->ctx);
	Py_END_ALLOW_THREADS if (st < 0)
	{
		(void)pyx_temps_finish(v.temps, v.ntemps, st, NULL);
		Py_DECREF(keep);
		return pyx_raise_call(st, NULL);
	}
	m = pyx_request_new(d->ctx, r, keep, &v);
	Py_DECREF(keep);
	return m;
}

static PyMethodDef kernel_functions[] = {
	{ "_dbuf_copy", dbuf_copy, METH_VARARGS,
	  "_dbuf_copy(dbuf, to_device, host, dbuf_offset, size, queue) -> Request" },
	{ 0 },
};

int pyx_kernel_init_types(PyObject *m)
{
	if (pyx_add_type(m, &kernel_spec, &pyx_KernelType) < 0 ||
	    pyx_add_type(m, &launch_spec, &pyx_LaunchType) < 0)
		return -1;
	return PyModule_AddFunctions(m, kernel_functions);
}
