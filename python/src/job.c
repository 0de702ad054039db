/* SPDX-License-Identifier: MIT */
/* python/src/job.c: library calls that cannot be cut in slices, run where Ctrl-C still works. */
#include <errno.h>
#include <time.h>

#include "pygpux.h"

/* The thread that runs Python's signal handlers: the main one, or after fork() the forker. */
static unsigned long main_ident;

/* Contexts' job counts fall under this lock; pyx_jobs_wait() sleeps on the condition. */
static pthread_mutex_t jobs_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t jobs_cond = PTHREAD_COND_INITIALIZER;

int pyx_job_init(void)
{
	PyObject *threading = PyImport_ImportModule("threading"), *t = NULL, *id = NULL;

	if (threading)
		t = PyObject_CallMethod(threading, "main_thread", NULL);
	if (t)
		id = PyObject_GetAttrString(t, "ident");
	if (id)
		main_ident = PyLong_AsUnsignedLong(id);
	Py_XDECREF(id);
	Py_XDECREF(t);
	Py_XDECREF(threading);
	return PyErr_Occurred() ? -1 : 0;
}

void pyx_job_after_fork(void)
{
	main_ident = PyThread_get_thread_ident();
	(void)pthread_mutex_init(&jobs_lock, NULL);
	(void)pthread_cond_init(&jobs_cond, NULL);
}

bool pyx_main_thread(void)
{
	return PyThread_get_thread_ident() == main_ident;
}

static void job_end_use(pyx_Context *ctx)
{
	if (!ctx)
		return;
	(void)pthread_mutex_lock(&jobs_lock);
	if (atomic_fetch_sub(&ctx->jobs, 1) == 1)
		(void)pthread_cond_broadcast(&jobs_cond);
	(void)pthread_mutex_unlock(&jobs_lock);
}

void pyx_jobs_wait(pyx_Context *ctx)
{
	if (atomic_load(&ctx->jobs) == 0)
		return;
	Py_BEGIN_ALLOW_THREADS(void) pthread_mutex_lock(&jobs_lock);
	while (atomic_load(&ctx->jobs) > 0)
		(void)pthread_cond_wait(&jobs_cond, &jobs_lock);
	(void)pthread_mutex_unlock(&jobs_lock);
	Py_END_ALLOW_THREADS
}

static void *job_thread(void *p)
{
	struct pyx_job *job = p;
	pyx_Context *ctx = job->ctx;
	bool abandoned;

	job->run(job);
	(void)pthread_mutex_lock(&job->lock);
	job->done = true;
	abandoned = job->abandoned;
	(void)pthread_cond_signal(&job->cond);
	(void)pthread_mutex_unlock(&job->lock);
	/* Once done is seen, the job is the caller's, unless it was given up on before. */
	if (abandoned) {
		(void)pthread_mutex_destroy(&job->lock);
		(void)pthread_cond_destroy(&job->cond);
		job->discard(job);
		job_end_use(ctx);
	}
	return NULL;
}

static void deadline_in(struct timespec *ts, unsigned ms)
{
	(void)clock_gettime(CLOCK_MONOTONIC, ts);
	ts->tv_nsec += (long)ms * 1000000L;
	ts->tv_sec += ts->tv_nsec / 1000000000L;
	ts->tv_nsec %= 1000000000L;
}

int pyx_job_run(struct pyx_job *job)
{
	pyx_Context *ctx = job->ctx;
	pthread_condattr_t ca;
	pthread_attr_t ta;
	pthread_t t;
	bool done = false;
	int r;

	job->done = job->abandoned = false;
	if (!pyx_main_thread()) {
		Py_BEGIN_ALLOW_THREADS job->run(job);
		Py_END_ALLOW_THREADS return 0;
	}
	(void)pthread_mutex_init(&job->lock, NULL);
	(void)pthread_condattr_init(&ca);
	(void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	(void)pthread_cond_init(&job->cond, &ca);
	(void)pthread_condattr_destroy(&ca);
	if (ctx)
		atomic_fetch_add(&ctx->jobs, 1);
	(void)pthread_attr_init(&ta);
	(void)pthread_attr_setdetachstate(&ta, PTHREAD_CREATE_DETACHED);
	r = pthread_create(&t, &ta, job_thread, job);
	(void)pthread_attr_destroy(&ta);
	if (r != 0) {
		/* No thread to be had: the call in place, as in other threads. */
		job_end_use(ctx);
		(void)pthread_mutex_destroy(&job->lock);
		(void)pthread_cond_destroy(&job->cond);
		Py_BEGIN_ALLOW_THREADS job->run(job);
		Py_END_ALLOW_THREADS return 0;
	}
	for (;;) {
		struct timespec ts;

		Py_BEGIN_ALLOW_THREADS deadline_in(&ts, PYX_SIGNAL_SLICE_MS);
		(void)pthread_mutex_lock(&job->lock);
		while (!job->done &&
		       pthread_cond_timedwait(&job->cond, &job->lock, &ts) != ETIMEDOUT)
			;
		done = job->done;
		(void)pthread_mutex_unlock(&job->lock);
		Py_END_ALLOW_THREADS if (done) break;
		if (PyErr_CheckSignals() < 0) {
			(void)pthread_mutex_lock(&job->lock);
			done = job->done;
			job->abandoned = !done;
			(void)pthread_mutex_unlock(&job->lock);
			if (!done)
				return PYX_E_SIGNAL; /* the helper's now */
			/* It ended meanwhile: let go of it here, and raise all the same. */
			(void)pthread_mutex_destroy(&job->lock);
			(void)pthread_cond_destroy(&job->cond);
			Py_BEGIN_ALLOW_THREADS job->discard(job);
			Py_END_ALLOW_THREADS job_end_use(ctx);
			return PYX_E_SIGNAL;
		}
	}
	(void)pthread_mutex_destroy(&job->lock);
	(void)pthread_cond_destroy(&job->cond);
	job_end_use(ctx);
	return 0;
}
