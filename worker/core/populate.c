/* SPDX-License-Identifier: MIT */
/* worker/core/populate.c: a segment's pages faulted in by several threads at once, before it is registered. */
#include <sys/mman.h>

#include "macro.h"
#include "populate.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/*
 * A segment that arrives is mapped in the worker, its pages are not: registering it with the
 * device faults them in one by one, and a page no process touched yet is allocated and zeroed
 * first. That is most of a registration's time: on an H200's host a fresh segment took 0.61 ms
 * a MiB to fault in and register, one whose pages the client had written 0.065. The kernel
 * faults pages in for several threads at once (four segments of 64 MiB in 50 ms, against
 * 155 ms for one of 256), so a segment is faulted in by chunks, by the thread that registers
 * it and the helpers here, and registered once it is whole.
 */

/* Lock held: fault in the segment's next chunk, the lock dropped meanwhile. false: none is
 * left. */
static bool chunk_do(struct wrk_populate *p, bool helper)
{
	uint8_t *addr = p->addr;
	size_t off = p->next, len;
	int advice = p->advice;

	if (!addr || off >= p->size)
		return false;
	len = MIN((size_t)WRK_POPULATE_CHUNK, p->size - off);
	p->next += len;
	p->busy++;
	p->helped += helper;
	(void)pthread_mutex_unlock(&p->lock);
	(void)madvise(addr + off, len, advice);
	(void)pthread_mutex_lock(&p->lock);
	if (--p->busy == 0 && p->next >= p->size)
		(void)pthread_cond_signal(&p->idle);
	return true;
}

static void *helper_main(void *arg)
{
	struct wrk_populate *p = arg;

	(void)pthread_mutex_lock(&p->lock);
	while (!p->stop)
		if (!chunk_do(p, true))
			(void)pthread_cond_wait(&p->work, &p->lock);
	(void)pthread_mutex_unlock(&p->lock);
	return NULL;
}

int wrk_populate_start(struct wrk_populate *p, unsigned helpers)
{
	*p = (struct wrk_populate){ 0 };
	(void)pthread_mutex_init(&p->caller, NULL);
	(void)pthread_mutex_init(&p->lock, NULL);
	(void)pthread_cond_init(&p->work, NULL);
	(void)pthread_cond_init(&p->idle, NULL);
	for (unsigned i = 0; i < MIN(helpers, WRK_POPULATE_HELPERS); i++) {
		int r = pthread_create(&p->threads[i], NULL, helper_main, p);

		if (r != 0)
			return -r;
		p->nthreads++;
	}
	return 0;
}

void wrk_populate_stop(struct wrk_populate *p)
{
	(void)pthread_mutex_lock(&p->lock);
	p->stop = true;
	(void)pthread_cond_broadcast(&p->work);
	(void)pthread_mutex_unlock(&p->lock);
	for (unsigned i = 0; i < p->nthreads; i++)
		(void)pthread_join(p->threads[i], NULL);
	p->nthreads = 0;
}

void wrk_populate(struct wrk_populate *p, void *addr, size_t size, bool write)
{
	int advice = write ? MADV_POPULATE_WRITE : MADV_POPULATE_READ;

	if (!p->nthreads || size <= WRK_POPULATE_CHUNK) {
		(void)madvise(addr, size, advice);
		return;
	}
	(void)pthread_mutex_lock(&p->caller);
	(void)pthread_mutex_lock(&p->lock);
	p->addr = addr;
	p->size = size;
	p->next = 0;
	p->advice = advice;
	(void)pthread_cond_broadcast(&p->work);
	while (chunk_do(p, false))
		;
	while (p->busy)
		(void)pthread_cond_wait(&p->idle, &p->lock);
	p->addr = NULL;
	(void)pthread_mutex_unlock(&p->lock);
	(void)pthread_mutex_unlock(&p->caller);
}
