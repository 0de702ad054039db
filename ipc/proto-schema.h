/* SPDX-License-Identifier: MIT */
/* ipc/proto-schema.h: the wire protocol as tables: its messages, statuses and codes. */
#pragma once

/*
 * Each table is an X-macro: X is called once per row, and whoever expands it picks the
 * columns it needs (ipc/proto.h: the enums and prototypes; ipc/proto.c: names, texts and
 * the decoders of one shape; the tests: their samples and the fuzz target's dispatch).
 * Rows are only ever appended: a number, once on the wire, keeps its meaning.
 *
 * The wire's codes are its own: gpux.h's enums are the API, these are the protocol. They
 * hold the same values, checked where the two meet (IPC_ASSERT_PUBLIC below), so a change
 * to either side fails the build instead of changing the format.
 */

/*
 * Statuses: X(wire name, gpux.h's name, value, label, text). Dense from 0 down. The label
 * names it in metrics (status="worker_lost") and the Python package; the text is
 * gpux_strerror()'s.
 */
#define IPC_STATUSES(X)                                                                            \
	X(IPC_OK, GPUX_OK, 0, "ok", "success")                                                     \
	X(IPC_E_INVAL, GPUX_E_INVAL, -1, "inval", "invalid argument")                              \
	X(IPC_E_NOMEM, GPUX_E_NOMEM, -2, "nomem", "out of memory")                                 \
	X(IPC_E_PROTO, GPUX_E_PROTO, -3, "proto", "protocol error")                                \
	X(IPC_E_CONNECT, GPUX_E_CONNECT, -4, "connect", "cannot reach gpuxd")                      \
	X(IPC_E_PERM, GPUX_E_PERM, -5, "perm", "refused by gpuxd")                                 \
	X(IPC_E_NODEV, GPUX_E_NODEV, -6, "nodev", "no such device, or the device failed")          \
	X(IPC_E_WORKER_LOST, GPUX_E_WORKER_LOST, -7, "worker_lost", "the worker died")             \
	X(IPC_E_KERNEL_FAULT, GPUX_E_KERNEL_FAULT, -8, "kernel_fault", "the kernel faulted")       \
	X(IPC_E_TIMEOUT, GPUX_E_TIMEOUT, -9, "timeout", "deadline passed")                         \
	X(IPC_E_COMPILE, GPUX_E_COMPILE, -10, "compile", "compile error")                          \
	X(IPC_E_NOTFOUND, GPUX_E_NOTFOUND, -11, "notfound", "no such kernel")                      \
	X(IPC_E_QUOTA, GPUX_E_QUOTA, -12, "quota", "quota exceeded")                               \
	X(IPC_E_AGAIN, GPUX_E_AGAIN, -13, "again", "not finished yet")                             \
	X(IPC_E_NODRIVER, GPUX_E_NODRIVER, -14, "nodriver", "no CUDA driver")                      \
	X(IPC_E_DEVICE, GPUX_E_DEVICE, -15, "device", "device error")                              \
	X(IPC_E_IO, GPUX_E_IO, -16, "io", "system call failed")                                    \
	X(IPC_E_VERSION, GPUX_E_VERSION, -17, "version", "no common protocol version")             \
	X(IPC_E_STOPPING, GPUX_E_STOPPING, -18, "stopping", "gpuxd is stopping")                   \
	X(IPC_E_DBUF_LOST, GPUX_E_DBUF_LOST, -19, "dbuf_lost",                                     \
	  "the device buffer was lost with its worker")

/* The other codes on the wire: X(wire name, gpux.h's name, value). */
#define IPC_BACKENDS(X)                                                                            \
	X(IPC_BACKEND_HOST, GPUX_BACKEND_HOST, 1) /* kernels in C on the CPU */                    \
	X(IPC_BACKEND_CUDA, GPUX_BACKEND_CUDA, 2)

#define IPC_DEVICE_STATES(X)                                                                       \
	X(IPC_DEVICE_STARTING, GPUX_DEVICE_STARTING, 1)                                            \
	X(IPC_DEVICE_READY, GPUX_DEVICE_READY, 2)                                                  \
	X(IPC_DEVICE_RESTARTING, GPUX_DEVICE_RESTARTING, 3)                                        \
	X(IPC_DEVICE_FAILED, GPUX_DEVICE_FAILED, 4) /* died too often */

#define IPC_LANGS(X)                                                                               \
	X(IPC_LANG_CUDA, GPUX_LANG_CUDA, 1) /* CUDA C++, compiled by the worker */                 \
	X(IPC_LANG_PTX, GPUX_LANG_PTX, 2)                                                          \
	X(IPC_LANG_CUBIN, GPUX_LANG_CUBIN, 3) /* a cubin or fatbin */                              \
	X(IPC_LANG_HOST, GPUX_LANG_HOST, 4)   /* C for the host back end */

#define IPC_ARG_KINDS(X)                                                                           \
	X(IPC_ARG_SCALAR, GPUX_ARG_SCALAR, 1) /* bytes in the SUBMIT's data */                     \
	X(IPC_ARG_IN, GPUX_ARG_IN, 2)         /* buffer kinds: a range of a segment */             \
	X(IPC_ARG_OUT, GPUX_ARG_OUT, 3)                                                            \
	X(IPC_ARG_INOUT, GPUX_ARG_INOUT, 4)                                                        \
	X(IPC_ARG_MAPPED, GPUX_ARG_MAPPED, 5)                                                      \
	X(IPC_ARG_DBUF, GPUX_ARG_DBUF, 6) /* a range of a device buffer */

#define IPC_MOD_SOURCES(X)                                                                         \
	X(IPC_MOD_COMPILED, GPUX_MODULE_COMPILED, 1) /* built for this load */                     \
	X(IPC_MOD_DISK, GPUX_MODULE_DISK, 2)         /* read from the worker's disk cache */       \
	X(IPC_MOD_MEMORY, GPUX_MODULE_MEMORY, 3)     /* the worker had it loaded already */

/* Flags and limits the client hands on as they are (ipc/proto.h gives their values):
 * X(wire name, gpux.h's name). */
#define IPC_PUBLIC_CONSTANTS(X)                                                                    \
	X(IPC_ARG_CACHED, GPUX_ARG_CACHED)                                                         \
	X(IPC_LAUNCH_TIMED, GPUX_LAUNCH_TIMED)                                                     \
	X(IPC_MOD_HEADERS_MAX, GPUX_MODULE_HEADERS_MAX)                                            \
	X(IPC_MOD_NAMES_MAX, GPUX_MODULE_NAMES_MAX)                                                \
	X(IPC_PRIO_MIN, GPUX_PRIORITY_MIN)                                                         \
	X(IPC_PRIO_MAX, GPUX_PRIORITY_MAX)                                                         \
	X(IPC_SHARE_MAX, GPUX_SHARE_MAX)                                                           \
	X(IPC_QUEUE_PRIORITY, GPUX_QUEUE_PRIORITY)                                                 \
	X(IPC_ATTR_UNKNOWN, GPUX_ATTR_UNKNOWN)

/*
 * Messages: X(TYPE, number, name, label, fixed part, decoded, fds, shape).
 *   IPC_<TYPE> is its number; ipc_decode_<name>() and (but for VAR) ipc_encode_<name>() its
 *   codec; the label names it in logs (ipc_type_name()).
 *   fixed part: struct ipc_<fixed part>, at the start of the payload; decoded: struct
 *   ipc_<decoded>, what the decoder gives (the fixed part itself, but for VAR).
 *   fds: how many fds travel with it, an expression of `m` (a pointer to the fixed part).
 *   shape: FIXED: the payload is the fixed part and nothing else; its decoder is made from
 *          this row and ipc/proto.c's ok_<name>(), which checks the fields.
 *          EMPTY: no payload, no fds.
 *          VAR: the fixed part then parts of its own, counted in it; encoder and decoder
 *          written by hand in ipc/proto.c, where every count, length and offset is checked
 *          in the open.
 */
#define IPC_MESSAGES(X)                                                                            \
	/* client -> gpuxd */                                                                      \
	X(HELLO, 1, hello, "hello", hello, hello, 0, FIXED)                                        \
	/* gpuxd -> client */                                                                      \
	X(WELCOME, 2, welcome, "welcome", welcome, welcome, 0, FIXED)                              \
	/* gpuxd -> client: a device, with a channel and status page when up */                    \
	X(DEVICE, 3, device, "device", device, device, IPC_DEVICE_NFDS(m), FIXED)                  \
	/* gpuxd -> worker: a new client's end of a channel */                                     \
	X(ATTACH, 4, attach, "attach", attach, attach, 1, FIXED)                                   \
	/* worker -> gpuxd: initialised, with its device's description */                          \
	X(READY, 5, ready, "ready", ready, ready, 0, FIXED)                                        \
	/* client -> worker: a shared segment (memfd) */                                           \
	X(SEG_ADD, 6, seg_add, "seg-add", seg_add, seg_add, 1, FIXED)                              \
	/* client -> worker */                                                                     \
	X(SEG_DROP, 7, seg_drop, "seg-drop", seg_drop, seg_drop, 0, FIXED)                         \
	/* client -> worker; answered by DONE */                                                   \
	X(MOD_LOAD, 8, mod_load, "mod-load", mod_load, mod_load_msg, IPC_MOD_LOAD_NFDS(m), VAR)    \
	/* client -> worker */                                                                     \
	X(MOD_DROP, 9, mod_drop, "mod-drop", mod_drop, mod_drop, 0, FIXED)                         \
	/* client -> worker; answered by DONE */                                                   \
	X(SUBMIT, 10, submit, "submit", submit, submit_msg, 0, VAR)                                \
	/* worker -> client: a completion */                                                       \
	X(DONE, 11, done, "done", done, done_msg, 0, VAR)                                          \
	/* admin client -> gpuxd */                                                                \
	X(STATUS_REQ, 12, status_req, "status-req", status_req, status_req, 0, FIXED)              \
	/* gpuxd -> admin client */                                                                \
	X(STATUS, 13, status, "status", status, status_msg, 0, VAR)                                \
	/* gpuxd -> client: a request of yours ran past its deadline */                            \
	X(KILLED, 14, killed, "killed", killed, killed, 0, FIXED)                                  \
	/* client -> worker; answered by DONE */                                                   \
	X(QUEUE_OPEN, 15, queue_open, "queue-open", queue_msg, queue_msg, 0, FIXED)                \
	/* client -> worker */                                                                     \
	X(QUEUE_CLOSE, 16, queue_close, "queue-close", queue_msg, queue_msg, 0, FIXED)             \
	/* client -> worker; answered by DONE */                                                   \
	X(DBUF_ALLOC, 17, dbuf_alloc, "dbuf-alloc", dbuf_alloc, dbuf_alloc, 0, FIXED)              \
	/* client -> worker */                                                                     \
	X(DBUF_FREE, 18, dbuf_free, "dbuf-free", dbuf_free, dbuf_free, 0, FIXED)                   \
	/* client -> worker: between a shared buffer and a device buffer; DONE */                  \
	X(COPY, 19, copy, "copy", copy, copy, 0, FIXED)                                            \
	/* worker -> client: the shared rings beside this channel (ipc/ring.h) */                  \
	X(RINGS, 20, rings, "rings", rings_offer, rings_offer, 1, FIXED)                           \
	/* either way on a channel: look at your ring */                                           \
	X(KICK, 21, kick, "kick", _, _, 0, EMPTY)                                                  \
	/* client -> gpuxd: a new channel to a device's worker, please */                          \
	X(CHANNEL_REQ, 22, channel_req, "channel-req", channel_req, channel_req, 0, FIXED)         \
	/* gpuxd -> worker: gpuxd stops; finish what you hold, take nothing new */                 \
	X(DRAIN, 23, drain, "drain", _, _, 0, EMPTY)                                               \
	/* worker -> client: the module a MOD_LOAD got, just before its DONE */                    \
	X(MOD_INFO, 24, mod_info, "mod-info", mod_info, mod_info, 0, FIXED)                        \
	/* admin client -> gpuxd: its clients, a page at a time (gpux top) */                      \
	X(CLIENTS_REQ, 25, clients_req, "clients-req", clients_req, clients_req, 0, FIXED)         \
	/* gpuxd -> admin client */                                                                \
	X(CLIENTS, 26, clients, "clients", clients, clients_msg, 0, VAR)                           \
	/* client -> worker: a kernel's attributes; answered by KERNEL_ATTRS, then DONE */         \
	X(KERNEL_ATTRS_REQ, 27, kernel_attrs_req, "kernel-attrs-req", sym_req, sym_req, 0, FIXED)  \
	/* worker -> client: a kernel's attributes, just before the DONE of its question */        \
	X(KERNEL_ATTRS, 28, kernel_attrs, "kernel-attrs", kernel_attrs, kernel_attrs, 0, FIXED)    \
	/* client -> worker: a module's variable as a device buffer; GLOBAL, then DONE */          \
	X(GLOBAL_REQ, 29, global_req, "global-req", sym_req, sym_req, 0, FIXED)                    \
	/* worker -> client: that variable's size, just before the DONE of its question */         \
	X(GLOBAL, 30, global, "global", global_info, global_info, 0, FIXED)                        \
	/* worker -> client: its page of the worker's marks (ipc/proto.h) */                       \
	X(MARKS, 31, marks, "marks", marks_offer, marks_offer, 1, FIXED)                           \
	/* client -> worker: a device buffer kept in host memory; DONE when it has an id */        \
	X(DBUF_HOST, 32, dbuf_host, "dbuf-host", dbuf_host, dbuf_host, 0, FIXED)                   \
	/* gpuxd -> worker: a client attached ahead (for a forked child) is that process's now */  \
	X(ADOPT, 33, adopt, "adopt", adopt, adopt, 0, FIXED)                                       \
	/* client -> worker: a queue's priority and compute share; DONE when it has an id */       \
	X(QUEUE_CONFIG, 34, queue_config, "queue-config", queue_config, queue_config, 0, FIXED)

/*
 * Where the wire's codes meet gpux.h's (the client, the worker, gpuxd), at file scope, with
 * both headers included: every wire code has the value of its namesake, and every code of
 * gpux.h's enums has a row (a switch over the public enum that misses one is made an error).
 */
#define IPC_SAME_AS_PUBLIC_(wire, pub, ...)                                                        \
	_Static_assert((long long)(wire) == (long long)(pub), #pub " on the wire");
#define IPC_PUBLIC_CASE_(wire, pub, ...) case pub:
#define IPC_ASSERT_PUBLIC()                                                                        \
	IPC_STATUSES(IPC_SAME_AS_PUBLIC_)                                                          \
	IPC_BACKENDS(IPC_SAME_AS_PUBLIC_)                                                          \
	IPC_DEVICE_STATES(IPC_SAME_AS_PUBLIC_)                                                     \
	IPC_LANGS(IPC_SAME_AS_PUBLIC_)                                                             \
	IPC_ARG_KINDS(IPC_SAME_AS_PUBLIC_)                                                         \
	IPC_MOD_SOURCES(IPC_SAME_AS_PUBLIC_)                                                       \
	IPC_PUBLIC_CONSTANTS(IPC_SAME_AS_PUBLIC_)                                                  \
	_Static_assert(sizeof(((struct gpux_device_info *)0)->name) ==                             \
			       sizeof(((struct ipc_device_info *)0)->name),                        \
		       "device names on the wire");                                                \
	_Static_assert(sizeof(((struct gpux_device_info *)0)->uuid) ==                             \
			       sizeof(((struct ipc_device_info *)0)->uuid),                        \
		       "device uuids on the wire");                                                \
	_Static_assert(sizeof(struct gpux_kernel_attrs) == sizeof(struct ipc_kernel_attrs),        \
		       "kernel attributes on the wire");                                           \
	_Pragma("GCC diagnostic push") _Pragma("GCC diagnostic error \"-Wswitch\"")                \
		__attribute__((unused)) static void                                                \
		ipc_public_codes_all_on_the_wire_(gpux_status s, enum gpux_backend b,              \
						  enum gpux_device_state d, enum gpux_lang l,      \
						  enum gpux_arg_kind k, enum gpux_module_source m) \
	{                                                                                          \
		switch (s) {                                                                       \
			IPC_STATUSES(IPC_PUBLIC_CASE_)                                             \
			break;                                                                     \
		}                                                                                  \
		switch (b) {                                                                       \
			IPC_BACKENDS(IPC_PUBLIC_CASE_)                                             \
			break;                                                                     \
		}                                                                                  \
		switch (d) {                                                                       \
			IPC_DEVICE_STATES(IPC_PUBLIC_CASE_)                                        \
			break;                                                                     \
		}                                                                                  \
		switch (l) {                                                                       \
			IPC_LANGS(IPC_PUBLIC_CASE_)                                                \
			break;                                                                     \
		}                                                                                  \
		switch (k) {                                                                       \
			IPC_ARG_KINDS(IPC_PUBLIC_CASE_)                                            \
			break;                                                                     \
		}                                                                                  \
		switch (m) {                                                                       \
			IPC_MOD_SOURCES(IPC_PUBLIC_CASE_)                                          \
			break;                                                                     \
		}                                                                                  \
	}                                                                                          \
	_Pragma("GCC diagnostic pop")
