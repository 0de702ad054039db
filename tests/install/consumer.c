/* SPDX-License-Identifier: MIT */
/* tests/install/consumer.c: a program outside gpux, built against an installed gpux with pkg-config. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <gpux/gpux.h>

/* It uses gpux_module_info() and gpux_connect_error(), of 0.2. */
#if !GPUX_CHECK_VERSION(0, 2)
#error "gpux 0.2 or later"
#endif

static const char kernel[] = "GPUX_HOST_PARAMS(twice, 8, sizeof(float *));\n"
			     "GPUX_HOST_KERNEL(twice)\n"
			     "{\n"
			     "\tuint64_t n = GPUX_ARG(uint64_t, 0);\n"
			     "\tfloat *x = GPUX_ARG(float *, 1);\n"
			     "\tGPUX_FOR_EACH_THREAD(t) {\n"
			     "\t\tuint64_t i = GPUX_GLOBAL_X(t);\n"
			     "\t\tif (i < n)\n"
			     "\t\t\tx[i] *= 2;\n"
			     "\t}\n"
			     "}\n";

int main(void)
{
	const uint64_t n = 1000;
	struct gpux_launch l = { .grid = { 8 }, .block = { 128 }, .device = GPUX_ANY };
	struct gpux_module_info info;
	gpux_ctx *ctx;
	gpux_module *m;
	gpux_buf *x;
	char *log = NULL;
	float *p;
	gpux_status st;

	/* The library is the one the headers describe. */
	if (strcmp(gpux_version(), GPUX_VERSION_STRING) != 0) {
		fprintf(stderr, "consumer: library %s, headers %s\n", gpux_version(),
			GPUX_VERSION_STRING);
		return 1;
	}
	st = gpux_connect(NULL, &ctx);
	if (st != GPUX_OK) {
		fprintf(stderr, "consumer: connect: %s\n", gpux_connect_error());
		return 1;
	}
	st = gpux_module_load(ctx, GPUX_LANG_HOST, kernel, strlen(kernel), NULL, &m, &log);
	if (st != GPUX_OK) {
		fprintf(stderr, "consumer: module: %s\n%s", gpux_strerror(st), log ? log : "");
		return 1;
	}
	free(log);
	if (gpux_module_info(m, &info) != GPUX_OK || info.source != GPUX_MODULE_COMPILED)
		return 1;
	if (gpux_buf_alloc(ctx, n * sizeof(float), &x) != GPUX_OK)
		return 1;
	p = gpux_buf_data(x);
	for (uint64_t i = 0; i < n; i++)
		p[i] = (float)i;
	{
		struct gpux_arg args[] = { GPUX_ARG_VALUE(n),
					   gpux_arg_mapped(x, 0, n * sizeof(float)) };

		st = gpux_run(m, "twice", &l, args, 2);
	}
	if (st != GPUX_OK) {
		fprintf(stderr, "consumer: run: %s\n", gpux_strerror(st));
		return 1;
	}
	for (uint64_t i = 0; i < n; i++)
		if (p[i] != 2.0f * (float)i)
			return 1;
	gpux_buf_free(x);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	printf("consumer: gpux %s ran a kernel\n", gpux_version());
	return 0;
}
