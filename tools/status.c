/* SPDX-License-Identifier: MIT */
/* tools/status.c: gpux status: what gpuxd and its workers are doing. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "admin.h"
#include "json.h"
#include "metrics.h"
#include "path.h"
#include "proto.h"
#include "tools.h"

#define STATUS_TIMEOUT_MS 5000

int tool_status_query(const char *path, struct ipc_status *ret, struct ipc_dev_status *devs)
{
	int fd = ipc_admin_connect(path, STATUS_TIMEOUT_MS, NULL, 0), r;

	if (fd < 0)
		return fd;
	r = ipc_admin_status(fd, STATUS_TIMEOUT_MS, ret, devs);
	(void)close(fd);
	return r;
}

static json_t *hist_json(const struct ipc_hist *h)
{
	json_t *o = json_object(), *buckets = json_array();
	uint64_t cum = 0;

	for (unsigned b = 0; b < IPC_HIST_BUCKETS; b++) {
		cum += h->count[b];
		if (b + 1 < IPC_HIST_BUCKETS)
			(void)json_array_append_new(
				buckets,
				json_pack("{s:o,s:o}", "le_seconds",
					  tool_json_real((double)ipc_hist_bounds_ns[b] / 1e9),
					  "count", tool_json_u64(cum)));
	}
	(void)json_object_set_new(o, "count", tool_json_u64(cum));
	(void)json_object_set_new(o, "sum_seconds", tool_json_real((double)h->sum_ns / 1e9));
	(void)json_object_set_new(o, "buckets", buckets);
	return o;
}

/* Priorities and compute shares: the CUDA stream priority each level's streams got, the
 * requests each level started, what shares are cut from or why there are none. */
static json_t *sched_json(const struct ipc_sched *s)
{
	json_t *o = json_object(), *levels = json_array();

	for (unsigned l = 0; l < IPC_PRIO_LEVELS; l++)
		(void)json_array_append_new(levels,
					    json_pack("{s:i,s:o,s:o}", "priority",
						      (int)l + IPC_PRIO_MIN, "stream_priority",
						      s->stream_prio[l] == IPC_STREAM_PRIO_NONE
							      ? json_null()
							      : json_integer(s->stream_prio[l]),
						      "requests", tool_json_u64(s->launches[l])));
	(void)json_object_set_new(o, "priorities", levels);
	(void)json_object_set_new(o, "stream_priority_least", json_integer(s->stream_prio_least));
	(void)json_object_set_new(o, "stream_priority_greatest",
				  json_integer(s->stream_prio_greatest));
	(void)json_object_set_new(o, "priority_streams", json_integer(s->prio_streams));
	(void)json_object_set_new(o, "shares", json_boolean(s->share_sms != 0));
	(void)json_object_set_new(o, "share_sms", json_integer(s->share_sms));
	(void)json_object_set_new(o, "share_unit", json_integer(s->share_unit));
	(void)json_object_set_new(o, "share_min", json_integer(s->share_min));
	(void)json_object_set_new(o, "share_streams", json_integer(s->share_streams));
	(void)json_object_set_new(o, "green_contexts", json_integer(s->share_ctxs));
	(void)json_object_set_new(o, "shares_note", tool_json_text(s->share_note));
	return o;
}

static json_t *dev_json(uint32_t i, const struct ipc_dev_status *d)
{
	const struct ipc_stats *s = &d->stats;
	json_t *o = json_object(), *by = json_object(), *usage = json_array();
	char uuid[33];
	static const struct {
		const char *name;
		size_t off;
	} counters[] = {
	/* clang-format takes a braced initializer in a macro for a function's body. */
	/* clang-format off */
#define C(f) { #f, offsetof(struct ipc_stats, f) }
		/* clang-format on */
		C(clients),         C(inflight),         C(requests_done),   C(requests_failed),
		C(launches),        C(segments),         C(segment_bytes),   C(modules_loaded),
		C(module_mem_hits), C(module_disk_hits), C(module_compiles), C(cache_hits),
		C(cache_misses),    C(cache_bytes),      C(cache_entries),   C(cache_evictions),
		C(dbuf_bytes),      C(mem_free),         C(graph_launches),  C(graph_requests),
		C(loop_sleeps),     C(kicks_sent),       C(socket_msgs),     C(blocking_waits),
		C(slot_waits),      C(loop_waits),       C(copyin_requests), C(clients_active),
		C(clients_busy),
#undef C
	};

	for (unsigned k = 0; k < 16; k++)
		(void)snprintf(uuid + 2 * k, 3, "%02x", d->info.uuid[k]);
	(void)json_object_set_new(o, "index", json_integer(i));
	(void)json_object_set_new(o, "name", tool_json_text(d->info.name));
	(void)json_object_set_new(o, "uuid", json_string(uuid));
	(void)json_object_set_new(
		o, "backend", json_string(d->info.backend == GPUX_BACKEND_CUDA ? "cuda" : "host"));
	(void)json_object_set_new(o, "state", json_string(ipc_device_state_name(d->state)));
	(void)json_object_set_new(o, "pid", json_integer(d->pid));
	(void)json_object_set_new(o, "generation", json_integer(d->generation));
	(void)json_object_set_new(o, "restarts", json_integer(d->restarts));
	(void)json_object_set_new(o, "deaths_recent", json_integer(d->deaths_recent));
	(void)json_object_set_new(o, "launches_per_second", json_integer(d->launch_rate));
	(void)json_object_set_new(o, "mem_total", tool_json_u64(d->info.mem_total));
	for (size_t k = 0; k < sizeof(counters) / sizeof(counters[0]); k++) {
		uint64_t v;

		memcpy(&v, (const uint8_t *)s + counters[k].off, sizeof(v));
		(void)json_object_set_new(o, counters[k].name, tool_json_u64(v));
	}
	(void)json_object_set_new(o, "build_seconds", tool_json_real((double)s->build_ns / 1e9));
	for (unsigned k = 0; k < IPC_STATUS_CODES; k++)
		if (s->by_status[k])
			(void)json_object_set_new(by, ipc_status_name(-(int)k),
						  tool_json_u64(s->by_status[k]));
	(void)json_object_set_new(o, "requests_by_status", by);
	(void)json_object_set_new(o, "latency", hist_json(&s->latency));
	(void)json_object_set_new(o, "queue_time", hist_json(&s->queue));
	for (unsigned k = 0; k < IPC_USAGE_UIDS; k++) {
		const struct ipc_usage *u = &s->usage[k];

		if (!u->shared_bytes && !u->device_bytes)
			continue;
		(void)json_array_append_new(
			usage, json_pack("{s:o,s:o,s:o}", "uid",
					 u->uid == IPC_USAGE_OTHERS ? json_string("other")
								    : json_integer(u->uid),
					 "shared_bytes", tool_json_u64(u->shared_bytes),
					 "device_bytes", tool_json_u64(u->device_bytes)));
	}
	(void)json_object_set_new(o, "memory_by_user", usage);
	(void)json_object_set_new(o, "driver", tool_json_text(s->driver));
	(void)json_object_set_new(o, "cuda_driver_version", json_integer(s->driver_version));
	(void)json_object_set_new(o, "nvrtc_version", json_integer(s->nvrtc_version));
	(void)json_object_set_new(o, "scheduling", sched_json(&s->sched));
	return o;
}

static int print_json(const char *path, const struct ipc_status *st,
		      const struct ipc_dev_status *devs)
{
	json_t *root = json_object(), *arr = json_array();

	if (!root || !arr)
		return tool_fail("json", "out of memory");
	(void)json_object_set_new(root, "socket", tool_json_text(path));
	(void)json_object_set_new(root, "version", tool_json_text(st->version));
	(void)json_object_set_new(root, "stopping", json_boolean(st->flags & IPC_STATUS_STOPPING));
	(void)json_object_set_new(root, "uptime_seconds",
				  tool_json_real((double)st->uptime_ns / 1e9));
	(void)json_object_set_new(root, "loop", tool_json_text(st->loop));
	(void)json_object_set_new(root, "clients", json_integer(st->nclients));
	(void)json_object_set_new(root, "clients_total", tool_json_u64(st->clients_total));
	(void)json_object_set_new(root, "clients_refused", tool_json_u64(st->clients_refused));
	(void)json_object_set_new(root, "spares", json_integer(st->spares));
	for (uint32_t i = 0; i < st->ndevices; i++)
		(void)json_array_append_new(arr, dev_json(i, &devs[i]));
	(void)json_object_set_new(root, "devices", arr);
	return tool_json_print(root);
}

/* Two lines: the priorities' streams and requests, and the compute shares or why none. */
static void print_sched(const struct ipc_sched *s)
{
	printf("     priorities (-1..2):");
	for (unsigned l = 0; l < IPC_PRIO_LEVELS; l++) {
		printf(" %d: %llu requests", (int)l + IPC_PRIO_MIN,
		       (unsigned long long)s->launches[l]);
		if (s->stream_prio[l] != IPC_STREAM_PRIO_NONE)
			printf(" (CUDA stream priority %d)", s->stream_prio[l]);
		printf(l + 1 < IPC_PRIO_LEVELS ? "," : "\n");
	}
	if (s->share_sms)
		printf("     compute shares: green contexts of %u SMs, in units of %u (%u at "
		       "least); "
		       "%u made, %u streams\n",
		       s->share_sms, s->share_unit, s->share_min, s->share_ctxs, s->share_streams);
	else
		printf("     compute shares: none, shares are ignored: %s\n", s->share_note);
}

static void print_table(const char *path, const struct ipc_status *st,
			const struct ipc_dev_status *devs)
{
	printf("gpuxd %s on %s: up %.1f s, %s loop, %u client%s now (%llu in all, %llu "
	       "refused), %u ready for forked children%s\n",
	       st->version, path, (double)st->uptime_ns / 1e9, st->loop, st->nclients,
	       st->nclients == 1 ? "" : "s", (unsigned long long)st->clients_total,
	       (unsigned long long)st->clients_refused, st->spares,
	       st->flags & IPC_STATUS_STOPPING ? ", STOPPING: draining" : "");
	printf("%-4s %-10s %-8s %-4s %-8s %-8s %-8s %-10s %-8s %-9s %-16s %s\n", "DEV", "STATE",
	       "PID", "GEN", "RESTARTS", "CLIENTS", "INFLIGHT", "SERVED", "FAILED", "LAUNCH/S",
	       "MODULES m/d/c", "NAME");
	for (uint32_t i = 0; i < st->ndevices; i++) {
		const struct ipc_dev_status d = devs[i];
		const struct ipc_stats *s = &d.stats;
		char mods[32];

		(void)snprintf(mods, sizeof(mods), "%llu/%llu/%llu",
			       (unsigned long long)s->module_mem_hits,
			       (unsigned long long)s->module_disk_hits,
			       (unsigned long long)s->module_compiles);
		printf("%-4u %-10s %-8u %-4u %-8u %-8llu %-8llu %-10llu %-8llu %-9u %-16s %s "
		       "(%s)\n",
		       i, ipc_device_state_name(d.state), d.pid, d.generation, d.restarts,
		       (unsigned long long)s->clients, (unsigned long long)s->inflight,
		       (unsigned long long)s->requests_done, (unsigned long long)s->requests_failed,
		       d.launch_rate, mods, d.info.name,
		       d.info.backend == GPUX_BACKEND_CUDA ? "cuda" : "host");
		if (s->driver_version)
			printf("     driver %s, CUDA %u.%u, NVRTC %u.%u\n",
			       *s->driver ? s->driver : "?", s->driver_version / 1000,
			       s->driver_version % 1000 / 10, s->nvrtc_version / 1000,
			       s->nvrtc_version % 1000 / 10);
		if (s->cache_hits || s->cache_misses || s->cache_bytes)
			printf("     device cache: %llu hits, %llu misses, %llu entries, %llu "
			       "bytes, "
			       "%llu evictions\n",
			       (unsigned long long)s->cache_hits,
			       (unsigned long long)s->cache_misses,
			       (unsigned long long)s->cache_entries,
			       (unsigned long long)s->cache_bytes,
			       (unsigned long long)s->cache_evictions);
		print_sched(&s->sched);
		printf("     hand-offs: %llu graphs of %llu requests, %llu loop sleeps, %llu kicks "
		       "sent, %llu socket messages, %llu blocking waits, %llu slot waits, %llu "
		       "ends seen by the loop, %llu copied in by kernel\n",
		       (unsigned long long)s->graph_launches, (unsigned long long)s->graph_requests,
		       (unsigned long long)s->loop_sleeps, (unsigned long long)s->kicks_sent,
		       (unsigned long long)s->socket_msgs, (unsigned long long)s->blocking_waits,
		       (unsigned long long)s->slot_waits, (unsigned long long)s->loop_waits,
		       (unsigned long long)s->copyin_requests);
	}
}

int tool_status(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' }, { "json", no_argument, NULL, 'j' },
		{ "prometheus", no_argument, NULL, 'p' },   { "per-user", no_argument, NULL, 'u' },
		{ "help", no_argument, NULL, 'h' },         { NULL, 0, NULL, 0 },
	};
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct ipc_status st;
	char path[IPC_SOCKET_PATH_MAX + 1], why[256];
	const char *sock = NULL;
	bool json = false, prom = false, per_user = false, private_path;
	int c, fd, r;

	while ((c = tool_getopt(argc, argv, opts, TOOL_USAGE_STATUS)) >= 0) {
		if (c == 's')
			sock = optarg;
		else if (c == 'j')
			json = true;
		else if (c == 'u')
			per_user = true;
		else
			prom = true;
	}
	if (optind != argc)
		tool_usage_error(TOOL_USAGE_STATUS, "status: unexpected argument \"%s\"",
				 argv[optind]);
	if (json && prom)
		tool_usage_error(TOOL_USAGE_STATUS, "status: --json or --prometheus, not both");
	if (per_user && !prom)
		tool_usage_error(TOOL_USAGE_STATUS, "status: --per-user goes with --prometheus");
	if (!sock) {
		if (ipc_client_socket(path, sizeof(path), &private_path) < 0)
			return tool_fail("status", "the default socket path is too long");
		sock = path;
	}
	fd = ipc_admin_connect(sock, STATUS_TIMEOUT_MS, why, sizeof(why));
	if (fd < 0) {
		char what[IPC_SOCKET_PATH_MAX + 16];

		(void)snprintf(what, sizeof(what), "connect %s", sock);
		return tool_fail(what,
				 fd == -ENOENT         ? "no such socket: no gpuxd serves this path"
				 : fd == -ECONNREFUSED ? "nobody listens there (its gpuxd is gone)"
				 : fd == -EACCES
					 ? "permission denied: the socket's mode or group keeps "
					   "this user out (gpuxd --allow-group)"
				 : *why ? why
					: strerror(-fd));
	}
	r = ipc_admin_status(fd, STATUS_TIMEOUT_MS, &st, devs);
	(void)close(fd);
	if (r < 0)
		return tool_fail("status", strerror(-r));
	if (json)
		return print_json(sock, &st, devs);
	if (prom) {
		if (ipc_metrics_write(stdout, &st, devs, per_user ? IPC_METRICS_PER_USER : 0) < 0 ||
		    fflush(stdout) != 0)
			return tool_fail("status", "cannot write to stdout");
		return TOOL_OK;
	}
	print_table(sock, &st, devs);
	return TOOL_OK;
}
