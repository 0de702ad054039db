/* SPDX-License-Identifier: MIT */
/* worker/host/host.c: the host back end: kernels in C, built by the system compiler, run on CPU threads. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>

#include "host-build.h"
#include "macro.h"
#include "sandbox.h"
#include "segment.h"
#include "wrk.h"

#define SHARED_OPTIN_MAX (1024 * 1024)
#define FAULT_STACK (64 * 1024)

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
};

struct host_dev {
	struct wrk *w;
	bool sandbox; /* kernels run under worker/host/sandbox.c's filter */
	const char *cc;
	char cc_version[256];
	struct host_slot slots[WRK_SLOTS_MAX];
	unsigned nslots;
};

struct host_module {
	void *dl;
	uintptr_t base;
	int fd; /* the memfd it was loaded from: its name stays this module's while it is open */
};

/* ---- faults: a kernel that crashes fails its request, then the worker exits ---- */

static __thread sigjmp_buf *fault_jmp;
static __thread volatile sig_atomic_t fault_signo;
static __thread void *fault_addr;
static __thread int fault_call; /* SIGSYS: the forbidden call */
static __thread unsigned fault_arch;
static __thread bool sandboxed;

static void on_fault(int sig, siginfo_t *si, void *ctx)
{
	sigjmp_buf *jb;

	if (!fault_jmp) {
		/* Not in a kernel: a bug of ours. Crash as we would have (in the sandbox, by
		 * abort(): no sigaction there). */
		if (sandboxed)
			abort();
		(void)signal(sig, SIG_DFL);
		(void)raise(sig);
		return;
	}
	fault_signo = sig;
	fault_addr = si->si_addr;
	if (sig == SIGSYS) {
		fault_call = si->si_syscall;
		fault_arch = si->si_arch;
	}
	/* A fault on the way out (in a sanitizer's siglongjmp) is a bug of ours, not a loop. */
	jb = fault_jmp;
	fault_jmp = NULL;
	siglongjmp(*jb, 1);
}

/* SIGSYS is a kernel's forbidden system call in the sandbox: a fault like the others. */
static int fault_handlers_install(void)
{
	static const int sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGSYS };
	struct sigaction sa = { 0 };

	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	for (unsigned i = 0; i < ARRAY_SIZE(sigs); i++)
		if (sigaction(sigs[i], &sa, NULL) < 0)
			return -errno;
	return 0;
}

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
		if (!s->started)
			continue;
		(void)pthread_mutex_lock(&s->lock);
		s->stop = true;
		(void)pthread_cond_signal(&s->cond);
		(void)pthread_mutex_unlock(&s->lock);
		(void)pthread_join(s->thread, NULL);
	}
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
	wrk_host_cc_version(d->cc, d->cc_version, sizeof(d->cc_version));
	r = fault_handlers_install();
	if (r < 0) {
		free(d);
		*ret_msg = wrk_strdup_printf("sigaction: %s", strerror(-r));
		return GPUX_E_IO;
	}
	host_info(device, ret_info);
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

static gpux_status host_slot_open(void *dv, unsigned slot, char **ret_msg)
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

/* The IN argument of r whose range (else, whose segment's read-only view) holds addr:
 * UINT_MAX when none. */
static unsigned in_arg_at(const struct wrk_req *r, const void *addr)
{
	const uint8_t *a = addr;

	for (unsigned whole = 0; whole < 2; whole++)
		for (unsigned i = 0; i < r->nargs; i++) {
			const struct wrk_arg *x = &r->args[i];
			const uint8_t *view;
			uint64_t from, len;

			if (x->kind != GPUX_ARG_IN || !x->map)
				continue;
			view = x->map->seg.frozen ? x->map->seg.addr : x->map->reg;
			from = whole ? 0 : x->offset;
			len = whole ? x->map->seg.size : x->len;
			if (view && a >= view + from && a < view + from + len)
				return i;
		}
	return UINT_MAX;
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

	wrk_host_build_key(d->cc, d->cc_version, s);
}

static gpux_status host_build(void *dv, const struct wrk_build *b, uint8_t **ret_image,
			      size_t *ret_len, char **ret_log)
{
	struct host_dev *d = dv;

	return wrk_host_build(d->cc, b, ret_image, ret_len, ret_log);
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

static gpux_status host_module_load(void *dv, const uint8_t *image, size_t len, void **ret_mod,
				    char **ret_msg)
{
	_cleanup_(closep) int fd = -1;
	struct host_dev *d = dv;
	struct host_module *hm;
	struct link_map *lm = NULL;
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
	hm->fd = TAKE_FD(fd);
	*ret_mod = hm;
	return 0;
}

static void host_module_unload(void *dv, void *mod)
{
	struct host_module *hm = mod;
	char path[32];

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

/* ---- running ---- */

static void run_request(struct wrk_req *r)
{
	gpux_host_kernel_fn *fn = (gpux_host_kernel_fn *)r->kernel->info.fn;
	struct gpux_host_launch l = {
		.grid_dim = { r->grid[0], r->grid[1], r->grid[2] },
		.block_dim = { r->block[0], r->block[1], r->block[2] },
		.shared_bytes = r->shared_bytes,
	};
	sigjmp_buf jb;
	uint64_t t0;

	if (r->shared_bytes) {
		l.shared = aligned_alloc(64, ALIGN_UP((size_t)r->shared_bytes, 64));
		if (!l.shared) {
			r->status = GPUX_E_NOMEM;
			r->error = strdup("no memory for the block's shared memory");
			return;
		}
	}
	t0 = mono_ns();
	if (sigsetjmp(jb, 1) == 0) {
		fault_jmp = &jb;
		for (l.block_idx.z = 0; l.block_idx.z < l.grid_dim.z; l.block_idx.z++)
			for (l.block_idx.y = 0; l.block_idx.y < l.grid_dim.y; l.block_idx.y++)
				for (l.block_idx.x = 0; l.block_idx.x < l.grid_dim.x; l.block_idx.x++)
					fn(&l, r->params);
		fault_jmp = NULL;
		r->status = 0;
	} else {
		unsigned in = fault_signo == SIGSEGV ? in_arg_at(r, fault_addr) : UINT_MAX;

		fault_jmp = NULL;
		r->status = GPUX_E_KERNEL_FAULT;
		if (fault_signo == SIGSYS)
			r->error = wrk_sandbox_fault_text(r->name, fault_call, fault_arch);
		else if (in != UINT_MAX)
			r->error = wrk_strdup_printf("kernel \"%s\" wrote to argument %u, an input: "
						     "IN arguments are read-only (pass it as INOUT "
						     "to write it)",
						     r->name, in);
		else
			r->error = wrk_strdup_printf("kernel \"%s\": %s at address %p", r->name,
						     strsignal(fault_signo), fault_addr);
	}
	r->t_end = mono_ns();
	r->device_ns = r->t_end - t0;
	free(l.shared);
}

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

static void *slot_main(void *arg)
{
	struct host_slot *s = arg;
	stack_t ss = { .ss_size = FAULT_STACK };
	sigset_t all;

	/* Signals are the loop's business (signalfd), not this thread's. */
	sigfillset(&all);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGBUS);
	sigdelset(&all, SIGFPE);
	sigdelset(&all, SIGILL);
	sigdelset(&all, SIGSYS);
	(void)pthread_sigmask(SIG_BLOCK, &all, NULL);
	/* A kernel that overflows its stack still reaches the fault handler. */
	ss.ss_sp = malloc(FAULT_STACK);
	if (ss.ss_sp)
		(void)sigaltstack(&ss, NULL);

	for (;;) {
		struct wrk_req *r;
		bool fatal;

		(void)pthread_mutex_lock(&s->lock);
		if (!s->head && !s->stop) {
			(void)pthread_mutex_unlock(&s->lock);
			wrk_spin_for_work(s->dev->w, &s->queued);
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
		if (s->dev->sandbox && !sandboxed) {
			int e = wrk_sandbox_enter(s->dev->w->done_fd);

			if (e < 0) {
				r->status = GPUX_E_PERM;
				r->error = wrk_strdup_printf("host kernels run in a sandbox here, "
							     "which could not be set up: %s",
							     strerror(-e));
				wrk_reqs_complete(&r, 1, false);
				continue;
			}
			sandboxed = true;
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
		if (r->kind == REQ_COPY)
			run_copy(r);
		else
			run_request(r);
		/* A kernel that faulted may have broken anything in this process: exit. */
		fatal = r->status == GPUX_E_KERNEL_FAULT;
		wrk_reqs_complete(&r, 1, fatal);
		if (fatal)
			break;
	}
	if (ss.ss_sp) {
		ss.ss_flags = SS_DISABLE;
		(void)sigaltstack(&ss, NULL);
		free(ss.ss_sp);
	}
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

static gpux_status host_upload(void *dv, void *dst, const void *src, uint64_t len,
			       void **ret_ready, char **ret_msg)
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
	.map_unregister = host_map_unregister,
	.target_key = host_target_key,
	.image_ext = "so",
	.build = host_build,
	.module_load = host_module_load,
	.module_unload = host_module_unload,
	.kernel_get = host_kernel_get,
	.slot_open = host_slot_open,
	.launch = host_launch,
	.dev_alloc = host_dev_alloc,
	.dev_free = host_dev_free,
	.upload = host_upload,
	.ready_wait = host_ready_nop,
	.ready_free = host_ready_nop,
	.mem_free = host_mem_free,
};
