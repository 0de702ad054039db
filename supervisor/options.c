/* SPDX-License-Identifier: MIT */
/* supervisor/options.c: gpuxd's command line, and each worker's, from ipc/options.h's table. */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "macro.h"
#include "parse.h"
#include "sup.h"

/* --socket-mode not given: 0600, or 0660 with --allow-group. */
#define SOCKET_MODE_UNSET UINT_MAX

/* A group by name or number. */
static int sup_parse_group(const char *value, void *opts, char *why, size_t why_len)
{
	struct sup_opts *o = opts;
	struct group *g;
	uint64_t v;

	if (ipc_parse_u64(value, 10, &v) == 0) {
		/* (gid_t)-1 is no group: chown() takes it as "leave it". */
		if (v >= (gid_t)-1) {
			(void)snprintf(why, why_len, "%s is no group id", value);
			return -EINVAL;
		}
		o->allow_gid = (gid_t)v;
	} else {
		errno = 0;
		g = getgrnam(value);
		if (!g) {
			(void)snprintf(why, why_len, "no group \"%s\"%s%s", value,
				       errno ? ": " : "", errno ? strerror(errno) : "");
			return -EINVAL;
		}
		o->allow_gid = g->gr_gid;
	}
	o->allow_group = true;
	return 0;
}

static int sup_parse_log_level(const char *value, void *opts, char *why, size_t why_len)
{
	struct sup_opts *o = opts;
	int level = sup_log_level_parse(value);

	if (level < 0) {
		(void)snprintf(why, why_len, "\"%s\" is not err, warning, notice, info or debug",
			       value);
		return -EINVAL;
	}
	o->log_level = level;
	return 0;
}

/* --metrics: the address's form and port now; its host is looked up when gpuxd starts. */
static int sup_parse_metrics(const char *value, void *opts, char *why, size_t why_len)
{
	struct sup_opts *o = opts;
	char host[256];
	unsigned port;
	int r = sup_metrics_addr(value, host, sizeof(host), &port, why, why_len);

	if (r < 0)
		return r;
	o->metrics = value;
	return 0;
}

#define SUP_ROW_(field, name_, ...)                                                                \
	{ .name = (name_), IPC_OPT_FIELD(struct sup_opts, field), __VA_ARGS__ },
#define SUP_SECTION_(text) { .kind = IPC_OPT_SECTION, .help = (text) },
static const struct ipc_opt sup_opts_table[] = {
	IPC_OPTIONS(SUP_ROW_, IPC_OPT_NONE_, SUP_ROW_, SUP_SECTION_)
};

const struct ipc_opt_prog sup_prog = {
	.name = "gpuxd",
	.synopsis = "gpuxd [options]",
	.version = GPUX_VERSION_STRING,
	.opts = sup_opts_table,
	.nopts = ARRAY_SIZE(sup_opts_table),
	.size = sizeof(struct sup_opts),
};

void sup_opts_init(struct sup_opts *o)
{
	*o = (struct sup_opts){
		.backend = "auto",
		.host_sandbox_mode = "auto",
		.socket_mode = SOCKET_MODE_UNSET,
		.idle_exit_ms = IPC_OPT_IDLE_EXIT_MS,
		.timeout_ms = IPC_OPT_TIMEOUT_MS,
		.max_timeout_ms = IPC_OPT_MAX_TIMEOUT_MS,
		.drain_ms = IPC_OPT_DRAIN_MS,
		.max_clients = IPC_OPT_MAX_CLIENTS,
		.reserved_clients = UINT_MAX,
		.max_clients_per_user = IPC_OPT_MAX_CLIENTS_PER_USER,
		.max_clients_per_process = IPC_OPT_MAX_CLIENTS_PER_PROCESS,
		.admin_clients = IPC_OPT_ADMIN_CLIENTS,
		.hello_timeout_ms = IPC_OPT_HELLO_TIMEOUT_MS,
		.busy_hello_timeout_ms = IPC_OPT_BUSY_HELLO_TIMEOUT_MS,
		.compile_timeout_ms = IPC_OPT_COMPILE_TIMEOUT_MS,
		.log_level = LOG_INFO,
	};
}

int sup_opts_parse(struct sup_opts *o, int argc, char **argv, char *why, size_t why_len)
{
	struct sup_opts n = *o;
	int r = ipc_opt_parse(&sup_prog, argc, argv, &n, why, why_len);

	if (r != 0)
		return r;
	if (n.socket_mode == SOCKET_MODE_UNSET)
		n.socket_mode = n.allow_group ? 0660 : 0600;
	/* A gpuxd that serves other users, or runs as root: its kernels are worth fencing. */
	n.host_sandbox = strcmp(n.host_sandbox_mode, "on") == 0 ||
			 (strcmp(n.host_sandbox_mode, "auto") == 0 &&
			  (n.allow_group || geteuid() == 0));
	if (n.reserved_clients == UINT_MAX)
		n.reserved_clients = n.max_clients / 16;
	/* Nobody but gpuxd's user could connect: surely a mistake. */
	if (n.reserved_clients >= n.max_clients) {
		(void)snprintf(why, why_len,
			       "--reserved-clients: %u leaves none of --max-clients %u to others",
			       n.reserved_clients, n.max_clients);
		return -EINVAL;
	}
	*o = n;
	return 0;
}

int sup_worker_argv(const struct sup *s, const struct sup_worker *w, struct sup_argv *ret)
{
	static const struct ipc_worker_opts defaults = IPC_WORKER_OPTS_DEFAULTS;
	struct ipc_worker_opts wo = defaults;
	int r;

	if (w) {
		wo.device = w->index;
		wo.backend = w->backend;
		wo.control_fd = 3;
		wo.status_fd = 4;
		wo.clients_fd = 5;
		wo.ledger_fd = 6;
		wo.parent_pid = getpid();
		wo.sandbox = s->opts.host_sandbox;
#define SUP_PASS_ON_(field, ...) wo.field = s->opts.field;
		IPC_OPTIONS(IPC_OPT_NONE_, IPC_OPT_NONE_, SUP_PASS_ON_, IPC_OPT_NONE_)
	} else {
		wo.probe = true;
		wo.backend = s->opts.backend;
	}
	ipc_argv_init(&ret->a, ret->v, ARRAY_SIZE(ret->v), ret->text, sizeof(ret->text));
	r = ipc_argv_add(&ret->a, s->opts.worker_path);
	if (r < 0)
		return r;
	return ipc_opt_argv(&ipc_worker_prog, &wo, &defaults, &ret->a);
}
