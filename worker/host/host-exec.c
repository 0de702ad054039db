/* SPDX-License-Identifier: MIT */
/* worker/host-exec.c: the host back end's launches: their blocks over the worker's CPU threads. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>
#include <linux/futex.h>

#include <gpux/cuda-host/gpux_cuda_abi.h>
#include <gpux/host-kernel.h>

#include "fault-addr.h"
#include "host-exec.h"
#include "macro.h"
#include "sandbox.h"

#define HELPERS_MAX 255u
#define FAULT_STACK (64 * 1024)
#define FIBERS_MAX 1024u  /* the threads of a block */
#define GUARD (64 * 1024) /* below each fiber's stack: more than a frame skips */
/* Fiber i's stack begins (i % 1024) cache lines below its area's top: areas are a multiple
 * of the caches' periods apart, and tops at one offset would all fall in the same sets
 * (measured: a barrier of 1024 threads 11 ns a thread, 7.5 ns with this). */
#define COLOURS (64 * 1024)
/* A launch's description and its argument pointers: one page, read-only for the kernel. */
#define LAUNCH_PAGE 4096u
_Static_assert(sizeof(struct gpux_host_launch) + IPC_ARGS_MAX * sizeof(void *) <= LAUNCH_PAGE,
	       "launch page");
/* The arguments' values, each 16-byte aligned. */
#define VALUES_MAX (IPC_ARGS_MAX * ALIGN_UP(IPC_SCALAR_MAX, 16u))

struct exec_job {
	struct exec_job *next;
	struct wrk_req *r;
	int prio; /* its slot's: helpers take the blocks of the highest first */
	bool cxx;
	uint64_t nblocks, chunk;
	atomic_uint_fast64_t next_block; /* the first not taken */
	atomic_bool stop;                /* one failed: take no more */
	unsigned helpers;                /* in it now (lock) */
	/* The first failure (lock). */
	gpux_status status;
	char *error;
	bool fatal;
};

struct exec_helper {
	struct host_exec *x;
	pthread_t thread;
	bool ended; /* returned, or parked for good (caged): lock */
	bool caged;
};

struct host_exec {
	struct wrk *w;
	bool sandbox;
	unsigned nhelpers;
	struct exec_helper helpers[HELPERS_MAX];
	pthread_mutex_t lock;
	pthread_cond_t wake; /* helpers: a job came, or stop */
	pthread_cond_t left; /* runners: helpers left their job */
	struct exec_job *jobs;
	bool stop;
};

/* ---- faults: a kernel that crashes fails its request, then the worker exits ---- */

/*
 * What a thread that runs C kernels gives them, kept off the stack they run on: the launch
 * page, mapped twice (written here, and read-only where the kernel sees it, so that a kernel
 * that writes its launch description or argument array faults at once), the values the
 * array points at (a kernel may change its own), and where a fault returns to.
 */
struct exec_thread {
	uint8_t *launch, *launch_ro;
	sigjmp_buf jb;
	uint8_t values[VALUES_MAX] __attribute__((aligned(16)));
};

static __thread struct exec_thread *me;
static __thread sigjmp_buf *fault_jmp;
static __thread volatile sig_atomic_t fault_signo;
static __thread void *fault_addr;
static __thread bool fault_addr_wild; /* outside the address space: fault_addr decoded, or 0 */
static __thread int fault_call;       /* SIGSYS: the forbidden call */
static __thread unsigned fault_arch;
static __thread const char *fault_what; /* no signal: what the kernel called (fork()) */
static __thread bool sandboxed;

/*
 * A bug of ours on a thread in the sandbox, where no signal's action can be set back to its
 * default (abort()'s and the faults' are ours): SIGKILL, the one left.
 */
static __attribute__((noreturn)) void die(void)
{
	for (;;)
		(void)syscall(SYS_tgkill, getpid(), gettid(), SIGKILL);
}

/*
 * An access outside the address space (x86-64's non-canonical addresses) is a general
 * protection fault, which the kernel reports with SI_KERNEL and no address: the address is
 * read from the instruction (worker/host/fault-addr.c).
 */
static void wild_address(void *ctx)
{
#if defined(__x86_64__)
	static const int order[WRK_X86_REGS] = { REG_RAX, REG_RCX, REG_RDX, REG_RBX,
						 REG_RSP, REG_RBP, REG_RSI, REG_RDI,
						 REG_R8,  REG_R9,  REG_R10, REG_R11,
						 REG_R12, REG_R13, REG_R14, REG_R15 };
	const ucontext_t *uc = ctx;
	uint64_t regs[WRK_X86_REGS], a;
	uintptr_t pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
	/* The instruction ran, so its bytes are mapped; those after it in the page are too. */
	size_t len = MIN((size_t)15, 4096 - (pc & 4095));

	for (unsigned i = 0; i < WRK_X86_REGS; i++)
		regs[i] = (uint64_t)uc->uc_mcontext.gregs[order[i]];
	fault_addr_wild = true;
	if (wrk_fault_operand((const uint8_t *)pc, len, regs, &a) == 0)
		fault_addr = (void *)(uintptr_t)a;
#endif
}

static void on_fault(int sig, siginfo_t *si, void *ctx)
{
	sigjmp_buf *jb;

	if (!fault_jmp) {
		/* Not in a kernel: a bug of ours. Crash as we would have (in the sandbox, with
		 * no sigaction or raise() there, by die()). */
		if (sandboxed)
			die();
		(void)signal(sig, SIG_DFL);
		(void)raise(sig);
		return;
	}
	fault_signo = sig;
	fault_addr = si->si_addr;
	fault_addr_wild = false;
	fault_what = NULL;
	if (sig == SIGSYS) {
		fault_call = si->si_syscall;
		fault_arch = si->si_arch;
	} else if ((sig == SIGSEGV || sig == SIGBUS) && si->si_code == SI_KERNEL) {
		wild_address(ctx);
	}
	/* A fault on the way out (in a sanitizer's siglongjmp) is a bug of ours, not a loop. */
	jb = fault_jmp;
	fault_jmp = NULL;
	siglongjmp(*jb, 1);
}

/* A kernel called what would take the worker with it: a fault, as a forbidden call is. */
static void kernel_escapes(const char *what)
{
	sigjmp_buf *jb = fault_jmp;

	if (!jb)
		return;
	fault_jmp = NULL;
	fault_signo = 0;
	fault_what = what;
	siglongjmp(*jb, 1);
}

/*
 * fork() runs these first, before it takes a lock or blocks a signal: a kernel's fork would
 * copy the worker (and its clients' work) into a child. exit() runs the exit handlers first
 * (the last registered first), each once: so every thread that runs kernels registers one
 * as it starts (host_exec_thread_begin()), and kernels on all of them at once calling exit()
 * each meet one.
 */
static void on_fork_prepare(void)
{
	kernel_escapes("fork()");
}

static void on_exit_called(void)
{
	kernel_escapes("exit()");
}

static void escape_hooks_install(void)
{
	(void)pthread_atfork(on_fork_prepare, NULL, NULL);
}

/* SIGSYS is a kernel's forbidden system call in the sandbox, SIGABRT its abort() (or a
 * failed assert()): faults like the others. fork() and exit() are caught before they act. */
int host_exec_faults_install(void)
{
	static const int sigs[] = { SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGSYS, SIGABRT };
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	struct sigaction sa = { 0 };

	(void)pthread_once(&once, escape_hooks_install);
	sa.sa_sigaction = on_fault;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
	sigemptyset(&sa.sa_mask);
	for (unsigned i = 0; i < ARRAY_SIZE(sigs); i++)
		if (sigaction(sigs[i], &sa, NULL) < 0)
			return -errno;
	return 0;
}

/* ---- a CPU thread that runs kernels ---- */

/* Its fibers' stacks (CUDA C++ blocks), made as a block first needs them, kept for the next. */
static __thread char **fiber_stacks;

static void *fiber_stack(uint32_t i)
{
	const size_t size = GUARD + GPUX_CU_STACK_BYTES + COLOURS;
	char *p;

	if (i >= FIBERS_MAX)
		return NULL;
	if (!fiber_stacks && !(fiber_stacks = calloc(FIBERS_MAX, sizeof(*fiber_stacks))))
		return NULL;
	if (!fiber_stacks[i]) {
		p = mmap(NULL, size, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
		if (p == MAP_FAILED)
			return NULL;
		/* An overflow takes SIGSEGV (on the fault stack), not another fiber's stack. */
		if (mprotect(p, GUARD, PROT_NONE) < 0) {
			(void)munmap(p, size);
			return NULL;
		}
		fiber_stacks[i] = p;
	}
	return fiber_stacks[i] + size - (i * 64) % COLOURS;
}

static void me_free(void)
{
	if (!me)
		return;
	if (me->launch)
		(void)munmap(me->launch, LAUNCH_PAGE);
	if (me->launch_ro)
		(void)munmap(me->launch_ro, LAUNCH_PAGE);
	free(me);
	me = NULL;
}

void host_exec_thread_begin(stack_t *ss)
{
	sigset_t all;

	/* Signals are the loop's business (signalfd), not this thread's. */
	sigfillset(&all);
	sigdelset(&all, SIGSEGV);
	sigdelset(&all, SIGBUS);
	sigdelset(&all, SIGFPE);
	sigdelset(&all, SIGILL);
	sigdelset(&all, SIGSYS);
	(void)pthread_sigmask(SIG_BLOCK, &all, NULL);
	(void)atexit(on_exit_called);
	/* A kernel that overflows its stack still reaches the fault handler. */
	*ss = (stack_t){ .ss_size = FAULT_STACK, .ss_sp = malloc(FAULT_STACK) };
	if (ss->ss_sp)
		(void)sigaltstack(ss, NULL);
	/* The launch page: a second mapping of the same shared page (old size 0), read-only.
	 * Without it (no memory), this thread runs no kernel. */
	me = aligned_alloc(64, ALIGN_UP(sizeof(*me), 64));
	if (me) {
		void *rw = mmap(NULL, LAUNCH_PAGE, PROT_READ | PROT_WRITE,
				MAP_SHARED | MAP_ANONYMOUS, -1, 0);
		void *ro =
			rw == MAP_FAILED ? MAP_FAILED : mremap(rw, 0, LAUNCH_PAGE, MREMAP_MAYMOVE);

		me->launch = rw == MAP_FAILED ? NULL : rw;
		me->launch_ro = ro == MAP_FAILED ? NULL : ro;
		if (!me->launch_ro || mprotect(me->launch_ro, LAUNCH_PAGE, PROT_READ) < 0)
			me_free();
	}
}

void host_exec_thread_end(stack_t *ss)
{
	me_free();
	if (ss->ss_sp) {
		ss->ss_flags = SS_DISABLE;
		(void)sigaltstack(ss, NULL);
		free(ss->ss_sp);
	}
	for (unsigned i = 0; fiber_stacks && i < FIBERS_MAX; i++)
		if (fiber_stacks[i])
			(void)munmap(fiber_stacks[i], GUARD + GPUX_CU_STACK_BYTES + COLOURS);
	free(fiber_stacks);
	fiber_stacks = NULL;
}

bool host_exec_caged(void)
{
	return sandboxed;
}

void host_exec_park(void)
{
	static int never;

	for (;;)
		(void)syscall(SYS_futex, &never, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
}

int host_exec_sandbox_enter(struct host_exec *x)
{
	int r;

	if (!x->sandbox || sandboxed)
		return 0;
	r = wrk_sandbox_enter(x->w->done_fd);
	if (r == 0)
		sandboxed = true;
	return r;
}

/* ---- blocks ---- */

static void job_fail(struct host_exec *x, struct exec_job *j, gpux_status status, char *error,
		     bool fatal)
{
	(void)pthread_mutex_lock(&x->lock);
	/* The first failure, unless a fault comes after it: that one says why the worker goes. */
	if (!j->status || (fatal && !j->fatal)) {
		free(j->error);
		j->status = status;
		j->error = error;
		j->fatal = fatal;
		error = NULL;
	}
	(void)pthread_mutex_unlock(&x->lock);
	free(error);
	atomic_store(&j->stop, true);
}

/*
 * The next blocks of job j on this thread until none is left or one failed: a C kernel's
 * launch written in hl, seen through kl, its arguments in kparams; or CUDA C++'s in cl.
 */
static void blocks_loop(struct host_exec *x, struct exec_job *j, struct gpux_host_launch *hl,
			const struct gpux_host_launch *kl, void *const *kparams,
			struct gpux_cu_launch *cl)
{
	struct wrk_req *r = j->r;
	const uint64_t gx = r->grid[0], gxy = gx * r->grid[1];
	int rc;

	while (!atomic_load_explicit(&j->stop, memory_order_relaxed)) {
		uint64_t b = atomic_fetch_add(&j->next_block, j->chunk);
		uint64_t end = MIN(b + j->chunk, j->nblocks);

		if (b >= j->nblocks)
			return;
		for (; b < end; b++) {
			uint32_t bx = (uint32_t)(b % gx), by = (uint32_t)(b % gxy / gx);
			uint32_t bz = (uint32_t)(b / gxy);

			if (!cl) {
				hl->block_idx = (struct gpux_dim3){ bx, by, bz };
				((gpux_host_kernel_fn *)r->kernel->info.fn)(kl, kparams);
				continue;
			}
			cl->block_idx = (struct gpux_cu_dim3){ bx, by, bz };
			rc = ((gpux_cu_block_fn *)r->kernel->info.fn)(cl, r->params);
			if (rc != 0) {
				cl->error[sizeof(cl->error) - 1] = '\0';
				job_fail(x, j,
					 rc == GPUX_CU_REFUSED ? GPUX_E_INVAL : GPUX_E_KERNEL_FAULT,
					 wrk_strdup_printf("kernel \"%s\": %s", r->name, cl->error),
					 false);
				return;
			}
		}
	}
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

/* What a kernel is told of its fault; to free. */
static char *fault_text(const struct wrk_req *r)
{
	uintptr_t a = (uintptr_t)fault_addr, ro = me ? (uintptr_t)me->launch_ro : 0;
	unsigned in = fault_signo == SIGSEGV ? in_arg_at(r, fault_addr) : UINT_MAX;

	if (fault_what)
		return wrk_strdup_printf("kernel \"%s\" called %s, which a host kernel may not: "
					 "it would %s",
					 r->name, fault_what,
					 strcmp(fault_what, "fork()") == 0
						 ? "copy the worker and its clients' work"
						 : "end the worker");
	if (fault_signo == SIGSYS)
		return wrk_sandbox_fault_text(r->name, fault_call, fault_arch);
	if (fault_signo == SIGSEGV && ro && a >= ro && a < ro + LAUNCH_PAGE)
		return wrk_strdup_printf("kernel \"%s\": %s at address %p: it wrote its launch "
					 "description (gpux or gpux_args), which is read-only",
					 r->name, strsignal(fault_signo), fault_addr);
	if (in != UINT_MAX)
		return wrk_strdup_printf("kernel \"%s\" wrote to argument %u, an input: IN "
					 "arguments are read-only (pass it as INOUT to write it)",
					 r->name, in);
	if (fault_addr_wild && !fault_addr)
		return wrk_strdup_printf("kernel \"%s\": %s at an address outside the address "
					 "space (which the processor does not report)",
					 r->name, strsignal(fault_signo));
	return wrk_strdup_printf("kernel \"%s\": %s at address %p%s", r->name,
				 strsignal(fault_signo), fault_addr,
				 fault_addr_wild ? " (outside the address space)" : "");
}

/* blocks_loop() with its faults caught: whether one faulted (this thread must run no kernel
 * again). The jump buffer is off the stack the kernel runs on. */
static bool blocks_guarded(struct host_exec *x, struct exec_job *j, struct gpux_host_launch *hl,
			   const struct gpux_host_launch *kl, void *const *kparams,
			   struct gpux_cu_launch *cl)
{
	if (sigsetjmp(me->jb, 1) == 0) {
		fault_jmp = &me->jb;
		blocks_loop(x, j, hl, kl, kparams, cl);
		fault_jmp = NULL;
		return false;
	}
	fault_jmp = NULL;
	job_fail(x, j, GPUX_E_KERNEL_FAULT, fault_text(j->r), true);
	return true;
}

/* This thread's part of job j: whether a kernel faulted here. */
static bool blocks_run(struct host_exec *x, struct exec_job *j)
{
	struct wrk_req *r = j->r;
	struct gpux_host_launch hl = {
		.grid_dim = { r->grid[0], r->grid[1], r->grid[2] },
		.block_dim = { r->block[0], r->block[1], r->block[2] },
		.shared_bytes = r->shared_bytes,
	};
	struct gpux_host_launch *page = NULL;
	struct gpux_cu_launch *cl = NULL;
	void **params = NULL;
	bool faulted;

	if (!me) {
		job_fail(x, j, GPUX_E_NOMEM, strdup("no memory to run a block"), false);
		return false;
	}
	if (j->cxx) {
		cl = calloc(1, sizeof(*cl));
		if (!cl) {
			job_fail(x, j, GPUX_E_NOMEM, strdup("no memory to run a block"), false);
			return false;
		}
		*cl = (struct gpux_cu_launch){
			.abi = GPUX_CU_ABI,
			.grid_dim = { r->grid[0], r->grid[1], r->grid[2] },
			.block_dim = { r->block[0], r->block[1], r->block[2] },
			.shared_bytes = r->shared_bytes,
			.stack = fiber_stack,
		};
	} else if (r->shared_bytes) {
		hl.shared = aligned_alloc(64, ALIGN_UP((size_t)r->shared_bytes, 64));
		if (!hl.shared) {
			job_fail(x, j, GPUX_E_NOMEM,
				 strdup("no memory for the block's shared memory"), false);
			return false;
		}
	}
	if (!j->cxx) {
		size_t at = 0;

		/* The launch page gets the description and the argument array, which points at
		 * this thread's copies of the values; the kernel sees the page read-only. */
		page = (struct gpux_host_launch *)me->launch;
		params = (void **)(me->launch + sizeof(*page));
		*page = hl;
		for (unsigned i = 0; i < r->nargs; i++) {
			size_t size = r->args[i].kind == GPUX_ARG_SCALAR ? r->args[i].size
									 : sizeof(void *);

			memcpy(me->values + at, r->params[i], size);
			params[i] = me->values + at;
			at += ALIGN_UP(size, 16);
		}
	}
	faulted = blocks_guarded(x, j, page, (const struct gpux_host_launch *)me->launch_ro,
				 (void *const *)(me->launch_ro + sizeof(hl)), cl);
	free(hl.shared);
	free(cl);
	return faulted;
}

/* ---- the helpers ---- */

static void *helper_main(void *arg)
{
	struct exec_helper *h = arg;
	struct host_exec *x = h->x;
	stack_t ss;

	host_exec_thread_begin(&ss);
	(void)pthread_mutex_lock(&x->lock);
	for (;;) {
		struct exec_job *j = NULL;
		bool faulted;

		/* Of the jobs with blocks left, the newest of the highest priority. */
		for (struct exec_job *k = x->jobs; k; k = k->next)
			if (atomic_load(&k->next_block) < k->nblocks && (!j || k->prio > j->prio))
				j = k;
		if (x->stop)
			break;
		if (!j) {
			(void)pthread_cond_wait(&x->wake, &x->lock);
			continue;
		}
		/* Before the first kernel, as a slot thread does; a thread that cannot be
		 * sandboxed runs none. */
		if (host_exec_sandbox_enter(x) < 0)
			break;
		j->helpers++;
		(void)pthread_mutex_unlock(&x->lock);
		faulted = blocks_run(x, j);
		(void)pthread_mutex_lock(&x->lock);
		if (--j->helpers == 0)
			(void)pthread_cond_broadcast(&x->left);
		if (faulted)
			break;
	}
	/* Said to host_exec_free(); in the sandbox, where its end would be refused, it parks. Once
	 * the lock goes, h and x may be freed (a caged helper is detached, not joined): only this
	 * thread's own flag is read after it. */
	h->ended = true;
	h->caged = sandboxed;
	(void)pthread_cond_broadcast(&x->left);
	(void)pthread_mutex_unlock(&x->lock);
	host_exec_thread_end(&ss);
	if (sandboxed)
		host_exec_park();
	return NULL;
}

/* The CPU threads a launch may use: $GPUX_HOST_THREADS, else the CPUs this process may run
 * on. */
static unsigned threads_wanted(void)
{
	const char *e = getenv("GPUX_HOST_THREADS");
	cpu_set_t set;

	if (e && *e) {
		unsigned long v = strtoul(e, NULL, 10);

		return (unsigned)MAX(1ul, MIN(v, (unsigned long)HELPERS_MAX + 1));
	}
	if (sched_getaffinity(0, sizeof(set), &set) < 0)
		return 1;
	return (unsigned)MAX(1, MIN(CPU_COUNT(&set), (int)HELPERS_MAX + 1));
}

int host_exec_new(struct wrk *w, bool sandbox, struct host_exec **ret)
{
	struct host_exec *x = calloc(1, sizeof(*x));
	unsigned want = threads_wanted() - 1;
	int r;

	if (!x)
		return -ENOMEM;
	x->w = w;
	x->sandbox = sandbox;
	(void)pthread_mutex_init(&x->lock, NULL);
	(void)pthread_cond_init(&x->wake, NULL);
	(void)pthread_cond_init(&x->left, NULL);
	for (; x->nhelpers < want; x->nhelpers++) {
		struct exec_helper *h = &x->helpers[x->nhelpers];

		h->x = x;
		r = pthread_create(&h->thread, NULL, helper_main, h);
		if (r != 0) {
			host_exec_free(x);
			return -r;
		}
	}
	*ret = x;
	return 0;
}

void host_exec_free(struct host_exec *x)
{
	if (!x)
		return;
	(void)pthread_mutex_lock(&x->lock);
	x->stop = true;
	(void)pthread_cond_broadcast(&x->wake);
	for (unsigned i = 0; i < x->nhelpers; i++)
		while (!x->helpers[i].ended)
			(void)pthread_cond_wait(&x->left, &x->lock);
	(void)pthread_mutex_unlock(&x->lock);
	/* A caged helper parks for good: it goes with the process. */
	for (unsigned i = 0; i < x->nhelpers; i++) {
		bool caged;

		(void)pthread_mutex_lock(&x->lock);
		caged = x->helpers[i].caged;
		(void)pthread_mutex_unlock(&x->lock);
		if (caged)
			(void)pthread_detach(x->helpers[i].thread);
		else
			(void)pthread_join(x->helpers[i].thread, NULL);
	}
	(void)pthread_mutex_destroy(&x->lock);
	(void)pthread_cond_destroy(&x->wake);
	(void)pthread_cond_destroy(&x->left);
	free(x);
}

bool host_exec_run(struct host_exec *x, struct wrk_req *r, bool cxx)
{
	struct exec_job j = {
		.r = r,
		.prio = x->w->slots[r->slot].prio,
		.cxx = cxx,
		.nblocks = (uint64_t)r->grid[0] * r->grid[1] * r->grid[2],
	};
	bool share = x->nhelpers > 0 && j.nblocks > 1, faulted;
	uint64_t t0 = mono_ns();

	/* A few blocks at a time: fewer trips to the counter, the ends still even. */
	j.chunk = MAX(1u, j.nblocks / (8u * (x->nhelpers + 1)));
	atomic_init(&j.next_block, 0);
	atomic_init(&j.stop, false);
	if (share) {
		(void)pthread_mutex_lock(&x->lock);
		j.next = x->jobs;
		x->jobs = &j;
		(void)pthread_cond_broadcast(&x->wake);
		(void)pthread_mutex_unlock(&x->lock);
	}
	faulted = blocks_run(x, &j);
	if (share) {
		struct exec_job **p;

		(void)pthread_mutex_lock(&x->lock);
		for (p = &x->jobs; *p != &j; p = &(*p)->next)
			;
		*p = j.next;
		while (j.helpers)
			(void)pthread_cond_wait(&x->left, &x->lock);
		(void)pthread_mutex_unlock(&x->lock);
	}
	r->t_end = mono_ns();
	r->device_ns = r->t_end - t0;
	r->status = j.status;
	r->error = j.error;
	return faulted || j.fatal;
}
