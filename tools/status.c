/* SPDX-License-Identifier: MIT */
/* tools/status.c: gpux status: what gpuxd and its workers are doing. */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "ipc/admin.h"
#include "ipc/path.h"
#include "ipc/proto.h"
#include "tools.h"

#define STATUS_TIMEOUT_MS 5000

static const char *state_name(uint32_t st)
{
	switch (st) {
	case GPUX_DEVICE_STARTING:
		return "starting";
	case GPUX_DEVICE_READY:
		return "ready";
	case GPUX_DEVICE_RESTARTING:
		return "restarting";
	case GPUX_DEVICE_FAILED:
		return "failed";
	default:
		return "?";
	}
}

int tool_status_query(const char *path, struct ipc_status *ret, struct ipc_dev_status *devs)
{
	int fd = ipc_admin_connect(path, STATUS_TIMEOUT_MS, NULL, 0), r;

	if (fd < 0)
		return fd;
	r = ipc_admin_status(fd, STATUS_TIMEOUT_MS, ret, devs);
	(void)close(fd);
	return r;
}

static void print_json(const char *path, const struct ipc_status *st, const struct ipc_dev_status *devs)
{
	printf("{\"socket\":\"%s\",\"uptime_s\":%.3f,\"loop\":\"%s\",\"clients\":%u,"
	       "\"clients_total\":%llu,\"clients_refused\":%llu,\"devices\":[",
	       path, (double)st->uptime_ns / 1e9, st->loop, st->nclients,
	       (unsigned long long)st->clients_total, (unsigned long long)st->clients_refused);
	for (uint32_t i = 0; i < st->ndevices; i++) {
		const struct ipc_dev_status d = devs[i];
		const struct ipc_stats *s = &d.stats;

		printf("%s{\"index\":%u,\"name\":\"%s\",\"backend\":\"%s\",\"state\":\"%s\","
		       "\"pid\":%u,\"generation\":%u,\"restarts\":%u,\"deaths_recent\":%u,"
		       "\"clients\":%llu,\"inflight\":%llu,\"requests_done\":%llu,"
		       "\"requests_failed\":%llu,\"segments\":%llu,\"segment_bytes\":%llu,"
		       "\"modules\":%llu,\"module_mem_hits\":%llu,\"module_disk_hits\":%llu,"
		       "\"module_compiles\":%llu,\"cache_hits\":%llu,\"cache_misses\":%llu,"
		       "\"cache_bytes\":%llu,\"cache_entries\":%llu,\"cache_evictions\":%llu,"
		       "\"dbuf_bytes\":%llu,\"mem_total\":%llu,\"mem_free\":%llu,"
		       "\"graph_launches\":%llu,\"graph_requests\":%llu,\"loop_sleeps\":%llu,"
		       "\"kicks_sent\":%llu,\"socket_msgs\":%llu,\"blocking_waits\":%llu,"
		       "\"slot_waits\":%llu}",
		       i ? "," : "", i, d.info.name,
		       d.info.backend == GPUX_BACKEND_CUDA ? "cuda" : "host", state_name(d.state),
		       d.pid, d.generation, d.restarts, d.deaths_recent,
		       (unsigned long long)s->clients, (unsigned long long)s->inflight,
		       (unsigned long long)s->requests_done, (unsigned long long)s->requests_failed,
		       (unsigned long long)s->segments, (unsigned long long)s->segment_bytes,
		       (unsigned long long)s->modules_loaded, (unsigned long long)s->module_mem_hits,
		       (unsigned long long)s->module_disk_hits,
		       (unsigned long long)s->module_compiles, (unsigned long long)s->cache_hits,
		       (unsigned long long)s->cache_misses, (unsigned long long)s->cache_bytes,
		       (unsigned long long)s->cache_entries, (unsigned long long)s->cache_evictions,
		       (unsigned long long)s->dbuf_bytes, (unsigned long long)d.info.mem_total,
		       (unsigned long long)s->mem_free, (unsigned long long)s->graph_launches,
		       (unsigned long long)s->graph_requests, (unsigned long long)s->loop_sleeps,
		       (unsigned long long)s->kicks_sent, (unsigned long long)s->socket_msgs,
		       (unsigned long long)s->blocking_waits, (unsigned long long)s->slot_waits);
	}
	printf("]}\n");
}

static void print_table(const char *path, const struct ipc_status *st, const struct ipc_dev_status *devs)
{
	printf("gpuxd on %s: up %.1f s, %s loop, %u clients now (%llu in all, %llu refused)\n",
	       path, (double)st->uptime_ns / 1e9, st->loop, st->nclients,
	       (unsigned long long)st->clients_total, (unsigned long long)st->clients_refused);
	printf("%-4s %-10s %-8s %-4s %-8s %-8s %-8s %-10s %-8s %-16s %s\n", "DEV", "STATE", "PID",
	       "GEN", "RESTARTS", "CLIENTS", "INFLIGHT", "SERVED", "FAILED", "MODULES m/d/c",
	       "NAME");
	for (uint32_t i = 0; i < st->ndevices; i++) {
		const struct ipc_dev_status d = devs[i];
		const struct ipc_stats *s = &d.stats;
		char mods[32];

		(void)snprintf(mods, sizeof(mods), "%llu/%llu/%llu",
			       (unsigned long long)s->module_mem_hits,
			       (unsigned long long)s->module_disk_hits,
			       (unsigned long long)s->module_compiles);
		printf("%-4u %-10s %-8u %-4u %-8u %-8llu %-8llu %-10llu %-8llu %-16s %s (%s)\n", i,
		       state_name(d.state), d.pid, d.generation, d.restarts,
		       (unsigned long long)s->clients, (unsigned long long)s->inflight,
		       (unsigned long long)s->requests_done, (unsigned long long)s->requests_failed,
		       mods, d.info.name, d.info.backend == GPUX_BACKEND_CUDA ? "cuda" : "host");
		if (s->cache_hits || s->cache_misses || s->cache_bytes)
			printf("     device cache: %llu hits, %llu misses, %llu entries, %llu bytes, "
			       "%llu evictions\n",
			       (unsigned long long)s->cache_hits, (unsigned long long)s->cache_misses,
			       (unsigned long long)s->cache_entries,
			       (unsigned long long)s->cache_bytes,
			       (unsigned long long)s->cache_evictions);
		printf("     hand-offs: %llu graphs of %llu requests, %llu loop sleeps, %llu kicks "
		       "sent, %llu socket messages, %llu blocking waits, %llu slot waits\n",
		       (unsigned long long)s->graph_launches, (unsigned long long)s->graph_requests,
		       (unsigned long long)s->loop_sleeps, (unsigned long long)s->kicks_sent,
		       (unsigned long long)s->socket_msgs, (unsigned long long)s->blocking_waits,
		       (unsigned long long)s->slot_waits);
	}
}

int tool_status(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "json", no_argument, NULL, 'j' },
		{ NULL, 0, NULL, 0 },
	};
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	struct ipc_status st;
	char dir[128], path[128];
	const char *sock = getenv("GPUX_SOCKET");
	bool json = false;
	int c, r;

	while ((c = getopt_long(argc, argv, "", opts, NULL)) >= 0) {
		if (c == 's')
			sock = optarg;
		else if (c == 'j')
			json = true;
		else
			return TOOL_USAGE;
	}
	if (optind != argc)
		return TOOL_USAGE;
	if (!sock || !*sock) {
		if (ipc_default_socket(dir, path, sizeof(path)) < 0)
			return tool_fail("status", "no default socket path");
		sock = path;
	}
	r = tool_status_query(sock, &st, devs);
	if (r < 0) {
		char what[200];
		(void)snprintf(what, sizeof(what), "connect %s", sock);
		return tool_fail(what, r == -ENOENT || r == -ECONNREFUSED ? "no gpuxd listens there"
									  : strerror(-r));
	}
	if (json)
		print_json(sock, &st, devs);
	else
		print_table(sock, &st, devs);
	return TOOL_OK;
}
