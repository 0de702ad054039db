/* SPDX-License-Identifier: MIT */
/* tests/fake-cuda/fake-sched.c: the fake driver's stream priorities and green contexts. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fake-cuda.h"

/*
 * Stream priorities: the device's range is GPUX_FAKE_CUDA_PRIORITIES ("least,greatest",
 * default "0,-5", an H100's), a stream's priority clamped into it as a driver does. Green
 * contexts: the device's FAKE_SMS SMs split in groups of the SMs asked for, rounded up to a
 * multiple of FAKE_SM_UNIT (an sm_90's 8); a green context's streams run their kernels on its
 * group. The kernel where(u32 *out) (fake-cuda.c) writes the priority and the SMs of the
 * stream it ran on, so that a test sees what the worker asked for.
 */

#define FAKE_SM_UNIT 8u
/* Marks the resources this fake hands out, in their padding (the driver keeps its own
 * there): one not made here is refused. */
#define RES_MAGIC 0x5245534fu /* "OSER" */

/* What the fake keeps in a CUdevResource's padding: its magic and the first SM. */
struct res_mark {
	uint32_t magic;
	uint32_t first;
};

/* Descriptors, kept for the process's life: the driver has no call that frees them. */
struct fake_desc {
	struct fake_desc *next;
	unsigned first, sms;
};

static struct fake_desc *descs;

struct fake_green {
	unsigned first, sms;
};

static void prio_range(int *least, int *greatest)
{
	const char *e = getenv("GPUX_FAKE_CUDA_PRIORITIES");

	*least = 0;
	*greatest = -5;
	if (e && *e) {
		char *end;
		long l = strtol(e, &end, 10);

		if (*end == ',') {
			*least = (int)l;
			*greatest = (int)strtol(end + 1, NULL, 10);
		}
	}
}

static int prio_clamp(int prio)
{
	int least, greatest;

	prio_range(&least, &greatest);
	if (prio > least)
		return least;
	return prio < greatest ? greatest : prio;
}

static CUresult stream_new(CUstream *s, int prio, unsigned sms)
{
	struct fake_stream *st = calloc(1, sizeof(*st));

	if (!st)
		return CUDA_ERROR_OUT_OF_MEMORY;
	st->prio = prio_clamp(prio);
	st->sms = sms;
	*s = (CUstream)st;
	fake_obj_add(FAKE_STREAM, 1);
	return CUDA_SUCCESS;
}

CUresult fake_prio_range(int *least, int *greatest)
{
	ENTER("cuCtxGetStreamPriorityRange");
	prio_range(least, greatest);
	return CUDA_SUCCESS;
}

CUresult fake_stream_create_prio(CUstream *s, unsigned flags, int prio)
{
	ENTER("cuStreamCreateWithPriority");
	return stream_new(s, prio, 0);
}

CUresult fake_stream_get_prio(CUstream s, int *prio)
{
	ENTER("cuStreamGetPriority");
	if (!s)
		return CUDA_ERROR_INVALID_HANDLE;
	*prio = ((struct fake_stream *)s)->prio;
	return CUDA_SUCCESS;
}

static void res_set(CUdevResource *r, unsigned first, unsigned sms)
{
	struct res_mark m = { RES_MAGIC, first };

	memset(r, 0, sizeof(*r));
	r->type = CU_DEV_RESOURCE_TYPE_SM;
	memcpy(r->_internal_padding, &m, sizeof(m));
	r->sm.smCount = sms;
	r->sm.minSmPartitionSize = FAKE_SM_UNIT;
	r->sm.smCoscheduledAlignment = FAKE_SM_UNIT;
}

static bool res_get(const CUdevResource *r, struct res_mark *ret)
{
	memcpy(ret, r->_internal_padding, sizeof(*ret));
	return r->type == CU_DEV_RESOURCE_TYPE_SM && ret->magic == RES_MAGIC;
}

CUresult fake_dev_resource(CUdevice dev, CUdevResource *r, CUdevResourceType type)
{
	ENTER_AS("cuDeviceGetDevResource", false);
	if (type != CU_DEV_RESOURCE_TYPE_SM)
		return CUDA_ERROR_INVALID_RESOURCE_TYPE;
	res_set(r, 0, FAKE_SMS);
	return CUDA_SUCCESS;
}

CUresult fake_sm_split(CUdevResource *result, unsigned *nb, const CUdevResource *input,
		       CUdevResource *remaining, unsigned flags, unsigned min_count)
{
	unsigned size = (min_count + FAKE_SM_UNIT - 1) / FAKE_SM_UNIT * FAKE_SM_UNIT, n;
	struct res_mark in;

	ENTER_AS("cuDevSmResourceSplitByCount", false);
	if (!nb || !input || !res_get(input, &in) || flags || min_count > input->sm.smCount)
		return CUDA_ERROR_INVALID_VALUE;
	size = size ? size : FAKE_SM_UNIT;
	n = input->sm.smCount / size;
	if (!result) {
		*nb = n;
		return CUDA_SUCCESS;
	}
	n = n < *nb ? n : *nb;
	for (unsigned i = 0; i < n; i++)
		res_set(&result[i], in.first + i * size, size);
	if (remaining)
		res_set(remaining, in.first + n * size, input->sm.smCount - n * size);
	*nb = n;
	return CUDA_SUCCESS;
}

CUresult fake_res_desc(CUdevResourceDesc *desc, CUdevResource *res, unsigned n)
{
	struct fake_desc *d;
	struct res_mark m;

	ENTER_AS("cuDevResourceGenerateDesc", false);
	if (!desc || !res || n != 1 || !res_get(&res[0], &m) || res[0].sm.smCount == 0)
		return CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION;
	d = calloc(1, sizeof(*d));
	if (!d)
		return CUDA_ERROR_OUT_OF_MEMORY;
	d->first = m.first;
	d->sms = res[0].sm.smCount;
	(void)pthread_mutex_lock(&fake_lock);
	d->next = descs;
	descs = d;
	(void)pthread_mutex_unlock(&fake_lock);
	*desc = (CUdevResourceDesc)d;
	return CUDA_SUCCESS;
}

CUresult fake_green_create(CUgreenCtx *g, CUdevResourceDesc desc, CUdevice dev, unsigned flags)
{
	const struct fake_desc *d = (const struct fake_desc *)desc;
	struct fake_green *fg;

	ENTER("cuGreenCtxCreate");
	if (!d || !(flags & CU_GREEN_CTX_DEFAULT_STREAM))
		return CUDA_ERROR_INVALID_VALUE;
	fg = calloc(1, sizeof(*fg));
	if (!fg)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fg->first = d->first;
	fg->sms = d->sms;
	*g = (CUgreenCtx)fg;
	fake_obj_add(FAKE_GREEN, 1);
	return CUDA_SUCCESS;
}

CUresult fake_green_destroy(CUgreenCtx g)
{
	CUresult r = fake_enter("cuGreenCtxDestroy", false);

	if (!g) {
		fake_bad_release("cuGreenCtxDestroy");
		return CUDA_ERROR_INVALID_CONTEXT;
	}
	free(g);
	fake_obj_add(FAKE_GREEN, -1);
	return r;
}

CUresult fake_green_stream(CUstream *s, CUgreenCtx g, unsigned flags, int prio)
{
	ENTER("cuGreenCtxStreamCreate");
	if (!g || !(flags & CU_STREAM_NON_BLOCKING))
		return CUDA_ERROR_INVALID_VALUE;
	return stream_new(s, prio, ((struct fake_green *)g)->sms);
}
