/* SPDX-License-Identifier: MIT */
/* worker/host/host.c: the host back end: kernels in C, built by the system compiler, run on CPU threads. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include "host-build.h"
#include "host-cuda.h"
#include "host-cumod.h"
#include "host-exec.h"
#include "macro.h"
#include "sandbox.h"
#include "segment.h"
#include "wrk.h"

#define SHARED_OPTIN_MAX (1024 * 1024)

struct host_slot {
	struct host_dev *dev;
	unsigned index;
	pthread_t thread;
	bool started;
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct wrk_req *head, *tail;
	atomic_uint queued; /* in head..tail: what a thread about to sleep spins on */
	bool stop;
	bool done;  /* the thread has ended, or parked for good (caged) */
	bool caged; /* it entered the sandbox: it never ends (worker/host/sandbox.h) */
};

struct host_dev {
	struct wrk *w;
	bool sandbox; /* kernels run under worker/host/sandbox.c's filter */
	const char *cc, *cxx;
	char cc_version[256], cxx_version[256];
	struct wrk_host_cage cage; /* the compilers' (worker/host/host-cage.h) */
	struct host_exec *exec;    /* the CPU threads of launches (worker/host/host-exec.c) */
	struct host_slot slots[WRK_SLOTS_MAX];
	unsigned nslots;
};

struct host_module {
	void *dl;
	uintptr_t base;
	int fd; /* the memfd it was loaded from: its name stays this module's while it is open */
	struct host_cumod *cu; /* CUDA C++: its kernels (worker/host/host-cumod.c); NULL: C */
};

/* ---- probe and open ---- */

static void host_info(uint32_t index, struct ipc_device_info *info)
{
	struct ipc_key k;
	char host[64] = "";
	struct sysinfo si;

	(void)gethostname(host, sizeof(host) - 1);
	memset(info, 0, sizeof(*info));
	info->index = index;
	info->backend = GPUX_BACKEND_HOST;
	info->sm_count = (uint32_t)get_nprocs();
	info->max_threads_per_block = 1024;
	if (sysinfo(&si) == 0)
		info->mem_total = (uint64_t)si.totalram * si.mem_unit;
	(void)snprintf(info->name, sizeof(info->name), "host CPU %u (%u threads)", index,
		       info->sm_count);
	k = ipc_key_of(host, strlen(host));
	k.lo ^= index;
	memcpy(info->uuid, &k, sizeof(info->uuid));
}

static gpux_status host_probe(struct ipc_device_info *ret, unsigned max, unsigned *ret_n,
			      char **ret_msg)
{
	const char *e = getenv("GPUX_HOST_DEVICES");
	unsigned n = e ? (unsigned)strtoul(e, NULL, 10) : 1;

	if (n == 0 || n > max)
		n = n ? max : 1;
	for (unsigned i = 0; i < n; i++)
		host_info(i, &ret[i]);
	*ret_n = n;
	return 0;
}

static void *slot_main(void *arg);

static void host_close(void *dv)
{
	struct host_dev *d = dv;

	if (!d)
		return;
	for (unsigned i = 0; i < d->nslots; i++) {
		struct host_slot *s = &d->slots[i];
		bool caged;

		if (!s->started)
			continue;
		(void)pthread_mutex_lock(&s->lock);
		s->stop = true;
		(void)pthread_cond_signal(&s->cond);
		while (!s->done)
			(void)pthread_cond_wait(&s->cond, &s->lock);
		caged = s->caged;
		(void)pthread_mutex_unlock(&s->lock);
		/* A caged thread parks for good: it goes with the process. */
		if (caged)
			(void)pthread_detach(s->thread);
		else
			(void)pthread_join(s->thread, NULL);
	}
	host_exec_free(d->exec);
	wrk_host_cage_done(&d->cage);
	free(d);
}

static gpux_status host_open(struct wrk *w, uint32_t device, void **ret_dev,
			     struct ipc_device_info *ret_info, struct wrk_limits *ret_limits,
			     char **ret_msg)
{
	struct host_dev *d = calloc(1, sizeof(*d));
	int r;

	if (!d)
		return GPUX_E_NOMEM;
	d->w = w;
	d->sandbox = w->opts.sandbox;
	d->cc = getenv("GPUX_HOST_CC");
	if (!d->cc || !*d->cc)
		d->cc = "cc";
	d->cxx = getenv("GPUX_HOST_CXX");
	if (!d->cxx || !*d->cxx)
		d->cxx = "c++";
	wrk_host_cc_version(d->cc, d->cc_version, sizeof(d->cc_version));
	wrk_host_cc_version(d->cxx, d->cxx_version, sizeof(d->cxx_version));
	/* What they write is bounded by what a client's modules may hold. */
	r = wrk_host_cage_init(&d->cage, w->opts.compile_memory, WRK_CLIENT_MOD_BYTES,
			       w->opts.compile_timeout_ms * NSEC_PER_MSEC);
	if (r == 0)
		r = wrk_host_cage_add_compiler(&d->cage, d->cc);
	if (r == 0)
		r = wrk_host_cage_add_compiler(&d->cage, d->cxx);
	if (r < 0) {
		wrk_host_cage_done(&d->cage);
		free(d);
		*ret_msg = wrk_strdup_printf("the compilers' cage: %s", strerror(-r));
		return wrk_status_from_errno(r, GPUX_E_IO);
	}
	if (!d->cage.landlock_abi)
		wrk_log(w, "no Landlock here: host compiles may read whatever this worker's user "
			   "may read");
	r = host_exec_faults_install();
	if (r < 0) {
		wrk_host_cage_done(&d->cage);
		free(d);
		*ret_msg = wrk_strdup_printf("sigaction: %s", strerror(-r));
		return GPUX_E_IO;
	}
	r = host_exec_new(w, d->sandbox, &d->exec);
	if (r < 0) {
		wrk_host_cage_done(&d->cage);
		free(d);
		*ret_msg = wrk_strdup_printf("the threads of launches: %s", strerror(-r));
		return GPUX_E_NOMEM;
	}
	host_info(device, ret_info);
	wrk_sched_device(w, 0, 0, 0, 0, 0,
			 "the host back end does not split its CPUs between queues");
	*ret_limits = (struct wrk_limits){
		.max_threads_per_block = 1024,
		.max_block = { 1024, 1024, 64 },
		.max_grid = { IPC_GRID_MAX, 65535, 65535 },
		.max_shared_per_block = 48 * 1024,
		.max_shared_per_block_optin = SHARED_OPTIN_MAX,
	};
	*ret_dev = d;
	return 0;
}

/* A thread per slot; its priority only orders the helpers' blocks (worker/host/host-exec.c),
 * and a share is not made: CPUs are not split. */
static gpux_status host_slot_open(void *dv, unsigned slot, struct wrk_stream *st, char **ret_msg)
{
	struct host_dev *d = dv;
	struct host_slot *s = &d->slots[slot];
	int r;

	s->dev = d;
	s->index = slot;
	(void)pthread_mutex_init(&s->lock, NULL);
	(void)pthread_cond_init(&s->cond, NULL);
	r = pthread_create(&s->thread, NULL, slot_main, s);
	if (r != 0) {
		*ret_msg = wrk_strdup_printf("pthread_create: %s", strerror(r));
		return GPUX_E_NOMEM;
	}
	s->started = true;
	d->nslots = MAX(d->nslots, slot + 1);
	return 0;
}

/*
 * ---- segments: plain memory needs no registration ----
 * but its pages are faulted into this process's mapping ahead (off the loop, as a GPU's
 * registration is, by several threads: worker/core/populate.c), so that a fresh buffer's
 * first kernel does not fault them in one by one. A kernel too old for MADV_POPULATE_READ
 * (5.14) leaves them to the kernels.
 *
 * Kernels work on the client's pages in place, so an IN argument (read-only, as on a GPU,
 * where a write would go to the device's copy) is handed to the kernel in a read-only view
 * of its segment: a second mapping of the same pages (mremap() of a shared mapping with no
 * old size), made at the segment's first IN use and kept as its registration. A kernel that
 * writes there faults, and is told which argument it wrote (run_request()), rather than
 * changing the client's input without a word.
 */

static gpux_status host_map_register(void *dv, struct wrk_mapping *m, char **ret_msg)
{
	struct host_dev *d = dv;

	wrk_populate(&d->w->reg.populate, m->seg.addr, m->seg.size, false);
	return 0;
}

static void host_map_unregister(void *dv, struct wrk_mapping *m)
{
	if (m->reg)
		(void)munmap(m->reg, m->seg.size);
	m->reg = NULL;
}

/* The read-only view of a segment's pages (a frozen one is read-only already), or NULL when
 * none could be made: then the writable one serves. */
static uint8_t *read_only_view(struct wrk_mapping *m)
{
	void *p;

	if (m->seg.frozen || m->reg)
		return m->seg.frozen ? m->seg.addr : m->reg;
	p = mremap(m->seg.addr, 0, m->seg.size, MREMAP_MAYMOVE);
	if (p == MAP_FAILED)
		return NULL;
	if (mprotect(p, m->seg.size, PROT_READ) < 0) {
		(void)munmap(p, m->seg.size);
		return NULL;
	}
	m->reg = p;
	return p;
}

static uint64_t host_mem_free(void *dv)
{
	struct sysinfo si;

	if (sysinfo(&si) < 0)
		return 0;
	return (uint64_t)si.freeram * si.mem_unit;
}

/* ---- building: worker/host/host-build.c ---- */

static void host_target_key(void *dv, uint32_t lang, struct ipc_key_state *s)
{
	struct host_dev *d = dv;

	if (lang == GPUX_LANG_CUDA)
		wrk_host_cuda_key(d->cxx, d->cxx_version, s);
	else
		wrk_host_build_key(d->cc, d->cc_version, s);
}

static gpux_status host_build(void *dv, const struct wrk_build *b, uint8_t **ret_image,
			      size_t *ret_len, char **ret_log)
{
	struct host_dev *d = dv;

	if (b->lang == GPUX_LANG_CUDA)
		return wrk_host_cuda_build(&d->cage, d->cxx, b, ret_image, ret_len, ret_log);
	return wrk_host_build(&d->cage, d->cc, b, ret_image, ret_len, ret_log);
}

/* ---- modules: the image is dlopen()ed from a memfd, so what was checked is what runs ---- */

/*
 * dlopen() hands back an object it has loaded already under the same name, and a module's
 * name is "/proc/self/fd/N": a memfd closed after its load would leave N to the next module,
 * which would then run the first one's code. So each module keeps its memfd open while it is
 * loaded (no other module can get N), and a load checks that nothing holds the name before
 * and that it got an object of its own after.
 */
#define NAME_TRIES 4

static void module_name(int fd, char path[static 32])
{
	(void)snprintf(path, 32, "/proc/self/fd/%d", fd);
}

/* Whether an object is loaded under this name now. */
static bool name_taken(const char *path)
{
	void *dl = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);

	if (!dl)
		return false;
	(void)dlclose(dl);
	return true;
}

/*
 * An fd of the image whose /proc/self/fd name no loaded object has: fd, or a duplicate of
 * it. Takes fd; -EBUSY when no name is free after NAME_TRIES.
 */
static int fresh_name_take(int fd)
{
	int taken[NAME_TRIES];
	unsigned n = 0;
	char path[32];

	module_name(fd, path);
	while (name_taken(path) && n < NAME_TRIES) {
		int d = fcntl(fd, F_DUPFD_CLOEXEC, 0);

		if (d < 0)
			break;
		taken[n++] = fd;
		fd = d;
		module_name(fd, path);
	}
	while (n > 0)
		(void)close(taken[--n]);
	if (name_taken(path)) {
		(void)close(fd);
		return -EBUSY;
	}
	return fd;
}

static void *own_symbol(struct host_module *hm, const char *name, unsigned type);

static gpux_status host_module_load(void *dv, const uint8_t *image, size_t len, void **ret_mod,
				    char **ret_msg)
{
	_cleanup_(closep) int fd = -1;
	struct host_dev *d = dv;
	struct host_module *hm;
	struct link_map *lm = NULL;
	const struct gpux_cu_module *mi;
	char path[32];
	void *dl;
	int r;

	if (d->sandbox && wrk_sandbox_image_check(image, len, ret_msg) < 0)
		return GPUX_E_INVAL;
	/* Sealed: what was checked is what the loader maps, whoever holds the fd. */
	r = ipc_blob_new("gpux-host-module", image, len, &fd);
	if (r < 0) {
		*ret_msg = wrk_strdup_printf("a memfd for the module: %s", strerror(-r));
		return wrk_status_from_errno(r, GPUX_E_IO);
	}
	fd = fresh_name_take(TAKE_FD(fd));
	if (fd < 0) {
		*ret_msg = fd == -EBUSY
				   ? strdup("no free name to load the module under")
				   : wrk_strdup_printf("a name for the module: %s", strerror(-fd));
		return GPUX_E_DEVICE;
	}
	hm = calloc(1, sizeof(*hm));
	if (!hm)
		return GPUX_E_NOMEM;
	module_name(fd, path);
	dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		const char *e = dlerror();
		*ret_msg = wrk_strdup_printf("loading the module: %s", e ? e : "dlopen failed");
		free(hm);
		return GPUX_E_DEVICE;
	}
	/* Another object with this file or its soname would come back under its own name. */
	if (dlinfo(dl, RTLD_DI_LINKMAP, &lm) != 0 || !lm || !lm->l_name ||
	    strcmp(lm->l_name, path) != 0) {
		(void)dlclose(dl);
		*ret_msg = wrk_strdup_printf("loading the module gave another object (%s)",
					     lm && lm->l_name ? lm->l_name : "unknown");
		free(hm);
		return GPUX_E_DEVICE;
	}
	hm->dl = dl;
	hm->base = (uintptr_t)lm->l_addr;
	/* CUDA C++ (worker/host/host-cuda.c): kernels by the module's table, never a symbol. */
	mi = own_symbol(hm, "gpux_cu_module_info", STT_OBJECT);
	if (mi) {
		gpux_status st =
			host_cumod_new(mi, hm->base, WRK_CLIENT_MOD_BYTES, &hm->cu, ret_msg);

		if (st != GPUX_OK) {
			(void)dlclose(dl);
			free(hm);
			return st;
		}
	}
	hm->fd = TAKE_FD(fd);
	*ret_mod = hm;
	return 0;
}

static void host_module_unload(void *dv, void *mod)
{
	struct host_module *hm = mod;
	char path[32];

	host_cumod_free(hm->cu);
	(void)dlclose(hm->dl);
	/* An object that stays loaded (marked NODELETE) keeps its name: its fd is never closed,
	 * so that no later module is given that name. */
	module_name(hm->fd, path);
	if (!name_taken(path))
		(void)close(hm->fd);
	free(hm);
}

/*
 * A symbol of the module itself (dlsym() would also find libc's through its dependencies)
 * of the type asked for: a kernel must be a function, not _init or a variable.
 */
static void *own_symbol(struct host_module *hm, const char *name, unsigned type)
{
	void *p = dlsym(hm->dl, name);
	const ElfW(Sym) *sym = NULL;
	Dl_info info;

	if (!p || dladdr1(p, &info, (void **)&sym, RTLD_DL_SYMENT) == 0 || !sym ||
	    (uintptr_t)info.dli_fbase != hm->base || ELF64_ST_TYPE(sym->st_info) != type)
		return NULL;
	return p;
}

static gpux_status host_kernel_get(void *dv, void *mod, const char *name,
				   struct wrk_kernel_info *ret, char **ret_msg)
{
	struct host_module *hm = mod;
	char pname[IPC_KERNEL_NAME_MAX + 32];
	const uint32_t *params;

	if (hm->cu)
		return host_cumod_kernel(hm->cu, name, ret, ret_msg);
	if (strncmp(name, "gpux_params_", 12) == 0 || !(ret->fn = own_symbol(hm, name, STT_FUNC))) {
		*ret_msg = wrk_strdup_printf("no kernel \"%s\" in the module", name);
		return GPUX_E_NOTFOUND;
	}
	ret->nparams = -1;
	(void)snprintf(pname, sizeof(pname), "gpux_params_%s", name);
	params = own_symbol(hm, pname, STT_OBJECT);
	if (params && params[0] <= IPC_ARGS_MAX) {
		ret->nparams = (int32_t)params[0];
		for (uint32_t i = 0; i < params[0]; i++)
			ret->param_size[i] = params[1 + i];
	}
	return 0;
}

/* ---- what a module holds: its kernels' attributes, its variables ---- */

static gpux_status host_kernel_attrs(void *dv, void *mod, const struct wrk_kernel_info *k,
				     struct ipc_kernel_attrs *ret, char **ret_msg)
{
	struct host_dev *d = dv;
	struct host_module *hm = mod;

	ret->max_threads_per_block = (int32_t)d->w->limits.max_threads_per_block;
	/* A C kernel has dynamic shared memory only; CUDA C++'s __shared__ variables are
	 * thread-local, not counted anywhere, and its extern __shared__ area is fixed. */
	ret->shared_size_bytes = hm->cu ? IPC_ATTR_UNKNOWN : 0;
	ret->max_dynamic_shared_size_bytes =
		hm->cu ? (int32_t)GPUX_CU_DYN_SHARED_MAX
		       : (int32_t)MIN(d->w->limits.max_shared_per_block_optin, (uint32_t)INT32_MAX);
	ret->nparams = k->nparams >= 0 ? k->nparams : IPC_ATTR_UNKNOWN;
	return 0;
}

struct place {
	uintptr_t base, lo, hi;
	bool found, writable;
};

/* Whether [lo, hi) lies in one segment the loader mapped from the module at base, and whether
 * that is writable once relocated (not in its RELRO part). */
static int place_find(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct place *p = arg;
	bool relro = false;

	if (info->dlpi_addr != p->base)
		return 0;
	for (ElfW(Half) i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		uintptr_t s = p->base + ph->p_vaddr, e = s + ph->p_memsz;

		if (ph->p_type == PT_LOAD && p->lo >= s && p->hi <= e) {
			p->found = true;
			p->writable = ph->p_flags & PF_W;
		}
		relro |= ph->p_type == PT_GNU_RELRO && p->lo < e && p->hi > s;
	}
	p->writable &= !relro;
	return 1;
}

/* A variable the module itself exports, with its size (as own_symbol() a function). */
static const void *own_variable(struct host_module *hm, const char *name, uint64_t *ret_size)
{
	const void *p = own_symbol(hm, name, STT_OBJECT);
	const ElfW(Sym) *sym = NULL;
	Dl_info info;

	if (!p || dladdr1(p, &info, (void **)&sym, RTLD_DL_SYMENT) == 0 || !sym)
		return NULL;
	*ret_size = sym->st_size;
	return p;
}

static gpux_status host_global_get(void *dv, void *mod, const char *name, void **ret_ptr,
				   uint64_t *ret_size, bool *ret_read_only, char **ret_msg)
{
	struct host_module *hm = mod;
	struct place p = { .base = hm->base };
	const void *addr = NULL;
	uint64_t size = 0;
	gpux_status st;

	if (hm->cu) {
		st = host_cumod_global(hm->cu, name, &addr, &size, ret_msg);
		if (st != GPUX_OK)
			return st;
	} else if (strncmp(name, "gpux_", 5) == 0 || !(addr = own_variable(hm, name, &size)) ||
		   size == 0) {
		/* gpux's own tables (gpux_params_*) are not the client's variables. */
		*ret_msg = wrk_strdup_printf("no variable \"%s\" in the module (a C module's "
					     "variables are those it exports: GPUX_HOST_GLOBAL)",
					     name);
		return GPUX_E_NOTFOUND;
	}
	/* Nothing outside the module's own memory, whatever its table says. */
	p.lo = (uintptr_t)addr;
	p.hi = size <= UINTPTR_MAX - p.lo ? p.lo + size : 0;
	if (p.hi != 0)
		(void)dl_iterate_phdr(place_find, &p);
	if (!p.found) {
		*ret_msg = wrk_strdup_printf("the variable \"%s\" is not in the module's memory",
					     name);
		return GPUX_E_INVAL;
	}
	*ret_ptr = (void *)addr;
	*ret_size = size;
	*ret_read_only = !p.writable;
	return 0;
}

static uint64_t host_module_bytes(void *dv, void *mod)
{
	struct host_module *hm = mod;

	return hm->cu ? host_cumod_bytes(hm->cu) : 0;
}

/* ---- running: worker/host-exec.c ---- */

/* A copy between a shared range (args[0]) and a device buffer (args[1]). */
static void run_copy(struct wrk_req *r)
{
	struct wrk_arg *h = &r->args[0], *d = &r->args[1];
	uint8_t *dev = (uint8_t *)d->dbuf->ptr + d->offset;
	uint64_t t0 = mono_ns();

	if (h->kind == GPUX_ARG_IN)
		memcpy(dev, h->host, h->len);
	else
		memcpy(h->host, dev, h->len);
	r->status = 0;
	r->t_end = mono_ns();
	r->device_ns = r->t_end - t0;
}

/*
 * The end of a slot thread: said to host_close(); one in the sandbox may not end (its exit
 * would be refused) and parks for good, touching nothing of the slot's after saying so.
 */
static void slot_end(struct host_slot *s)
{
	bool caged;

	(void)pthread_mutex_lock(&s->lock);
	s->done = true;
	caged = s->caged;
	(void)pthread_cond_broadcast(&s->cond);
	(void)pthread_mutex_unlock(&s->lock);
	if (caged)
		host_exec_park();
}

static void *slot_main(void *arg)
{
	struct host_slot *s = arg;
	stack_t ss;

	host_exec_thread_begin(&ss);

	for (;;) {
		struct wrk_req *r;
		bool fatal;
		int e;

		(void)pthread_mutex_lock(&s->lock);
		if (!s->head && !s->stop) {
			(void)pthread_mutex_unlock(&s->lock);
			wrk_spin_for_work(s->dev->w->spin_ns, &s->queued);
			(void)pthread_mutex_lock(&s->lock);
		}
		while (!s->head && !s->stop)
			(void)pthread_cond_wait(&s->cond, &s->lock);
		if (!s->head) {
			(void)pthread_mutex_unlock(&s->lock);
			break;
		}
		r = s->head;
		s->head = r->backend;
		if (!s->head)
			s->tail = NULL;
		atomic_fetch_sub(&s->queued, 1);
		(void)pthread_mutex_unlock(&s->lock);

		/* A dead client's work that has not started never will. */
		if (wrk_req_cancelled(r)) {
			wrk_reqs_complete(&r, 1, false);
			continue;
		}
		/* Before the first kernel, once the wake-up eventfd exists. */
		e = host_exec_sandbox_enter(s->dev->exec);
		if (e < 0) {
			r->status = GPUX_E_PERM;
			r->error = wrk_strdup_printf("host kernels run in a sandbox here, which "
						     "could not be set up: %s",
						     strerror(-e));
			wrk_reqs_complete(&r, 1, false);
			continue;
		}
		if (host_exec_caged() && !s->caged) {
			(void)pthread_mutex_lock(&s->lock);
			s->caged = true;
			(void)pthread_mutex_unlock(&s->lock);
		}
		/* Host kernels and copies work on the client's pages in place: past this mark a
		 * request never runs again elsewhere. Asked once more after it, so that a client
		 * dropped meanwhile (which reads its marks once its channel is gone) finds the
		 * mark of anything that ran. */
		wrk_mark(r, IPC_MARK_STARTED);
		if (wrk_req_cancelled(r)) {
			wrk_reqs_complete(&r, 1, false);
			continue;
		}
		/* A kernel that faulted may have broken anything in this process: exit. */
		fatal = false;
		if (r->kind == REQ_COPY)
			run_copy(r);
		else
			fatal = host_exec_run(s->dev->exec, r,
					      ((struct host_module *)r->mod->handle)->cu != NULL);
		wrk_reqs_complete(&r, 1, fatal);
		if (fatal)
			break;
	}
	host_exec_thread_end(&ss);
	slot_end(s);
	return NULL;
}

static void host_launch(void *dv, unsigned slot, struct wrk_req *first, unsigned n)
{
	struct host_dev *d = dv;
	struct host_slot *s = &d->slots[slot];
	struct wrk_req *r = first, *last = NULL;

	for (unsigned k = 0; k < n; k++, r = r->next) {
		/* A buffer's parameter is its data pointer, as for cuLaunchKernel: the client's
		 * pages themselves (an input's read-only), or the device buffer's memory. */
		for (unsigned i = 0; i < r->nargs; i++) {
			struct wrk_arg *a = &r->args[i];

			if (a->kind == GPUX_ARG_SCALAR)
				continue;
			/* (A cached input's bytes are its frozen segment's: read-only there, where
			 * the cache's copy would take a kernel's writes for later hits.) */
			if (a->dbuf) {
				a->dev = (uint8_t *)a->dbuf->ptr + a->offset;
			} else if (a->kind == GPUX_ARG_IN) {
				uint8_t *view = read_only_view(a->map);

				a->dev = view ? view + a->offset : a->host;
			} else {
				a->dev = a->host;
			}
			r->params[i] = &a->dev;
		}
		r->launched = true;
		r->backend = NULL;
		if (last)
			last->backend = r;
		last = r;
	}
	(void)pthread_mutex_lock(&s->lock);
	if (s->tail)
		s->tail->backend = first;
	else
		s->head = first;
	s->tail = last;
	atomic_fetch_add(&s->queued, n);
	(void)pthread_cond_signal(&s->cond);
	(void)pthread_mutex_unlock(&s->lock);
}

/* ---- memory that outlives requests: host memory here ---- */

static gpux_status host_dev_alloc(void *dv, uint64_t size, void **ret_ptr, char **ret_msg)
{
	void *p = size <= SIZE_MAX - 63 ? aligned_alloc(64, ALIGN_UP((size_t)size, 64)) : NULL;

	if (!p) {
		*ret_msg = wrk_strdup_printf("no memory for %llu bytes", (unsigned long long)size);
		return GPUX_E_NOMEM;
	}
	*ret_ptr = p;
	return 0;
}

static void host_dev_free(void *dv, void *ptr)
{
	free(ptr);
}

static gpux_status host_upload(void *dv, void *dst, const void *src, uint64_t len, void **ret_ready,
			       char **ret_msg)
{
	memcpy(dst, src, len);
	*ret_ready = NULL;
	return 0;
}

static void host_ready_nop(void *dv, void *ready)
{
}

const struct wrk_backend_ops wrk_backend_host = {
	.name = "host",
	.backend = GPUX_BACKEND_HOST,
	.probe = host_probe,
	.open = host_open,
	.close = host_close,
	.map_register = host_map_register,
	.register_off_loop = true,
	.register_optional = true,
	.map_unregister = host_map_unregister,
	.target_key = host_target_key,
	.image_ext = "so",
	.build = host_build,
	.module_load = host_module_load,
	.module_bytes = host_module_bytes,
	.module_unload = host_module_unload,
	.kernel_get = host_kernel_get,
	.kernel_attrs = host_kernel_attrs,
	.global_get = host_global_get,
	.slot_open = host_slot_open,
	.launch = host_launch,
	.dev_alloc = host_dev_alloc,
	.dev_free = host_dev_free,
	.upload = host_upload,
	.ready_wait = host_ready_nop,
	.ready_free = host_ready_nop,
	.mem_free = host_mem_free,
};
