/* SPDX-License-Identifier: MIT */
/* tests/e2e.h: a real gpuxd on a temporary socket, for end-to-end tests. */
#pragma once

#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cmocka.h>

#include <gpux/gpux.h>

#include "macro.h"
#include "proto.h"

struct test_daemon {
	pid_t pid;
	char dir[256];
	char sock[300];
	char cache[300];
	char log[300];
};

/*
 * Start gpuxd ($GPUX_DAEMON) on a socket in a new temporary directory, with its own module
 * cache, the extra arguments given (NULL-terminated), and wait until every device is ready.
 * Asserts on failure.
 */
void test_daemon_start(struct test_daemon *d, const char *const *args);

/* test_daemon_start(), listening on `sock` rather than in the temporary directory. */
void test_daemon_start_at(struct test_daemon *d, const char *sock, const char *const *args);

/*
 * test_daemon_start() for a gpuxd that may refuse to start: 0 once every device is ready, or
 * -ECHILD when gpuxd exited before (its wait status in *ret_status; d->dir and its log are
 * left for test_daemon_stop() to remove). Asserts when neither happens in time.
 */
int test_daemon_try_start(struct test_daemon *d, const char *const *args, int *ret_status);

/* SIGTERM, wait for the exit (asserting it is clean), remove the directory. */
void test_daemon_stop(struct test_daemon *d);

/* Ask gpuxd for its status: devs[] gets at most IPC_DEVICES_MAX entries. 0 or -errno. */
int test_daemon_status(const struct test_daemon *d, struct ipc_status *ret,
		       struct ipc_dev_status *devs);

/* The pid of the gpuxd at sock (one that daemonized, not our child): its worker's parent. */
pid_t test_daemon_pid_at(const char *sock);

/* SIGTERM a gpuxd that is not our child and wait (up to 10 s) until it is gone; asserts. */
void test_stop_pid(pid_t pid);

/* The pid of a device's worker now (asserting it is ready). */
pid_t test_worker_pid(const struct test_daemon *d, uint32_t device);

/* The pid of a worker's compile helper (its child started with --compiler), 0 if it has none. */
pid_t test_compiler_of(pid_t worker);

/* Whether NVRTC can be loaded here: the toolkit's, or $GPUX_NVRTC_LIB. */
bool test_have_nvrtc(void);

/* Wait until the device is ready with a worker of a generation above `generation`. */
void test_wait_generation(const struct test_daemon *d, uint32_t device, uint32_t generation);

/* Wait (up to 10 s) until pred holds for the device's status; asserts it does. */
void test_wait_stats(const struct test_daemon *d, uint32_t device,
		     bool (*pred)(const struct ipc_dev_status *s, void *arg), void *arg);

/* Whether gpuxd's log (its workers' lines too) has, or within 20 s gets, a line holding `what`. */
bool test_log_wait(const struct test_daemon *d, const char *what);

/* Connect a client to the daemon; asserts. */
gpux_ctx *test_connect(const struct test_daemon *d);

/* The host kernels the end-to-end tests use (see e2e.c), and their length. */
extern const char test_host_kernels[];
extern const size_t test_host_kernels_len;

/* Load test_host_kernels; asserts. */
gpux_module *test_load_host_kernels(gpux_ctx *ctx);

/* The host kernel "spin" of m (one thread, busy for ms milliseconds) on a device: submitted
 * (the request in *ret_req), or run to its end. gpux_submit()'s or gpux_run()'s status. */
gpux_status test_spin_submit(gpux_module *m, uint32_t device, uint32_t ms, gpux_req **ret_req);
gpux_status test_spin_run(gpux_module *m, uint32_t device, uint32_t ms);

/* Most e2e tests' state: a daemon, a connection to it, the host kernels, a random seed. */
struct test_env {
	struct test_daemon d;
	gpux_ctx *ctx;
	gpux_module *m;
	uint64_t seed;
};

/* test_daemon_start(args), test_connect() and test_load_host_kernels(); asserts. */
struct test_env *test_env_open(const char *const *args);
void test_env_close(struct test_env *e);

/* cmocka group setups that test_env_open() with no extra arguments, or with two host devices;
 * the teardown test_env_close()s either. */
int test_env_setup(void **state);
int test_env_setup_two_devices(void **state);
int test_env_teardown(void **state);
#define TEST_WITH_ENV(t) cmocka_unit_test_setup_teardown(t, test_env_setup, test_env_teardown)

/* The daemon still runs a kernel ("empty", one thread) for e's client; asserts. */
void test_env_still_serves(const struct test_env *e);

/* Uniform floats in [-1, 1) from a seed. */
void test_fill_random(float *p, size_t n, uint64_t *seed);

/* A launch of one thread per element, 128 threads per block, on a device or queue. */
struct gpux_launch test_launch_1d(uint64_t n, uint32_t device, gpux_queue *q);

/* out = in + 1 (m's "add1": n, in, out) with `in` a cached input, on dev (GPUX_ANY too): the
 * result checked (asserts), the device it ran on returned. */
uint32_t test_add1_cached(gpux_ctx *ctx, gpux_module *m, gpux_buf *in, uint64_t n, uint32_t dev);
/*
 * m's "saxpy" (n, a, x, y, out) over n random floats on a device, x and y IN, out OUT: its
 * status, the result checked (asserts) when it is GPUX_OK.
 */
gpux_status test_saxpy(gpux_ctx *ctx, gpux_module *m, uint32_t device, uint64_t n, uint64_t *seed);

/* ---- a client that speaks the protocol itself, as a hostile one could ---- */

/* A SOCK_SEQPACKET socket connected to the daemon's; asserts. */
int test_raw_connect(const struct test_daemon *d);

/*
 * Say hello to the daemon as the library would and take device 0's channel (its rings and
 * marks offers read and ignored: the channel works by its socket alone). *ret_sup is the connection
 * to gpuxd, which must stay open while the channel is used. Asserts.
 */
int test_raw_channel(const struct test_daemon *d, int *ret_sup);

/* Whether the peer closed the socket within a few seconds (reading what it sent first). */
bool test_closed_by_peer(int fd);

/* How many CUDA devices a worker finds here ($GPUX_WORKER --probe --backend cuda): GPU tests
 * exit 77 (skipped) without one. */
unsigned test_gpu_count(void);

/* Exit 77 (skipped), saying why, when fewer than n CUDA devices are here. For main(). */
void test_gpu_require(unsigned n);

/* A test of its own daemon: the state is a struct test_daemon that the test starts (with the
 * arguments it needs) and that is stopped after it, whatever happened in it. */
int test_daemon_setup(void **state);
int test_daemon_teardown(void **state);
#define TEST_WITH_DAEMON(t)                                                                        \
	cmocka_unit_test_setup_teardown(t, test_daemon_setup, test_daemon_teardown)

/* Send a SEG_ADD of segment `id`, `size` bytes, with fd; asserts. */
void test_send_seg(int chan, uint64_t id, uint64_t size, uint32_t flags, int fd);

/*
 * Receive on a raw channel the DONE of request id, what comes before it dropped: its status,
 * and its text (NUL-terminated, cut to fit) in text[cap]. Fails the test when nothing came
 * for timeout_ms.
 */
int test_raw_done(int chan, uint32_t id, int timeout_ms, char *text, size_t cap);

/* Send n bytes of a message on a raw channel and receive the DONE that answers it (waiting at
 * most 10 s): test_raw_done()'s answer. */
int test_raw_call(int chan, const void *msg, size_t n, char *text, size_t cap);
