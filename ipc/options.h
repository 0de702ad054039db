/* SPDX-License-Identifier: MIT */
/* ipc/options.h: the options of gpuxd and gpux-worker, in one table. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "opt.h"
#include "proto.h"
#include "status.h"

/* Defaults the table's help states. */
#define IPC_OPT_IDLE_EXIT_MS 10000
#define IPC_OPT_TIMEOUT_MS 60000
#define IPC_OPT_MAX_TIMEOUT_MS 3600000
#define IPC_OPT_DRAIN_MS 5000
#define IPC_OPT_CACHE_TTL_MS 600000
#define IPC_OPT_MAX_CLIENTS 4096
#define IPC_OPT_MAX_CLIENTS_PER_USER 256
#define IPC_OPT_MAX_CLIENTS_PER_PROCESS 64
#define IPC_OPT_ADMIN_CLIENTS 16
#define IPC_OPT_HELLO_TIMEOUT_MS 5000
#define IPC_OPT_BUSY_HELLO_TIMEOUT_MS 250
#define IPC_OPT_COMPILE_TIMEOUT_MS 120000
/* The compilers' memory by default: this, or half the machine's when that is less. */
#define IPC_OPT_COMPILE_MEMORY_MAX (4ULL << 30)
/* The device-memory reserve when none is given: a sixteenth of the device, at most this. */
#define IPC_OPT_DEVICE_RESERVE_MAX (256ull << 20)
/* A time in ms that still fits a uint64_t in ns. */
#define IPC_OPT_MS_MAX (UINT64_MAX / 1000000u)
/* Connections of one user, or one process, or kept for gpux status: a sanity bound. */
#define IPC_OPT_CLIENTS_MAX 1000000u

#define IPC_OPT_STR_(x) #x
#define IPC_OPT_STR(x) IPC_OPT_STR_(x)

/*
 * The table: a row per option, called as
 *   D(field, name, ...)   gpuxd's only: `field` of struct sup_opts (supervisor/sup.h);
 *   W(field, name, ...)   gpux-worker's only: `field` of struct ipc_worker_opts, which gpuxd
 *                         fills for each worker it starts and hands over as its argv;
 *   DW(field, name, ...)  gpuxd's, which gives each worker the same value: `field` of both;
 *   S(text)               a heading in gpuxd's usage text.
 * The rest of a row is struct ipc_opt's, as designated initializers. gpuxd's rows are made
 * in supervisor/options.c (with its parsers, sup_parse_*()), the worker's in ipc/options.c;
 * gpuxd's argv for a worker comes from the worker's rows (ipc_opt_argv()), so the two can
 * never disagree on a name or a range.
 */
/* The table as written, a row per option (clang-format would re-pack its strings). */
/* clang-format off */
#define IPC_OPTIONS(D, W, DW, S)                                                                   \
	W(device, "device", .kind = IPC_OPT_UINT, .arg = "N", .max = IPC_DEVICES_MAX - 1,          \
	  .help = "the device to serve (default 0)")                                               \
	W(backend, "backend", .kind = IPC_OPT_WORD, .words = "auto|cuda|host", .arg = "B",         \
	  .help = "its back end: host (default) or cuda; auto too with --probe")                   \
	W(control_fd, "control-fd", .kind = IPC_OPT_UINT, .arg = "FD", .max = INT_MAX,             \
	  .help = "the channel to gpuxd")                                                          \
	W(status_fd, "status-fd", .kind = IPC_OPT_UINT, .arg = "FD", .max = INT_MAX,               \
	  .help = "the status page (a memfd gpuxd reads)")                                         \
	W(clients_fd, "clients-fd", .kind = IPC_OPT_UINT, .arg = "FD", .max = INT_MAX,             \
	  .help = "the table of its clients (a memfd gpuxd reads)")                                \
	W(ledger_fd, "ledger-fd", .kind = IPC_OPT_UINT, .arg = "FD", .max = INT_MAX,               \
	  .help = "device memory by user, of every worker (a memfd)")                              \
	W(parent_pid, "parent-pid", .kind = IPC_OPT_UINT, .arg = "PID", .max = INT_MAX,            \
	  .help = "gpuxd: exit at once when it is not the parent")                                 \
	W(probe, "probe", .kind = IPC_OPT_FLAG,                                                    \
	  .help = "print the devices of --backend, one a line, and exit")                          \
	W(compiler, "compiler", .kind = IPC_OPT_FLAG,                                              \
	  .help = "be the worker's NVRTC helper, on fd 3")                                         \
	W(sandbox, "sandbox", .kind = IPC_OPT_FLAG,                                                \
	  .help = "run host kernels under a seccomp filter")                                       \
	W(restart, "restart", .kind = IPC_OPT_FLAG,                                                \
	  .help = "another worker served the device before: ready before the compiler is warm")    \
	D(socket_path, "socket", .kind = IPC_OPT_TEXT, .arg = "PATH",                              \
	  .help = "listen here (default $XDG_RUNTIME_DIR/gpux/gpuxd.sock,\n"                       \
		  "else /tmp/gpux-UID/gpuxd.sock)")                                                \
	D(private_mode, "private", .kind = IPC_OPT_FLAG,                                           \
	  .help = "exit once the last client has been gone a while")                               \
	D(daemonize, "daemonize", .kind = IPC_OPT_FLAG,                                            \
	  .help = "go to the background; return once listening")                                   \
	D(idle_exit_ms, "idle-exit-ms", .kind = IPC_OPT_UINT, .arg = "MS", .max = IPC_OPT_MS_MAX,  \
	  .help = "that while (default " IPC_OPT_STR(IPC_OPT_IDLE_EXIT_MS) ")")                    \
	D(backend, "backend", .kind = IPC_OPT_WORD, .words = "auto|cuda|host", .arg = "B",         \
	  .help = "auto (default), cuda or host")                                                  \
	D(host_devices, "host-devices", .kind = IPC_OPT_UINT, .arg = "N", .min = 1,                \
	  .max = IPC_DEVICES_MAX, .help = "host back end: serve N devices (default 1)")            \
	D(worker_path, "worker", .kind = IPC_OPT_TEXT, .arg = "PATH",                              \
	  .help = "the gpux-worker program")                                                       \
	D(standby, "standby", .kind = IPC_OPT_FLAG,                                                \
	  .help = "keep a second worker per device started, which takes\n"                         \
		  "over at once when a worker dies (of a client's kernel\n"                       \
		  "fault, say): its CUDA context holds device memory\n"                           \
		  "(524 MiB on an H200)")                                                          \
	DW(cache_dir, "cache-dir", .kind = IPC_OPT_TEXT, .arg = "DIR",                             \
	   .help = "compiled modules (default $GPUX_CACHE_DIR, else\n"                             \
		   "$XDG_CACHE_HOME/gpux)")                                                        \
	DW(timeout_ms, "timeout-ms", .kind = IPC_OPT_UINT, .arg = "MS", .max = IPC_OPT_MS_MAX,     \
	   .help = "default request deadline (default " IPC_OPT_STR(IPC_OPT_TIMEOUT_MS) ")")       \
	DW(max_timeout_ms, "max-timeout-ms", .kind = IPC_OPT_UINT, .arg = "MS",                    \
	   .max = IPC_OPT_MS_MAX,                                                                  \
	   .help = "the longest deadline a client may ask for (default " IPC_OPT_STR(              \
		   IPC_OPT_MAX_TIMEOUT_MS) ")")                                                    \
	D(drain_ms, "drain-ms", .kind = IPC_OPT_UINT, .arg = "MS", .max = IPC_OPT_MS_MAX,          \
	  .help = "on SIGTERM, how long requests may finish (default " IPC_OPT_STR(                \
		  IPC_OPT_DRAIN_MS) ")")                                                           \
	DW(quota_shared, "quota-shared", .kind = IPC_OPT_UINT, .arg = "BYTES", .max = UINT64_MAX,  \
	   .help = "shared-buffer memory one client may have (default a\n"                         \
		   "quarter of the machine's): the library refuses more at\n"                      \
		   "once, and workers do not map more")                                            \
	DW(quota_shared_user, "quota-shared-user", .kind = IPC_OPT_UINT, .arg = "BYTES",           \
	   .max = UINT64_MAX,                                                                      \
	   .help = "what all clients of one user together may have\n"                              \
		   "mapped by a worker (default half the machine's memory)")                       \
	DW(quota_device, "quota-device", .kind = IPC_OPT_UINT, .arg = "BYTES", .max = UINT64_MAX,  \
	   .help = "device memory a client may hold in device buffers\n"                           \
		   "(default half the device's)")                                                  \
	DW(quota_device_user, "quota-device-user", .kind = IPC_OPT_UINT, .arg = "BYTES",           \
	   .max = UINT64_MAX,                                                                      \
	   .help = "device memory (device buffers, cached inputs) one\n"                           \
		   "user other than gpuxd's and root may hold, all its\n"                          \
		   "clients on all devices together (default half a\n"                             \
		   "device's; host back end: half the machine's)")                                 \
	DW(reserved_device, "reserved-device", .kind = IPC_OPT_UINT, .arg = "BYTES",               \
	   .max = UINT64_MAX,                                                                      \
	   .help = "of each device (host back end: of the machine), what\n"                        \
		   "only gpuxd's user and root may take (default a\n"                              \
		   "sixteenth)")                                                                   \
	DW(device_reserve, "device-reserve", .kind = IPC_OPT_UINT, .arg = "BYTES",                 \
	   .max = UINT64_MAX,                                                                      \
	   .help = "device memory that device buffers and the device cache\n"                      \
		   "never take, kept for running requests' copies\n"                               \
		   "(default a sixteenth of the device's, at most 256 MiB)")                        \
	DW(cache_bytes, "cache-bytes", .kind = IPC_OPT_UINT, .arg = "BYTES", .max = UINT64_MAX,    \
	   .help = "the device cache's budget (default a quarter of the device)")                  \
	DW(cache_ttl_ms, "cache-ttl-ms", .kind = IPC_OPT_UINT, .arg = "MS", .max = IPC_OPT_MS_MAX, \
	   .help = "cached inputs unused this long go (default " IPC_OPT_STR(                      \
		   IPC_OPT_CACHE_TTL_MS) ")")                                                      \
	DW(slots, "slots", .kind = IPC_OPT_UINT, .arg = "N", .max = IPC_STATUS_SLOTS,              \
	   .help = "streams per worker (default: a stream per CPU, at most 8)")                    \
	DW(compile_memory, "compile-memory", .kind = IPC_OPT_UINT, .arg = "BYTES",                 \
	   .max = UINT64_MAX,                                                                      \
	   .help = "the address space of a compiler (cc, NVRTC) at most\n"                         \
		   "(default 4 GiB, or half the machine's memory if less)")                        \
	DW(compile_timeout_ms, "compile-timeout-ms", .kind = IPC_OPT_UINT, .arg = "MS",            \
	   .max = IPC_OPT_MS_MAX,                                                                  \
	   .help = "a compile's time at most (default " IPC_OPT_STR(                               \
		   IPC_OPT_COMPILE_TIMEOUT_MS) ")")                                                \
	D(allow_gid, "allow-group", .kind = IPC_OPT_PARSE, .parse = sup_parse_group,               \
	  .arg = "GROUP",                                                                          \
	  .help = "also serve members of GROUP (socket mode 0660). Host\n"                         \
		  "kernels (the host back end's C code) are native code\n"                         \
		  "run as gpuxd's user, inside its workers, so only that\n"                        \
		  "user and root may load them: never the group")                                  \
	D(host_sandbox_mode, "host-sandbox", .kind = IPC_OPT_WORD, .words = "auto|on|off",         \
	  .arg = "MODE",                                                                           \
	  .help = "auto (default: on with --allow-group or as root), on or\n"                      \
		  "off: host kernels run under a seccomp filter (memory,\n"                        \
		  "clocks, sleep; no files, sockets, processes, signals);\n"                       \
		  "a forbidden call fails the request as a kernel fault\n"                         \
		  "and restarts the worker. A kernel that corrupts its\n"                          \
		  "worker's memory can still reach past it")                                       \
	D(socket_mode, "socket-mode", .kind = IPC_OPT_MODE, .arg = "MODE", .max = 0777,            \
	  .help = "the socket's mode, octal (default 0600)")                                       \
	S("Connections (a process has one per gpux_connect()):")                                   \
	D(max_clients, "max-clients", .kind = IPC_OPT_UINT, .arg = "N", .min = 1,                  \
	  .max = IPC_WORKER_CLIENTS_MAX,                                                           \
	  .help = "at once, of everybody (default " IPC_OPT_STR(IPC_OPT_MAX_CLIENTS) ", at most "  \
		  "16384); the\n"                                                                 \
		  "last --reserved-clients of them only for gpuxd's user\n"                        \
		  "and root")                                                                      \
	D(reserved_clients, "reserved-clients", .kind = IPC_OPT_UINT, .arg = "N",                  \
	  .max = IPC_WORKER_CLIENTS_MAX - 1, .help = "(default max-clients / 16)")                 \
	D(max_clients_per_user, "max-clients-per-user", .kind = IPC_OPT_UINT, .arg = "N",          \
	  .max = IPC_OPT_CLIENTS_MAX,                                                              \
	  .help = "of one user other than those (default " IPC_OPT_STR(                            \
		  IPC_OPT_MAX_CLIENTS_PER_USER) ")")                                               \
	D(max_clients_per_process, "max-clients-per-process", .kind = IPC_OPT_UINT, .arg = "N",    \
	  .max = IPC_OPT_CLIENTS_MAX,                                                              \
	  .help = "of one process (default " IPC_OPT_STR(IPC_OPT_MAX_CLIENTS_PER_PROCESS) ")")     \
	D(admin_clients, "admin-clients", .kind = IPC_OPT_UINT, .arg = "N",                        \
	  .max = IPC_OPT_CLIENTS_MAX,                                                              \
	  .help = "beyond max-clients, kept for gpux status (default " IPC_OPT_STR(                \
		  IPC_OPT_ADMIN_CLIENTS) ")")                                                      \
	D(hello_timeout_ms, "hello-timeout-ms", .kind = IPC_OPT_UINT, .arg = "MS",                 \
	  .max = IPC_OPT_MS_MAX,                                                                   \
	  .help = "a new connection's time to say hello (default " IPC_OPT_STR(                    \
		  IPC_OPT_HELLO_TIMEOUT_MS) ")")                                                   \
	D(busy_hello_timeout_ms, "busy-hello-timeout-ms", .kind = IPC_OPT_UINT, .arg = "MS",       \
	  .max = IPC_OPT_MS_MAX,                                                                   \
	  .help = "that time while connections without hello hold a\n"                             \
		  "quarter of max-clients, or only the reserve is left\n"                          \
		  "(default " IPC_OPT_STR(IPC_OPT_BUSY_HELLO_TIMEOUT_MS) ")")                      \
	S("Priorities of queues (gpux_queue_open_ex(3)):")                                         \
	D(prio_rules, "priority", .kind = IPC_OPT_PARSE, .parse = sup_parse_priority,              \
	  .arg = "RULES",                                                                          \
	  .help = "who may give queues which priorities (-1 to 2), and\n"                          \
		  "theirs by default: WHO=MAX[/DEFAULT], several with\n"                          \
		  "commas or options, the first that matches holds; WHO\n"                        \
		  "is user:NAME, group:NAME (numbers too) or * (all).\n"                          \
		  "Without a rule: every priority for gpuxd's user and\n"                         \
		  "root, 0 at most for others; DEFAULT: 0, or MAX if lower")                       \
	S("Metrics:")                                                                              \
	D(metrics, "metrics", .kind = IPC_OPT_PARSE, .parse = sup_parse_metrics, .arg = "ADDR",    \
	  .help = "serve Prometheus metrics at http://ADDR/metrics\n"                              \
		  "(HOST:PORT, [V6]:PORT, or :PORT for every address;\n"                          \
		  "a process of its own, gpux-metrics)")                                           \
	D(metrics_per_user, "metrics-per-user", .kind = IPC_OPT_FLAG,                              \
	  .help = "label memory by user (uid): anyone who can reach\n"                             \
		  "the port sees who uses the devices, and how much")                              \
	S("Logs:")                                                                                 \
	D(log_level, "log-level", .kind = IPC_OPT_PARSE, .parse = sup_parse_log_level,             \
	  .arg = "LEVEL", .words = "err|warning|notice|info|debug",                                \
	  .help = "err, warning, notice, info (default) or debug")                                 \
	D(log_file, "log-file", .kind = IPC_OPT_TEXT, .arg = "PATH",                               \
	  .help = "log there (reopened on SIGHUP); by default the journal\n"                       \
		  "under systemd, syslog with --daemonize, else stderr;\n"                         \
		  "--private: $GPUX_LOG_FILE, else\n"                                              \
		  "$XDG_STATE_HOME/gpux/gpuxd.log (~/.local/state/...)")
/* clang-format on */

/* What gpuxd tells a worker, and what the worker reads from its command line. */
struct ipc_worker_opts {
	uint32_t device;
	const char *backend;
	int control_fd;
	int status_fd;
	int clients_fd;   /* -1: no table of clients (gpux top shows none of this worker's) */
	int ledger_fd;    /* -1: none (no per-user cap on device memory) */
	pid_t parent_pid; /* 0: none */
	bool probe;       /* list the devices and exit */
	bool compiler;    /* be the compile helper */
	bool sandbox;     /* host kernels run under a seccomp filter (worker/sandbox.c) */
	bool restart;     /* another worker served the device before (worker/cuda/cuda.c) */
	const char *cache_dir;
	uint64_t timeout_ms;         /* default request deadline */
	uint64_t max_timeout_ms;     /* the longest a client may ask for */
	uint64_t quota_shared;       /* shared-buffer bytes a client may have attached */
	uint64_t quota_shared_user;  /* those of one user's clients together (mappings) */
	uint64_t quota_device;       /* device bytes a client may hold in device buffers; 0: half */
	uint64_t quota_device_user;  /* ... a user, all its clients and devices; 0: half */
	uint64_t reserved_device;    /* ... only gpuxd's user and root may take; 0: a sixteenth */
	uint64_t device_reserve;     /* device bytes kept for requests' copies; 0: the default */
	uint64_t cache_bytes;        /* the device cache's budget; 0: a quarter of the device */
	uint64_t cache_ttl_ms;       /* idle entries older than this go; 0: the default */
	unsigned slots;              /* streams; 0: the worker's choice */
	uint64_t compile_memory;     /* a compiler's address space (RLIMIT_AS); 0: the default */
	uint64_t compile_timeout_ms; /* a compile's time; 0: the default */
};

/*
 * Where a worker starts from; gpuxd leaves out of the argv what is as here. A device and a
 * back end not given (device 0, the host) are told from given ones, so that gpuxd always
 * names them.
 */
#define IPC_WORKER_NO_DEVICE UINT32_MAX
#define IPC_WORKER_OPTS_DEFAULTS                                                                   \
	{                                                                                          \
		.device = IPC_WORKER_NO_DEVICE, .backend = NULL, .control_fd = -1,                 \
		.status_fd = -1, .clients_fd = -1, .ledger_fd = -1,                                \
		.timeout_ms = IPC_OPT_TIMEOUT_MS, .max_timeout_ms = IPC_OPT_MAX_TIMEOUT_MS,        \
		.quota_shared = UINT64_MAX, .quota_shared_user = UINT64_MAX,                       \
		.compile_timeout_ms = IPC_OPT_COMPILE_TIMEOUT_MS,                                  \
	}

/* gpux-worker's command line: the W and DW rows. */
extern const struct ipc_opt_prog ipc_worker_prog;

/* Room for a worker's argv: its program, two words per option, the NULL; and its text. */
#define IPC_OPT_NONE_(...)
#define IPC_OPT_ONE_(field, name, ...) +1
#define IPC_OPT_TEXT_(field, name, ...) +(2 + sizeof(name) + 21)
enum {
	IPC_WORKER_ARGV_MAX =
		2 + 2 * (0 IPC_OPTIONS(IPC_OPT_NONE_, IPC_OPT_ONE_, IPC_OPT_ONE_, IPC_OPT_NONE_)),
	IPC_WORKER_ARGV_TEXT =
		0 IPC_OPTIONS(IPC_OPT_NONE_, IPC_OPT_TEXT_, IPC_OPT_TEXT_, IPC_OPT_NONE_),
};
