/* SPDX-License-Identifier: MIT */
/* supervisor/sup.h: gpuxd's objects: workers it supervises, clients it serves. */
#pragma once

#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <syslog.h>

#include <gpux/gpux.h>

#include "ledger.h"
#include "loop.h"
#include "map.h"
#include "options.h"
#include "proto.h"
#include "status.h"

/* Five deaths within a minute mark a device failed (as s6 and systemd throttle). */
#define SUP_DEATHS_MAX 5u
#define SUP_DEATH_WINDOW_NS (60ULL * 1000000000ULL)
/* Deaths of a kernel fault blamed on one client's request are no strike against the device,
 * up to this many within the window: past them, whatever runs there seems to fault. */
#define SUP_BLAMED_MAX 20u
#define SUP_BACKOFF_MIN_NS (100ULL * 1000000ULL)
#define SUP_BACKOFF_MAX_NS (5ULL * 1000000000ULL)
/* --standby: a device's standby starts this long after its worker became ready. */
#define SUP_STANDBY_DELAY_NS (1000ULL * 1000000ULL)
/* A failed device is tried once more after this long. */
#define SUP_FAILED_RETRY_NS (300ULL * 1000000000ULL)
/* A worker must say READY within this (CUDA start-up takes about 0.3 s). */
#define SUP_START_TIMEOUT_NS (60ULL * 1000000000ULL)
/* Between SIGTERM and SIGKILL when stopping a worker. */
#define SUP_STOP_GRACE_NS (2ULL * 1000000000ULL)
/* How often deadlines are checked. */
#define SUP_DEADLINE_TICK_NS (50ULL * 1000000ULL)
/* A client refused at hello is dropped this long after being told why. */
#define SUP_REFUSED_LINGER_NS (100ULL * 1000000ULL)
/* A channel a client asks for comes this long after its last one to that device, at the
 * soonest; one that must wait is looked at again this often (supervisor/clients.c). */
#define SUP_CHANNEL_INTERVAL_NS (50ULL * 1000000ULL)
#define SUP_CHANNEL_RETRY_NS (10ULL * 1000000ULL)
/* Fds queued for one client: two per device at hello, and more as workers restart. */
#define SUP_CLIENT_QUEUE_FDS (4u * IPC_DEVICES_MAX)

/* A worker's log pipe: what one round of the loop reads of it (a worker writing without end
 * does not keep gpuxd from the rest), and the longest line kept (the rest is cut). */
#define SUP_LOG_ROUND_BYTES (16u * 1024u)
#define SUP_LOG_LINE_MAX 1024u

/* Connections made ahead for one process's children (supervisor/spares.c), at most. */
#define SUP_POOL_SPARES 8u

/* Exit codes. */
#define SUP_EXIT_OK 0
#define SUP_EXIT_FAIL 1
#define SUP_EXIT_USAGE 2
#define SUP_EXIT_RUNNING 3 /* another gpuxd holds the socket */

/*
 * A rule of --priority: which clients (a user, a group's members, everybody) may give their
 * queues which priorities at most, and which theirs are when they name none
 * (supervisor/clients.c: the first rule that matches a client holds).
 */
enum sup_prio_who {
	SUP_PRIO_USER,
	SUP_PRIO_GROUP,
	SUP_PRIO_ALL,
};

struct sup_prio_rule {
	enum sup_prio_who who;
	uint32_t id; /* uid or gid */
	int8_t max, def;
};

#define SUP_PRIO_RULES_MAX 64u

struct sup_opts {
	const char *socket_path;
	bool private_mode;
	bool daemonize;
	const char *backend;
	const char *worker_path;
	const char *cache_dir;
	bool allow_group;
	gid_t allow_gid;
	const char *host_sandbox_mode; /* --host-sandbox: auto, on or off */
	bool host_sandbox;             /* host kernels under a seccomp filter (that, resolved) */
	unsigned socket_mode;
	uint64_t idle_exit_ms;
	uint64_t timeout_ms;
	uint64_t max_timeout_ms;
	uint64_t drain_ms;
	uint64_t quota_shared;      /* shared-buffer bytes of one client */
	uint64_t quota_shared_user; /* of one user's clients together, at a worker */
	uint64_t quota_device;
	uint64_t device_reserve;
	uint64_t quota_device_user;
	uint64_t reserved_device;
	uint64_t cache_bytes;
	uint64_t cache_ttl_ms;
	unsigned host_devices;
	unsigned slots;
	uint64_t compile_memory;
	uint64_t compile_timeout_ms;
	/* Connections (see supervisor/clients.c): all of them, the last `reserved_clients` of
	 * those for gpuxd's user and root only; per user (others than those) and per process;
	 * beyond max_clients, `admin_clients` for gpux status. */
	unsigned max_clients;
	unsigned reserved_clients;
	unsigned max_clients_per_user;
	unsigned max_clients_per_process;
	unsigned admin_clients;
	uint64_t hello_timeout_ms;      /* to say hello */
	uint64_t busy_hello_timeout_ms; /* the same under pressure */
	bool standby;                   /* a worker started ahead per device */
	const char *metrics;            /* --metrics ADDR, or NULL */
	bool metrics_per_user;          /* uid labels on memory */
	int log_level;                  /* a syslog priority */
	const char *log_file;           /* NULL: the target sup_log_auto() chooses */
	struct sup_prio_rule prio_rules[SUP_PRIO_RULES_MAX]; /* --priority, in order */
	unsigned nprio_rules;
};

/* A worker's life, as a table of state x event (supervisor/workers.c). */
enum sup_state {
	W_DOWN,     /* not running, nothing planned */
	W_STARTING, /* spawned, waiting for READY */
	W_READY,
	W_BACKOFF,  /* died; restart when the timer fires */
	W_FAILED,   /* died too often; retried after a long pause */
	W_STOPPING, /* SIGTERM sent; SIGKILL when the timer fires */
	W_STATE_N
};

enum sup_event { E_START, E_READY, E_DIED, E_TIMER, E_STOP, E_EVENT_N };

struct sup;

struct sup_worker {
	struct sup *s;
	uint32_t index;
	struct ipc_device_info info;
	char backend[16];
	enum sup_state state;
	pid_t pid;
	int pidfd;
	struct ipc_watch *pid_watch;
	struct ipc_conn *control;
	int status_fd;    /* read-write, for the worker */
	int status_ro_fd; /* read-only, for clients */
	struct ipc_status_page *status;
	int clients_fd; /* gpux top's table of its clients (ipc/status.h), for the worker */
	const struct ipc_client_table *clients; /* the same, read here */
	struct ipc_timer *timer;
	uint32_t generation;
	uint32_t restarts;
	uint64_t deaths[SUP_DEATHS_MAX];
	unsigned ndeaths;
	uint64_t blamed[SUP_BLAMED_MAX]; /* the last deaths of a fault blamed on a request */
	unsigned nblamed;
	bool killed_deadline;
	int last_exit; /* wait status of the last death */
	/* A worker handled as gone while its process exits (supervisor/workers.c exiting()). */
	pid_t exiting_pid;
	int exiting_pidfd;
	struct ipc_watch *exiting_watch;
	uint64_t spawned_ns; /* when the worker now starting (or started) was spawned */
	uint64_t died_ns;    /* when the last one was reaped (0: none died) */
	/* Its stderr, a pipe whose lines go to gpuxd's log (an NVRTC helper shares it). */
	int log_fd;
	struct ipc_watch *log_watch;
	char log_line[SUP_LOG_LINE_MAX];
	size_t log_len;
	bool log_cut; /* the line was longer than log_line: the rest of it is dropped */
	/* Launches per second: the count at the start of the current second. */
	uint64_t rate_launches;
	uint64_t rate_since_ns;
	uint32_t launch_rate;
	/* --standby: the worker started ahead for this device, which takes over at once when
	 * this one dies (NULL without it, and in that standby itself). */
	struct sup_worker *standby;
	bool is_standby;
};

struct sup_client {
	struct sup *s;
	struct ipc_conn *conn;
	uint64_t id;
	uid_t uid;
	gid_t gid;
	pid_t pid;
	int8_t prio_max, prio_default; /* what --priority allows it (supervisor/clients.c) */
	bool hello_done;
	const char *refused; /* why it was told no at hello; dropped when hello_timer fires */
	bool admin;
	bool silent;     /* has not said hello yet (nor been refused) */
	bool admin_pool; /* took one of the slots beyond max_clients: admin or nothing */
	bool hurried;    /* silent under pressure: has the busy deadline */
	uint64_t accepted_ns;
	struct ipc_timer *hello_timer;
	/* Channels asked for (CHANNEL_REQ) and not given yet, a bit per device, and the worker
	 * generation each asks of (0: any); when each device's last channel went; the timer
	 * that gives them. */
	uint64_t chan_wanted;
	uint32_t chan_wanted_gen[IPC_DEVICES_MAX];
	uint64_t chan_last_ns[IPC_DEVICES_MAX];
	struct ipc_timer *chan_timer;
	struct sup_client *prev, *next;
};

/* A client gone lately, for the log lines about its work that outlives it (a deadline). */
#define SUP_GONE_KEPT 64u
struct sup_gone {
	uint64_t id; /* 0: none */
	pid_t pid;
	uid_t uid;
	uint64_t gone_ns;
};

struct sup {
	struct sup_opts opts;
	struct ipc_loop *loop;
	char socket_path[128];
	int listen_fd;
	bool activated; /* listen_fd came from systemd: not ours to unlink */
	int lock_fd;
	struct ipc_listener *listener;
	struct sup_worker workers[IPC_DEVICES_MAX];
	unsigned nworkers;
	struct sup_worker standbys[IPC_DEVICES_MAX]; /* --standby: one per worker */
	/* Device memory by user, which every worker writes (ipc/ledger.h); made at the first
	 * spawn. */
	struct ipc_ledger *ledger;
	int ledger_fd;
	struct sup_client *clients;
	unsigned nclients;
	unsigned nsilent;     /* clients that have not said hello */
	unsigned nadmin_pool; /* clients in the slots beyond max_clients */
	bool hello_busy;      /* under pressure, as of the last connection */
	bool sweep_armed;
	struct ipc_timer *hello_sweep;       /* cuts hurried connections */
	struct ipc_map per_uid;              /* uid -> connections, as a pointer-sized count */
	struct ipc_map per_pid;              /* pid -> connections */
	struct ipc_map client_ids;           /* id -> struct sup_client */
	struct sup_gone gone[SUP_GONE_KEPT]; /* the last clients gone, the oldest replaced */
	unsigned ngone;
	uint64_t next_client_id;
	uint64_t clients_total;
	uint64_t clients_refused;
	struct ipc_map pools; /* pid -> struct sup_pool: spares for that process's children */
	unsigned nspares;
	uint64_t spares_taken;
	struct ipc_timer *refill_timer;
	/* --metrics: the port, bound here and served by gpux-metrics beside gpuxd, which is
	 * restarted when it dies (supervisor/metrics.c). */
	int metrics_fd;
	char *metrics_program;
	char metrics_where[96]; /* the address bound, for the log */
	pid_t metrics_pid;
	int metrics_pidfd;
	struct ipc_watch *metrics_watch;
	struct ipc_timer *metrics_timer;
	uint64_t metrics_started_ns;
	uint64_t metrics_backoff_ns;
	struct ipc_timer *deadline_timer;
	struct ipc_timer *idle_timer;
	struct ipc_timer *stop_timer;
	int signal_fd;
	struct ipc_watch *signal_watch;
	bool stopping;
	uint64_t stop_deadline;
	uint64_t drain_reported; /* the in-flight count last logged while draining */
	uint64_t started_ns;
};

/* supervisor/log.c */
enum sup_log_target {
	SUP_LOG_STDERR,
	SUP_LOG_JOURNAL, /* systemd's native protocol, when stderr is the journal's stream */
	SUP_LOG_SYSLOG,
	SUP_LOG_FILE, /* appended to; reopened on SIGHUP (log rotation) */
};

/* A level's name (err, warning, notice, info, debug) as its syslog priority, or -EINVAL. */
int sup_log_level_parse(const char *s);

/* ---- options (supervisor/options.c, from the table of ipc/options.h) ---- */

extern const struct ipc_opt_prog sup_prog;

/* gpuxd's defaults. */
void sup_opts_init(struct sup_opts *o);

/*
 * Parse argv into *o (written only when all is good) and resolve what several options
 * decide together. Returns 0, IPC_OPT_HELP, IPC_OPT_VERSION, -EINVAL with why filled, or
 * -ENOMEM.
 */
int sup_opts_parse(struct sup_opts *o, int argc, char **argv, char *why, size_t why_len);

/*
 * Room for a worker's command line, and the command line itself: worker w's (with its
 * device, back end and gpuxd's options it takes), or, w NULL, the probe's. 0 or -errno.
 */
struct sup_argv {
	struct ipc_argv a;
	char *v[IPC_WORKER_ARGV_MAX];
	char text[IPC_WORKER_ARGV_TEXT];
};
int sup_worker_argv(const struct sup *s, const struct sup_worker *w, struct sup_argv *ret);
/* Where gpuxd logs when not told: the journal under systemd, syslog when daemonized. */
enum sup_log_target sup_log_auto(bool daemonized);
/* Log to `target` (file: the path) what is at `level` or more urgent. 0 or -errno. */
int sup_log_open(enum sup_log_target target, const char *file, int level);
/* Open the log file anew (after it was rotated); 0 or -errno. */
int sup_log_reopen(void);
void sup_log_close(void);
/* One line at a syslog priority (LOG_ERR ... LOG_DEBUG); sup_log() is LOG_INFO. */
void sup_logp(int priority, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sup_logv(int priority, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
void sup_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* supervisor/systemd.c */
/* Take $NOTIFY_SOCKET from the environment (workers must not inherit it). */
void sup_notify_init(void);
/* Tell systemd (READY=1, STATUS=..., STOPPING=1); 0 when not under systemd, or -errno. */
int sup_notify(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The socket systemd passed (socket activation): 1 and *ret_fd, 0 when none, or -errno. */
int sup_listen_fds(int *ret_fd);

/* supervisor/metrics.c */
/*
 * --metrics' ADDR (HOST:PORT, [V6]:PORT or :PORT) split into its host (empty: every address;
 * host_len bytes of room) and port (1 to 65535). 0, or -EINVAL with why.
 */
int sup_metrics_addr(const char *addr, char *host, size_t host_len, unsigned *ret_port, char *why,
		     size_t why_len);
/*
 * Bind --metrics' address and start gpux-metrics to serve it, again whenever it dies while
 * gpuxd runs. 0, or -errno with why (the resolver's own words, or the system call's).
 */
int sup_metrics_start(struct sup *s, char *why, size_t why_len);
/* Stop gpux-metrics and close the port. */
void sup_metrics_free(struct sup *s);

/* supervisor/stop.c */
/* The stop's timer, made before anything may call sup_stop(). */
int sup_stop_setup(struct sup *s);
/* Stop: new clients are refused while requests in flight finish (bounded), then the
 * workers are stopped. */
void sup_stop(struct sup *s);

/* supervisor/workers.c */
int sup_workers_probe(struct sup *s);
int sup_workers_start(struct sup *s);
void sup_worker_event(struct sup_worker *w, enum sup_event ev);
/* A worker that died and whose pidfd's news is still on its way is taken for dead now. */
void sup_worker_reap_if_dead(struct sup_worker *w);
/* Write the number of client processes into every worker's status page (ipc/status.h). */
void sup_workers_tell_processes(struct sup *s);
unsigned sup_worker_recent_deaths(const struct sup_worker *w);
bool sup_workers_all_down(const struct sup *s);
/* E_STOP to every worker and standby. */
void sup_workers_stop(struct sup *s);
uint64_t sup_workers_inflight(const struct sup *s);
/* Tell every worker to finish what it has and take nothing new. */
void sup_workers_drain(struct sup *s);
/* Whether every ready worker has said (on its status page) that it drains. */
bool sup_workers_drained(const struct sup *s);
void sup_workers_free(struct sup *s);
/* One round of w's log pipe into gpuxd's log: at most SUP_LOG_ROUND_BYTES, lines cut at
 * SUP_LOG_LINE_MAX; at its end the pipe is closed. */
void sup_worker_log_read(struct sup_worker *w);
const char *sup_state_name(enum sup_state st);
uint32_t sup_public_state(const struct sup_worker *w);
/*
 * Whether the worker takes new channels: ready, and not about to die (it gave up after a
 * kernel fault, or gpuxd kills it for a deadline: its status page's fault record says so).
 * A client given a channel to a worker that dies then had its first requests lost.
 */
bool sup_worker_serving(const struct sup_worker *w);
/*
 * Start the program at path with argv and the file actions fa, gpuxd's environment, every
 * signal unblocked and those gpuxd handles (SIGPIPE, SIGTERM, SIGINT, SIGHUP) back to their
 * defaults. 0 with *ret_pid, or -errno.
 */
int sup_spawn(pid_t *ret_pid, const char *path, const posix_spawn_file_actions_t *fa,
	      char *const *argv);

/* supervisor/spares.c */
struct sup_spare;
int sup_spares_start(struct sup *s);
void sup_spares_free(struct sup *s);
/*
 * For a hello of c: a spare made for the children of c's parent process, when it is a client
 * here and has one for c's uid and gid (to free with sup_spare_free()); else NULL. Either way
 * the parent's pool is made again, or made larger when it had none left.
 */
struct sup_spare *sup_spare_take(struct sup *s, const struct sup_client *c);
void sup_spare_free(struct sup *s, struct sup_spare *sp);
uint64_t sup_spare_id(const struct sup_spare *sp);
/* The spare's end of a channel to w, taken (the caller closes it), or -1 when it has none
 * that leads to w as it runs now. */
int sup_spare_channel(struct sup_spare *sp, const struct sup_worker *w);
/* The process had its last connection closed: its pool goes. */
void sup_spares_pid_gone(struct sup *s, pid_t pid);
/* A worker changed (or gpuxd stops): every spare goes, and is made again unless stopping. */
void sup_spares_drop(struct sup *s);

/* supervisor/clients.c */
int sup_clients_start(struct sup *s);
void sup_clients_free(struct sup *s);
void sup_client_give_channel(struct sup_client *c, struct sup_worker *w);
void sup_clients_device_changed(struct sup *s, struct sup_worker *w);
void sup_client_send_killed(struct sup *s, uint64_t client_id, const struct ipc_killed *k);
/* A client gone lately (one of the last SUP_GONE_KEPT), or NULL. */
const struct sup_gone *sup_client_gone_get(const struct sup *s, uint64_t client_id);
/* The status now: *ret (count = ndevices) and devs[0 .. ndevices) (IPC_DEVICES_MAX). */
void sup_status_collect(struct sup *s, struct ipc_status *ret, struct ipc_dev_status *devs);
