/* SPDX-License-Identifier: MIT */
/* tools/tools.h: the gpux command's subcommands, and the conventions they share. */
#pragma once

#include <getopt.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <gpux/gpux.h>

/* Exit codes: 0 ok, 1 failure, 2 usage. Failures print one line: "gpux: what: why". */
#define TOOL_OK 0
#define TOOL_FAIL 1
#define TOOL_USAGE 2

#define TOOL_USAGE_STATUS                                                                          \
	"usage: gpux status [--socket PATH] [--json | --prometheus [--per-user]]\n"                \
	"  --socket PATH   gpuxd's socket (default: $GPUX_SOCKET, the per-user one, the\n"         \
	"                  system-wide one)\n"                                                     \
	"  --json          one JSON document on stdout\n"                                          \
	"  --prometheus    the metrics in Prometheus' text format (for node_exporter's\n"          \
	"                  textfile collector)\n"                                                  \
	"  --per-user      and memory by user (uid labels)\n"
#define TOOL_USAGE_COMPILE                                                                         \
	"usage: gpux compile [--socket PATH] [--lang cuda|ptx|cubin|host] [--options OPTS]\n"      \
	"                    [--json] FILE\n"                                                      \
	"  Compile FILE through a worker (as gpux_module_load() does) and print the\n"             \
	"  compiler's log, where the module came from and its cache key.\n"                        \
	"  --lang L        default: from FILE's name (.cu, .ptx, .cubin/.fatbin, .c)\n"            \
	"  --options OPTS  compiler options, space-separated (NVRTC's -D, -U, -std=...)\n"         \
	"  --json          one JSON document on stdout\n"
#define TOOL_USAGE_DEMO                                                                            \
	"usage: gpux demo [--socket PATH] [--children N] [--elements N]\n"                         \
	"  --children N    forked children that run the kernel (1 to 256, default 8)\n"            \
	"  --elements N    elements of the vectors (default 1048576)\n"
#define TOOL_USAGE_BENCH                                                                           \
	"usage: gpux bench [--socket PATH] [--json] [--quick] [--only SCENARIOS] [--plot FILE]\n"  \
	"       gpux bench --from FILE [--json] [--plot FILE]\n"                                   \
	"  --json          one JSON document on stdout (the table goes to stderr)\n"               \
	"  --quick         fewer repetitions\n"                                                    \
	"  --only LIST     comma-separated: rtt bw fork cached modules clients fair gpus host\n"   \
	"                  idle fault (a neighbour's faults: what innocents lose; own gpuxd)\n"    \
	"                  fresh prio shares\n"                                                    \
	"  --plot FILE     an SVG chart: launches/s against client processes (gpux, CuPy,\n"       \
	"                  in-process CUDA) and the round trips' percentiles\n"                    \
	"  --from FILE     a run saved by --json, instead of a new one (its table, --plot)\n"

#define TOOL_USAGE_SOAK                                                                            \
	"usage: gpux soak [--minutes N] [--clients N] [--seed N]\n"                                \
	"                 [--watchdog-s S] [--rss-slack-mib N] [--keep]\n"                         \
	"                 [--ops run,queue,frozen,dbuf,module,fork,fault,hang]\n"                  \
	"  Forked clients at work while workers and gpuxd are killed, and kernels fault or\n"      \
	"  hang; checks every result.\n"                                                           \
	"  --minutes N        how long (default 1; a fraction is fine)\n"                          \
	"  --clients N        clients at once (1 to 64, default 6)\n"                              \
	"  --seed N           of the random choices (default: the time)\n"                         \
	"  --watchdog-s S     an operation longer than this is a hang (default 120)\n"             \
	"  --rss-slack-mib N  growth of a worker's RSS that is no leak (default 64)\n"             \
	"  --ops LIST         the kinds of operation the clients do (default all)\n"               \
	"  --keep             keep gpuxd's log and cache even when all went well\n"

#define TOOL_USAGE_TOP                                                                             \
	"usage: gpux top [--socket PATH] [--interval S] [--count N] [--batch | --json]\n"          \
	"  gpuxd's devices and clients, refreshed: per device its state, clients, requests\n"      \
	"  and launches per second, queue, memory and cache hits; per client its pid, user,\n"     \
	"  command, requests per second, requests in flight, shared and device memory.\n"          \
	"  On a terminal it redraws in place (q quits); else, or with --batch, it prints\n"        \
	"  one plain frame per interval.\n"                                                        \
	"  --interval S    seconds between frames (default 1, at least 0.1)\n"                     \
	"  --count N       stop after N frames\n"                                                  \
	"  --batch         plain frames one after another, for a log or a script\n"                \
	"  --json          one JSON document of one frame, then exit\n"

int tool_status(int argc, char **argv);
int tool_top(int argc, char **argv);
int tool_compile(int argc, char **argv);
int tool_demo(int argc, char **argv);
int tool_bench(int argc, char **argv);
int tool_soak(int argc, char **argv);

struct ipc_status;
struct ipc_dev_status;
/* Ask gpuxd at path for its whole status (an admin hello): 0 or -errno; devs must hold
 * IPC_DEVICES_MAX. */
int tool_status_query(const char *path, struct ipc_status *ret, struct ipc_dev_status *devs);

/* The demo's kernels, for each back end: saxpy(n, a, x, y, out) and empty(). */
extern const char tool_kernels_host[];
extern const char tool_kernels_cuda[];

/* Load the demo kernels for the back end of device 0. */
gpux_status tool_load_kernels(gpux_ctx *ctx, gpux_module **ret, char **ret_log, double *ret_ms);

/*
 * getopt_long() the gpux way (opts must have "help" as 'h'): -h and --help print `usage` on
 * stdout and exit 0; an unknown option or a missing value prints one line naming it, then
 * the usage, on stderr and exits 2. Returns what getopt_long() does otherwise.
 */
int tool_getopt(int argc, char **argv, const struct option *opts, const char *usage);
/* One line "gpux: ...", the usage, exit 2. */
void tool_usage_error(const char *usage, const char *fmt, ...)
	__attribute__((format(printf, 2, 3), noreturn));
/* A number option's value in [min, max], or a usage error. */
uint64_t tool_parse_u64(const char *cmd, const char *usage, const char *opt, const char *s,
			uint64_t min, uint64_t max);

/*
 * Where gpuxd is, for the subcommands that start their own: $GPUX_DAEMON, beside this program
 * (a build tree), where it was installed (sbindir), else the first on the PATH. 0 with its
 * path in buf, or -ENOENT with the installed path in buf (for the message).
 */
int tool_daemon_path(char *buf, size_t len);

int tool_fail(const char *what, const char *why);
/* "gpux: connect: <gpux_connect_error()>", exit code 1. */
int tool_connect_fail(gpux_status st);
double tool_ms(uint64_t ns);
uint64_t tool_now(void);
int tool_cmp_u64(const void *a, const void *b);
