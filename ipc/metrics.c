/* SPDX-License-Identifier: MIT */
/* ipc/metrics.c: request-time histograms and the Prometheus text form of a STATUS. */
#include <assert.h>
#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "macro.h"
#include "metrics.h"

const uint64_t ipc_hist_bounds_ns[IPC_HIST_BUCKETS - 1] = {
	2500,       5000,       10000,       25000,       50000,       100000,
	250000,     500000,     1000000,     2500000,     5000000,     10000000,
	25000000,   50000000,   100000000,   250000000,   500000000,   1000000000,
	2500000000, 5000000000, 10000000000, 30000000000, 60000000000,
};

void ipc_hist_add(struct ipc_hist *h, uint64_t ns)
{
	unsigned lo = 0, hi = IPC_HIST_BUCKETS - 1;

	/* The first bucket whose bound is at least ns: a binary search of 23 bounds. */
	while (lo < hi) {
		unsigned mid = (lo + hi) / 2;

		if (ns <= ipc_hist_bounds_ns[mid])
			hi = mid;
		else
			lo = mid + 1;
	}
	h->count[lo]++;
	h->sum_ns += ns;
}

/* ---- the text format ---- */

static const char *const state_names[] = { "starting", "ready", "restarting", "failed" };

const char *ipc_device_state_name(uint32_t state)
{
	if (state < IPC_DEVICE_STARTING || state > IPC_DEVICE_FAILED)
		return "?";
	return state_names[state - IPC_DEVICE_STARTING];
}

/* A label value with \, " and newlines escaped, as the format asks. */
static void put_label(FILE *f, const char *name, const char *value)
{
	(void)fprintf(f, "%s=\"", name);
	for (const char *p = value; *p; p++) {
		if (*p == '\\' || *p == '"')
			(void)fprintf(f, "\\%c", *p);
		else if (*p == '\n')
			(void)fputs("\\n", f);
		else
			(void)fputc(*p, f);
	}
	(void)fputc('"', f);
}

static void family(FILE *f, const char *name, const char *type, const char *help)
{
	(void)fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void sample_u64(FILE *f, const char *name, uint32_t device, uint64_t v)
{
	(void)fprintf(f, "%s{device=\"%u\"} %llu\n", name, device, (unsigned long long)v);
}

static void sample_seconds(FILE *f, const char *name, uint32_t device, uint64_t ns)
{
	(void)fprintf(f, "%s{device=\"%u\"} %.9f\n", name, device, (double)ns / 1e9);
}

/* A counter or gauge with one value per device, the value at `off` in its ipc_dev_status
 * (`size` bytes: 4 or 8). */
static void per_device(FILE *f, const struct ipc_status *st, const struct ipc_dev_status *devs,
		       const char *name, const char *type, const char *help, size_t off,
		       size_t size)
{
	assert(size == sizeof(uint32_t) || size == sizeof(uint64_t));
	family(f, name, type, help);
	for (uint32_t i = 0; i < st->ndevices; i++) {
		const uint8_t *p = (const uint8_t *)&devs[i] + off;
		uint64_t v = 0;

		if (size == sizeof(uint32_t)) {
			uint32_t v32;
			memcpy(&v32, p, sizeof(v32));
			v = v32;
		} else {
			memcpy(&v, p, sizeof(v));
		}
		sample_u64(f, name, i, v);
	}
}

static void histogram(FILE *f, const struct ipc_status *st, const struct ipc_dev_status *devs,
		      const char *name, const char *help, size_t off)
{
	family(f, name, "histogram", help);
	for (uint32_t i = 0; i < st->ndevices; i++) {
		struct ipc_hist h;
		uint64_t cum = 0;

		memcpy(&h, (const uint8_t *)&devs[i] + off, sizeof(h));
		for (unsigned b = 0; b < IPC_HIST_BUCKETS; b++) {
			cum += h.count[b];
			if (b + 1 < IPC_HIST_BUCKETS)
				(void)fprintf(f, "%s_bucket{device=\"%u\",le=\"%g\"} %llu\n", name,
					      i, (double)ipc_hist_bounds_ns[b] / 1e9,
					      (unsigned long long)cum);
			else
				(void)fprintf(f, "%s_bucket{device=\"%u\",le=\"+Inf\"} %llu\n",
					      name, i, (unsigned long long)cum);
		}
		(void)fprintf(f, "%s_sum{device=\"%u\"} %.9f\n", name, i, (double)h.sum_ns / 1e9);
		(void)fprintf(f, "%s_count{device=\"%u\"} %llu\n", name, i,
			      (unsigned long long)cum);
	}
}

static void device_info(FILE *f, const struct ipc_status *st, const struct ipc_dev_status *devs)
{
	family(f, "gpux_device_info", "gauge",
	       "A device gpuxd serves and its worker's driver (the value is always 1).");
	for (uint32_t i = 0; i < st->ndevices; i++) {
		const struct ipc_dev_status *d = &devs[i];
		char uuid[33], num[24];

		for (unsigned k = 0; k < 16; k++)
			(void)snprintf(uuid + 2 * k, 3, "%02x", d->info.uuid[k]);
		(void)fprintf(f, "gpux_device_info{device=\"%u\",", i);
		put_label(f, "name", d->info.name);
		(void)fputc(',', f);
		put_label(f, "uuid", uuid);
		(void)fputc(',', f);
		put_label(f, "backend", d->info.backend == IPC_BACKEND_CUDA ? "cuda" : "host");
		(void)fputc(',', f);
		put_label(f, "driver", d->stats.driver);
		(void)snprintf(num, sizeof(num), "%u.%u", d->stats.driver_version / 1000,
			       d->stats.driver_version % 1000 / 10);
		(void)fputc(',', f);
		put_label(f, "cuda_version", d->stats.driver_version ? num : "");
		(void)snprintf(num, sizeof(num), "%u.%u", d->stats.nvrtc_version / 1000,
			       d->stats.nvrtc_version % 1000 / 10);
		(void)fputc(',', f);
		put_label(f, "nvrtc_version", d->stats.nvrtc_version ? num : "");
		(void)fputs("} 1\n", f);
	}
}

static void device_state(FILE *f, const struct ipc_status *st, const struct ipc_dev_status *devs)
{
	family(f, "gpux_device_state", "gauge", "1 for the state each device is in, else 0.");
	for (uint32_t i = 0; i < st->ndevices; i++)
		for (uint32_t s = IPC_DEVICE_STARTING; s <= IPC_DEVICE_FAILED; s++)
			(void)fprintf(f, "gpux_device_state{device=\"%u\",state=\"%s\"} %d\n", i,
				      ipc_device_state_name(s), devs[i].state == s);
}

static void requests(FILE *f, const struct ipc_status *st, const struct ipc_dev_status *devs)
{
	family(f, "gpux_requests_total", "counter",
	       "Requests (launches and copies) finished, by the status they ended with.");
	for (uint32_t i = 0; i < st->ndevices; i++)
		for (unsigned k = 0; k < IPC_STATUS_CODES; k++) {
			const char *name = ipc_status_name(-(int)k);

			if (strcmp(name, "unknown") == 0)
				continue;
			(void)fprintf(f, "gpux_requests_total{device=\"%u\",status=\"%s\"} %llu\n",
				      i, name, (unsigned long long)devs[i].stats.by_status[k]);
		}
}

static void usage(FILE *f, const struct ipc_status *st, const struct ipc_dev_status *devs,
		  const char *name, const char *help, bool device_mem, bool per_user)
{
	family(f, name, "gauge", help);
	for (uint32_t i = 0; i < st->ndevices; i++) {
		uint64_t sum = 0;

		for (unsigned k = 0; k < IPC_USAGE_UIDS; k++) {
			const struct ipc_usage *u = &devs[i].stats.usage[k];
			uint64_t v = device_mem ? u->device_bytes : u->shared_bytes;

			sum += v;
			if (!per_user || (!u->shared_bytes && !u->device_bytes))
				continue;
			if (u->uid == IPC_USAGE_OTHERS)
				(void)fprintf(f, "%s{device=\"%u\",uid=\"other\"}", name, i);
			else
				(void)fprintf(f, "%s{device=\"%u\",uid=\"%u\"}", name, i, u->uid);
			(void)fprintf(f, " %llu\n", (unsigned long long)v);
		}
		if (!per_user)
			sample_u64(f, name, i, sum);
	}
}

/* Where a field of a device's status is, and how wide (4 or 8 bytes). */
#define DEV(field)                                                                                 \
	offsetof(struct ipc_dev_status, field), sizeof(((struct ipc_dev_status *)0)->field)
#define STAT(field) DEV(stats.field)

/* A number per device: a field of its status. */
static const struct {
	const char *name, *type, *help;
	size_t off, size;
} counts[] = {
	{ "gpux_worker_restarts_total", "counter", "Times the device's worker was started again.",
	  DEV(restarts) },
	{ "gpux_worker_deaths_recent", "gauge",
	  "Deaths of the device's worker within the last minute (5 mark it failed).",
	  DEV(deaths_recent) },
	{ "gpux_device_clients", "gauge", "Clients with a channel to the device's worker.",
	  STAT(clients) },
	{ "gpux_device_clients_active", "gauge",
	  "Clients whose rings the worker's loop looks at: those at work lately.",
	  STAT(clients_active) },
	{ "gpux_device_clients_busy", "gauge", "Clients with requests in flight on the device.",
	  STAT(clients_busy) },
	{ "gpux_launches_total", "counter", "Kernel launches finished.", STAT(launches) },
	{ "gpux_launches_per_second", "gauge",
	  "Kernel launches finished per second, over the last second or so.", DEV(launch_rate) },
	{ "gpux_requests_inflight", "gauge", "Requests the worker holds: queued or running.",
	  STAT(inflight) },
	/* How requests were handed on: wake-ups where spinning should do show a slow mode. */
	{ "gpux_worker_loop_sleeps_total", "counter",
	  "Times the worker's loop went to sleep, each ended by a wake-up.", STAT(loop_sleeps) },
	{ "gpux_client_kicks_total", "counter",
	  "Clients woken because they were not looking at their ring.", STAT(kicks_sent) },
	{ "gpux_socket_messages_total", "counter",
	  "Client messages that came by the socket, not the ring.", STAT(socket_msgs) },
	{ "gpux_blocking_waits_total", "counter",
	  "Waits for a request's end that stopped spinning and napped.", STAT(blocking_waits) },
	{ "gpux_slot_waits_total", "counter", "Times a queue waited in line for room in its slot.",
	  STAT(slot_waits) },
	{ "gpux_loop_waits_total", "counter",
	  "Requests launched alone whose end the worker's loop saw itself.", STAT(loop_waits) },
	{ "gpux_copyin_requests_total", "counter",
	  "Requests whose copies in went by gpux's copy-in kernel, in a graph with their kernel.",
	  STAT(copyin_requests) },
	{ "gpux_graph_launches_total", "counter", "Groups of requests launched as one CUDA graph.",
	  STAT(graph_launches) },
	{ "gpux_graph_requests_total", "counter", "Requests launched inside CUDA graphs.",
	  STAT(graph_requests) },
	{ "gpux_cache_hits_total", "counter", "Cached inputs found on the device.",
	  STAT(cache_hits) },
	{ "gpux_cache_misses_total", "counter",
	  "Cached inputs uploaded because the device did not hold them.", STAT(cache_misses) },
	{ "gpux_cache_evictions_total", "counter", "Cached inputs dropped from the device.",
	  STAT(cache_evictions) },
	{ "gpux_cache_bytes", "gauge", "Device memory of cached inputs.", STAT(cache_bytes) },
	{ "gpux_cache_entries", "gauge", "Cached inputs on the device.", STAT(cache_entries) },
	{ "gpux_modules", "gauge", "Modules the worker holds.", STAT(modules_loaded) },
	{ "gpux_module_memory_hits_total", "counter", "Module loads the worker had in memory.",
	  STAT(module_mem_hits) },
	{ "gpux_module_disk_hits_total", "counter", "Module loads read from the disk cache.",
	  STAT(module_disk_hits) },
	{ "gpux_module_compiles_total", "counter", "Modules compiled (failed compiles included).",
	  STAT(module_compiles) },
	{ "gpux_device_memory_total_bytes", "gauge", "The device's memory.", DEV(info.mem_total) },
	{ "gpux_device_memory_free_bytes", "gauge",
	  "The device's free memory, as its driver last said.", STAT(mem_free) },
};

int ipc_metrics_write(FILE *f, const struct ipc_status *st, const struct ipc_dev_status *devs,
		      unsigned flags)
{
	bool per_user = flags & IPC_METRICS_PER_USER;

	family(f, "gpux_build_info", "gauge", "gpuxd's version (the value is always 1).");
	(void)fputs("gpux_build_info{", f);
	put_label(f, "version", st->version);
	(void)fputs("} 1\n", f);
	family(f, "gpux_uptime_seconds", "gauge", "How long gpuxd has run.");
	(void)fprintf(f, "gpux_uptime_seconds %.3f\n", (double)st->uptime_ns / 1e9);
	family(f, "gpux_stopping", "gauge", "1 while gpuxd drains before it stops.");
	(void)fprintf(f, "gpux_stopping %d\n", !!(st->flags & IPC_STATUS_STOPPING));
	/* Not gpux_clients: a parser takes gpux_clients_total's family to be that. */
	family(f, "gpux_clients_connected", "gauge", "Clients connected to gpuxd now.");
	(void)fprintf(f, "gpux_clients_connected %u\n", st->nclients);
	family(f, "gpux_clients_total", "counter", "Clients gpuxd accepted.");
	(void)fprintf(f, "gpux_clients_total %llu\n", (unsigned long long)st->clients_total);
	family(f, "gpux_clients_refused_total", "counter",
	       "Clients gpuxd refused (not allowed, too many, stopping).");
	(void)fprintf(f, "gpux_clients_refused_total %llu\n",
		      (unsigned long long)st->clients_refused);

	device_info(f, st, devs);
	device_state(f, st, devs);
	requests(f, st, devs);
	histogram(f, st, devs, "gpux_request_latency_seconds",
		  "From a request's arrival at the worker to its completion.",
		  offsetof(struct ipc_dev_status, stats.latency));
	histogram(f, st, devs, "gpux_request_queue_seconds",
		  "From a request's arrival at the worker to the start of its work.",
		  offsetof(struct ipc_dev_status, stats.queue));
	for (unsigned k = 0; k < ARRAY_SIZE(counts); k++)
		per_device(f, st, devs, counts[k].name, counts[k].type, counts[k].help,
			   counts[k].off, counts[k].size);
	family(f, "gpux_module_build_seconds_total", "counter",
	       "Time spent compiling modules and reading them from the disk cache.");
	for (uint32_t i = 0; i < st->ndevices; i++)
		sample_seconds(f, "gpux_module_build_seconds_total", i, devs[i].stats.build_ns);
	usage(f, st, devs, "gpux_shared_memory_bytes",
	      per_user ? "Shared memory of each user's clients that the worker maps."
		       : "Shared memory of clients that the worker maps.",
	      false, per_user);
	usage(f, st, devs, "gpux_device_buffer_bytes",
	      per_user ? "Device memory held in each user's device buffers."
		       : "Device memory held in device buffers.",
	      true, per_user);
	return ferror(f) ? -EIO : 0;
}
