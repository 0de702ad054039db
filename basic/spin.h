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
 * Whether a client of workers serving `spinners` spinning threads in all (its fellow clients
 * and the workers' own) may spin: when there is a CPU for each, or when $GPUX_SPIN_US asked
 * for spinning outright.
 */
bool ipc_spin_fits(uint64_t spinners);

#define IPC_SPIN_NS_DEFAULT (50u * 1000u)
#define IPC_SPIN_CPUS_MIN 4

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield");
#endif
}
