/* SPDX-License-Identifier: MIT */
/* ipc/metrics.h: request-time histograms and the Prometheus text form of a STATUS. */
#pragma once

#include <stdint.h>
#include <stdio.h>

#include "proto.h"

/* The upper bounds of the buckets of struct ipc_hist, from 2.5 µs to 60 s; the last bucket
 * (IPC_HIST_BUCKETS - 1) holds what is longer. */
extern const uint64_t ipc_hist_bounds_ns[IPC_HIST_BUCKETS - 1];

/* Count one time of `ns` in h. */
void ipc_hist_add(struct ipc_hist *h, uint64_t ns);

/* Memory by user: gpux_shared_memory_bytes and gpux_device_buffer_bytes get a uid label (by
 * default they are per device only, and say nothing of who uses it). */
#define IPC_METRICS_PER_USER 0x1u

/* A device's state (enum ipc_device_state) as gpux's tools and metrics name it: "starting",
 * "ready", "restarting", "failed", else "?". */
const char *ipc_device_state_name(uint32_t state);

/*
 * Write gpuxd's metrics in the Prometheus text format (version 0.0.4) to f: the status `st`
 * (its ndevices) and `devs[0 .. st->ndevices)`, with `flags` (IPC_METRICS_*). Names and
 * labels follow Prometheus' own conventions (gpux_requests_total{device="0",status="ok"},
 * histograms in seconds). Returns 0, or -EIO when writing failed.
 */
int ipc_metrics_write(FILE *f, const struct ipc_status *st, const struct ipc_dev_status *devs,
		      unsigned flags);
