/* SPDX-License-Identifier: MIT */
/* tools/tools.h: the gpux command's subcommands. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include <gpux/gpux.h>

/* Exit codes: 0 ok, 1 failure, 2 usage. Failures print one line: "gpux: what: why". */
#define TOOL_OK 0
#define TOOL_FAIL 1
#define TOOL_USAGE 2

int tool_status(int argc, char **argv);
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

int tool_fail(const char *what, const char *why);
double tool_ms(uint64_t ns);
uint64_t tool_now(void);
int tool_cmp_u64(const void *a, const void *b);
