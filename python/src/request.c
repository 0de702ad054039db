/* SPDX-License-Identifier: MIT */
/* python/src/request.c: a submitted request: waiting, its status, message and timings. */
#include <math.h>
#include <string.h>
#include <time.h>

#include "pygpux.h"

PyTypeObject *pyx_RequestType;

PyObject *pyx_request_new(pyx_Context *ctx, gpux_req *req, PyObject *keep, struct pyx_argv *v)
{
	pyx_Request *self = PyObject_GC_New(pyx_Request, pyx_RequestType);

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
		Py_BEGIN_ALLOW_THREADS pyx_blocking_enter(ctx);
		gpux_req_free(req);
		pyx_blocking_leave(ctx);
		Py_END_ALLOW_THREADS(void)
			pyx_temps_finish(v->temps, v->ntemps, GPUX_E_NOMEM, NULL);
		if (self) {
			/* PyObject_GC_New took a reference to the type, as each object does. */
			PyObject_GC_Del(self);
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
	self->why[0] = 0;
	self->orphan = false;
	Py_XINCREF(keep);
	self->keep = keep;
	PyObject_GC_Track((PyObject *)self);
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
	self->status = pyx_temps_finish(temps, ntemps, st, self->why);
	PyMem_Free(temps);
}

/* Still running: wait, so that the memory it uses is not let go under it; then let go. */
static void request_end(pyx_Request *self)
{
	gpux_status st;

	if (self->done)
		return;
	Py_BEGIN_ALLOW_THREADS pyx_blocking_enter(self->ctx);
	st = gpux_wait(self->req, -1);
	pyx_blocking_leave(self->ctx);
	Py_END_ALLOW_THREADS finished(self, st);
}

static int request_traverse(pyx_Request *self, visitproc visit, void *arg)
{
	Py_VISIT(Py_TYPE((PyObject *)self));
	Py_VISIT((PyObject *)self->ctx);
	Py_VISIT(self->keep);
	return pyx_temps_traverse(self->temps, self->ntemps, visit, arg);
}

/* A cycle through what it holds is broken once the request has finished (the context stays:
 * the request's handle is freed with it). */
static int request_clear(pyx_Request *self)
{
	request_end(self);
	return 0;
}

/* Put r in its context's orphans; false if there is no room. The exception set stays. */
static bool orphan_append(pyx_Context *ctx, pyx_Request *r)
{
	PyObject *type, *value, *tb;
	bool ok;

	PyErr_Fetch(&type, &value, &tb);
	pyx_temps_no_copy_back(r->temps, r->ntemps);
	r->orphan = true;
	if (!ctx->orphans)
		ctx->orphans = PyList_New(0);
	ok = ctx->orphans && PyList_Append(ctx->orphans, (PyObject *)r) == 0;
	PyErr_Clear();
	PyErr_Restore(type, value, tb);
	return ok;
}

/*
 * A request still running whose object goes (a future dropped): rather than wait here, a new
 * object takes over the request and what it holds, as an orphan of the context.
 */
static bool request_hand_over(pyx_Request *self)
{
	pyx_Request *o;

	if (self->done || self->orphan)
		return false;
	o = PyObject_GC_New(pyx_Request, pyx_RequestType);
	if (!o)
		return false;
	Py_INCREF((PyObject *)self->ctx);
	o->ctx = self->ctx;
	o->req = self->req;
	o->done = false;
	o->status = GPUX_E_AGAIN;
	o->keep = self->keep;
	o->ntemps = self->ntemps;
	o->temps = self->temps;
	o->why[0] = 0;
	o->orphan = false;
	PyObject_GC_Track((PyObject *)o);
	self->req = NULL;
	self->keep = NULL;
	self->temps = NULL;
	self->ntemps = 0;
	self->done = true;
	if (!orphan_append(o->ctx, o)) {
		/* No room to keep it: it waits as it goes. */
		o->orphan = true;
	}
	Py_DECREF(o);
	return true;
}

static void request_dealloc(pyx_Request *self)
{
	PyTypeObject *type = Py_TYPE((PyObject *)self);

	PyObject_GC_UnTrack((PyObject *)self);
	if (!request_hand_over(self))
		request_end(self);
	Py_BEGIN_ALLOW_THREADS gpux_req_free(self->req);
	Py_END_ALLOW_THREADS Py_DECREF(self->ctx);
	PyObject_GC_Del(self);
	Py_DECREF(type);
}

int pyx_wait(pyx_Context *ctx, gpux_req *req, int64_t ms)
{
	bool slices = pyx_main_thread();
	struct timespec now;
	int64_t deadline = 0, left = ms;
	int st;

	if (ms > 0) {
		(void)clock_gettime(CLOCK_MONOTONIC, &now);
		deadline = now.tv_sec * 1000 + now.tv_nsec / 1000000 + ms;
	}
	pyx_blocking_enter(ctx);
	for (;;) {
		int64_t slice = left;

		if (slices && (slice < 0 || slice > PYX_SIGNAL_SLICE_MS))
			slice = PYX_SIGNAL_SLICE_MS;
		Py_BEGIN_ALLOW_THREADS st = slice == 0 ? gpux_test(req) : gpux_wait(req, slice);
		Py_END_ALLOW_THREADS if (st != GPUX_E_AGAIN || left == 0) break;
		if (PyErr_CheckSignals() < 0) {
			st = PYX_E_SIGNAL;
			break;
		}
		if (ms > 0) {
			(void)clock_gettime(CLOCK_MONOTONIC, &now);
			left = deadline - (now.tv_sec * 1000 + now.tv_nsec / 1000000);
			if (left <= 0)
				break;
		}
	}
	pyx_blocking_leave(ctx);
	return st;
}

void pyx_orphan_add(pyx_Context *ctx, gpux_req *req, PyObject *keep, struct pyx_argv *v)
{
	PyObject *type, *value, *tb, *r;

	/* The interrupt's exception stays; nothing here may replace it. */
	PyErr_Fetch(&type, &value, &tb);
	pyx_temps_no_copy_back(v->temps, v->ntemps);
	r = pyx_request_new(ctx, req, keep, v);
	/* Without room for it in the list, the request is waited for as it goes. */
	if (r && !orphan_append(ctx, (pyx_Request *)r))
		((pyx_Request *)r)->orphan = true;
	Py_XDECREF(r);
	PyErr_Clear();
	PyErr_Restore(type, value, tb);
}

/* Whether the request finished, of what was taken in, taking nothing in (as peek()). */
static bool request_seen_done(pyx_Request *self)
{
	gpux_status st = GPUX_E_AGAIN;

	if (self->done)
		return true;
	Py_BEGIN_ALLOW_THREADS if (gpux_req_done(self->req)) st = gpux_test(self->req);
	Py_END_ALLOW_THREADS if (st == GPUX_E_AGAIN) return false;
	finished(self, st);
	return true;
}

void pyx_orphans_reap(pyx_Context *ctx)
{
	PyObject *list = ctx->orphans;
	Py_ssize_t n;

	if (!list)
		return;
	Py_BEGIN_ALLOW_THREADS(void) gpux_process(ctx->ctx);
	Py_END_ALLOW_THREADS n = PyList_Size(list);
	for (Py_ssize_t i = n - 1; i >= 0; i--) {
		PyObject *r = PyList_GetItem(list, i);

		if (r && request_seen_done((pyx_Request *)r) && PySequence_DelItem(list, i) < 0)
			PyErr_Clear();
	}
	if (PyList_Size(list) == 0 && ctx->orphans == list)
		Py_CLEAR(ctx->orphans);
}

/* wait(timeout=None) -> bool: whether it finished (None: no time limit; 0: just look). */
static PyObject *request_wait(pyx_Request *self, PyObject *args)
{
	PyObject *timeout = Py_None;
	int64_t ms = -1;
	int st;

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
	st = pyx_wait(self->ctx, self->req, ms);
	if (st == PYX_E_SIGNAL)
		return NULL;
	if (self->done) /* another thread saw it end meanwhile */
		Py_RETURN_TRUE;
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
	return PyBool_FromLong(request_seen_done(self));
}

/* The worker's detail text (owned by the request, set once it is done), or "", or the
 * extension's own. */
static const char *message(pyx_Request *self)
{
	const char *m;

	if (self->why[0])
		return self->why;
	Py_BEGIN_ALLOW_THREADS m = gpux_req_message(self->req);
	Py_END_ALLOW_THREADS return m;
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

	Py_BEGIN_ALLOW_THREADS st = gpux_req_times(self->req, &t);
	Py_END_ALLOW_THREADS if (st != GPUX_OK) Py_RETURN_NONE;
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

static PyObject *request_repr(pyx_Request *self)
{
	if (!self->done)
		return PyUnicode_FromFormat("<gpux Request on device %u: running>",
					    gpux_req_device(self->req));
	return PyUnicode_FromFormat("<gpux Request on device %u: %s>", gpux_req_device(self->req),
				    self->status == GPUX_OK ? "done" : gpux_strerror(self->status));
}

static PyType_Slot request_slots[] = {
	{ Py_tp_dealloc, request_dealloc },
	{ Py_tp_traverse, request_traverse },
	{ Py_tp_clear, request_clear },
	{ Py_tp_repr, request_repr },
	{ Py_tp_methods, request_methods },
	{ Py_tp_getset, request_getset },
	{ Py_tp_doc, "A submitted request (Kernel.submit); gpux.Future wraps it." },
	{ 0, NULL },
};

static PyType_Spec request_spec = {
	.name = "gpux._gpux.Request",
	.basicsize = sizeof(pyx_Request),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.slots = request_slots,
};

int pyx_request_init_types(PyObject *m)
{
	return pyx_add_type(m, &request_spec, &pyx_RequestType);
}
