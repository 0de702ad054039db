/* SPDX-License-Identifier: MIT */
/* python/src/launch.c: Modules, Kernels and their launches: arguments, grid, options, submit. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pygpux.h"

PyTypeObject *pyx_ModuleType, *pyx_KernelType, *pyx_ArgType, *pyx_LaunchType;

/* ---- arguments ---- */

/* Copy a temporary back into the memory it stands for, if that is still where it was. */
static gpux_status copy_back(struct pyx_temp *t, char *why)
{
	Py_buffer now;
	bool same;

	/*
	 * What exports the memory may have let go of it meanwhile, though its export was held: a
	 * numpy array resized with refcheck=False frees its old memory. Export it again: only the
	 * same memory of the same size is written.
	 */
	if (PyObject_GetBuffer(t->view.obj, &now, PyBUF_ANY_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
		PyErr_Clear();
		same = false;
	} else {
		same = now.buf == t->view.buf && now.len == t->view.len;
		PyBuffer_Release(&now);
	}
	if (same) {
		memcpy(t->view.buf, gpux_buf_data(t->buf), (size_t)t->view.len);
		return GPUX_OK;
	}
	if (why)
		(void)snprintf(why, PYX_WHY_MAX,
			       "argument %u: its memory moved or changed size while the request "
			       "ran (a numpy array resized?): its output was not copied back",
			       t->arg);
	return GPUX_E_INVAL;
}

gpux_status pyx_temps_finish(struct pyx_temp *temps, unsigned n, gpux_status st, char *why)
{
	gpux_status ret = st;
	bool bufs = false;

	/*
	 * The copies back with the GIL held, as the copies in: a thread that sees the request
	 * finished (request.c) sees its outputs whole. Freeing takes the context's lock.
	 */
	for (unsigned i = 0; i < n; i++) {
		struct pyx_temp *t = &temps[i];

		if (t->held) {
			if (t->copy_back && st == GPUX_OK && copy_back(t, why) < 0)
				ret = GPUX_E_INVAL;
			PyBuffer_Release(&t->view);
			t->held = t->copy_back = false;
		}
		bufs |= t->buf != NULL;
	}
	if (!bufs)
		return ret;
	Py_BEGIN_ALLOW_THREADS for (unsigned i = 0; i < n; i++)
	{
		gpux_buf_free(temps[i].buf);
		temps[i].buf = NULL;
	}
	Py_END_ALLOW_THREADS return ret;
}

void pyx_temps_no_copy_back(struct pyx_temp *temps, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		temps[i].copy_back = false;
}

int pyx_temps_traverse(struct pyx_temp *temps, unsigned n, visitproc visit, void *arg)
{
	for (unsigned i = 0; i < n; i++)
		if (temps[i].held)
			Py_VISIT(temps[i].view.obj);
	return 0;
}

static int arg_error(uint32_t i, const char *what)
{
	PyErr_Format(PyExc_ValueError, "argument %u: %s", i, what);
	return -1;
}

/* A temporary gpux buffer stands in for memory that is not gpux's: copied in, and back after. */
int pyx_host_arg(pyx_Context *ctx, uint32_t i, PyObject *obj, uint32_t kind, uint32_t flags,
		 struct pyx_argv *v, struct gpux_arg *ret)
{
	struct pyx_temp *t;
	pyx_Buffer *b;
	Py_buffer view;
	gpux_status st;

	if (PyObject_GetBuffer(obj, &view, PyBUF_ANY_CONTIGUOUS) < 0) {
		PyErr_Clear();
		PyErr_Format(PyExc_TypeError,
			     "argument %u: this object is neither a contiguous array nor a scalar",
			     i);
		return -1;
	}
	if (kind == 0)
		kind = view.readonly ? GPUX_ARG_IN : GPUX_ARG_INOUT;
	if (kind != GPUX_ARG_IN && view.readonly) {
		PyBuffer_Release(&view);
		return arg_error(i, "read-only memory cannot be an output (Out, InOut, Mapped)");
	}
	if (view.len == 0) {
		PyBuffer_Release(&view);
		return arg_error(i, "an empty array cannot be a kernel argument");
	}
	b = pyx_buffer_find(view.buf, (size_t)view.len);
	if (b) {
		if (b->ctx != ctx) {
			PyBuffer_Release(&view);
			return arg_error(i, "the array belongs to another gpux Context");
		}
		if ((flags & GPUX_ARG_CACHED) && !b->frozen) {
			PyBuffer_Release(&view);
			return arg_error(i, "Cached() needs a frozen array (gpux.freeze)");
		}
		*ret = gpux_arg_buf(kind, b->buf, (uint64_t)((char *)view.buf - b->data),
				    (uint64_t)view.len);
		ret->flags = flags;
		v->temps[v->ntemps++] = (struct pyx_temp){ .view = view, .arg = i, .held = true };
		return 0;
	}
	if (flags & GPUX_ARG_CACHED) {
		PyBuffer_Release(&view);
		return arg_error(i, "Cached() needs a frozen array in gpux memory (gpux.freeze)");
	}
	t = &v->temps[v->ntemps];
	Py_BEGIN_ALLOW_THREADS st = gpux_buf_alloc(ctx->ctx, (size_t)view.len, &t->buf);
	Py_END_ALLOW_THREADS if (st < 0)
	{
		PyBuffer_Release(&view);
		pyx_raise_call(st, "cannot allocate a temporary shared buffer");
		return -1;
	}
	v->ntemps++;
	t->arg = i;
	if (kind != GPUX_ARG_OUT)
		memcpy(gpux_buf_data(t->buf), view.buf, (size_t)view.len);
	t->held = t->copy_back = kind != GPUX_ARG_IN;
	if (t->held)
		t->view = view;
	else
		PyBuffer_Release(&view);
	*ret = gpux_arg_buf(kind, t->buf, 0, (uint64_t)view.len);
	return 0;
}

static int dbuf_arg(pyx_Context *ctx, uint32_t i, pyx_DeviceBuffer *d, uint64_t offset,
		    uint64_t size, struct gpux_arg *ret)
{
	uint64_t total = gpux_dbuf_size(d->dbuf);

	if (d->ctx != ctx)
		return arg_error(i, "the device buffer belongs to another gpux Context");
	if (size == 0)
		size = total > offset ? total - offset : 0;
	if (offset >= total || size > total - offset)
		return arg_error(i, "the range is outside the device buffer");
	*ret = gpux_arg_dbuf(d->dbuf, offset, size);
	return 0;
}

static int scalar_arg(uint32_t i, const void *p, size_t len, struct pyx_argv *v,
		      struct gpux_arg *ret)
{
	if (len == 0 || len > PYX_SCALAR_MAX)
		return arg_error(i, "a scalar has 1 to 256 bytes");
	memcpy(v->scalars[i], p, len);
	*ret = gpux_arg_scalar(v->scalars[i], len);
	return 0;
}

/* Python int (as int64, or uint64 above it), float (double), bool (one byte), bytes. */
static int python_scalar(uint32_t i, PyObject *o, struct pyx_argv *v, struct gpux_arg *ret)
{
	if (PyBool_Check(o)) {
		uint8_t b = o == Py_True;
		return scalar_arg(i, &b, 1, v, ret);
	}
	if (PyLong_Check(o)) {
		int overflow;
		long long x = PyLong_AsLongLongAndOverflow(o, &overflow);

		if (overflow > 0) {
			unsigned long long u = PyLong_AsUnsignedLongLong(o);
			if (u == (unsigned long long)-1 && PyErr_Occurred())
				return -1;
			return scalar_arg(i, &u, sizeof(u), v, ret);
		}
		if (overflow < 0 || (x == -1 && PyErr_Occurred()))
			return arg_error(i, "the integer does not fit in 64 bits");
		return scalar_arg(i, &x, sizeof(x), v, ret);
	}
	if (PyFloat_Check(o)) {
		double d = PyFloat_AsDouble(o);
		return scalar_arg(i, &d, sizeof(d), v, ret);
	}
	{
		char *p;
		Py_ssize_t len;

		if (PyBytes_AsStringAndSize(o, &p, &len) < 0)
			return -1;
		return scalar_arg(i, p, (size_t)len, v, ret);
	}
}

static int one_arg(pyx_Context *ctx, uint32_t i, PyObject *o, struct pyx_argv *v)
{
	struct gpux_arg *ret = &v->a[i];
	PyTypeObject *t = Py_TYPE(o);

	if (t == pyx_ArgType) {
		pyx_Arg *w = (pyx_Arg *)o;

		if (Py_TYPE(w->obj) == pyx_DeviceBufferType) {
			if (w->kind != GPUX_ARG_DBUF)
				return arg_error(i, "a device buffer is passed as itself");
			return dbuf_arg(ctx, i, (pyx_DeviceBuffer *)w->obj, w->offset, w->size,
					ret);
		}
		if (w->kind == GPUX_ARG_DBUF)
			return arg_error(i, "not a device buffer");
		return pyx_host_arg(ctx, i, w->obj, w->kind, w->flags, v, ret);
	}
	if (t == pyx_DeviceBufferType)
		return dbuf_arg(ctx, i, (pyx_DeviceBuffer *)o, 0, 0, ret);
	if (PyLong_Check(o) || PyFloat_Check(o) || PyBytes_Check(o))
		return python_scalar(i, o, v, ret);
	if (pyx_np_generic && PyType_IsSubtype(t, (PyTypeObject *)pyx_np_generic)) {
		Py_buffer view;
		int r;

		if (PyObject_GetBuffer(o, &view, PyBUF_SIMPLE) < 0)
			return -1;
		r = scalar_arg(i, view.buf, (size_t)view.len, v, ret);
		PyBuffer_Release(&view);
		return r;
	}
	if (pyx_device_array_type && PyType_IsSubtype(t, (PyTypeObject *)pyx_device_array_type)) {
		/* A gpux.DeviceArray: its range of its device buffer, an Arg made once. */
		PyObject *a = PyObject_GetAttrString(o, "_arg");
		int r;

		if (!a)
			return -1;
		if (Py_TYPE(a) != pyx_ArgType || ((pyx_Arg *)a)->kind != GPUX_ARG_DBUF ||
		    Py_TYPE(((pyx_Arg *)a)->obj) != pyx_DeviceBufferType) {
			Py_DECREF(a);
			return arg_error(i,
					 "a DeviceArray's _arg is not a range of a device buffer");
		}
		r = dbuf_arg(ctx, i, (pyx_DeviceBuffer *)((pyx_Arg *)a)->obj,
			     ((pyx_Arg *)a)->offset, ((pyx_Arg *)a)->size, ret);
		Py_DECREF(a);
		return r;
	}
	return pyx_host_arg(ctx, i, o, 0, 0, v, ret);
}

int pyx_argv_fill(pyx_Context *ctx, PyObject *args, struct pyx_argv *v)
{
	Py_ssize_t n = PyTuple_Size(args);

	v->n = 0;
	v->ntemps = 0;
	if (n < 0)
		return -1;
	if ((size_t)n > PYX_ARGS_MAX) {
		PyErr_SetString(PyExc_ValueError, "a kernel takes at most 64 arguments");
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		if (one_arg(ctx, (uint32_t)i, PyTuple_GetItem(args, i), v) < 0) {
			(void)pyx_temps_finish(v->temps, v->ntemps, GPUX_E_INVAL, NULL);
			v->ntemps = 0;
			return -1;
		}
	}
	v->n = (uint32_t)n;
	return 0;
}

/* ---- Arg ---- */

static PyObject *argw_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *names[] = { "kind", "obj", "flags", "offset", "size", NULL };
	unsigned int kind, flags = 0;
	unsigned long long offset = 0, size = 0;
	PyObject *obj;
	pyx_Arg *self;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "IO|IKK", names, &kind, &obj, &flags, &offset,
					 &size))
		return NULL;
	if (kind < GPUX_ARG_IN || kind > GPUX_ARG_DBUF || (flags & ~GPUX_ARG_CACHED)) {
		PyErr_SetString(PyExc_ValueError, "no such argument kind or flag");
		return NULL;
	}
	self = PyObject_GC_New(pyx_Arg, type);
	if (!self)
		return NULL;
	self->kind = kind;
	self->flags = flags;
	Py_INCREF(obj);
	self->obj = obj;
	self->offset = offset;
	self->size = size;
	PyObject_GC_Track((PyObject *)self);
	return (PyObject *)self;
}

/*
 * No tp_clear: a request in flight may hold the Arg of a device buffer that nothing else
 * holds, which must not go before the request ends. The cycles an Arg is in are broken at the
 * Request (which waits for its end first) or at the user's objects.
 */
static int argw_traverse(pyx_Arg *self, visitproc visit, void *arg)
{
	Py_VISIT(Py_TYPE((PyObject *)self));
	Py_VISIT(self->obj);
	return 0;
}

static void argw_dealloc(pyx_Arg *self)
{
	PyTypeObject *type = Py_TYPE((PyObject *)self);

	PyObject_GC_UnTrack((PyObject *)self);
	Py_DECREF(self->obj);
	PyObject_GC_Del(self);
	Py_DECREF(type);
}

static const char *const kind_names[] = {
	[GPUX_ARG_IN] = "In",         [GPUX_ARG_OUT] = "Out",    [GPUX_ARG_INOUT] = "InOut",
	[GPUX_ARG_MAPPED] = "Mapped", [GPUX_ARG_DBUF] = "range",
};

static PyObject *argw_repr(pyx_Arg *self)
{
	const char *kind = self->kind == GPUX_ARG_IN && (self->flags & GPUX_ARG_CACHED)
				   ? "Cached"
				   : kind_names[self->kind];

	PyObject *name, *r;

	if (self->kind == GPUX_ARG_DBUF)
		return PyUnicode_FromFormat(
			"<gpux Arg: bytes %llu to %llu of %R>", (unsigned long long)self->offset,
			(unsigned long long)(self->offset + self->size), self->obj);
	/* The array's type, not its contents: a repr of a large array is long. */
	name = PyType_GetName(Py_TYPE(self->obj));
	if (!name)
		return NULL;
	r = PyUnicode_FromFormat("<gpux %s of a %U>", kind, name);
	Py_DECREF(name);
	return r;
}

static PyObject *argw_obj(pyx_Arg *self, void *unused)
{
	Py_INCREF(self->obj);
	return self->obj;
}

static PyObject *argw_kind(pyx_Arg *self, void *unused)
{
	return PyLong_FromUnsignedLong(self->kind);
}

static PyObject *argw_flags(pyx_Arg *self, void *unused)
{
	return PyLong_FromUnsignedLong(self->flags);
}

static PyGetSetDef argw_getset[] = {
	{ "obj", (getter)argw_obj, NULL, "the array or device buffer", NULL },
	{ "kind", (getter)argw_kind, NULL, "GPUX_ARG_* kind", NULL },
	{ "flags", (getter)argw_flags, NULL, "GPUX_ARG_CACHED or 0", NULL },
	{ 0 },
};

static PyType_Slot argw_slots[] = {
	{ Py_tp_new, argw_new },
	{ Py_tp_dealloc, argw_dealloc },
	{ Py_tp_traverse, argw_traverse },
	{ Py_tp_repr, argw_repr },
	{ Py_tp_getset, argw_getset },
	{ Py_tp_doc, "Arg(kind, obj, flags=0, offset=0, size=0): how a kernel takes an argument "
		     "(gpux.In, Out, InOut, Mapped, Cached, DeviceBuffer.range)." },
	{ 0, NULL },
};

static PyType_Spec argw_spec = {
	.name = "gpux._gpux.Arg",
	.basicsize = sizeof(pyx_Arg),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.slots = argw_slots,
};

/* ---- Module ---- */

/* gpux_module_load_ex()'s headers and name expressions, and the objects their strings are in. */
struct load_extra {
	struct gpux_module_opts o;
	struct gpux_header *headers;
	const char **names;
	PyObject *items; /* list of (name, text): keeps the headers' strings alive */
	PyObject *seq;   /* the name expressions, likewise */
};

static void load_extra_done(struct load_extra *x)
{
	PyMem_Free(x->headers);
	PyMem_Free(x->names);
	Py_XDECREF(x->items);
	Py_XDECREF(x->seq);
}

static PyObject *inval(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static PyObject *inval(const char *fmt, ...)
{
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	return pyx_raise(GPUX_E_INVAL, msg);
}

/* TypeError "<what>, not <o's type>" (the limited API has no tp_name). */
static void wrong_type(const char *what, PyObject *o)
{
	PyObject *name = PyType_GetName(Py_TYPE(o));

	if (!name)
		return;
	PyErr_Format(PyExc_TypeError, "%s, not %U", what, name);
	Py_DECREF(name);
}

/* A header's name and text into h; the bytes it adds to the request into *size. */
static int header_get(PyObject *item, struct gpux_header *h, uint64_t *size)
{
	PyObject *name, *text;
	Py_ssize_t nl, tl;
	char *t;

	if (!PyTuple_Check(item) || PyTuple_Size(item) != 2) {
		PyErr_SetString(PyExc_TypeError, "headers: its items() are not (name, text) pairs");
		return -1;
	}
	name = PyTuple_GetItem(item, 0);
	text = PyTuple_GetItem(item, 1);
	if (!PyUnicode_Check(name)) {
		wrong_type("headers: a header's name is a str", name);
		return -1;
	}
	h->name = PyUnicode_AsUTF8AndSize(name, &nl);
	if (!h->name)
		return -1;
	if (nl == 0 || nl > (Py_ssize_t)PYX_NAME_MAX || strlen(h->name) != (size_t)nl) {
		inval("headers: a header's name has 1 to %u bytes and no NUL: '%.64s'",
		      PYX_NAME_MAX, h->name);
		return -1;
	}
	if (PyUnicode_Check(text)) {
		h->text = PyUnicode_AsUTF8AndSize(text, &tl);
	} else if (PyBytes_Check(text)) {
		h->text = PyBytes_AsStringAndSize(text, &t, &tl) < 0 ? NULL : t;
	} else {
		char what[128];

		(void)snprintf(what, sizeof(what), "headers['%.64s']: the text is a str or bytes",
			       h->name);
		wrong_type(what, text);
		return -1;
	}
	if (!h->text)
		return -1;
	if (strlen(h->text) != (size_t)tl) {
		inval("headers['%.64s']: the text has a NUL byte", h->name);
		return -1;
	}
	*size += 8 + (uint64_t)nl + (uint64_t)tl;
	return 0;
}

static int headers_get(PyObject *headers, struct load_extra *x, uint64_t *size)
{
	Py_ssize_t n;

	if (!PyMapping_Check(headers) || PyUnicode_Check(headers) || PyBytes_Check(headers) ||
	    PySequence_Check(headers)) {
		wrong_type("headers: a mapping of names to texts ({'util.cuh': '...'})", headers);
		return -1;
	}
	n = PyMapping_Size(headers);
	if (n < 0)
		return -1;
	if ((size_t)n > GPUX_MODULE_HEADERS_MAX) {
		inval("headers: at most %u of them, not %zd", GPUX_MODULE_HEADERS_MAX, n);
		return -1;
	}
	x->items = PyMapping_Items(headers);
	if (!x->items)
		return -1;
	n = PyList_Size(x->items);
	x->headers = PyMem_Calloc((size_t)n + 1, sizeof(*x->headers));
	if (!x->headers) {
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++)
		if (header_get(PyList_GetItem(x->items, i), &x->headers[i], size) < 0)
			return -1;
	x->o.headers = x->headers;
	x->o.nheaders = (uint32_t)n;
	return 0;
}

static int names_get(PyObject *names, struct load_extra *x, uint64_t *size)
{
	Py_ssize_t n;

	if (PyUnicode_Check(names) || PyBytes_Check(names) || !PySequence_Check(names)) {
		wrong_type("name_expressions: a sequence of str (such as ['fill<float>'])", names);
		return -1;
	}
	x->seq = PySequence_Tuple(names);
	if (!x->seq)
		return -1;
	n = PyTuple_Size(x->seq);
	if ((size_t)n > GPUX_MODULE_NAMES_MAX) {
		inval("name_expressions: at most %u of them, not %zd", GPUX_MODULE_NAMES_MAX, n);
		return -1;
	}
	x->names = PyMem_Calloc((size_t)n + 1, sizeof(*x->names));
	if (!x->names) {
		PyErr_NoMemory();
		return -1;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *o = PyTuple_GetItem(x->seq, i);
		Py_ssize_t len;

		if (!PyUnicode_Check(o)) {
			char what[64];

			(void)snprintf(what, sizeof(what), "name_expressions[%zd]: a str", i);
			wrong_type(what, o);
			return -1;
		}
		x->names[i] = PyUnicode_AsUTF8AndSize(o, &len);
		if (!x->names[i])
			return -1;
		if (len == 0 || len > (Py_ssize_t)PYX_NAME_MAX ||
		    strlen(x->names[i]) != (size_t)len) {
			inval("name_expressions[%zd]: 1 to %u bytes and no NUL: '%.64s'", i,
			      PYX_NAME_MAX, x->names[i]);
			return -1;
		}
		*size += 4 + (uint64_t)len;
	}
	x->o.names = x->names;
	x->o.nnames = (uint32_t)n;
	return 0;
}

/* The checks gpux_module_load_ex() makes, here, to say which argument is wrong and why. */
static int load_extra_get(PyObject *headers, PyObject *names, unsigned lang, size_t code_len,
			  struct load_extra *x)
{
	uint64_t size = code_len;

	memset(x, 0, sizeof(*x));
	x->o.size = sizeof(x->o);
	if (headers == Py_None)
		headers = NULL;
	if (names == Py_None)
		names = NULL;
	if ((headers || names) && lang != GPUX_LANG_CUDA) {
		inval("headers and name_expressions are for CUDA C++ only (lang \"cuda\")");
		return -1;
	}
	if ((headers && headers_get(headers, x, &size) < 0) ||
	    (names && names_get(names, x, &size) < 0))
		return -1;
	if (size > PYX_CODE_MAX) {
		inval("the code, headers and name expressions take %llu bytes, above the %u MiB a "
		      "module may",
		      (unsigned long long)size, PYX_CODE_MAX >> 20);
		return -1;
	}
	return 0;
}

/*
 * A module load on a helper thread (job.c), so that Ctrl-C interrupts it: it owns copies of
 * the code, options, headers and name expressions, which the load reads after the caller
 * may have gone. Given up on, it frees the module it got.
 */
struct load_job {
	struct pyx_job job;
	uint32_t lang;
	const void *code;
	size_t len;
	struct gpux_module_opts o;
	gpux_status st;
	gpux_module *m;
	char *log;
	char why[512]; /* gpux_connect_error() of the thread that loaded */
		       /* then the copies */
};

static void load_run(struct pyx_job *job)
{
	struct load_job *l = (struct load_job *)job;

	pyx_blocking_enter(job->ctx);
	l->st = gpux_module_load_ex(job->ctx->ctx, l->lang, l->code, l->len, &l->o, &l->m, &l->log);
	pyx_blocking_leave(job->ctx);
	(void)snprintf(l->why, sizeof(l->why), "%s", l->st < 0 ? gpux_connect_error() : "");
}

static void load_discard(struct pyx_job *job)
{
	struct load_job *l = (struct load_job *)job;

	gpux_module_free(l->m);
	free(l->log);
	free(l);
}

static char *copy_str(char **p, const char *s)
{
	size_t n = strlen(s) + 1;
	char *d = memcpy(*p, s, n);

	*p += n;
	return d;
}

/* The job, with its own copies of what the load reads. */
static struct load_job *load_job_new(uint32_t lang, const Py_buffer *code, const char *options,
				     const struct load_extra *x)
{
	size_t size = sizeof(struct load_job) + (size_t)code->len + 1 +
		      (options ? strlen(options) + 1 : 0) +
		      x->o.nheaders * sizeof(struct gpux_header) + x->o.nnames * sizeof(char *);
	struct gpux_header *h;
	const char **names;
	struct load_job *l;
	char *p;

	for (uint32_t i = 0; i < x->o.nheaders; i++)
		size += strlen(x->headers[i].name) + strlen(x->headers[i].text) + 2;
	for (uint32_t i = 0; i < x->o.nnames; i++)
		size += strlen(x->names[i]) + 1;
	l = calloc(1, size);
	if (!l)
		return NULL;
	l->job.run = load_run;
	l->job.discard = load_discard;
	l->lang = lang;
	l->o = x->o;
	h = (struct gpux_header *)(l + 1);
	names = (const char **)(h + x->o.nheaders);
	p = (char *)(names + x->o.nnames);
	for (uint32_t i = 0; i < x->o.nheaders; i++) {
		h[i].name = copy_str(&p, x->headers[i].name);
		h[i].text = copy_str(&p, x->headers[i].text);
	}
	for (uint32_t i = 0; i < x->o.nnames; i++)
		names[i] = copy_str(&p, x->names[i]);
	l->o.headers = x->o.nheaders ? h : NULL;
	l->o.names = x->o.nnames ? names : NULL;
	l->o.options = options ? copy_str(&p, options) : NULL;
	l->code = memcpy(p, code->buf, (size_t)code->len);
	l->len = (size_t)code->len;
	return l;
}

static PyObject *module_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	static char *names[] = { "lang",    "code",    "options",
				 "context", "headers", "name_expressions",
				 NULL };
	PyObject *ctx_obj = NULL, *headers = NULL, *exprs = NULL;
	struct load_extra x;
	struct load_job *l;
	pyx_Context *ctx;
	unsigned int lang;
	Py_buffer code;
	const char *options = NULL;
	pyx_Module *self;
	gpux_module *m;
	char *log;
	gpux_status st;

	if (!PyArg_ParseTupleAndKeywords(args, kw, "Iy*|zO$OO", names, &lang, &code, &options,
					 &ctx_obj, &headers, &exprs))
		return NULL;
	if (load_extra_get(headers, exprs, lang, (size_t)code.len, &x) < 0) {
		load_extra_done(&x);
		PyBuffer_Release(&code);
		return NULL;
	}
	l = load_job_new(lang, &code, options, &x);
	load_extra_done(&x);
	PyBuffer_Release(&code);
	if (!l)
		return PyErr_NoMemory();
	ctx = pyx_context_arg(ctx_obj);
	if (!ctx) {
		free(l);
		return NULL;
	}
	l->job.ctx = ctx;
	if (pyx_job_run(&l->job) == PYX_E_SIGNAL) {
		/* The helper frees what the load gets. */
		Py_DECREF(ctx);
		return NULL;
	}
	st = l->st;
	m = l->m;
	log = l->log;
	if (st < 0) {
		if (log)
			pyx_raise(st, log);
		else
			pyx_raise_with(st, "cannot load the module", l->why);
		free(log);
		free(l);
		Py_DECREF(ctx);
		return NULL;
	}
	free(l);
	self = PyObject_GC_New(pyx_Module, type);
	if (self)
		self->log = PyUnicode_DecodeUTF8(log ? log : "", log ? (Py_ssize_t)strlen(log) : 0,
						 "replace");
	free(log);
	if (!self || !self->log) {
		if (self) {
			/* PyObject_GC_New took a reference to the type, as each object does. */
			PyObject_GC_Del(self);
			Py_DECREF(type);
		}
		Py_BEGIN_ALLOW_THREADS gpux_module_free(m);
		Py_END_ALLOW_THREADS Py_DECREF(ctx);
		return NULL;
	}
	self->ctx = ctx;
	self->module = m;
	self->lang = lang;
	PyObject_GC_Track((PyObject *)self);
	return (PyObject *)self;
}

static int module_traverse(pyx_Module *self, visitproc visit, void *arg)
{
	Py_VISIT(Py_TYPE((PyObject *)self));
	Py_VISIT((PyObject *)self->ctx);
	return 0;
}

static void module_dealloc(pyx_Module *self)
{
	PyTypeObject *type = Py_TYPE((PyObject *)self);

	PyObject_GC_UnTrack((PyObject *)self);
	Py_BEGIN_ALLOW_THREADS gpux_module_free(self->module);
	Py_END_ALLOW_THREADS Py_DECREF(self->log);
	Py_DECREF(self->ctx);
	PyObject_GC_Del(self);
	Py_DECREF(type);
}

static PyObject *module_log(pyx_Module *self, void *unused)
{
	Py_INCREF(self->log);
	return self->log;
}

static PyObject *module_context(pyx_Module *self, void *unused)
{
	Py_INCREF((PyObject *)self->ctx);
	return (PyObject *)self->ctx;
}

static PyObject *module_lang(pyx_Module *self, void *unused)
{
	return PyLong_FromUnsignedLong(self->lang);
}

static PyGetSetDef module_getset[] = {
	{ "log", (getter)module_log, NULL, "the compiler's warnings, or ''", NULL },
	{ "lang", (getter)module_lang, NULL, "the code's language (enum gpux_lang)", NULL },
	{ "context", (getter)module_context, NULL, "the Context it belongs to", NULL },
	{ 0 },
};

static PyType_Slot module_slots[] = {
	{ Py_tp_new, module_new },
	{ Py_tp_dealloc, module_dealloc },
	{ Py_tp_traverse, module_traverse },
	{ Py_tp_getset, module_getset },
	{ Py_tp_doc, "Module(lang, code, options=None, context=None, *, headers=None, "
		     "name_expressions=None): code loaded for kernels (gpux.Module is the "
		     "package's front)." },
	{ 0, NULL },
};

static PyType_Spec module_spec = {
	.name = "gpux._gpux.Module",
	.basicsize = sizeof(pyx_Module),
	.flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
	.slots = module_slots,
};

int pyx_launch_init_types(PyObject *m)
{
	if (pyx_add_type(m, &argw_spec, &pyx_ArgType) < 0 ||
	    pyx_add_type(m, &module_spec, &pyx_ModuleType) < 0)
		return -1;
	return pyx_kernel_init_types(m);
}
