/* SPDX-License-Identifier: MIT */
/* worker/host-exec.c: the host back end's launches: their blocks over the worker's CPU threads. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <setjmp.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <gpux/cuda-host/gpux_cuda_abi.h>
#include <gpux/host-kernel.h>

#include "host-exec.h"
#include "macro.h"
#include "sandbox.h"

#define HELPERS_MAX 255u
#define FAULT_STACK (64 * 1024)
#define FIBERS_MAX 1024u /* the threads of a block */
#define GUARD (64 * 1024) /* below each fiber's stack: more than a frame skips */
/* Fiber i's stack begins (i % 1024) cache lines below its area's top: areas are a multiple
 * of the caches' periods apart, and tops at one offset would all fall in the same sets
 * (measured: a barrier of 1024 threads 11 ns a thread, 7.5 ns with this). */
#define COLOURS (64 * 1024)

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

struct host_exec {
	struct wrk *w;
	bool sandbox;
	unsigned nhelpers;
	pthread_t threads[HELPERS_MAX];
	pthread_mutex_t lock;
	pthread_cond_t wake; /* helpers: a job came, or stop */
	pthread_cond_t left; /* runners: helpers left their job */
	struct exec_job *jobs;
	bool stop;
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
int host_exec_faults_install(void)
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
	/* A kernel that overflows its stack still reaches the fault handler. */
	*ss = (stack_t){ .ss_size = FAULT_STACK, .ss_sp = malloc(FAULT_STACK) };
	if (ss->ss_sp)
		(void)sigaltstack(ss, NULL);
}

void host_exec_thread_end(stack_t *ss)
{
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

/* The next blocks of job j on this thread until none is left or one failed. */
static void blocks_loop(struct host_exec *x, struct exec_job *j, struct gpux_host_launch *hl,
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
				((gpux_host_kernel_fn *)r->kernel->info.fn)(hl, r->params);
				continue;
			}
			cl->block_idx = (struct gpux_cu_dim3){ bx, by, bz };
			rc = ((gpux_cu_block_fn *)r->kernel->info.fn)(cl, r->params);
			if (rc != 0) {
				cl->error[sizeof(cl->error) - 1] = '\0';
				job_fail(x, j, rc == GPUX_CU_REFUSED ? GPUX_E_INVAL : GPUX_E_KERNEL_FAULT,
					 wrk_strdup_printf("kernel \"%s\": %s", r->name, cl->error),
					 false);
				return;
			}
		}
	}
}

/* blocks_loop() with its faults caught: whether one faulted (this thread must run no kernel
 * again). */
static bool blocks_guarded(struct host_exec *x, struct exec_job *j, struct gpux_host_launch *hl,
			   struct gpux_cu_launch *cl)
{
	sigjmp_buf jb;

	if (sigsetjmp(jb, 1) == 0) {
		fault_jmp = &jb;
		blocks_loop(x, j, hl, cl);
		fault_jmp = NULL;
		return false;
	}
	fault_jmp = NULL;
	job_fail(x, j, GPUX_E_KERNEL_FAULT,
		 fault_signo == SIGSYS
			 ? wrk_sandbox_fault_text(j->r->name, fault_call, fault_arch)
			 : wrk_strdup_printf("kernel \"%s\": %s at address %p", j->r->name,
					     strsignal(fault_signo), fault_addr),
		 true);
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
	struct gpux_cu_launch *cl = NULL;
	bool faulted;

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
	faulted = blocks_guarded(x, j, &hl, cl);
	free(hl.shared);
	free(cl);
	return faulted;
}

/* ---- the helpers ---- */

static void *helper_main(void *arg)
{
	struct host_exec *x = arg;
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
	(void)pthread_mutex_unlock(&x->lock);
	host_exec_thread_end(&ss);
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
		r = pthread_create(&x->threads[x->nhelpers], NULL, helper_main, x);
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
	(void)pthread_mutex_unlock(&x->lock);
	for (unsigned i = 0; i < x->nhelpers; i++)
		(void)pthread_join(x->threads[i], NULL);
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
