/* SPDX-License-Identifier: MIT */
/* ipc/options.c: gpux-worker's command line, from the table of ipc/options.h. */
#include <stddef.h>

#include "macro.h"
#include "options.h"

/* The usage text says so. */
_Static_assert(IPC_WORKER_CLIENTS_MAX == 16384, "--max-clients' help");

#define WORKER_ROW_(field, name_, ...)                                                             \
	{ .name = (name_), IPC_OPT_FIELD(struct ipc_worker_opts, field), __VA_ARGS__ },
static const struct ipc_opt worker_opts[] = { IPC_OPTIONS(IPC_OPT_NONE_, WORKER_ROW_, WORKER_ROW_,
							  IPC_OPT_NONE_) };

const struct ipc_opt_prog ipc_worker_prog = {
	.name = "gpux-worker",
	.synopsis = "gpux-worker --probe [--backend auto|host|cuda]\n"
		    "       gpux-worker --compiler\n"
		    "       gpux-worker --device N --backend host|cuda --control-fd FD "
		    "--status-fd FD [options]\n"
		    "gpux-worker is started by gpuxd; it is not meant to be run by hand.",
	.opts = worker_opts,
	.nopts = ARRAY_SIZE(worker_opts),
	.size = sizeof(struct ipc_worker_opts),
};
