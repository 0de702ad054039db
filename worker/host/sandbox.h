/* SPDX-License-Identifier: MIT */
/* worker/host/sandbox.h: the seccomp filter a host back end's slot thread runs kernels under. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/*
 * Put the calling thread, and only it, under the host kernels' filter, with no new
 * privileges: memory, locks, clocks, sleeping and its own signal frames are allowed (signals
 * unblocked, never blocked), and write() to wake_fd alone; any other call (its own end, the
 * process's, another architecture's or x32's included) is not made and raises SIGSYS in the
 * thread. So the thread must never end once it is in (it parks). 0, or -errno (-ENOSYS: no
 * filter for this architecture).
 */
int wrk_sandbox_enter(int wake_fd);

/* The message of a kernel's forbidden call `nr` of architecture `arch` (SIGSYS), to free. */
char *wrk_sandbox_fault_text(const char *kernel, int nr, unsigned arch);

/*
 * Whether a host module's image (a shared object) runs none of its code as it is loaded or
 * looked up, and loads no object of its own choosing: no constructors or destructors, _init
 * or _fini, IFUNC resolvers, library paths, audit or filter objects, DT_NEEDED paths. That
 * code would run on the thread that loads the module, outside the sandbox. The image is read
 * as the loader reads it (program headers, the dynamic segment where it is mapped), not by
 * its section table, which the loader never reads; and since the loader reads its tables
 * from the module as it relocates it, no relocation may write them (nor text relocations
 * make read-only segments writable, nor copy relocations copy) (worker/host/sandbox-image.c).
 * 0, or -EINVAL with *ret_msg (to free) saying what was found.
 */
int wrk_sandbox_image_check(const uint8_t *image, size_t len, char **ret_msg);
