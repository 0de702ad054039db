/* SPDX-License-Identifier: MIT */
/* tests/test-e2e-sandbox.c: host kernels of a sandboxed gpuxd compute, and make no system calls. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "e2e.h"
#include "helpers.h"

/* Each kernel writes 1 into its argument once its call returned: it was not stopped. */
static const char kernels[] =
	"#include <fcntl.h>\n"
	"#include <pthread.h>\n"
	"#include <signal.h>\n"
	"#include <stdlib.h>\n"
	"#include <string.h>\n"
	"#include <sys/mman.h>\n"
	"#include <sys/socket.h>\n"
	"#include <sys/syscall.h>\n"
	"#include <time.h>\n"
	"#include <unistd.h>\n"
	"GPUX_HOST_PARAMS(allowed, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(allowed)\n"
	"{\n"
	"	struct timespec ts = { 0, 1000 };\n"
	"	char *big = malloc(8 << 20), *small = malloc(100);\n"
	"	if (!big || !small) return;\n"
	"	memset(big, 1, 8 << 20);\n"
	"	memset(small, 2, 100);\n"
	"	free(big);\n"
	"	free(small);\n"
	"	clock_gettime(CLOCK_MONOTONIC, &ts);\n"
	"	nanosleep(&(struct timespec){ 0, 1000 }, NULL);\n"
	"	*GPUX_ARG(int *, 0) = 1;\n"
	"}\n"
	"GPUX_HOST_PARAMS(opens, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(opens)\n"
	"{\n"
	"	*GPUX_ARG(int *, 0) = open(\"/etc/passwd\", O_RDONLY) >= 0;\n"
	"}\n"
	"GPUX_HOST_PARAMS(sockets, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(sockets)\n"
	"{\n"
	"	*GPUX_ARG(int *, 0) = socket(AF_INET, SOCK_STREAM, 0) >= 0;\n"
	"}\n"
	"GPUX_HOST_PARAMS(kills, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(kills)\n"
	"{\n"
	"	*GPUX_ARG(int *, 0) = kill(1, 0) == 0;\n"
	"}\n"
	/* Calls allowed by their arguments, with others: write() to another fd, mmap() of a file.
	 */
	"GPUX_HOST_PARAMS(writes, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(writes)\n"
	"{\n"
	"	*GPUX_ARG(int *, 0) = write(2, \"x\", 1) == 1;\n"
	"}\n"
	"GPUX_HOST_PARAMS(maps, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(maps)\n"
	"{\n"
	"	*GPUX_ARG(int *, 0) = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, 0, 0) != "
	"MAP_FAILED;\n"
	"}\n"
	/* What would end the worker, or copy it, called from a kernel. */
	"GPUX_HOST_PARAMS(forks, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(forks)\n"
	"{\n"
	"	pid_t p = fork();\n"
	"	if (p == 0) _exit(0);\n"
	"	*GPUX_ARG(int *, 0) = p > 0;\n"
	"}\n"
	"GPUX_HOST_PARAMS(ends_thread, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(ends_thread)\n"
	"{\n"
	"	syscall(SYS_exit, 0);\n"
	"	*GPUX_ARG(int *, 0) = 1;\n"
	"}\n"
	"GPUX_HOST_PARAMS(ends_process, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(ends_process)\n"
	"{\n"
	"	syscall(SYS_exit_group, 0);\n"
	"	*GPUX_ARG(int *, 0) = 1;\n"
	"}\n"
	"GPUX_HOST_PARAMS(exits, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(exits)\n"
	"{\n"
	"	exit(0);\n"
	"}\n"
	"static void *nothing(void *arg) { return arg; }\n"
	"GPUX_HOST_PARAMS(threads, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(threads)\n"
	"{\n"
	"	pthread_t t;\n"
	"	*GPUX_ARG(int *, 0) = pthread_create(&t, NULL, nothing, NULL) == 0;\n"
	"}\n"
	"GPUX_HOST_PARAMS(runs, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(runs)\n"
	"{\n"
	"	*GPUX_ARG(int *, 0) = system(\"true\") == 0;\n"
	"}\n"
	"#ifdef __x86_64__\n"
	/* getpid, by its x32 number, and by the i386 one through int 0x80. */
	"GPUX_HOST_PARAMS(x32, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(x32)\n"
	"{\n"
	"	*GPUX_ARG(int *, 0) = syscall(0x40000000 | SYS_getpid) > 0;\n"
	"}\n"
	"GPUX_HOST_PARAMS(i386, sizeof(int *));\n"
	"GPUX_HOST_KERNEL(i386)\n"
	"{\n"
	"	long r = 20;\n"
	"	__asm__ volatile(\"int $0x80\" : \"+a\"(r) : : \"memory\");\n"
	"	*GPUX_ARG(int *, 0) = r > 0;\n"
	"}\n"
	"#endif\n";

/* A sandboxed daemon, and one module: the kernels of the other tests and those above. */
static int setup(void **state)
{
	static const char *const args[] = { "--host-sandbox", "on", "--slots", "1", NULL };
	struct test_env *e = calloc(1, sizeof(*e));
	size_t n = test_host_kernels_len + sizeof(kernels);
	char *code = malloc(n), *log = NULL;
	gpux_status st;

	assert_non_null(e);
	assert_non_null(code);
	memcpy(code, test_host_kernels, test_host_kernels_len);
	memcpy(code + test_host_kernels_len, kernels, sizeof(kernels));
	test_daemon_start(&e->d, args);
	e->ctx = test_connect(&e->d);
	st = gpux_module_load(e->ctx, GPUX_LANG_HOST, code, n - 1, NULL, &e->m, &log);
	if (st != GPUX_OK)
		fail_msg("loading the kernels: %s\n%s", gpux_strerror(st), log ? log : "");
	free(log);
	free(code);
	e->seed = (uint64_t)mono_ns();
	*state = e;
	return 0;
}

static uint32_t generation(struct test_env *e)
{
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];

	assert_int_equal(test_daemon_status(&e->d, &st, devs), 0);
	return devs[0].generation;
}

/* Run one of the kernels above; its status, and its message in msg. */
static gpux_status run(struct test_env *e, const char *name, int *ret_done, char *msg, size_t len)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	gpux_buf *b;
	gpux_req *r;
	gpux_status st;

	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &b), GPUX_OK);
	{
		struct gpux_arg a = gpux_arg_inout(b, 0, sizeof(int));
		assert_int_equal(gpux_submit(e->m, name, &l, &a, 1, &r), GPUX_OK);
	}
	st = gpux_wait(r, 20000);
	(void)snprintf(msg, len, "%s", gpux_req_message(r));
	gpux_req_free(r);
	*ret_done = *(int *)gpux_buf_data(b);
	gpux_buf_free(b);
	return st;
}

static void test_e2e_sandboxed_kernel_computes(void **state)
{
	struct test_env *e = *state;
	char msg[512];
	int done = 0;
	uint32_t n = 1000;
	float *x, *y, *out, a = 2;
	gpux_buf *bx, *by, *bo;
	uint64_t n64 = n;

	assert_int_equal(run(e, "allowed", &done, msg, sizeof(msg)), GPUX_OK);
	assert_int_equal(done, 1);

	/* The kernels of the other tests, on shared buffers, with the block's shared memory. */
	assert_int_equal(gpux_buf_alloc(e->ctx, n * sizeof(float), &bx), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * sizeof(float), &by), GPUX_OK);
	assert_int_equal(gpux_buf_alloc(e->ctx, n * sizeof(float), &bo), GPUX_OK);
	x = gpux_buf_data(bx);
	y = gpux_buf_data(by);
	out = gpux_buf_data(bo);
	test_fill_random(x, n, &e->seed);
	test_fill_random(y, n, &e->seed);
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n64), GPUX_ARG_VALUE(a),
					   gpux_arg_in(bx, 0, n * sizeof(float)),
					   gpux_arg_in(by, 0, n * sizeof(float)),
					   gpux_arg_out(bo, 0, n * sizeof(float)) };
		struct gpux_launch l = test_launch_1d(n, 0, NULL);

		l.shared_bytes = 4096;
		assert_int_equal(gpux_run(e->m, "saxpy", &l, args, 5), GPUX_OK);
	}
	for (uint32_t i = 0; i < n; i++)
		assert_float_equal(out[i], a * x[i] + y[i], 1e-6);
	gpux_buf_free(bx);
	gpux_buf_free(by);
	gpux_buf_free(bo);
}

/*
 * The request faults, its message saying `says` (and `also`), and the worker restarts; a
 * co-tenant's request queued behind it ends at once, not at its deadline (a minute).
 */
static void faults(struct test_env *e, const char *kernel, const char *says, const char *also)
{
	uint32_t gen = generation(e);
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	gpux_ctx *other = test_connect(&e->d);
	gpux_module *om = test_load_host_kernels(other);
	gpux_req *victim = NULL;
	gpux_buf *b;
	gpux_req *r;
	gpux_status st;
	char msg[512];

	assert_int_equal(gpux_buf_alloc(e->ctx, 64, &b), GPUX_OK);
	{
		struct gpux_arg a = gpux_arg_inout(b, 0, sizeof(int));
		assert_int_equal(gpux_submit(e->m, kernel, &l, &a, 1, &r), GPUX_OK);
	}
	/* Sent before or after the fault, whose worker may be gone already. */
	st = gpux_submit(om, "empty", &l, NULL, 0, &victim);
	if (st != GPUX_OK && st != GPUX_E_WORKER_LOST)
		fail_msg("kernel %s: its co-tenant's submit got %s", kernel, gpux_strerror(st));
	/* Within 10 s, where the deadline is 60. */
	st = gpux_wait(r, 10000);
	(void)snprintf(msg, sizeof(msg), "%s", gpux_req_message(r));
	if (st != GPUX_E_KERNEL_FAULT)
		fail_msg("kernel %s: %s (%s), not a kernel fault", kernel, gpux_strerror(st), msg);
	assert_int_equal(*(int *)gpux_buf_data(b), 0);
	if (!strstr(msg, says) || (also && !strstr(msg, also)))
		fail_msg("kernel %s: message \"%s\" does not say \"%s\"", kernel, msg, says);
	st = victim ? gpux_wait(victim, 10000) : GPUX_OK;
	if (st != GPUX_OK && st != GPUX_E_WORKER_LOST)
		fail_msg("kernel %s: its co-tenant's request got %s", kernel, gpux_strerror(st));
	gpux_req_free(victim);
	gpux_req_free(r);
	gpux_buf_free(b);
	test_wait_generation(&e->d, 0, gen);
	assert_int_equal(gpux_run(e->m, "empty", &l, NULL, 0), GPUX_OK);
	assert_int_equal(gpux_run(om, "empty", &l, NULL, 0), GPUX_OK);
	gpux_module_free(om);
	gpux_disconnect(other);
}

/* A forbidden call is not made: the request faults, naming it, and the worker restarts. */
static void forbidden(struct test_env *e, const char *kernel, const char *says)
{
	faults(e, kernel, says, "sandbox");
}

static void test_e2e_sandboxed_kernel_may_not_open(void **state)
{
	forbidden(*state, "opens", "(openat)");
}

static void test_e2e_sandboxed_kernel_may_not_make_sockets(void **state)
{
	forbidden(*state, "sockets", "(socket)");
}

static void test_e2e_sandboxed_kernel_may_not_signal(void **state)
{
	forbidden(*state, "kills", "(kill)");
}

static void test_e2e_sandboxed_kernel_may_not_write_or_map_files(void **state)
{
	forbidden(*state, "writes", "(write)");
	forbidden(*state, "maps", "(mmap)");
}

static void test_e2e_sandboxed_kernel_may_not_run_programs(void **state)
{
	/* system() starts with a signal action or a clone, whichever the libc has first. */
	forbidden(*state, "runs", "system call");
}

/* Nothing that would end the slot's thread (which would leave its request unanswered). */
static void test_e2e_sandboxed_kernel_may_not_end_its_thread(void **state)
{
	forbidden(*state, "ends_thread", "(exit)");
}

/* Nor the worker: that would be "the worker died", not the kernel's fault. */
static void test_e2e_sandboxed_kernel_may_not_end_the_worker(void **state)
{
	forbidden(*state, "ends_process", "(exit_group)");
	faults(*state, "exits", "exit()", NULL);
}

/* Nor copy it, nor block every signal first, as pthread_create() and posix_spawn() do. */
static void test_e2e_sandboxed_kernel_may_not_fork(void **state)
{
	faults(*state, "forks", "fork()", NULL);
	forbidden(*state, "threads", "blocking signals");
}

static void test_e2e_sandboxed_kernel_may_not_use_other_abis(void **state)
{
#ifdef __x86_64__
	forbidden(*state, "x32", "x32");
	forbidden(*state, "i386", "another architecture");
#else
	skip();
#endif
}

/* Code that would run as a module loads, outside the filter: the module is refused. */
static void test_e2e_sandboxed_module_may_not_run_code_at_load(void **state)
{
	static const struct {
		const char *code, *says;
	} cases[] = {
		{ "#include <stdlib.h>\n#define S(x) #x\n#define STR(x) S(x)\n"
		  "__attribute__((constructor)) static void c(void)\n"
		  "{ system(\"touch \" STR(MARK)); }\nGPUX_HOST_KERNEL(k) {}\n",
		  "constructor" },
		{ "#include <stdlib.h>\n#define S(x) #x\n#define STR(x) S(x)\n"
		  "__attribute__((visibility(\"default\"))) void _init(void) "
		  "{ system(\"touch \" STR(MARK)); }\nGPUX_HOST_KERNEL(k) {}\n",
		  "_init" },
		{ "#include <stdlib.h>\n#define S(x) #x\n#define STR(x) S(x)\n"
		  "GPUX_HOST_KERNEL(k) {}\n"
		  "static void *pick(void) { system(\"touch \" STR(MARK)); return (void *)k; }\n"
		  "__attribute__((visibility(\"default\"), ifunc(\"pick\"))) void j(void);\n",
		  "IFUNC" },
	};
	struct test_env *e = *state;
	char mark[400], opt[420];

	(void)snprintf(mark, sizeof(mark), "%s/ran", e->d.dir);
	(void)snprintf(opt, sizeof(opt), "-DMARK=%s", mark);
	for (unsigned i = 0; i < ARRAY_SIZE(cases); i++) {
		gpux_module *m = NULL;
		char *log = NULL;

		assert_int_equal(gpux_module_load(e->ctx, GPUX_LANG_HOST, cases[i].code,
						  strlen(cases[i].code), opt, &m, &log),
				 GPUX_E_INVAL);
		if (!log || !strstr(log, cases[i].says) || !strstr(log, "sandbox"))
			fail_msg("case %u: log \"%s\" does not say \"%s\"", i, log ? log : "",
				 cases[i].says);
		free(log);
		assert_int_equal(access(mark, F_OK), -1);
	}
}

#define WITH_DAEMON(t) cmocka_unit_test_setup_teardown(t, setup, test_env_teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		/* A daemon each: five deaths within a minute would mark its device failed. */
		WITH_DAEMON(test_e2e_sandboxed_kernel_computes),
		WITH_DAEMON(test_e2e_sandboxed_kernel_may_not_open),
		WITH_DAEMON(test_e2e_sandboxed_kernel_may_not_make_sockets),
		WITH_DAEMON(test_e2e_sandboxed_kernel_may_not_signal),
		WITH_DAEMON(test_e2e_sandboxed_kernel_may_not_write_or_map_files),
		WITH_DAEMON(test_e2e_sandboxed_kernel_may_not_run_programs),
		WITH_DAEMON(test_e2e_sandboxed_kernel_may_not_end_its_thread),
		WITH_DAEMON(test_e2e_sandboxed_kernel_may_not_end_the_worker),
		WITH_DAEMON(test_e2e_sandboxed_kernel_may_not_fork),
		WITH_DAEMON(test_e2e_sandboxed_kernel_may_not_use_other_abis),
		WITH_DAEMON(test_e2e_sandboxed_module_may_not_run_code_at_load),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
