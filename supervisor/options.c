/* SPDX-License-Identifier: MIT */
/* supervisor/options.c: gpuxd's command line, and each worker's, from ipc/options.h's table. */
#include <errno.h>
#include <grp.h>
#include <pwd.h>
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

/* A priority of a rule: -1 to 2. */
static int prio_value(const char *s, size_t len, int8_t *ret)
{
	bool neg = len > 0 && s[0] == '-';
	char buf[8];
	uint64_t v;

	if (neg) {
		s++;
		len--;
	}
	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	if (ipc_parse_u64(buf, 10, &v) < 0 || v > (neg ? (uint64_t)-IPC_PRIO_MIN : IPC_PRIO_MAX))
		return -EINVAL;
	*ret = (int8_t)(neg ? -(int64_t)v : (int64_t)v);
	return 0;
}

/* WHO of a rule: user:NAME, group:NAME (names or numbers), or "*". */
static int prio_who(const char *who, struct sup_prio_rule *r, char *why, size_t why_len)
{
	const char *name = strchr(who, ':');
	uint64_t v;

	if (strcmp(who, "*") == 0) {
		r->who = SUP_PRIO_ALL;
		return 0;
	}
	if (!name || name[1] == '\0')
		goto bad;
	name++;
	if (strncmp(who, "user:", 5) == 0) {
		struct passwd *p;

		r->who = SUP_PRIO_USER;
		if (ipc_parse_u64(name, 10, &v) == 0 && v < (uid_t)-1) {
			r->id = (uint32_t)v;
			return 0;
		}
		errno = 0;
		p = getpwnam(name);
		if (!p) {
			(void)snprintf(why, why_len, "no user \"%s\"%s%s", name, errno ? ": " : "",
				       errno ? strerror(errno) : "");
			return -EINVAL;
		}
		r->id = p->pw_uid;
		return 0;
	}
	if (strncmp(who, "group:", 6) == 0) {
		struct group *g;

		r->who = SUP_PRIO_GROUP;
		if (ipc_parse_u64(name, 10, &v) == 0 && v < (gid_t)-1) {
			r->id = (uint32_t)v;
			return 0;
		}
		errno = 0;
		g = getgrnam(name);
		if (!g) {
			(void)snprintf(why, why_len, "no group \"%s\"%s%s", name, errno ? ": " : "",
				       errno ? strerror(errno) : "");
			return -EINVAL;
		}
		r->id = g->gr_gid;
		return 0;
	}
bad:
	(void)snprintf(why, why_len, "\"%s\" is not user:NAME, group:NAME or *", who);
	return -EINVAL;
}

/* One rule, WHO=MAX[/DEFAULT]: appended to the options' rules. */
static int prio_rule(struct sup_opts *o, const char *rule, char *why, size_t why_len)
{
	const char *eq = strrchr(rule, '=');
	const char *slash = eq ? strchr(eq, '/') : NULL;
	struct sup_prio_rule r = { 0 };
	char who[256];
	int e;

	if (!eq || (size_t)(eq - rule) >= sizeof(who)) {
		(void)snprintf(why, why_len, "\"%s\" is not WHO=MAX[/DEFAULT]", rule);
		return -EINVAL;
	}
	memcpy(who, rule, (size_t)(eq - rule));
	who[eq - rule] = '\0';
	e = prio_who(who, &r, why, why_len);
	if (e < 0)
		return e;
	if (prio_value(eq + 1, slash ? (size_t)(slash - eq - 1) : strlen(eq + 1), &r.max) < 0 ||
	    (slash && prio_value(slash + 1, strlen(slash + 1), &r.def) < 0)) {
		(void)snprintf(why, why_len, "%s: a priority is a number from %d to %d", rule,
			       IPC_PRIO_MIN, IPC_PRIO_MAX);
		return -EINVAL;
	}
	if (!slash)
		r.def = MIN(r.max, (int8_t)0);
	if (r.def > r.max) {
		(void)snprintf(why, why_len, "%s: the default is above the highest", rule);
		return -EINVAL;
	}
	if (o->nprio_rules == SUP_PRIO_RULES_MAX) {
		(void)snprintf(why, why_len, "more than %u rules", SUP_PRIO_RULES_MAX);
		return -EINVAL;
	}
	o->prio_rules[o->nprio_rules++] = r;
	return 0;
}

/* --priority RULE[,RULE...], as often as wished: the rules in the order given. */
static int sup_parse_priority(const char *value, void *opts, char *why, size_t why_len)
{
	char rule[512];

	for (const char *p = value;; p++) {
		size_t n = strcspn(p, ",");
		int e;

		if (n == 0 || n >= sizeof(rule)) {
			(void)snprintf(why, why_len, "\"%s\": an empty or overlong rule", value);
			return -EINVAL;
		}
		memcpy(rule, p, n);
		rule[n] = '\0';
		e = prio_rule(opts, rule, why, why_len);
		if (e < 0)
			return e;
		p += n;
		if (*p == '\0')
			return 0;
	}
}

#define SUP_ROW_(field, name_, ...)                                                                \
	{ .name = (name_), IPC_OPT_FIELD(struct sup_opts, field), __VA_ARGS__ },
#define SUP_SECTION_(text) { .kind = IPC_OPT_SECTION, .help = (text) },
static const struct ipc_opt sup_opts_table[] = { IPC_OPTIONS(SUP_ROW_, IPC_OPT_NONE_, SUP_ROW_,
							     SUP_SECTION_) };

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
	n.host_sandbox =
		strcmp(n.host_sandbox_mode, "on") == 0 ||
		(strcmp(n.host_sandbox_mode, "auto") == 0 && (n.allow_group || geteuid() == 0));
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
		/* Clients wait for a restarted worker, not for its first compile. */
		wo.restart = w->generation > 0;
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
