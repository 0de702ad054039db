/* SPDX-License-Identifier: MIT */
/* python/src/request.c: a submitted request: waiting, its status, message and timings. */
#include <math.h>
#include <string.h>

#include "pygpux.h"

PyTypeObject *pyx_RequestType;

PyObject *pyx_request_new(pyx_Context *ctx, gpux_req *req, PyObject *keep, struct pyx_argv *v)
{
	pyx_Request *self = PyObject_New(pyx_Request, pyx_RequestType);

	if (self) {
		self->temps = NULL;
		self->ntemps = 0;
		if (v->ntemps) {
			self->temps = PyMem_Malloc(v->ntemps * sizeof(*self->temps));
			if (self->temps) {
				memcpy(self->temps, v->temps, v->ntemps * sizeof(*self->temps));
				self->ntemps = v->ntemps;
			}
		}
	}
	if (!self || (v->ntemps && !self->temps)) {
		/* The request must end before its temporaries go. */
		Py_BEGIN_ALLOW_THREADS
		pyx_blocking_enter(ctx);
		gpux_req_free(req);
		pyx_blocking_leave(ctx);
		Py_END_ALLOW_THREADS
		pyx_temps_finish(v->temps, v->ntemps, GPUX_E_NOMEM);
		if (self) {
			/* PyObject_New took a reference to the type, as each object does. */
			PyObject_Free(self);
			Py_DECREF(pyx_RequestType);
		}
		return PyErr_NoMemory();
	}
	v->ntemps = 0;
	Py_INCREF((PyObject *)ctx);
	self->ctx = ctx;
	self->req = req;
	self->done = false;
	self->status = GPUX_E_AGAIN;
	Py_XINCREF(keep);
	self->keep = keep;
	return (PyObject *)self;
}

PyObject *pyx_future_new(pyx_Context *ctx, gpux_req *req, PyObject *keep, struct pyx_argv *v)
{
	PyObject *r = pyx_request_new(ctx, req, keep, v), *f;

	if (!r || !pyx_future_type)
		return r;
	f = PyObject_CallFunctionObjArgs(pyx_future_type, r, (PyObject *)ctx, NULL);
	Py_DECREF(r);
	return f;
}

/*
 * The request ended with st: its outputs are copied back and what it used is let go, once.
 * Two threads may see it end (result() and the watcher's peek()): the first takes all of it,
 * and lets go of every Python object, before pyx_temps_finish() lets go of the GIL, so the
 * second finds nothing left to do.
 */
static void finished(pyx_Request *self, gpux_status st)
{
	struct pyx_temp *temps = self->temps;
	unsigned ntemps = self->ntemps;
	PyObject *keep = self->keep;

	if (self->done)
		return;
	self->done = true;
	self->status = st;
	self->temps = NULL;
	self->ntemps = 0;
	self->keep = NULL;
	Py_XDECREF(keep);
	pyx_temps_finish(temps, ntemps, st);
	PyMem_Free(temps);
}

static void request_dealloc(pyx_Request *self)
{
	PyTypeObject *type = Py_TYPE((PyObject *)self);

	/* Still running: wait, so that the memory it uses is not let go under it. */
	if (!self->done) {
		gpux_status st;

		Py_BEGIN_ALLOW_THREADS
		pyx_blocking_enter(self->ctx);
		st = gpux_wait(self->req, -1);
		pyx_blocking_leave(self->ctx);
		Py_END_ALLOW_THREADS
		finished(self, st);
	}
	Py_BEGIN_ALLOW_THREADS
	gpux_req_free(self->req);
	Py_END_ALLOW_THREADS
	Py_DECREF(self->ctx);
	PyObject_Free(self);
	Py_DECREF(type);
}

/* wait(timeout=None) -> bool: whether it finished (None: no time limit; 0: just look). */
static PyObject *request_wait(pyx_Request *self, PyObject *args)
{
	PyObject *timeout = Py_None;
	int64_t ms = -1;
	gpux_status st;

	if (!PyArg_ParseTuple(args, "|O", &timeout))
		return NULL;
	if (self->done)
		Py_RETURN_TRUE;
	if (timeout != Py_None) {
		double s = PyFloat_AsDouble(timeout);

		if (s == -1.0 && PyErr_Occurred())
			return NULL;
		if (isnan(s)) {
			PyErr_SetString(PyExc_ValueError, "timeout: seconds, or None");
			return NULL;
		}
		/* Past 10^9 s (and inf) the cast to int64 would be undefined: no limit. */
		ms = s <= 0 ? 0 : s >= 1e9 ? -1 : (int64_t)ceil(s * 1000.0);
	}
	Py_BEGIN_ALLOW_THREADS
	pyx_blocking_enter(self->ctx);
	st = ms == 0 ? gpux_test(self->req) : gpux_wait(self->req, ms);
	pyx_blocking_leave(self->ctx);
	Py_END_ALLOW_THREADS
	if (st == GPUX_E_AGAIN)
		Py_RETURN_FALSE;
	finished(self, st);
	Py_RETURN_TRUE;
}

/*
 * peek() -> bool: whether it finished, of what this process has taken in (Context.process()),
 * taking nothing in itself: a watcher that took in, then peeks at each of its futures, has
 * missed none that another peek took in meanwhile (a wait(0) may take in anyone's).
 */
static PyObject *request_peek(pyx_Request *self, PyObject *unused)
{
	gpux_status st = GPUX_E_AGAIN;

	if (self->done)
		Py_RETURN_TRUE;
	/* gpux_test() of a done request only reads its status. */
	Py_BEGIN_ALLOW_THREADS
	if (gpux_req_done(self->req))
		st = gpux_test(self->req);
	Py_END_ALLOW_THREADS
	if (st == GPUX_E_AGAIN)
		Py_RETURN_FALSE;
	finished(self, st);
	Py_RETURN_TRUE;
}

/* The worker's detail text (owned by the request, set once it is done), or "". */
static const char *message(pyx_Request *self)
{
	const char *m;

	Py_BEGIN_ALLOW_THREADS
	m = gpux_req_message(self->req);
	Py_END_ALLOW_THREADS
	return m;
}

/* check(): raise the request's error, if it failed. */
static PyObject *request_check(pyx_Request *self, PyObject *unused)
{
	if (!self->done) {
		PyErr_SetString(PyExc_RuntimeError, "the request has not finished");
		return NULL;
	}
	if (self->status < 0)
		return pyx_raise(self->status, message(self));
	Py_RETURN_NONE;
}

static PyObject *request_done(pyx_Request *self, void *unused)
{
	return PyBool_FromLong(self->done);
}

static PyObject *request_status(pyx_Request *self, void *unused)
{
	if (!self->done)
		Py_RETURN_NONE;
	return PyLong_FromLong(self->status);
}

static PyObject *request_message(pyx_Request *self, void *unused)
{
	const char *m = message(self);

	return PyUnicode_DecodeUTF8(m, (Py_ssize_t)strlen(m), "replace");
}

static PyObject *request_times(pyx_Request *self, void *unused)
{
	struct gpux_times t;
	gpux_status st;

	Py_BEGIN_ALLOW_THREADS
	st = gpux_req_times(self->req, &t);
	Py_END_ALLOW_THREADS
	if (st != GPUX_OK)
		Py_RETURN_NONE;
	return Py_BuildValue("(KKK)", (unsigned long long)t.queue_ns, (unsigned long long)t.run_ns,
			     (unsigned long long)t.device_ns);
}

static PyObject *request_device(pyx_Request *self, void *unused)
{
	return PyLong_FromUnsignedLong(gpux_req_device(self->req));
}

static PyMethodDef request_methods[] = {
	{ "wait", (PyCFunction)request_wait, METH_VARARGS,
	  "wait(timeout=None) -> bool: whether it finished, waiting up to timeout seconds." },
	{ "peek", (PyCFunction)request_peek, METH_NOARGS,
	  "peek() -> bool: whether it finished, of what was taken in (Context.process()); "
	  "unlike wait(0), takes nothing in." },
	{ "check", (PyCFunction)request_check, METH_NOARGS,
	  "check(): raise the request's error (a gpux.GpuxError), if it failed." },
	{ 0 },
};

static PyGetSetDef request_getset[] = {
	{ "done", (getter)request_done, NULL, "whether it was seen to finish", NULL },
	{ "status", (getter)request_status, NULL, "its gpux status once done, else None", NULL },
	{ "message", (getter)request_message, NULL, "the worker's detail text, or ''", NULL },
	{ "times", (getter)request_times, NULL,
	  "(queue_ns, run_ns, device_ns) once done, else None", NULL },
	{ "device", (getter)request_device, NULL, "the device it was sent to", NULL },
	{ 0 },
};

static PyType_Slot request_slots[] = {
	{ Py_tp_dealloc, request_dealloc },
	{ Py_tp_methods, request_methods },
	{ Py_tp_getset, request_getset },
	{ Py_tp_doc, "A submitted request (Kernel.submit); gpux.Future wraps it." },
	{ 0, NULL },
};

static PyType_Spec request_spec = {
	.name = "gpux._gpux.Request",
	.basicsize = sizeof(pyx_Request),
	.flags = Py_TPFLAGS_DEFAULT,
	.slots = request_slots,
};

int pyx_request_init_types(PyObject *m)
{
	return pyx_add_type(m, &request_spec, &pyx_RequestType);
}
