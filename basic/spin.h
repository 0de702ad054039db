/* SPDX-License-Identifier: MIT */
/* basic/spin.h: how long a thread that waits for an answer looks before it sleeps. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/*
 * A round trip through gpux crosses several threads of two processes; each that sleeps costs
 * a wake-up (5 to 10 µs on the machines measured) on the critical path. So a thread that
 * waits for something due soon looks for it this long first, then sleeps: $GPUX_SPIN_US
 * (0: never spin), else 50 µs where there are at least 4 CPUs, else 0 (on fewer, the spinning
 * thread takes the CPU from the thread it waits for). Read once.
 */
uint64_t ipc_spin_ns(void);

/*
 * How long a wait for latency-critical work looks before it sleeps: ipc_spin_ns(), or
 * IPC_SPIN_URGENT_NS where that is longer and $GPUX_SPIN_US did not say. Such a round trip
 * beside busy clients takes longer than a spin, and the wake-up that a sleep then costs it
 * is that of a loaded machine (on an H200 beside 16 busy clients on 16 CPUs: 0.2 ms at the
 * median, after the answer was there); a CPU spent on the few latency-critical waits is the
 * price of their priority.
 */
uint64_t ipc_spin_urgent_ns(void);

/*
 * Whether a client of workers serving `spinners` spinning threads in all (its fellow clients
 * and the workers' own) may spin: when there is a CPU for each, or when $GPUX_SPIN_US asked
 * for spinning outright.
 */
bool ipc_spin_fits(uint64_t spinners);

#define IPC_SPIN_NS_DEFAULT (50u * 1000u)
#define IPC_SPIN_CPUS_MIN 4
#define IPC_SPIN_URGENT_NS (2u * 1000u * 1000u)

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}
