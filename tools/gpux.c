/* SPDX-License-Identifier: MIT */
/* tools/gpux.c: the gpux command: its subcommands, and the conventions they share. */
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tools.h"

int tool_fail(const char *what, const char *why)
{
	(void)fprintf(stderr, "gpux: %s: %s\n", what, why);
	return TOOL_FAIL;
}

int tool_connect_fail(gpux_status st)
{
	const char *why = gpux_connect_error();

	(void)fprintf(stderr, "gpux: connect: %s\n", *why ? why : gpux_strerror(st));
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

void tool_usage_error(const char *usage, const char *fmt, ...)
{
	va_list ap;

	(void)fputs("gpux: ", stderr);
	va_start(ap, fmt);
	(void)vfprintf(stderr, fmt, ap);
	va_end(ap);
	(void)fprintf(stderr, "\n%s", usage);
	exit(TOOL_USAGE);
}

int tool_getopt(int argc, char **argv, const struct option *opts, const char *usage)
{
	int c, idx = -1;

	opterr = 0;
	c = getopt_long(argc, argv, ":h", opts, &idx);
	if (c == 'h') {
		(void)fputs(usage, stdout);
		exit(TOOL_OK);
	}
	if (c == ':')
		tool_usage_error(usage, "%s: option %s needs a value", argv[0], argv[optind - 1]);
	if (c == '?')
		tool_usage_error(usage, "%s: unknown option %s", argv[0], argv[optind - 1]);
	return c;
}

uint64_t tool_parse_u64(const char *cmd, const char *usage, const char *opt, const char *s,
			uint64_t min, uint64_t max)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v < min || v > max)
		tool_usage_error(usage, "%s: %s: bad value \"%s\" (%llu to %llu)", cmd, opt, s,
				 (unsigned long long)min, (unsigned long long)max);
	return v;
}

/* Whether dir/name (dir: its first dir_len bytes) is a program we may run; its path in buf. */
static bool program_at(char *buf, size_t len, const char *dir, size_t dir_len, const char *name)
{
	int n = snprintf(buf, len, "%.*s/%s", (int)dir_len, dir, name);

	return n > 0 && (size_t)n < len && access(buf, X_OK) == 0;
}

int tool_daemon_path(char *buf, size_t len)
{
	const char *env = getenv("GPUX_DAEMON"), *path = getenv("PATH");
	char self[PATH_MAX];
	ssize_t n;

	if (env && *env) {
		(void)snprintf(buf, len, "%s", env);
		return 0;
	}
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n > 0) {
		const char *dir;

		self[n] = '\0';
		dir = dirname(self);
		if (program_at(buf, len, dir, strlen(dir), "gpuxd"))
			return 0;
	}
	if (program_at(buf, len, GPUX_SBINDIR, strlen(GPUX_SBINDIR), "gpuxd"))
		return 0;
	for (const char *p = path; p && *p;) {
		size_t k = strcspn(p, ":");

		/* An empty entry is the current directory, as for execvp(). */
		if (program_at(buf, len, k ? p : ".", k ? k : 1, "gpuxd"))
			return 0;
		p += k + (p[k] == ':');
	}
	(void)snprintf(buf, len, "%s/gpuxd", GPUX_SBINDIR);
	return -ENOENT;
}

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *usage;
	const char *what;
} commands[] = {
	{ "status", tool_status, TOOL_USAGE_STATUS, "what gpuxd and its workers are doing" },
	{ "top", tool_top, TOOL_USAGE_TOP, "devices and clients, live" },
	{ "compile", tool_compile, TOOL_USAGE_COMPILE, "compile a module through a worker" },
	{ "demo", tool_demo, TOOL_USAGE_DEMO, "run a kernel from forked children, and check it" },
	{ "bench", tool_bench, TOOL_USAGE_BENCH,
	  "gpux against in-process CUDA, scenario by scenario" },
	{ "soak", tool_soak, TOOL_USAGE_SOAK,
	  "clients at work while workers and gpuxd are killed" },
	{ "version", NULL, "usage: gpux version\n", "gpux's version" },
	{ "help", NULL, "usage: gpux help [COMMAND]\n", "this text, or a command's" },
};

static void usage(FILE *f)
{
	(void)fprintf(f, "usage: gpux COMMAND [OPTIONS]   (gpux COMMAND --help for its options)\n"
			 "       gpux --version | --help\n\ncommands:\n");
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
		(void)fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].what);
	(void)fprintf(f, "\nSee gpux(1).\n");
}

int main(int argc, char **argv)
{
	const char *cmd = argc >= 2 ? argv[1] : NULL;

	if (!cmd) {
		(void)fprintf(stderr, "gpux: no command given\n");
		usage(stderr);
		return TOOL_USAGE;
	}
	if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) {
		printf("gpux %s\n", gpux_version());
		return TOOL_OK;
	}
	if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 ||
	    (strcmp(cmd, "help") == 0 && argc == 2)) {
		usage(stdout);
		return TOOL_OK;
	}
	if (strcmp(cmd, "help") == 0)
		cmd = argv[2];
	for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
		if (strcmp(cmd, commands[i].name) != 0)
			continue;
		if (argv[1] != cmd || !commands[i].run) {
			(void)fputs(commands[i].usage, stdout);
			return TOOL_OK;
		}
		return commands[i].run(argc - 1, argv + 1);
	}
	(void)fprintf(stderr, "gpux: unknown command \"%s\"\n", cmd);
	usage(stderr);
	return TOOL_USAGE;
}
