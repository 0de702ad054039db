/* SPDX-License-Identifier: MIT */
/* tools/gpux.c: the gpux command: status, demo, bench, soak. */
#include <string.h>
#include <time.h>

#include "tools.h"

int tool_fail(const char *what, const char *why)
{
	(void)fprintf(stderr, "gpux: %s: %s\n", what, why);
	return TOOL_FAIL;
}

uint64_t tool_now(void)
{
	struct timespec ts;

	(void)clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

double tool_ms(uint64_t ns)
{
	return (double)ns / 1e6;
}

int tool_cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void usage(FILE *f)
{
	(void)fprintf(f, "usage: gpux status [--socket PATH] [--json]\n"
			 "       gpux demo [--socket PATH] [--children N] [--elements N]\n"
			 "       gpux bench [--socket PATH] [--json] [--quick] [--only SCENARIOS]\n"
			 "                  (scenarios: rtt bw fork cached modules clients gpus)\n"
			 "       gpux soak [--minutes N] [--clients N] [--seed N]\n"
			 "                 [--watchdog-s S] [--rss-slack-mib N] [--ops LIST]\n"
			 "                 [--keep]\n"
			 "       gpux version\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return TOOL_USAGE;
	}
	if (strcmp(argv[1], "status") == 0)
		return tool_status(argc - 1, argv + 1);
	if (strcmp(argv[1], "demo") == 0)
		return tool_demo(argc - 1, argv + 1);
	if (strcmp(argv[1], "bench") == 0)
		return tool_bench(argc - 1, argv + 1);
	if (strcmp(argv[1], "soak") == 0)
		return tool_soak(argc - 1, argv + 1);
	if (strcmp(argv[1], "version") == 0) {
		printf("gpux %s\n", gpux_version());
		return TOOL_OK;
	}
	if (strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0) {
		usage(stdout);
		return TOOL_OK;
	}
	usage(stderr);
	return TOOL_USAGE;
}
