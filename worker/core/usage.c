/* SPDX-License-Identifier: MIT */
/* worker/core/usage.c: memory by user (status page, caps over workers), gpux top's rows, driver. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "macro.h"
#include "wrk.h"

/* ---- device memory by user, over every worker (ipc/ledger.h) ---- */

void wrk_user_caps(struct wrk *w)
{
	uint64_t mem = w->info.mem_total;
	uint64_t reserve = w->opts.reserved_device ? w->opts.reserved_device : mem / 16;

	w->ledger_caps = (struct ipc_ledger_caps){
		.user = w->opts.quota_device_user ? w->opts.quota_device_user : mem / 2,
		.others = mem > reserve ? mem - reserve : 0,
		/* The host back end's devices are all the machine's memory. */
		.shared_memory = w->be->backend == GPUX_BACKEND_HOST,
	};
}

gpux_status wrk_user_charge(struct wrk *w, uint32_t uid, uint64_t bytes, int *ret_row,
			    char **ret_msg)
{
	struct ipc_ledger_refusal why = { 0 };
	unsigned row;
	int r;

	/* gpuxd's own user and root: no cap, as for connections. */
	if (!w->ledger || uid == geteuid() || uid == 0) {
		*ret_row = -1;
		return 0;
	}
	r = ipc_ledger_charge(w->ledger, uid, w->opts.device, bytes, &w->ledger_caps, &row, &why);
	if (r == 0) {
		*ret_row = (int)row;
		return 0;
	}
	if (r == -EDQUOT)
		*ret_msg = wrk_strdup_printf(
			"%llu bytes of device memory would pass the user's cap: uid %u holds %llu "
			"of the %llu bytes a user may hold on all devices together (gpuxd "
			"--quota-device-user)",
			(unsigned long long)bytes, uid, (unsigned long long)why.held,
			(unsigned long long)why.cap);
	else if (r == -ENOSPC)
		*ret_msg = wrk_strdup_printf(
			"%llu bytes of device memory would pass what users may take: they hold "
			"%llu of %llu bytes %s; the rest is kept for gpuxd's user and root (gpuxd "
			"--reserved-device)",
			(unsigned long long)bytes, (unsigned long long)why.held,
			(unsigned long long)why.cap,
			w->ledger_caps.shared_memory ? "of the machine's" : "of the device's");
	else if (r == -EUSERS)
		*ret_msg = strdup("too many users hold device memory at once");
	else
		*ret_msg = wrk_strdup_printf("device memory by user: %s", strerror(-r));
	return r == -ETIMEDOUT ? GPUX_E_IO : GPUX_E_QUOTA;
}

void wrk_user_credit(struct wrk *w, int row, uint64_t bytes)
{
	if (row >= 0)
		ipc_ledger_credit(w->ledger, (unsigned)row, w->opts.device, bytes);
}

/* The entry of uid, a free one for it, or (all taken) the last, which counts the others. */
static unsigned usage_slot(struct wrk *w, uint32_t uid)
{
	unsigned free_slot = IPC_USAGE_UIDS;

	for (unsigned i = 0; i < IPC_USAGE_UIDS - 1; i++) {
		const struct ipc_usage *u = &w->stats.usage[i];
		bool empty = !u->shared_bytes && !u->device_bytes;

		if (!empty && u->uid == uid)
			return i;
		if (empty && free_slot == IPC_USAGE_UIDS)
			free_slot = i;
	}
	if (free_slot < IPC_USAGE_UIDS) {
		w->stats.usage[free_slot].uid = uid;
		return free_slot;
	}
	w->stats.usage[IPC_USAGE_UIDS - 1].uid = IPC_USAGE_OTHERS;
	return IPC_USAGE_UIDS - 1;
}

unsigned wrk_usage_add(struct wrk *w, uint32_t uid, uint64_t shared_bytes, uint64_t device_bytes)
{
	unsigned i = usage_slot(w, uid);

	w->stats.usage[i].shared_bytes += shared_bytes;
	w->stats.usage[i].device_bytes += device_bytes;
	w->status_dirty = true;
	return i;
}

void wrk_usage_sub(struct wrk *w, unsigned slot, uint64_t shared_bytes, uint64_t device_bytes)
{
	/* The entry an object was counted in keeps its uid until all it holds is given back. */
	w->stats.usage[slot].shared_bytes -= shared_bytes;
	w->stats.usage[slot].device_bytes -= device_bytes;
	w->status_dirty = true;
}

/*
 * The release in the first line of /proc/driver/nvidia/version: the first word after "Kernel
 * Module" that starts with a digit. The proprietary module says "NVRM version: NVIDIA UNIX
 * x86_64 Kernel Module  580.95.05  Tue Sep ...", the open one "NVRM version: NVIDIA UNIX Open
 * Kernel Module for x86_64  580.159.04  Release Build ...". "" when there is none.
 */
void wrk_driver_release(const char *line, char *ret, size_t size)
{
	const char *p = strstr(line, "Kernel Module");

	if (size == 0)
		return;
	ret[0] = '\0';
	if (!p)
		return;
	for (p += strlen("Kernel Module"); *p && *p != '\n'; p += strcspn(p, " \t\n")) {
		p += strspn(p, " \t");
		if (*p >= '0' && *p <= '9') {
			size_t n = MIN(strcspn(p, " \t\n"), size - 1);

			memcpy(ret, p, n);
			ret[n] = '\0';
			return;
		}
	}
}

void wrk_driver_versions(struct wrk *w, uint32_t driver_version, uint32_t nvrtc_version)
{
	char line[256];
	FILE *f;

	w->stats.driver_version = driver_version;
	w->stats.nvrtc_version = nvrtc_version;
	f = fopen("/proc/driver/nvidia/version", "re");
	if (!f)
		return;
	if (fgets(line, sizeof(line), f))
		wrk_driver_release(line, w->stats.driver, sizeof(w->stats.driver));
	(void)fclose(f);
}

/* ---- gpux top's rows ---- */

void wrk_client_row_take(struct wrk_client *c)
{
	struct ipc_client_table *t = c->w->client_table;

	c->row = 0;
	for (unsigned i = 0; t && i < IPC_WORKER_CLIENTS_MAX; i++) {
		struct ipc_client_row *row = &t->rows[i];

		if (__atomic_load_n(&row->client_id, __ATOMIC_RELAXED))
			continue;
		c->row = i + 1;
		wrk_client_row_update(c);
		/* The id last: a reader that sees it sees this client's counters. */
		__atomic_store_n(&row->client_id, c->id, __ATOMIC_RELEASE);
		return;
	}
}

void wrk_client_row_put(struct wrk_client *c)
{
	struct ipc_client_row *row;

	if (!c->row)
		return;
	row = &c->w->client_table->rows[c->row - 1];
	__atomic_store_n(&row->client_id, 0, __ATOMIC_RELEASE);
	c->row = 0;
}
