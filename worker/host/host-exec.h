/* SPDX-License-Identifier: MIT */
/* worker/host-exec.h: the host back end's launches: their blocks over the worker's CPU threads. */
#pragma once

#include <signal.h>
#include <stdbool.h>

#include "wrk.h"

/*
 * A launch's blocks are shared out between the slot thread that runs the request and a
 * team of helper threads (one fewer than the CPU threads a launch may use: the CPUs the
 * worker may run on, or $GPUX_HOST_THREADS), each taking the next few blocks until none is
 * left. Several slots' launches share the team. Every thread that runs kernels catches
 * their faults (SIGSEGV, SIGBUS, SIGFPE, SIGILL, and SIGSYS from the sandbox's filter, which
 * it enters before its first kernel when the worker has one).
 */
struct host_exec;

/* The fault handlers, for the whole worker: 0 or -errno. */
int host_exec_faults_install(void);

/* The team for a worker w; sandbox: kernels run under worker/sandbox.c's filter. 0 or -errno. */
int host_exec_new(struct wrk *w, bool sandbox, struct host_exec **ret);
/* Stop and join the helpers (none may be in a launch). Accepts NULL. */
void host_exec_free(struct host_exec *x);

/* A thread that will run kernels: signals to the loop only, the fault stack (*ss, for
 * host_exec_thread_end()). */
void host_exec_thread_begin(stack_t *ss);
/* Its fault stack and its fibers' stacks go. */
void host_exec_thread_end(stack_t *ss);

/* Put the calling thread in the sandbox, once: 0 or -errno. */
int host_exec_sandbox_enter(struct host_exec *x);
/* Whether the calling thread is in the sandbox: then it may never end (its exit is refused),
 * and parks instead, for good (host_exec_park()). */
bool host_exec_caged(void);
__attribute__((noreturn)) void host_exec_park(void);

/*
 * Run request r (a launch: its kernel's info.fn a C host kernel, or with `cxx` a CUDA C++
 * block function) over all its blocks; r->status, r->error, r->t_end and r->device_ns say
 * how it went. Returns whether the worker must go (a kernel faulted: anything in this
 * process may be broken).
 */
bool host_exec_run(struct host_exec *x, struct wrk_req *r, bool cxx);
