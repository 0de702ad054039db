/* SPDX-License-Identifier: MIT */
/* worker/host-cumod.c: a CUDA C++ module on the host: its kernels, by the names a GPU's go by. */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "host-cumod.h"
#include "knames.h"
#include "macro.h"
#include "proto.h"
#include "wrk.h"

#define KERNELS_MAX 65536u

struct host_cumod {
	const struct gpux_cu_kernel **k;
	const char **sym; /* each kernel's symbol: the module's, or one of own[] */
	char **own;       /* made up for a kernel the module does not export */
	unsigned n;
	struct wrk_knames *names;
	size_t bytes;
	const struct gpux_cu_global *globals; /* the module's own table, nglobals */
	uint32_t nglobals;
};

void host_cumod_free(struct host_cumod *m)
{
	if (!m)
		return;
	for (unsigned i = 0; i < m->n; i++)
		free(m->own[i]);
	free(m->own);
	free(m->sym);
	free(m->k);
	wrk_knames_free(m->names);
	free(m);
}

/* The symbol the module exports at a kernel's address, or NULL (a static kernel). */
static const char *exported(const void *fn, uintptr_t base)
{
	Dl_info info;

	if (dladdr(fn, &info) == 0 || !info.dli_sname || info.dli_saddr != fn ||
	    (uintptr_t)info.dli_fbase != base)
		return NULL;
	return info.dli_sname;
}

static bool entry_ok(const struct gpux_cu_kernel *e)
{
	return e && e->kernel && e->run && e->name && e->nparams <= IPC_ARGS_MAX &&
	       (e->param_size || !e->nparams) && strnlen(e->name, 4096) < 4096;
}

/* The kernels' symbols, once each, and the (expression, symbol) pairs, for wrk_knames. */
static int names_make(struct host_cumod *m, uint32_t nexprs, size_t max_bytes)
{
	_cleanup_(freep) const char **uniq = calloc(m->n + 1, sizeof(*uniq));
	_cleanup_(freep) char *pairs = NULL;
	size_t len = 0;
	unsigned nu = 0;
	FILE *f;

	if (!uniq)
		return -ENOMEM;
	for (unsigned i = 0; i < m->n; i++) {
		unsigned u;

		for (u = 0; u < nu && strcmp(uniq[u], m->sym[i]) != 0; u++)
			;
		if (u == nu)
			uniq[nu++] = m->sym[i];
	}
	f = open_memstream(&pairs, &len);
	if (!f)
		return -ENOMEM;
	for (unsigned i = 0; i < nexprs; i++) {
		(void)fwrite(m->k[i]->name, 1, strlen(m->k[i]->name) + 1, f);
		(void)fwrite(m->sym[i], 1, strlen(m->sym[i]) + 1, f);
	}
	if (fclose(f) != 0)
		return -ENOMEM;
	return wrk_knames_new_list(uniq, nu, pairs, len, nexprs, max_bytes, &m->names);
}

gpux_status host_cumod_new(const struct gpux_cu_module *mi, uintptr_t base, size_t max_bytes,
			   struct host_cumod **ret, char **ret_msg)
{
	struct host_cumod *m;
	int r;

	if (mi->abi != GPUX_CU_ABI || mi->nkernels > KERNELS_MAX || mi->nexprs > mi->nkernels ||
	    (mi->nkernels && !mi->kernels) || (mi->nglobals && !mi->globals)) {
		*ret_msg = strdup("a CUDA C++ module this worker does not know");
		return GPUX_E_INVAL;
	}
	m = calloc(1, sizeof(*m));
	if (!m)
		return GPUX_E_NOMEM;
	m->n = mi->nkernels;
	m->k = calloc(m->n + 1, sizeof(*m->k));
	m->sym = calloc(m->n + 1, sizeof(*m->sym));
	m->own = calloc(m->n + 1, sizeof(*m->own));
	if (!m->k || !m->sym || !m->own) {
		host_cumod_free(m);
		return GPUX_E_NOMEM;
	}
	for (unsigned i = 0; i < m->n; i++) {
		const struct gpux_cu_kernel *e = mi->kernels[i];

		if (!entry_ok(e)) {
			host_cumod_free(m);
			*ret_msg =
				wrk_strdup_printf("a CUDA C++ module whose kernel %u this worker "
						  "does not know",
						  i);
			return GPUX_E_INVAL;
		}
		m->k[i] = e;
		m->sym[i] = exported(e->kernel, base);
		/* A kernel with internal linkage is its name as declared, as nvcc's -G would
		 * show it; an instance by expression only, a name nobody can write. */
		if (!m->sym[i]) {
			m->own[i] = i < mi->nexprs ? wrk_strdup_printf("gpux_cu_entry_%u", i)
						   : strdup(e->name);
			if (!m->own[i]) {
				host_cumod_free(m);
				return GPUX_E_NOMEM;
			}
			m->sym[i] = m->own[i];
		}
	}
	r = names_make(m, mi->nexprs, max_bytes);
	if (r < 0) {
		host_cumod_free(m);
		if (r != -E2BIG)
			return GPUX_E_NOMEM;
		*ret_msg = wrk_strdup_printf("the module's kernel names take more than the %zu MiB "
					     "a client's modules may",
					     max_bytes / (size_t)MiB);
		return GPUX_E_QUOTA;
	}
	m->bytes = wrk_knames_bytes(m->names) + 3 * (m->n + 1) * sizeof(void *);
	m->globals = mi->globals;
	m->nglobals = mi->nglobals;
	*ret = m;
	return 0;
}

size_t host_cumod_bytes(const struct host_cumod *m)
{
	return m->bytes;
}

static int find(const struct host_cumod *m, const char *sym)
{
	for (unsigned i = 0; i < m->n; i++)
		if (strcmp(m->sym[i], sym) == 0)
			return (int)i;
	return -1;
}

/* As worker/cuda.c's kernel_find(): a name expression the module was built with, else the
 * symbol itself (extern "C", or mangled), else the one C++ function of that name. */
gpux_status host_cumod_kernel(const struct host_cumod *m, const char *name,
			      struct wrk_kernel_info *ret, char **ret_msg)
{
	const char *sym = wrk_knames_lowered(m->names, name);
	const struct gpux_cu_kernel *e;
	int i = find(m, sym ? sym : name), r;

	if (i < 0 && !sym) {
		r = wrk_knames_match(m->names, name, &sym, ret_msg);
		if (r < 0)
			return r == -ENOTUNIQ ? GPUX_E_INVAL : GPUX_E_NOTFOUND;
		i = find(m, sym);
	}
	if (i < 0) {
		*ret_msg = wrk_strdup_printf("no kernel \"%s\" in the module", name);
		return GPUX_E_NOTFOUND;
	}
	e = m->k[i];
	ret->fn = (void *)e->run;
	ret->nparams = (int32_t)e->nparams;
	for (uint32_t p = 0; p < e->nparams; p++)
		ret->param_size[p] = e->param_size[p];
	return 0;
}

/* A qualified name without the global namespace's "::" in front. */
static const char *unrooted(const char *name)
{
	return strncmp(name, "::", 2) == 0 ? name + 2 : name;
}

gpux_status host_cumod_global(const struct host_cumod *m, const char *name, const void **ret_addr,
			      uint64_t *ret_size, char **ret_msg)
{
	for (uint32_t i = 0; i < m->nglobals; i++) {
		const struct gpux_cu_global *g = &m->globals[i];

		if (!g->name || !g->symbol || strnlen(g->name, 4096) == 4096 ||
		    strnlen(g->symbol, 4096) == 4096)
			continue;
		if (strcmp(g->symbol, name) != 0 && strcmp(g->name, unrooted(name)) != 0)
			continue;
		if (!g->addr || g->size == 0)
			break;
		*ret_addr = g->addr;
		*ret_size = g->size;
		return 0;
	}
	*ret_msg = wrk_strdup_printf("no variable \"%s\" in the module (a __device__ or "
				     "__constant__ one defined at namespace scope)",
				     name);
	return GPUX_E_NOTFOUND;
}
