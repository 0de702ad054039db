/* SPDX-License-Identifier: MIT */
/* basic/spin.c: the spin time, from the environment and the CPU count. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#include "macro.h"
#include "spin.h"

/* At most 10 ms: a spin is a bet on something due soon, not a way to wait. */
#define SPIN_US_MAX 10000u

static uint64_t spin_ns;
static unsigned spin_cpus;
static bool spin_asked;
static pthread_once_t spin_once = PTHREAD_ONCE_INIT;

static void spin_init(void)
{
	const char *s = getenv("GPUX_SPIN_US");
	long cpus = sysconf(_SC_NPROCESSORS_ONLN);
	char *end;

	spin_cpus = cpus > 0 ? (unsigned)cpus : 1;
	if (s && *s) {
		unsigned long long us;

		errno = 0;
		us = strtoull(s, &end, 10);
		if (errno == 0 && *end == '\0') {
			spin_ns = MIN(us, (unsigned long long)SPIN_US_MAX) * NSEC_PER_USEC;
			spin_asked = true;
			return;
		}
	}
	spin_ns = spin_cpus >= IPC_SPIN_CPUS_MIN ? IPC_SPIN_NS_DEFAULT : 0;
}

uint64_t ipc_spin_ns(void)
{
	(void)pthread_once(&spin_once, spin_init);
	return spin_ns;
}

uint64_t ipc_spin_urgent_ns(void)
{
	(void)pthread_once(&spin_once, spin_init);
	return spin_asked || spin_ns == 0 ? spin_ns : MAX(spin_ns, (uint64_t)IPC_SPIN_URGENT_NS);
}

bool ipc_spin_fits(uint64_t spinners)
{
	(void)pthread_once(&spin_once, spin_init);
	return spin_asked || spinners <= spin_cpus;
}
