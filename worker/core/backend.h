/* SPDX-License-Identifier: MIT */
/* worker/core/backend.h: the one interface through which a worker drives its device. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <gpux/gpux.h>

#include "key.h"
#include "proto.h"

struct wrk;
struct wrk_req;
struct wrk_mapping;

/* What a module's kernel needs from the caller, as far as the back end can tell. */
struct wrk_kernel_info {
	void *fn;
	int32_t nparams; /* -1: the back end cannot tell */
	uint32_t param_size[IPC_ARGS_MAX];
	uint32_t max_threads_per_block; /* for this kernel; 0: the device's limit */
	uint32_t static_shared_bytes;
	uint32_t shared_optin; /* the back end's: dynamic shared memory the kernel was allowed */
};

/* The device's launch limits, checked before every launch. */
struct wrk_limits {
	uint32_t max_threads_per_block;
	uint32_t max_block[3];
	uint32_t max_grid[3];
	uint32_t max_shared_per_block;       /* without opting in */
	uint32_t max_shared_per_block_optin; /* with a raised kernel attribute */
};

/*
 * What a slot's stream is made for: its queues' priority and compute share; and what the back
 * end made of them.
 */
struct wrk_stream {
	int prio;         /* IPC_PRIO_MIN to IPC_PRIO_MAX */
	unsigned share;   /* the SMs its kernels may use (a compute share, a multiple of the
			   * unit the back end gave wrk_sched_device()); 0: every SM */
	int32_t dev_prio; /* made: the stream's priority as the device took it, or
			   * IPC_STREAM_PRIO_NONE (the device has none) */
	unsigned sms;     /* made: the SMs its kernels may use (a green context's); 0: all */
};

/* A compile request, handed to build() on the compile thread. */
struct wrk_build {
	uint32_t lang;
	const uint8_t *code;
	size_t code_len;
	const char *options;  /* NUL-terminated, space-separated */
	const uint8_t *extra; /* CUDA C++: headers and name expressions (ipc/proto.h), checked */
	size_t extra_len;
	uint32_t nheaders, nnames;
};

/*
 * A back end. `dev` is its per-device state, made by open(). Functions marked (any thread)
 * may run on the compile thread while the loop runs others; the rest run on the loop thread.
 * Errors are a gpux_status with a message the caller frees (ret_msg may be left NULL).
 */
struct wrk_backend_ops {
	const char *name;
	uint32_t backend; /* enum gpux_backend */

	/* List the devices of this kind; 0 devices is not an error. */
	gpux_status (*probe)(struct ipc_device_info *ret, unsigned max, unsigned *ret_n,
			     char **ret_msg);

	gpux_status (*open)(struct wrk *w, uint32_t device, void **ret_dev,
			    struct ipc_device_info *ret_info, struct wrk_limits *ret_limits,
			    char **ret_msg);
	void (*close)(void *dev);

	/*
	 * Make a mapped segment usable for copies (register, pin); undone by map_unregister().
	 * With register_off_loop, it runs on a thread of its own as the segment arrives (it is
	 * slow: CUDA pins every page), and requests using the segment wait for it, unless
	 * register_optional says they can do without (it only makes them faster).
	 */
	gpux_status (*map_register)(void *dev, struct wrk_mapping *m, char **ret_msg);
	bool register_off_loop;
	bool register_optional;
	void (*map_unregister)(void *dev, struct wrk_mapping *m);

	/* What makes a compiled image specific to this device and toolchain (module keys). */
	void (*target_key)(void *dev, uint32_t lang, struct ipc_key_state *s);
	/* The file name ending of cached images ("cubin", "so"). */
	const char *image_ext;
	/* Compile to an image (any thread). On GPUX_E_COMPILE, *ret_log says why. */
	gpux_status (*build)(void *dev, const struct wrk_build *b, uint8_t **ret_image,
			     size_t *ret_len, char **ret_log);
	/* Load an image (any thread). */
	gpux_status (*module_load)(void *dev, const uint8_t *image, size_t len, void **ret_mod,
				   char **ret_msg);
	/* What a loaded module keeps in this process besides its image (kernel names), in bytes
	 * that its clients are charged (any thread); NULL: nothing. */
	uint64_t (*module_bytes)(void *dev, void *mod);
	void (*module_unload)(void *dev, void *mod);
	gpux_status (*kernel_get)(void *dev, void *mod, const char *name,
				  struct wrk_kernel_info *ret, char **ret_msg);
	/* A kernel's attributes (k from kernel_get()), IPC_ATTR_UNKNOWN where it cannot tell. */
	gpux_status (*kernel_attrs)(void *dev, void *mod, const struct wrk_kernel_info *k,
				    struct ipc_kernel_attrs *ret, char **ret_msg);
	/*
	 * A variable of a module, by its symbol or qualified name (a client's, up to
	 * IPC_KERNEL_NAME_MAX bytes): where kernels see it (as a dev_alloc() pointer), its size,
	 * and whether its memory is read-only. GPUX_E_NOTFOUND when the module has none so named.
	 */
	gpux_status (*global_get)(void *dev, void *mod, const char *name, void **ret_ptr,
				  uint64_t *ret_size, bool *ret_read_only, char **ret_msg);

	/*
	 * Streams: slot i of the worker's stream slots, for queues of st's priority and share,
	 * which it fills in. At open() a back end tells the worker, by wrk_sched_device(), what
	 * priorities and shares it makes; slots of a priority other than 0 or with a share are
	 * opened later, on the loop thread, when a queue first needs them.
	 */
	gpux_status (*slot_open)(void *dev, unsigned slot, struct wrk_stream *st, char **ret_msg);

	/*
	 * Start the work of n requests (launches or copies), the next ones of slot `slot` in
	 * order: first, first->next, ... (r->next stays the caller's). Every one of them ends
	 * through wrk_reqs_complete(), in this order, r->status and r->error saying what failed
	 * (a request the device refused too). The back end sets r->launched once all of a
	 * request's work is queued.
	 */
	void (*launch)(void *dev, unsigned slot, struct wrk_req *first, unsigned n);
	/*
	 * After each round of the loop (`sleeping`: before it sleeps), for work the back end
	 * lets the loop thread watch itself; NULL: none. Returns whether the loop should stay
	 * awake for it. A round that launched anything does not sleep after it, so work launched
	 * after this call is looked at next round.
	 */
	bool (*poll)(void *dev, bool sleeping);

	/* Device memory that outlives requests (device buffers, cache entries). */
	gpux_status (*dev_alloc)(void *dev, uint64_t size, void **ret_ptr, char **ret_msg);
	void (*dev_free)(void *dev, void *ptr);
	/* Copy to device memory apart from any request; *ret_ready marks the end (NULL: done). */
	gpux_status (*upload)(void *dev, void *dst, const void *src, uint64_t len, void **ret_ready,
			      char **ret_msg);
	/* Wait for an upload's end, and let its mark go. */
	void (*ready_wait)(void *dev, void *ready);
	void (*ready_free)(void *dev, void *ready);

	/* Free device memory now, or 0 if unknown (status page). */
	uint64_t (*mem_free)(void *dev);
	/* Device memory an allocation could still get now (free, and what a pool keeps unused),
	 * for the device-memory reserve (wrk_dev_room()); NULL where every request's copies
	 * need no device memory (the host back end). */
	uint64_t (*mem_room)(void *dev);
};

extern const struct wrk_backend_ops wrk_backend_host;
#ifdef GPUX_HAVE_CUDA
extern const struct wrk_backend_ops wrk_backend_cuda;
#endif

/* The back end of that name ("host", "cuda"), or NULL. */
const struct wrk_backend_ops *wrk_backend_find(const char *name);
