/* SPDX-License-Identifier: MIT */
/* tools/demo.c: gpux demo: compile a kernel, run it from forked children on shared buffers, check. */
#include <getopt.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tools.h"

const char tool_kernels_host[] =
	"GPUX_HOST_PARAMS(saxpy, sizeof(uint64_t), sizeof(float), sizeof(float *),\n"
	"                 sizeof(float *), sizeof(float *));\n"
	"GPUX_HOST_KERNEL(saxpy)\n"
	"{\n"
	"\tuint64_t n = GPUX_ARG(uint64_t, 0);\n"
	"\tfloat a = GPUX_ARG(float, 1);\n"
	"\tconst float *x = GPUX_ARG(const float *, 2);\n"
	"\tconst float *y = GPUX_ARG(const float *, 3);\n"
	"\tfloat *out = GPUX_ARG(float *, 4);\n"
	"\n"
	"\tGPUX_FOR_EACH_THREAD(t) {\n"
	"\t\tuint64_t i = GPUX_GLOBAL_X(t);\n"
	"\t\tif (i < n)\n"
	"\t\t\tout[i] = a * x[i] + y[i];\n"
	"\t}\n"
	"}\n"
	"\n"
	"GPUX_HOST_PARAMS(empty);\n"
	"GPUX_HOST_KERNEL(empty)\n"
	"{\n"
	"}\n";

const char tool_kernels_cuda[] =
	"extern \"C\" __global__ void saxpy(unsigned long long n, float a, const float *x,\n"
	"                                  const float *y, float *out)\n"
	"{\n"
	"\tunsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;\n"
	"\tif (i < n)\n"
	"\t\tout[i] = a * x[i] + y[i];\n"
	"}\n"
	"\n"
	"extern \"C\" __global__ void empty()\n"
	"{\n"
	"}\n";

gpux_status tool_load_kernels(gpux_ctx *ctx, gpux_module **ret, char **ret_log, double *ret_ms)
{
	struct gpux_device_info info;
	uint64_t t0 = tool_now();
	gpux_status st = gpux_device_info(ctx, 0, &info);

	if (st < 0)
		return st;
	if (info.backend == GPUX_BACKEND_CUDA)
		st = gpux_module_load(ctx, GPUX_LANG_CUDA, tool_kernels_cuda,
				      sizeof(tool_kernels_cuda) - 1, NULL, ret, ret_log);
	else
		st = gpux_module_load(ctx, GPUX_LANG_HOST, tool_kernels_host,
				      sizeof(tool_kernels_host) - 1, NULL, ret, ret_log);
	*ret_ms = tool_ms(tool_now() - t0);
	return st;
}

/* out[k * n + i] = (k + 1) * x[i] + y[i], for the slice k of one run. */
static gpux_status saxpy(gpux_module *m, uint32_t device, uint64_t n, float a, gpux_buf *x,
			 gpux_buf *y, gpux_buf *out, uint64_t slice)
{
	struct gpux_arg args[5] = {
		GPUX_ARG_VALUE(n),
		GPUX_ARG_VALUE(a),
		gpux_arg_in(x, 0, n * sizeof(float)),
		gpux_arg_in(y, 0, n * sizeof(float)),
		gpux_arg_out(out, slice * n * sizeof(float), n * sizeof(float)),
	};
	struct gpux_launch l = {
		.grid = { (uint32_t)((n + 255) / 256), 1, 1 },
		.block = { 256, 1, 1 },
		.device = device,
	};

	return gpux_run(m, "saxpy", &l, args, 5);
}

static uint64_t check(const float *x, const float *y, const float *out, uint64_t n, float a)
{
	uint64_t bad = 0;

	for (uint64_t i = 0; i < n; i++) {
		float want = a * x[i] + y[i];
		if (!(fabsf(out[i] - want) <= 1e-5f * fabsf(want) + 1e-6f))
			bad++;
	}
	return bad;
}

static int child(gpux_module *m, uint32_t ndev, uint64_t n, unsigned k, gpux_buf *x, gpux_buf *y,
		 gpux_buf *out, gpux_buf *times, uint64_t t_fork)
{
	uint64_t *t = gpux_buf_data(times);
	gpux_status st;

	/* The child uses what it inherited: the module, the buffers, the connection object. */
	st = saxpy(m, k % ndev, n, (float)(k + 1), x, y, out, k);
	t[k] = tool_now() - t_fork;
	if (st < 0) {
		(void)fprintf(stderr, "gpux: demo: child %u: %s\n", k, gpux_strerror(st));
		return 1;
	}
	return check(gpux_buf_data(x), gpux_buf_data(y),
		     (float *)gpux_buf_data(out) + (uint64_t)k * n, n, (float)(k + 1))
		       ? 1
		       : 0;
}

static double empty_round_trip_us(gpux_module *m, unsigned runs)
{
	struct gpux_launch l = { .grid = { 1, 1, 1 }, .block = { 1, 1, 1 } };
	uint64_t *lat = calloc(runs, sizeof(*lat));
	double med;

	if (!lat)
		return -1;
	for (unsigned i = 0; i < runs + runs / 10; i++) {
		uint64_t t0 = tool_now();
		gpux_req *r;
		gpux_status st = gpux_submit(m, "empty", &l, NULL, 0, &r);

		if (st == 0)
			st = gpux_wait(r, -1);
		if (st < 0) {
			(void)fprintf(stderr, "gpux: empty kernel: %s: %s\n", gpux_strerror(st),
				      st == GPUX_E_INVAL ? "bad launch" : gpux_req_message(r));
			free(lat);
			return -1;
		}
		gpux_req_free(r);
		if (i >= runs / 10)
			lat[i - runs / 10] = tool_now() - t0;
	}
	qsort(lat, runs, sizeof(*lat), tool_cmp_u64);
	med = (double)lat[runs / 2] / 1e3;
	free(lat);
	return med;
}

int tool_demo(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "children", required_argument, NULL, 'c' },
		{ "elements", required_argument, NULL, 'n' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *sock = NULL;
	unsigned nchildren = 8, failed = 0;
	uint64_t n = 1 << 20, bad, t0;
	gpux_buf *x, *y, *out, *times;
	struct gpux_device_info info;
	gpux_module *m;
	gpux_ctx *ctx;
	char *log = NULL;
	double compile_ms, first_ms, rt_us;
	uint32_t ndev;
	gpux_status st;
	int c;

	while ((c = tool_getopt(argc, argv, opts, TOOL_USAGE_DEMO)) >= 0) {
		if (c == 's')
			sock = optarg;
		else if (c == 'c')
			nchildren = (unsigned)tool_parse_u64("demo", TOOL_USAGE_DEMO, "--children",
							     optarg, 1, 256);
		else
			n = tool_parse_u64("demo", TOOL_USAGE_DEMO, "--elements", optarg, 1,
					   1ull << 28);
	}
	if (optind != argc)
		tool_usage_error(TOOL_USAGE_DEMO, "demo: unexpected argument \"%s\"", argv[optind]);

	st = gpux_connect(sock, &ctx);
	if (st < 0)
		return tool_connect_fail(st);
	ndev = gpux_device_count(ctx);
	printf("gpux demo: %u device%s\n", ndev, ndev == 1 ? "" : "s");
	for (uint32_t i = 0; i < ndev; i++)
		if (gpux_device_info(ctx, i, &info) == 0)
			printf("  device %u: %s (%s)\n", i, info.name,
			       info.backend == GPUX_BACKEND_CUDA ? "cuda" : "host back end");

	st = tool_load_kernels(ctx, &m, &log, &compile_ms);
	if (st < 0) {
		(void)fprintf(stderr, "%s", log ? log : "");
		free(log);
		return tool_fail("module", gpux_strerror(st));
	}
	free(log);
	printf("  module loaded in %.1f ms (compiled, or from the cache)\n", compile_ms);

	if (gpux_buf_alloc(ctx, n * sizeof(float), &x) < 0 ||
	    gpux_buf_alloc(ctx, n * sizeof(float), &y) < 0 ||
	    gpux_buf_alloc(ctx, (nchildren + 1) * n * sizeof(float), &out) < 0 ||
	    gpux_buf_alloc(ctx, (nchildren + 1) * sizeof(uint64_t), &times) < 0)
		return tool_fail("buffers", "out of memory");
	srand48((long)tool_now());
	for (uint64_t i = 0; i < n; i++) {
		((float *)gpux_buf_data(x))[i] = (float)drand48() * 2.0f - 1.0f;
		((float *)gpux_buf_data(y))[i] = (float)drand48() * 2.0f - 1.0f;
	}

	t0 = tool_now();
	st = saxpy(m, 0, n, (float)(nchildren + 1), x, y, out, nchildren);
	first_ms = tool_ms(tool_now() - t0);
	if (st < 0)
		return tool_fail("saxpy", gpux_strerror(st));
	bad = check(gpux_buf_data(x), gpux_buf_data(y),
		    (float *)gpux_buf_data(out) + (uint64_t)nchildren * n, n,
		    (float)(nchildren + 1));
	printf("  saxpy of %llu floats: %s, %.2f ms\n", (unsigned long long)n,
	       bad ? "WRONG" : "correct", first_ms);
	if (bad)
		return tool_fail("saxpy", "wrong result");

	/* Children: each runs its own saxpy on the inherited buffers, into its own slice. */
	for (unsigned k = 0; k < nchildren; k++) {
		uint64_t tf = tool_now();
		pid_t pid = fork();

		if (pid < 0)
			return tool_fail("fork", "failed");
		if (pid == 0)
			_exit(child(m, ndev, n, k, x, y, out, times, tf));
	}
	for (unsigned k = 0; k < nchildren; k++) {
		int ws;
		if (wait(&ws) < 0 || !WIFEXITED(ws) || WEXITSTATUS(ws) != 0)
			failed++;
	}
	for (unsigned k = 0; k < nchildren; k++)
		if (check(gpux_buf_data(x), gpux_buf_data(y),
			  (float *)gpux_buf_data(out) + (uint64_t)k * n, n, (float)(k + 1)))
			failed++;
	{
		uint64_t *t = gpux_buf_data(times);
		qsort(t, nchildren, sizeof(*t), tool_cmp_u64);
		printf("  %u forked children, each its own saxpy on the shared buffers: %s\n",
		       nchildren, failed ? "FAILED" : "all correct");
		printf("    a child's first result after fork(): median %.2f ms, max %.2f ms\n",
		       tool_ms(t[nchildren / 2]), tool_ms(t[nchildren - 1]));
	}
	if (failed)
		return tool_fail("children", "wrong or failed results");

	rt_us = empty_round_trip_us(m, 1000);
	if (rt_us < 0)
		return tool_fail("empty kernel", "failed");
	printf("  empty kernel round trip: median %.1f us (1000 runs)\n", rt_us);

	gpux_buf_free(times);
	gpux_buf_free(out);
	gpux_buf_free(y);
	gpux_buf_free(x);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	printf("gpux demo: ok\n");
	return TOOL_OK;
}
