/* SPDX-License-Identifier: MIT */
/* tests/fake-cuda/fake-graph.c: CUDA graphs of kernel nodes for the fake driver, run in order. */
#include <stdlib.h>
#include <string.h>

#include "fake-cuda.h"

/*
 * A graph is kernel nodes in the order they were added (gpux makes chains); dependencies are
 * not looked at. A node keeps its own copy of the parameters' values, as the driver does, so
 * that what the caller's arrays point to may change after it is set.
 */

#define NODES_MAX 256u
#define NODE_BYTES (MAX_PARAMS * 16u)

struct fake_knode {
	struct fake_fn *fn;
	unsigned gx, bx;
	unsigned shared;
	int nparams;
	void *params[MAX_PARAMS];
	uint8_t bytes[NODE_BYTES];
};

struct fake_graph {
	unsigned n;
	struct fake_knode k[NODES_MAX];
	unsigned index[NODES_MAX]; /* what CUgraphNode handles point at */
};

struct fake_exec {
	unsigned n;
	struct fake_knode k[NODES_MAX];
};

static CUresult knode_set(struct fake_knode *k, const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct fake_fn *fn = (struct fake_fn *)p->func;
	size_t sizes[MAX_PARAMS], off = 0;
	int n;

	if (!fn || (uint64_t)p->blockDimX * p->blockDimY * p->blockDimZ > 1024 ||
	    (int)p->sharedMemBytes > fn->max_dyn_shared)
		return CUDA_ERROR_INVALID_VALUE;
	n = fake_param_sizes(fn, sizes);
	if (n > 0 && !p->kernelParams)
		return CUDA_ERROR_INVALID_VALUE;
	for (int i = 0; i < n; i++) {
		if (off + sizes[i] > NODE_BYTES)
			return CUDA_ERROR_INVALID_VALUE;
		memcpy(k->bytes + off, p->kernelParams[i], sizes[i]);
		k->params[i] = k->bytes + off;
		off += (sizes[i] + 7) & ~(size_t)7;
	}
	k->fn = fn;
	k->nparams = n;
	k->gx = p->gridDimX;
	k->bx = p->blockDimX;
	k->shared = p->sharedMemBytes;
	return CUDA_SUCCESS;
}

/* Copy a node keeping its parameter pointers on its own bytes. */
static void knode_copy(struct fake_knode *dst, const struct fake_knode *src)
{
	*dst = *src;
	for (int i = 0; i < src->nparams; i++)
		dst->params[i] = dst->bytes + ((const uint8_t *)src->params[i] - src->bytes);
}

CUresult fake_graph_create(CUgraph *g, unsigned flags)
{
	ENTER("cuGraphCreate");
	*g = calloc(1, sizeof(struct fake_graph));
	if (!*g)
		return CUDA_ERROR_OUT_OF_MEMORY;
	fake_obj_add(FAKE_GRAPH, 1);
	return CUDA_SUCCESS;
}

CUresult fake_graph_destroy(CUgraph g)
{
	CUresult r = fake_enter("cuGraphDestroy", false);

	if (!g)
		return CUDA_ERROR_INVALID_HANDLE;
	free(g);
	fake_obj_add(FAKE_GRAPH, -1);
	return r;
}

CUresult fake_graph_add_kernel(CUgraphNode *n, CUgraph g, const CUgraphNode *deps, size_t ndeps,
			       const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct fake_graph *fg = (struct fake_graph *)g;
	CUresult r;

	ENTER("cuGraphAddKernelNode");
	if (fg->n == NODES_MAX)
		return CUDA_ERROR_OUT_OF_MEMORY;
	r = knode_set(&fg->k[fg->n], p);
	if (r != CUDA_SUCCESS)
		return r;
	fg->index[fg->n] = fg->n;
	*n = (CUgraphNode)&fg->index[fg->n];
	fg->n++;
	return CUDA_SUCCESS;
}

CUresult fake_graph_instantiate(CUgraphExec *e, CUgraph g, unsigned long long flags)
{
	const struct fake_graph *fg = (const struct fake_graph *)g;
	struct fake_exec *x;

	ENTER("cuGraphInstantiateWithFlags");
	x = calloc(1, sizeof(*x));
	if (!x)
		return CUDA_ERROR_OUT_OF_MEMORY;
	x->n = fg->n;
	for (unsigned i = 0; i < fg->n; i++)
		knode_copy(&x->k[i], &fg->k[i]);
	*e = (CUgraphExec)x;
	fake_obj_add(FAKE_GRAPH_EXEC, 1);
	return CUDA_SUCCESS;
}

CUresult fake_exec_destroy(CUgraphExec e)
{
	CUresult r = fake_enter("cuGraphExecDestroy", false);

	if (!e)
		return CUDA_ERROR_INVALID_HANDLE;
	free(e);
	fake_obj_add(FAKE_GRAPH_EXEC, -1);
	return r;
}

CUresult fake_exec_set_kernel(CUgraphExec e, CUgraphNode n, const CUDA_KERNEL_NODE_PARAMS *p)
{
	struct fake_exec *x = (struct fake_exec *)e;
	unsigned i = *(const unsigned *)n;

	ENTER("cuGraphExecKernelNodeSetParams");
	if (i >= x->n)
		return CUDA_ERROR_INVALID_VALUE;
	return knode_set(&x->k[i], p);
}

CUresult fake_graph_launch(CUgraphExec e, CUstream s)
{
	struct fake_exec *x = (struct fake_exec *)e;

	ENTER("cuGraphLaunch");
	for (unsigned i = 0; i < x->n; i++) {
		CUresult r = fake_run_kernel(x->k[i].fn, x->k[i].gx, x->k[i].bx,
					     (struct fake_stream *)s, x->k[i].params);
		if (r != CUDA_SUCCESS)
			return r;
	}
	return CUDA_SUCCESS;
}
