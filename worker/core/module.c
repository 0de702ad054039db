/* SPDX-License-Identifier: MIT */
/* worker/core/module.c: the module caches (memory and disk) and the compile thread. */
#include <errno.h>
#include <fcntl.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>

#include <xxhash.h>

#include "channel.h"
#include "macro.h"
#include "segment.h"
#include "wrk.h"

/*
 * A module is keyed by XXH3-128 of its language, options, code and what the back end says
 * makes an image specific (architecture, compiler and driver versions). In memory the key
 * maps to the loaded module, shared by all clients; on disk to the compiled image, in
 * $cache_dir/<key>.<ext>, behind a header with a checksum that is checked before every load.
 */

#define DISK_MAGIC "GPUXMOD1"
#define DISK_VERSION 1u
/* A cached image larger than this is not believed. */
#define DISK_IMAGE_MAX (512u * 1024u * 1024u)

struct disk_hdr {
	char magic[8];
	uint32_t version;
	uint32_t lang;
	uint64_t key_lo, key_hi;
	uint64_t len;
	uint64_t checksum;
};
_Static_assert(sizeof(struct disk_hdr) == 48, "disk cache format");

/* A client bound to a module being built: answered (reply_id, when not 0) and charged its
 * size once it is. */
struct wrk_waiter {
	struct wrk_waiter *next;
	struct wrk_client *client;
	uint32_t reply_id;
	uint64_t mod_id;
};

/* ---- disk cache (compile thread) ---- */

static char *disk_path(struct wrk *w, struct ipc_key key, const char *suffix)
{
	char hex[IPC_KEY_HEX_LEN + 1];

	ipc_key_hex(key, hex);
	return wrk_strdup_printf("%s/%s.%s%s", w->opts.cache_dir, hex, w->be->image_ext, suffix);
}

/*
 * Read and verify a cached image; any mismatch means "not cached". -ENOENT: there is none;
 * another error, with *ret_why saying what is wrong with the file that is there.
 */
static int disk_read(struct wrk *w, struct wrk_module *m, const char **ret_why)
{
	_cleanup_(freep) char *path = disk_path(w, m->key, "");
	_cleanup_(closep) int fd = -1;
	struct disk_hdr h;
	struct stat st;
	uint8_t *img;

	*ret_why = "it cannot be read";
	if (!path)
		return -ENOMEM;
	fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (fd < 0)
		return -errno;
	/* Only a file of ours that nobody else could have written. */
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
	    (st.st_mode & 022) != 0) {
		*ret_why = "it is not a file of the worker's own that only it may write";
		return -EPERM;
	}
	*ret_why = "it is truncated";
	if ((size_t)st.st_size < sizeof(h))
		return -EBADMSG;
	if (pread(fd, &h, sizeof(h), 0) != (ssize_t)sizeof(h))
		return -EIO;
	*ret_why = "its header is not this module's";
	if (memcmp(h.magic, DISK_MAGIC, sizeof(h.magic)) != 0 || h.version != DISK_VERSION ||
	    h.lang != m->lang || h.key_lo != m->key.lo || h.key_hi != m->key.hi || h.len == 0 ||
	    h.len > DISK_IMAGE_MAX)
		return -EBADMSG;
	if (h.len != (uint64_t)st.st_size - sizeof(h)) {
		*ret_why = h.len > (uint64_t)st.st_size - sizeof(h)
				   ? "it is truncated"
				   : "it is longer than its header says";
		return -EBADMSG;
	}
	img = malloc(h.len);
	if (!img)
		return -ENOMEM;
	if (pread(fd, img, h.len, sizeof(h)) != (ssize_t)h.len ||
	    XXH3_64bits(img, h.len) != h.checksum) {
		*ret_why = "its checksum does not match";
		free(img);
		return -EBADMSG;
	}
	m->image = img;
	m->image_len = h.len;
	return 0;
}

/*
 * Write an image under a temporary name, then rename: readers never see half a file. No
 * fsync: what a crash leaves half written fails its checksum and is compiled again, while
 * waiting for the disk (tens of ms on some) would hold up every compile's answer.
 */
static int disk_write(struct wrk *w, const struct wrk_module *m)
{
	_cleanup_(freep) char *path = disk_path(w, m->key, "");
	_cleanup_(freep) char *tmp = NULL;
	_cleanup_(closep) int fd = -1;
	struct disk_hdr h = {
		.version = DISK_VERSION,
		.lang = m->lang,
		.key_lo = m->key.lo,
		.key_hi = m->key.hi,
		.len = m->image_len,
		.checksum = XXH3_64bits(m->image, m->image_len),
	};
	int r;

	memcpy(h.magic, DISK_MAGIC, sizeof(h.magic));
	tmp = wrk_strdup_printf("%s/.tmp-%d-XXXXXX", w->opts.cache_dir, (int)getpid());
	if (!path || !tmp)
		return -ENOMEM;
	fd = mkostemp(tmp, O_CLOEXEC);
	if (fd < 0)
		return -errno;
	r = write_all(fd, &h, sizeof(h));
	if (r == 0)
		r = write_all(fd, m->image, m->image_len);
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		(void)unlink(tmp);
	return r;
}

/* ---- the compile thread ---- */

static void job_run(struct wrk *w, struct wrk_module *m)
{
	uint64_t t0 = mono_ns();
	const char *why = NULL;
	char *msg = NULL;
	gpux_status st;
	int r;

	m->build_ns = 0;
	r = w->disk_cache ? disk_read(w, m, &why) : -ENOENT;
	/* A damaged file is compiled again (and replaced), never loaded; said, a few a second. */
	if (r < 0 && r != -ENOENT && r != -ENOMEM) {
		_cleanup_(freep) char *path = disk_path(w, m->key, "");

		wrk_log_client(w, m->creator->uid,
			       "module cache: %s: %s; compiling the module "
			       "again",
			       path ? path : w->opts.cache_dir, why);
	}
	if (r == 0) {
		m->from_disk = true;
	} else {
		struct wrk_build b = {
			.lang = m->lang,
			.code = m->code,
			.code_len = m->code_len,
			.options = m->options,
			.extra = m->code + m->code_len,
			.extra_len = m->extra_len,
			.nheaders = m->nheaders,
			.nnames = m->nnames,
		};
		st = w->be->build(w->dev, &b, &m->image, &m->image_len, &m->log);
		m->build_ns = mono_ns() - t0;
		if (st < 0) {
			m->status = st;
			return;
		}
		r = w->disk_cache ? disk_write(w, m) : 0;
		if (r < 0)
			wrk_log_client(w, m->creator->uid, "module cache: writing %s: %s",
				       w->opts.cache_dir, strerror(-r));
	}
	st = w->be->module_load(w->dev, m->image, m->image_len, &m->handle, &msg);
	m->build_ns = mono_ns() - t0;
	if (st < 0) {
		m->status = st;
		free(m->log);
		m->log = msg;
		return;
	}
	m->status = GPUX_OK;
}

/*
 * Answer a MOD_LOAD: when the module is ready, first what it is (its cache key, where it
 * came from for this load, the time that took), then the DONE.
 */
static void module_reply(struct wrk_client *c, uint32_t id, const struct wrk_module *m,
			 uint32_t source)
{
	static uint8_t buf[128];
	struct ipc_mod_info mi = {
		.key_lo = m->key.lo,
		.key_hi = m->key.hi,
		.build_ns = source == IPC_MOD_MEMORY ? 0 : m->build_ns,
		.source = source,
	};
	int n;

	if (id != 0 && !c->gone && m->state == MOD_READY) {
		n = ipc_encode_mod_info(buf, sizeof(buf), id, &mi);
		if (n > 0)
			wrk_client_send(c, buf, (size_t)n);
	}
	wrk_reply(c, id, m->state == MOD_READY ? GPUX_OK : m->status, m->log);
}

static void *compiler_main(void *arg)
{
	struct wrk *w = arg;
	uint64_t one = 1;

	for (;;) {
		struct wrk_module *m;

		(void)pthread_mutex_lock(&w->job_lock);
		while (!w->jobs_head && !w->jobs_stop)
			(void)pthread_cond_wait(&w->job_cond, &w->job_lock);
		if (w->jobs_stop) {
			(void)pthread_mutex_unlock(&w->job_lock);
			return NULL;
		}
		m = w->jobs_head;
		w->jobs_head = m->next_done;
		if (!w->jobs_head)
			w->jobs_tail = NULL;
		(void)pthread_mutex_unlock(&w->job_lock);

		job_run(w, m);

		(void)pthread_mutex_lock(&w->done_lock);
		m->next_done = w->done_mods;
		w->done_mods = m;
		atomic_store(&w->done_any, true);
		(void)pthread_mutex_unlock(&w->done_lock);
		(void)write(w->done_fd, &one, sizeof(one));
	}
}

/*
 * The disk cache directory must be ours and closed to others: whoever could write there
 * could plant a module that the next worker loads. Otherwise there is no disk cache.
 */
static bool cache_dir_ok(const char *dir)
{
	struct stat st;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return false;
	return lstat(dir, &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() &&
	       (st.st_mode & 022) == 0;
}

int wrk_modules_start(struct wrk *w)
{
	int r;

	w->disk_cache = w->opts.cache_dir && cache_dir_ok(w->opts.cache_dir);
	if (!w->disk_cache)
		wrk_log(w,
			"no usable module cache directory (%s): compiled modules are kept in "
			"memory only",
			w->opts.cache_dir ? w->opts.cache_dir : "none given");
	r = pthread_create(&w->compiler, NULL, compiler_main, w);
	if (r != 0)
		return -r;
	w->compiler_started = true;
	return 0;
}

static void module_free(struct wrk *w, struct wrk_module *m)
{
	while (m->kernels) {
		struct wrk_kernel *k = m->kernels;
		m->kernels = k->next;
		free(k->name);
		free(k);
	}
	if (m->handle)
		w->be->module_unload(w->dev, m->handle);
	free(m->log);
	free(m->code);
	free(m->options);
	free(m->image);
	free(m);
}

void wrk_modules_stop(struct wrk *w)
{
	struct wrk_module *m;

	if (w->compiler_started) {
		(void)pthread_mutex_lock(&w->job_lock);
		w->jobs_stop = true;
		(void)pthread_cond_signal(&w->job_cond);
		(void)pthread_mutex_unlock(&w->job_lock);
		(void)pthread_join(w->compiler, NULL);
		w->compiler_started = false;
	}
	/* Builds never started or never taken in: their references go with them. */
	while ((m = w->jobs_head)) {
		w->jobs_head = m->next_done;
		m->status = GPUX_E_WORKER_LOST;
		m->next_done = w->done_mods;
		w->done_mods = m;
	}
	w->jobs_tail = NULL;
	m = w->done_mods;
	w->done_mods = NULL;
	if (m)
		wrk_modules_finish(w, m);
	while ((m = w->idle_head)) {
		w->idle_head = m->lru_next;
		(void)ipc_map_remove(&w->modules, m->key.lo);
		module_free(w, m);
	}
	ipc_map_done(&w->modules);
	{
		struct canon_key *ck;

		while ((ck = ipc_map_pop(&w->canon_keys)))
			free(ck);
		ipc_map_done(&w->canon_keys);
	}
}

/* ---- memory cache (loop thread) ---- */

static void idle_unlink(struct wrk *w, struct wrk_module *m)
{
	if (m->lru_prev)
		m->lru_prev->lru_next = m->lru_next;
	else
		w->idle_head = m->lru_next;
	if (m->lru_next)
		m->lru_next->lru_prev = m->lru_prev;
	else
		w->idle_tail = m->lru_prev;
	m->lru_prev = m->lru_next = NULL;
	w->nidle--;
}

static void module_ref(struct wrk *w, struct wrk_module *m)
{
	if (m->refs++ == 0 && m->state == MOD_READY && m->cached)
		idle_unlink(w, m);
}

void wrk_module_unref(struct wrk *w, struct wrk_module *m)
{
	if (!m || --m->refs > 0)
		return;
	if (m->state != MOD_READY || !m->cached) {
		if (m->cached)
			(void)ipc_map_remove(&w->modules, m->key.lo);
		module_free(w, m);
		w->stats.modules_loaded = ipc_map_size(&w->modules);
		return;
	}
	/* Keep it loaded for the next client, most recently used first. */
	m->lru_next = w->idle_head;
	if (w->idle_head)
		w->idle_head->lru_prev = m;
	w->idle_head = m;
	if (!w->idle_tail)
		w->idle_tail = m;
	w->nidle++;
	while (w->nidle > WRK_MODULES_IDLE_MAX) {
		struct wrk_module *old = w->idle_tail;
		idle_unlink(w, old);
		(void)ipc_map_remove(&w->modules, old->key.lo);
		module_free(w, old);
	}
	w->stats.modules_loaded = ipc_map_size(&w->modules);
}

/*
 * Keyed by user too: a module is never shared between users (whose code could be made to
 * collide with another's on purpose). `canon`: the code in its canonical form
 * (worker/core/source.c), else NULL: its bytes. Then its headers and names, as they are.
 */
static struct ipc_key key_of(struct wrk *w, uint32_t uid, const struct ipc_mod_load *ml,
			     const char *options, const uint8_t *code, const char *canon,
			     size_t canon_len, int *ret_err)
{
	struct ipc_key_state s;
	struct ipc_key k = { 0, 0 };

	*ret_err = ipc_key_begin(&s);
	if (*ret_err < 0)
		return k;
	ipc_key_add(&s, canon ? "gpux-module-2" : "gpux-module-1", 13);
	ipc_key_add_u64(&s, uid);
	ipc_key_add_u64(&s, ml->lang);
	ipc_key_add(&s, options, strlen(options));
	ipc_key_add_u64(&s, ml->nheaders);
	ipc_key_add_u64(&s, ml->nnames);
	if (canon) {
		ipc_key_add(&s, canon, canon_len);
		ipc_key_add(&s, code + ml->code_len, ml->extra_len);
	} else {
		ipc_key_add(&s, code, (size_t)ml->code_len + ml->extra_len);
	}
	w->be->target_key(w->dev, ml->lang, &s);
	return ipc_key_end(&s);
}

/*
 * Whether a module's key may be of its canonical form: C and C++ source whose options ask
 * for no debug information, where columns are written down (worker/core/source.c keeps
 * lines, not columns).
 */
static bool canon_allowed(uint32_t lang, const char *options)
{
	static const char *const debug[] = { "-G", "--device-debug", "-lineinfo",
					     "--generate-line-info", "-g" };
	const char *p = options;

	if (lang != GPUX_LANG_CUDA && lang != GPUX_LANG_HOST)
		return false;
	while (*p) {
		size_t n;

		p += strspn(p, " \t\n");
		n = strcspn(p, " \t\n");
		for (unsigned i = 0; i < ARRAY_SIZE(debug); i++)
			if (n && n == strlen(debug[i]) && memcmp(p, debug[i], n) == 0)
				return false;
		p += n;
	}
	return true;
}

/* Canonical keys remembered by the key of the bytes they were made from (a module sent again,
 * by another client or a forked child, is not read again): a few thousand, any one going
 * when there are more. */
#define CANON_KEYS_MAX 4096u

struct canon_key {
	struct ipc_key bytes, canon;
};

/*
 * A module's key: of its code's canonical form (a source that differs from a cached one only
 * in comments, or in how much whitespace there is where there is some, is that module), or,
 * where that form is not taken or cannot be made, of its bytes.
 */
static struct ipc_key module_key(struct wrk *w, uint32_t uid, const struct ipc_mod_load *ml,
				 const char *options, const uint8_t *code, int *ret_err)
{
	struct ipc_key bytes = key_of(w, uid, ml, options, code, NULL, 0, ret_err), key;
	struct canon_key *ck;
	char *canon;
	ssize_t n;

	if (*ret_err < 0 || !canon_allowed(ml->lang, options))
		return bytes;
	ck = ipc_map_get(&w->canon_keys, bytes.lo);
	if (ck && ipc_key_equal(ck->bytes, bytes))
		return ck->canon;
	canon = malloc(MAX(ml->code_len, 1u));
	if (!canon) {
		*ret_err = -ENOMEM;
		return bytes;
	}
	n = wrk_source_canon((const char *)code, ml->code_len, canon);
	key = n < 0 ? bytes : key_of(w, uid, ml, options, code, canon, (size_t)n, ret_err);
	free(canon);
	if (*ret_err < 0)
		return bytes;
	if (ck) {
		ck->bytes = bytes;
		ck->canon = key;
		return key;
	}
	if (ipc_map_size(&w->canon_keys) >= CANON_KEYS_MAX)
		free(ipc_map_pop(&w->canon_keys));
	ck = malloc(sizeof(*ck));
	if (ck) {
		*ck = (struct canon_key){ bytes, key };
		if (ipc_map_put(&w->canon_keys, bytes.lo, ck) < 0)
			free(ck);
	}
	return key;
}

/* The client's mod_id, just bound to m (building), is answered when m is built. */
static void module_wait(struct wrk_module *m, struct wrk_client *c, uint32_t id, uint64_t mod_id)
{
	struct wrk_waiter *wt = calloc(1, sizeof(*wt));

	if (!wt) {
		/* Told it failed, the client holds no module: nor does its id, nor its charge. */
		wrk_module_drop(c, mod_id);
		wrk_reply(c, id, GPUX_E_NOMEM, "out of memory");
		return;
	}
	c->refs++;
	wt->client = c;
	wt->reply_id = id;
	wt->mod_id = mod_id;
	wt->next = m->waiters;
	m->waiters = wt;
}

/* A module that is a refusal: what the requests naming its id are told. NULL: no memory. */
static struct wrk_module *module_failed(gpux_status status, const char *text)
{
	struct wrk_module *m = calloc(1, sizeof(*m));

	if (!m || !(m->log = strdup(text))) {
		free(m);
		return NULL;
	}
	m->refs = 1;
	m->state = MOD_FAILED;
	m->status = status;
	return m;
}

/* Whether `bytes` more would take the client's modules past their cap. */
static bool mod_bytes_over(const struct wrk_client *c, uint64_t bytes)
{
	return bytes > WRK_CLIENT_MOD_BYTES - MIN(c->mod_bytes, WRK_CLIENT_MOD_BYTES);
}

static char *mod_bytes_text(void)
{
	return wrk_strdup_printf("this client's modules would take more than %llu MiB (their "
				 "images and kernel names): let some go first",
				 WRK_CLIENT_MOD_BYTES / MiB);
}

/*
 * Refuse a MOD_LOAD: answer it (when it has an id) and bind the module id to the refusal, so
 * that the requests naming it get the reason too: a load sent without an id (to a device
 * other than the first) has nobody else to tell.
 */
static void module_refuse(struct wrk_client *c, uint32_t id, uint64_t mod_id, gpux_status status,
			  const char *text)
{
	struct wrk_modref *ref;
	struct wrk_module *m;

	wrk_reply(c, id, status, text);
	if (ipc_map_get(&c->mods, mod_id) || ipc_map_size(&c->mods) >= WRK_CLIENT_MODS_MAX)
		return;
	ref = calloc(1, sizeof(*ref));
	m = ref ? module_failed(status, text) : NULL;
	if (!m) {
		free(ref);
		return;
	}
	ref->mod = m;
	if (ipc_map_put(&c->mods, mod_id, ref) < 0) {
		module_free(c->w, m);
		free(ref);
	}
}

/*
 * MOD_LOAD: bind the client's module id to the shared module of that key, starting its
 * build when nobody has it yet. Answered (when the message has an id) once it is ready.
 */
int wrk_module_load(struct wrk_client *c, const struct ipc_msg *msg)
{
	struct wrk *w = c->w;
	struct ipc_mod_load_msg ml;
	_cleanup_(freep) uint8_t *code = NULL;
	_cleanup_(freep) char *options = NULL;
	struct wrk_modref *ref;
	struct wrk_module *m;
	struct ipc_key key;
	uint32_t id = msg->hdr.id;
	uint64_t charge;
	size_t all;
	int r;

	if (ipc_decode_mod_load(msg, &ml) < 0)
		return -EBADMSG;
	if (ipc_map_get(&c->mods, ml.m.mod_id)) {
		wrk_reply(c, id, GPUX_E_INVAL, "that module id is in use");
		return 0;
	}
	if (ipc_map_size(&c->mods) >= WRK_CLIENT_MODS_MAX) {
		wrk_reply(c, id, GPUX_E_QUOTA, "too many modules loaded by this client");
		return 0;
	}
	/* A host kernel is native code in this process: only gpuxd's own user (or root) may
	 * run one here, not the members of an --allow-group. */
	if (w->be->backend == GPUX_BACKEND_HOST && c->uid != geteuid() && c->uid != 0) {
		module_refuse(c, id, ml.m.mod_id, GPUX_E_PERM,
			      "host kernels run as gpuxd's user: only that user may load them");
		return 0;
	}
	/* Code waiting for the compile thread is held in memory: cap it. */
	all = (size_t)ml.m.code_len + ml.m.extra_len;
	if (c->build_bytes + all > WRK_CLIENT_BUILD_BYTES ||
	    w->build_bytes + all > WRK_BUILD_BYTES) {
		module_refuse(c, id, ml.m.mod_id, GPUX_E_QUOTA,
			      "too much code is waiting to be compiled");
		return 0;
	}
	if (ml.m.flags & IPC_MOD_CODE_FD) {
		r = ipc_blob_read(msg->fds[0], all, IPC_CODE_MAX, &code, NULL);
		if (r == -EBADF) {
			module_refuse(c, id, ml.m.mod_id, GPUX_E_INVAL,
				      "the module's code is not in a sealed memfd of its length");
			return 0;
		}
		/* The decoder checked inline headers; these came in the memfd. */
		if (r == 0 && ipc_mod_extra_check(code + ml.m.code_len, ml.m.extra_len,
						  ml.m.nheaders, ml.m.nnames) < 0) {
			module_refuse(c, id, ml.m.mod_id, GPUX_E_INVAL,
				      "malformed headers or name expressions");
			return 0;
		}
	} else {
		code = malloc(all);
		r = code ? 0 : -ENOMEM;
		if (code)
			memcpy(code, ml.code, all);
	}
	options = strndup(ml.options, ml.m.options_len);
	if (r < 0 || !options) {
		module_refuse(c, id, ml.m.mod_id, GPUX_E_NOMEM, "out of memory");
		return 0;
	}
	key = module_key(w, c->uid, &ml.m, options, code, &r);
	if (r < 0) {
		module_refuse(c, id, ml.m.mod_id, GPUX_E_NOMEM, "out of memory");
		return 0;
	}

	m = ipc_map_get(&w->modules, key.lo);
	if (m && (!ipc_key_equal(m->key, key) || m->lang != ml.m.lang))
		m = NULL;
	/* A module being built counts as its code until it is (wrk_modules_finish()). */
	charge = m ? m->bytes : all;
	if (mod_bytes_over(c, charge)) {
		_cleanup_(freep) char *text = mod_bytes_text();

		module_refuse(c, id, ml.m.mod_id, GPUX_E_QUOTA, text ? text : "too many modules");
		return 0;
	}
	ref = calloc(1, sizeof(*ref));
	if (!ref) {
		wrk_reply(c, id, GPUX_E_NOMEM, "out of memory");
		return 0;
	}
	if (m) {
		module_ref(w, m);
		w->stats.module_mem_hits++;
	} else {
		m = calloc(1, sizeof(*m));
		if (!m) {
			free(ref);
			wrk_reply(c, id, GPUX_E_NOMEM, "out of memory");
			return 0;
		}
		/* One reference for the client, one for the build: a client that goes away
		 * meanwhile does not free what the compile thread works on. */
		m->refs = 2;
		m->creator = c;
		c->refs++;
		c->build_bytes += all;
		w->build_bytes += all;
		m->key = key;
		m->lang = ml.m.lang;
		m->state = MOD_BUILDING;
		m->code = TAKE_PTR(code);
		m->code_len = ml.m.code_len;
		m->extra_len = ml.m.extra_len;
		m->nheaders = ml.m.nheaders;
		m->nnames = ml.m.nnames;
		m->bytes = all;
		m->options = TAKE_PTR(options);
		/* A key collision with another module: build it, uncached. */
		m->cached = ipc_map_put(&w->modules, key.lo, m) == 0;
		(void)pthread_mutex_lock(&w->job_lock);
		if (w->jobs_tail)
			w->jobs_tail->next_done = m;
		else
			w->jobs_head = m;
		w->jobs_tail = m;
		(void)pthread_cond_signal(&w->job_cond);
		(void)pthread_mutex_unlock(&w->job_lock);
	}
	ref->mod = m;
	r = ipc_map_put(&c->mods, ml.m.mod_id, ref);
	if (r < 0) {
		wrk_module_unref(w, m);
		free(ref);
		wrk_reply(c, id, GPUX_E_NOMEM, "out of memory");
		return 0;
	}
	ref->bytes = charge;
	c->mod_bytes += charge;
	w->stats.modules_loaded = ipc_map_size(&w->modules);
	if (m->state == MOD_BUILDING)
		module_wait(m, c, id, ml.m.mod_id);
	else
		module_reply(c, id, m, IPC_MOD_MEMORY);
	return 0;
}

void wrk_module_drop(struct wrk_client *c, uint64_t mod_id)
{
	struct wrk_modref *ref = ipc_map_remove(&c->mods, mod_id);

	if (!ref)
		return;
	c->mod_bytes -= ref->bytes;
	wrk_module_unref(c->w, ref->mod);
	free(ref);
}

/* The build's end: its input bytes and its reference go. */
static void build_done(struct wrk *w, struct wrk_module *m)
{
	m->creator->build_bytes -= m->code_len + m->extra_len;
	w->build_bytes -= m->code_len + m->extra_len;
	wrk_client_unref(m->creator);
	m->creator = NULL;
	wrk_module_unref(w, m);
}

/*
 * A client that waited for m, built now, is charged what m takes instead of its code; past
 * its cap its id is bound to a refusal instead of m. Returns whether it still holds m.
 */
static bool module_charge(struct wrk *w, struct wrk_module *m, const struct wrk_waiter *wt)
{
	struct wrk_client *c = wt->client;
	struct wrk_modref *ref = c->gone ? NULL : ipc_map_get(&c->mods, wt->mod_id);
	_cleanup_(freep) char *text = NULL;
	struct wrk_module *refusal;

	/* Let go of meanwhile (the id may name another module since). */
	if (!ref || ref->mod != m)
		return true;
	c->mod_bytes -= ref->bytes;
	ref->bytes = 0;
	if (!mod_bytes_over(c, m->bytes)) {
		ref->bytes = m->bytes;
		c->mod_bytes += m->bytes;
		return true;
	}
	text = mod_bytes_text();
	refusal = module_failed(GPUX_E_QUOTA, text ? text : "too many modules");
	if (refusal) {
		ref->mod = refusal;
	} else {
		(void)ipc_map_remove(&c->mods, wt->mod_id);
		free(ref);
	}
	wrk_module_unref(w, m);
	wrk_reply(c, wt->reply_id, GPUX_E_QUOTA, text ? text : "too many modules");
	return false;
}

/* Compile jobs that finished: mark them, answer who waited, let blocked queues go on. */
void wrk_modules_finish(struct wrk *w, struct wrk_module *done)
{
	struct wrk_module *finished = NULL;

	while (done) {
		struct wrk_module *m = done;
		struct wrk_waiter *wt;

		done = m->next_done;
		m->next_done = NULL;
		w->stats.build_ns += m->build_ns;
		if (m->status == 0) {
			m->state = MOD_READY;
			m->bytes = m->image_len;
			if (w->be->module_bytes)
				m->bytes += w->be->module_bytes(w->dev, m->handle);
			if (m->from_disk)
				w->stats.module_disk_hits++;
			else
				w->stats.module_compiles++;
		} else {
			m->state = MOD_FAILED;
			w->stats.module_compiles += m->status == GPUX_E_COMPILE;
			/* Not cached: the next load of this code tries again. */
			if (m->cached) {
				(void)ipc_map_remove(&w->modules, m->key.lo);
				m->cached = false;
			}
			m->bytes = 0;
		}
		free(m->code);
		m->code = NULL;
		free(m->image);
		m->image = NULL;
		free(m->options);
		m->options = NULL;
		while ((wt = m->waiters)) {
			m->waiters = wt->next;
			if (module_charge(w, m, wt))
				module_reply(wt->client, wt->reply_id, m,
					     m->from_disk ? IPC_MOD_DISK : IPC_MOD_COMPILED);
			wrk_client_unref(wt->client);
			free(wt);
		}
		wrk_symbols_answer(w, m);
		m->next_done = finished;
		finished = m;
	}
	wrk_kick_all(w);
	while (finished) {
		struct wrk_module *m = finished;

		finished = m->next_done;
		m->next_done = NULL;
		build_done(w, m);
	}
}

/* A kernel of a ready module, looked up once and remembered. */
gpux_status wrk_module_kernel(struct wrk *w, struct wrk_module *m, const char *name,
			      struct wrk_kernel **ret, char **ret_msg)
{
	struct wrk_kernel *k;
	gpux_status r;

	for (k = m->kernels; k; k = k->next)
		if (strcmp(k->name, name) == 0) {
			*ret = k;
			return 0;
		}
	k = calloc(1, sizeof(*k));
	if (!k)
		return GPUX_E_NOMEM;
	r = w->be->kernel_get(w->dev, m->handle, name, &k->info, ret_msg);
	if (r < 0) {
		free(k);
		return r;
	}
	k->name = strdup(name);
	if (!k->name) {
		free(k);
		return GPUX_E_NOMEM;
	}
	k->next = m->kernels;
	m->kernels = k;
	*ret = k;
	return 0;
}

gpux_status wrk_options_check(const char *pattern, const char *options, char **ret_log)
{
	_cleanup_(freep) char *copy = strdup(options);
	char *save = NULL;
	unsigned n = 0;
	regex_t re;
	gpux_status rc = GPUX_OK;

	if (!copy || regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB) != 0)
		return GPUX_E_NOMEM;
	for (char *t = strtok_r(copy, " \t\n", &save); t && rc == 0;
	     t = strtok_r(NULL, " \t\n", &save)) {
		if (++n > WRK_OPTIONS_MAX) {
			*ret_log = strdup("too many compiler options");
			rc = GPUX_E_INVAL;
		} else if (regexec(&re, t, 0, NULL, 0) != 0) {
			*ret_log = wrk_strdup_printf("compiler option not allowed: %s", t);
			rc = GPUX_E_INVAL;
		}
	}
	regfree(&re);
	return rc;
}
