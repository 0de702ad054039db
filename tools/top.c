/* SPDX-License-Identifier: MIT */
/* tools/top.c: gpux top: gpuxd's devices and clients, live on a terminal or in snapshots for scripts. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <poll.h>
#include <pwd.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "admin.h"
#include "json.h"
#include "macro.h"
#include "metrics.h"
#include "path.h"
#include "proto.h"
#include "tools.h"

#define TOP_TIMEOUT_MS 5000

/*
 * Each frame is two looks at gpuxd, an interval apart, on one admin connection: the status
 * (every device's counters, as gpux status gets them) and the clients (CLIENTS: each one's
 * pid, uid and what its workers' tables count). Rates are the counters' growth over the
 * interval; a worker that restarted in between starts its counters again, and shows none.
 */
struct look {
	uint64_t t_ns;
	struct ipc_status st;
	struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct ipc_client_info *clients; /* by id */
	size_t nclients;
	bool have_clients; /* gpuxd answered CLIENTS (an older one does not know it) */
};

struct top {
	const char *sock;
	int fd;
	bool ask_clients;
	struct look a, b; /* the look before, and the last */
	struct look *prev, *cur;
	double interval;
	bool live, json;
	unsigned rows, cols; /* of the terminal, live */
};

static volatile sig_atomic_t stop, resized;

static void on_stop(int sig)
{
	stop = 1;
}

static void on_winch(int sig)
{
	resized = 1;
}

static void look_clear(struct look *l)
{
	free(l->clients);
	l->clients = NULL;
	l->nclients = 0;
	l->have_clients = false;
}

/* One look at gpuxd: 0, or -errno with `why` (a reconnection is tried once). */
static int look_take(struct top *t, struct look *l, char *why, size_t why_len)
{
	int r;

	look_clear(l);
	for (int tries = 0; tries < 2; tries++) {
		if (t->fd < 0) {
			t->fd = ipc_admin_connect(t->sock, TOP_TIMEOUT_MS, why, why_len);
			if (t->fd < 0)
				return t->fd;
		}
		r = ipc_admin_status(t->fd, TOP_TIMEOUT_MS, &l->st, l->devs);
		if (r == 0 && t->ask_clients) {
			r = ipc_admin_clients(t->fd, TOP_TIMEOUT_MS, &l->clients, &l->nclients);
			/* A gpuxd that does not know the question drops the connection: devices
			 * only, from now on. */
			if (r == -ECONNRESET) {
				t->ask_clients = false;
				r = -EAGAIN;
			}
			l->have_clients = r == 0;
		}
		if (r == 0) {
			l->t_ns = tool_now();
			return 0;
		}
		t->fd = safe_close(t->fd);
		(void)snprintf(why, why_len, "%s",
			       r == -EAGAIN ? "gpuxd dropped the connection" : strerror(-r));
	}
	return r;
}

/* ---- what a frame shows ---- */

/* A counter's growth per second from the look before, or NAN (no look before, a restart). */
static double rate(const struct top *t, uint64_t before, uint64_t now, bool same_worker)
{
	double secs;

	if (!t->prev || !same_worker || now < before)
		return NAN;
	secs = (double)(t->cur->t_ns - t->prev->t_ns) / 1e9;
	return secs > 0 ? (double)(now - before) / secs : NAN;
}

static bool same_worker(const struct top *t, uint32_t i)
{
	return t->prev && i < t->prev->st.ndevices && t->prev->devs[i].pid == t->cur->devs[i].pid &&
	       t->prev->devs[i].generation == t->cur->devs[i].generation;
}

static double dev_requests_rate(const struct top *t, uint32_t i)
{
	const struct ipc_stats *s = &t->cur->devs[i].stats;
	const struct ipc_stats *p =
		t->prev && i < t->prev->st.ndevices ? &t->prev->devs[i].stats : s;

	return rate(t, p->requests_done + p->requests_failed, s->requests_done + s->requests_failed,
		    same_worker(t, i));
}

static double dev_launch_rate(const struct top *t, uint32_t i)
{
	const struct ipc_stats *s = &t->cur->devs[i].stats;
	const struct ipc_stats *p =
		t->prev && i < t->prev->st.ndevices ? &t->prev->devs[i].stats : s;

	return rate(t, p->launches, s->launches, same_worker(t, i));
}

/* The device cache's hits of all its lookups so far, or NAN when it had none. */
static double cache_hit(const struct ipc_stats *s)
{
	uint64_t all = s->cache_hits + s->cache_misses;

	return all ? (double)s->cache_hits / (double)all : NAN;
}

/* A client's requests per second: its requests now against the look before (by id). */
static double client_rate(const struct top *t, const struct ipc_client_info *c)
{
	const struct look *p = t->prev;
	size_t lo = 0, hi;

	if (!p || !p->have_clients)
		return NAN;
	hi = p->nclients;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (p->clients[mid].id < c->id)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == p->nclients || p->clients[lo].id != c->id)
		return NAN;
	return rate(t, p->clients[lo].requests, c->requests, true);
}

/* The process's command name (/proc/PID/comm), or "?" when it cannot be read. */
static void command(uint32_t pid, char *buf, size_t len)
{
	char path[64];
	FILE *f;

	(void)snprintf(buf, len, "?");
	(void)snprintf(path, sizeof(path), "/proc/%u/comm", pid);
	f = fopen(path, "re");
	if (!f)
		return;
	if (fgets(buf, (int)len, f))
		buf[strcspn(buf, "\n")] = '\0';
	(void)fclose(f);
	for (char *p = buf; *p; p++)
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
}

static void user(uint32_t uid, char *buf, size_t len)
{
	struct passwd *pw = getpwuid(uid);

	if (pw && strlen(pw->pw_name) < len)
		(void)snprintf(buf, len, "%s", pw->pw_name);
	else
		(void)snprintf(buf, len, "%u", uid);
}

/* ---- text ---- */

/* A rate as "1.23M", "456.7k", "89.0"; "-" for none. */
static void fmt_rate(double v, char *buf, size_t len)
{
	if (isnan(v))
		(void)snprintf(buf, len, "-");
	else if (v >= 1e6)
		(void)snprintf(buf, len, "%.2fM", v / 1e6);
	else if (v >= 1e3)
		(void)snprintf(buf, len, "%.1fk", v / 1e3);
	else
		(void)snprintf(buf, len, "%.1f", v);
}

static void fmt_bytes(uint64_t v, char *buf, size_t len)
{
	static const char *const units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double d = (double)v;
	unsigned u = 0;

	while (d >= 1024 && u + 1 < ARRAY_SIZE(units)) {
		d /= 1024;
		u++;
	}
	(void)snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", d, units[u]);
}

static void fmt_uptime(uint64_t ns, char *buf, size_t len)
{
	uint64_t s = ns / NSEC_PER_SEC;

	if (s >= 86400)
		(void)snprintf(buf, len, "%llud%02lluh", (unsigned long long)(s / 86400),
			       (unsigned long long)(s % 86400 / 3600));
	else if (s >= 3600)
		(void)snprintf(buf, len, "%lluh%02llum", (unsigned long long)(s / 3600),
			       (unsigned long long)(s % 3600 / 60));
	else
		(void)snprintf(buf, len, "%llum%02llus", (unsigned long long)(s / 60),
			       (unsigned long long)(s % 60));
}

/* A line of the frame, cut to the terminal's width when live; false once it is full. */
static bool line(struct top *t, unsigned *nlines, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static bool line(struct top *t, unsigned *nlines, const char *fmt, ...)
{
	char buf[512];
	va_list ap;

	if (t->live && t->rows && *nlines + 1 >= t->rows)
		return false;
	va_start(ap, fmt);
	(void)vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (t->live && t->cols && strlen(buf) > t->cols)
		buf[t->cols] = '\0';
	/* Live: each line ends by clearing what the last frame left to its right. */
	(void)printf("%s%s\n", buf, t->live ? "\033[K" : "");
	(*nlines)++;
	return true;
}

static int cmp_by_rate(const void *a, const void *b, void *arg)
{
	const struct top *t = arg;
	const struct ipc_client_info *x = a, *y = b;
	double rx = client_rate(t, x), ry = client_rate(t, y);

	rx = isnan(rx) ? -1 : rx;
	ry = isnan(ry) ? -1 : ry;
	if (rx != ry)
		return rx < ry ? 1 : -1;
	if (x->inflight != y->inflight)
		return x->inflight < y->inflight ? 1 : -1;
	return x->id < y->id ? -1 : x->id > y->id;
}

static void render_text(struct top *t)
{
	const struct look *l = t->cur;
	char up[32], when[32], r1[16], r2[16], b1[16], b2[16], hit[16], cmd[32], who[32];
	struct ipc_client_info *sorted = NULL;
	time_t now = time(NULL);
	unsigned nl = 0;
	size_t nclients;
	struct tm tm;

	(void)localtime_r(&now, &tm);
	(void)strftime(when, sizeof(when), "%H:%M:%S", &tm);
	fmt_uptime(l->st.uptime_ns, up, sizeof(up));
	if (t->live)
		(void)fputs("\033[H", stdout);
	/* The clients of the devices, shown below; gpuxd's count has gpux top and gpux status
	 * among them too. */
	nclients = l->have_clients ? l->nclients : l->st.nclients;
	(void)line(t, &nl, "gpux top - %s - gpuxd %s on %s, up %s, %zu client%s%s", when,
		   l->st.version, t->sock, up, nclients, nclients == 1 ? "" : "s",
		   l->st.flags & IPC_STATUS_STOPPING ? ", STOPPING" : "");
	(void)line(t, &nl, "%-3s %-10s %7s %9s %9s %6s %21s %6s  %s", "DEV", "STATE", "CLIENTS",
		   "REQ/S", "LAUNCH/S", "QUEUE", "MEMORY USED/TOTAL", "CACHE", "NAME");
	for (uint32_t i = 0; i < l->st.ndevices; i++) {
		const struct ipc_dev_status *d = &l->devs[i];
		char mem[32];

		fmt_rate(dev_requests_rate(t, i), r1, sizeof(r1));
		fmt_rate(dev_launch_rate(t, i), r2, sizeof(r2));
		fmt_bytes(d->stats.mem_free <= d->info.mem_total
				  ? d->info.mem_total - d->stats.mem_free
				  : 0,
			  b1, sizeof(b1));
		fmt_bytes(d->info.mem_total, b2, sizeof(b2));
		(void)snprintf(mem, sizeof(mem), "%s/%s", b1, b2);
		if (isnan(cache_hit(&d->stats)))
			(void)snprintf(hit, sizeof(hit), "-");
		else
			(void)snprintf(hit, sizeof(hit), "%.1f%%", 100 * cache_hit(&d->stats));
		(void)line(t, &nl, "%-3u %-10s %7llu %9s %9s %6llu %21s %6s  %s (%s)", i,
			   ipc_device_state_name(d->state), (unsigned long long)d->stats.clients,
			   r1, r2, (unsigned long long)d->stats.inflight, mem, hit, d->info.name,
			   d->info.backend == GPUX_BACKEND_CUDA ? "cuda" : "host");
	}
	(void)line(t, &nl, "%s", "");
	if (!l->have_clients) {
		(void)line(t, &nl, "(this gpuxd does not list its clients)");
		goto out;
	}
	(void)line(t, &nl, "%8s %-10s %-16s %9s %8s %10s %10s %4s", "PID", "USER", "COMMAND",
		   "REQ/S", "INFLIGHT", "SHARED", "DEVICE", "DEVS");
	if (l->nclients) {
		sorted = malloc(l->nclients * sizeof(*sorted));
		if (!sorted)
			goto out;
		memcpy(sorted, l->clients, l->nclients * sizeof(*sorted));
		qsort_r(sorted, l->nclients, sizeof(*sorted), cmp_by_rate, t);
	}
	for (size_t k = 0; k < l->nclients; k++) {
		const struct ipc_client_info *c = &sorted[k];

		command(c->pid, cmd, sizeof(cmd));
		user(c->uid, who, sizeof(who));
		fmt_rate(client_rate(t, c), r1, sizeof(r1));
		fmt_bytes(c->shared_bytes, b1, sizeof(b1));
		fmt_bytes(c->device_bytes, b2, sizeof(b2));
		if (!line(t, &nl, "%8u %-10.10s %-16.16s %9s %8u %10s %10s %4u", c->pid, who, cmd,
			  r1, c->inflight, b1, b2, c->channels)) {
			break;
		}
	}
out:
	free(sorted);
	/* Live: what the last frame had below this one goes. */
	if (t->live)
		(void)fputs("\033[J", stdout);
	else
		(void)fputc('\n', stdout);
	(void)fflush(stdout);
}

/* ---- JSON ---- */

static json_t *rate_json(double v)
{
	return tool_json_real(v);
}

static int render_json(const struct top *t)
{
	const struct look *l = t->cur;
	json_t *root = json_object(), *devs = json_array(), *clients = json_array();
	char cmd[32], who[32];

	if (!root || !devs || !clients)
		return tool_fail("top", "out of memory");
	(void)json_object_set_new(root, "socket", tool_json_text(t->sock));
	(void)json_object_set_new(root, "version", tool_json_text(l->st.version));
	(void)json_object_set_new(root, "interval_seconds",
				  tool_json_real((double)(t->cur->t_ns - t->prev->t_ns) / 1e9));
	(void)json_object_set_new(root, "uptime_seconds",
				  tool_json_real((double)l->st.uptime_ns / 1e9));
	(void)json_object_set_new(root, "stopping",
				  json_boolean(l->st.flags & IPC_STATUS_STOPPING));
	for (uint32_t i = 0; i < l->st.ndevices; i++) {
		const struct ipc_dev_status *d = &l->devs[i];

		(void)json_array_append_new(
			devs, json_pack("{s:i,s:o,s:s,s:s,s:o,s:o,s:o,s:o,s:o,s:o,s:o}", "index",
					(int)i, "name", tool_json_text(d->info.name), "backend",
					d->info.backend == GPUX_BACKEND_CUDA ? "cuda" : "host",
					"state", ipc_device_state_name(d->state), "clients",
					tool_json_u64(d->stats.clients), "requests_per_second",
					rate_json(dev_requests_rate(t, i)), "launches_per_second",
					rate_json(dev_launch_rate(t, i)), "queue",
					tool_json_u64(d->stats.inflight), "memory_total",
					tool_json_u64(d->info.mem_total), "memory_free",
					tool_json_u64(d->stats.mem_free), "cache_hit_ratio",
					tool_json_real(cache_hit(&d->stats))));
	}
	(void)json_object_set_new(root, "devices", devs);
	for (size_t k = 0; l->have_clients && k < l->nclients; k++) {
		const struct ipc_client_info *c = &l->clients[k];

		command(c->pid, cmd, sizeof(cmd));
		user(c->uid, who, sizeof(who));
		(void)json_array_append_new(
			clients,
			json_pack("{s:o,s:I,s:I,s:o,s:o,s:o,s:o,s:I,s:o,s:o,s:I}", "id",
				  tool_json_u64(c->id), "pid", (json_int_t)c->pid, "uid",
				  (json_int_t)c->uid, "user", tool_json_text(who), "command",
				  tool_json_text(cmd), "requests_per_second",
				  rate_json(client_rate(t, c)), "requests",
				  tool_json_u64(c->requests), "inflight", (json_int_t)c->inflight,
				  "shared_bytes", tool_json_u64(c->shared_bytes), "device_bytes",
				  tool_json_u64(c->device_bytes), "devices",
				  (json_int_t)c->channels));
	}
	if (l->have_clients) {
		(void)json_object_set_new(root, "clients", clients);
	} else {
		json_decref(clients);
		(void)json_object_set_new(root, "clients", json_null());
	}
	return tool_json_print(root);
}

/* ---- the terminal ---- */

static struct termios saved_tty;
static bool tty_raw;

static void tty_restore(void)
{
	if (tty_raw)
		(void)tcsetattr(STDIN_FILENO, TCSANOW, &saved_tty);
	tty_raw = false;
	/* The cursor back, below what was drawn. */
	(void)fputs("\033[?25h", stdout);
	(void)fflush(stdout);
}

/* Keys without Enter, unechoed, when stdin is the terminal ('q' quits). */
static void tty_setup(struct top *t)
{
	struct winsize ws;
	struct termios raw;

	if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0) {
		t->rows = ws.ws_row;
		t->cols = ws.ws_col;
	}
	if (!tty_raw && isatty(STDIN_FILENO) && tcgetattr(STDIN_FILENO, &saved_tty) == 0) {
		raw = saved_tty;
		raw.c_lflag &= ~(tcflag_t)(ICANON | ECHO);
		raw.c_cc[VMIN] = 0;
		raw.c_cc[VTIME] = 0;
		tty_raw = tcsetattr(STDIN_FILENO, TCSANOW, &raw) == 0;
	}
	(void)fputs("\033[?25l\033[2J", stdout);
}

/* Wait the interval, or less: a key (q quits), a signal. */
static void wait_interval(const struct top *t)
{
	uint64_t until = tool_now() + (uint64_t)(t->interval * 1e9);

	while (!stop && !resized) {
		struct pollfd p = { .fd = STDIN_FILENO, .events = POLLIN };
		uint64_t now = tool_now();
		char c;

		if (now >= until)
			return;
		if (poll(&p, tty_raw ? 1 : 0, (int)((until - now) / 1000000) + 1) > 0 &&
		    read(STDIN_FILENO, &c, 1) == 1 && (c == 'q' || c == 'Q'))
			stop = 1;
	}
}

int tool_top(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "interval", required_argument, NULL, 'i' },
		{ "count", required_argument, NULL, 'n' },
		{ "batch", no_argument, NULL, 'b' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	static struct top t = { .fd = -1, .ask_clients = true, .interval = 1.0 };
	char path[IPC_SOCKET_PATH_MAX + 1], why[256] = "";
	struct sigaction sa = { .sa_handler = on_stop };
	uint64_t count = 0, frames = 0;
	bool batch = false, private_path;
	int c, r, rc = TOOL_OK;

	while ((c = tool_getopt(argc, argv, opts, TOOL_USAGE_TOP)) >= 0) {
		if (c == 's') {
			t.sock = optarg;
		} else if (c == 'i') {
			char *end;

			errno = 0;
			t.interval = strtod(optarg, &end);
			if (errno || end == optarg || *end || !(t.interval >= 0.1) ||
			    t.interval > 3600)
				tool_usage_error(
					TOOL_USAGE_TOP,
					"top: --interval: bad value \"%s\" (0.1 to 3600 s)",
					optarg);
		} else if (c == 'n') {
			count = tool_parse_u64("top", TOOL_USAGE_TOP, "--count", optarg, 1,
					       UINT32_MAX);
		} else if (c == 'b') {
			batch = true;
		} else {
			t.json = true;
		}
	}
	if (optind != argc)
		tool_usage_error(TOOL_USAGE_TOP, "top: unexpected argument \"%s\"", argv[optind]);
	if (t.json && (batch || count > 1))
		tool_usage_error(TOOL_USAGE_TOP,
				 "top: --json is one snapshot: no --batch or --count");
	if (t.json)
		count = 1;
	if (!t.sock) {
		if (ipc_client_socket(path, sizeof(path), &private_path) < 0)
			return tool_fail("top", "the default socket path is too long");
		t.sock = path;
	}
	t.live = !batch && !t.json && isatty(STDOUT_FILENO);
	(void)sigaction(SIGINT, &sa, NULL);
	(void)sigaction(SIGTERM, &sa, NULL);
	sa.sa_handler = on_winch;
	(void)sigaction(SIGWINCH, &sa, NULL);
	t.prev = NULL;
	t.cur = &t.a;
	r = look_take(&t, t.cur, why, sizeof(why));
	if (r < 0) {
		char what[IPC_SOCKET_PATH_MAX + 16];

		(void)snprintf(what, sizeof(what), "connect %s", t.sock);
		return tool_fail(what, *why ? why : strerror(-r));
	}
	if (t.live) {
		tty_setup(&t);
		(void)atexit(tty_restore);
		render_text(&t);
	}
	while (!stop && (!count || frames < count)) {
		wait_interval(&t);
		if (stop)
			break;
		if (resized) {
			resized = 0;
			if (t.live)
				tty_setup(&t);
		}
		t.prev = t.cur;
		t.cur = t.cur == &t.a ? &t.b : &t.a;
		r = look_take(&t, t.cur, why, sizeof(why));
		if (r < 0) {
			/* Live, gpuxd's going is shown and waited out; else it ends the run. */
			t.cur = t.prev;
			t.prev = NULL;
			if (!t.live) {
				rc = tool_fail("top", why);
				break;
			}
			(void)printf("\033[H\033[2Jgpux top: %s: %s (trying again)\033[K\n", t.sock,
				     why);
			(void)fflush(stdout);
			continue;
		}
		frames++;
		if (t.json)
			rc = render_json(&t);
		else
			render_text(&t);
	}
	if (t.live)
		tty_restore();
	look_clear(&t.a);
	look_clear(&t.b);
	t.fd = safe_close(t.fd);
	return rc;
}
