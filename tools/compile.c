/* SPDX-License-Identifier: MIT */
/* tools/compile.c: gpux compile: build a module through a worker, print its log and cache key. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "tools.h"

#define CODE_MAX (64u << 20)

static const char *const lang_names[] = { NULL, "cuda", "ptx", "cubin", "host" };
static const char *const source_names[] = { NULL, "compiled", "disk cache", "worker memory" };

static uint32_t lang_of_name(const char *file)
{
	const char *dot = strrchr(file, '.');

	if (!dot)
		return 0;
	if (strcmp(dot, ".cu") == 0 || strcmp(dot, ".cuh") == 0)
		return GPUX_LANG_CUDA;
	if (strcmp(dot, ".ptx") == 0)
		return GPUX_LANG_PTX;
	if (strcmp(dot, ".cubin") == 0 || strcmp(dot, ".fatbin") == 0)
		return GPUX_LANG_CUBIN;
	if (strcmp(dot, ".c") == 0)
		return GPUX_LANG_HOST;
	return 0;
}

/*
 * The whole file, NUL-terminated (PTX must be), in *ret (free() it). -EINVAL: not a regular
 * file, or an empty one; -EFBIG: CODE_MAX or more; -EIO: it changed size while read.
 */
static int read_file(const char *path, char **ret, size_t *ret_len)
{
	struct stat st;
	char *buf;
	size_t len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC), r = 0;

	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) < 0)
		r = -errno;
	else if (!S_ISREG(st.st_mode) || st.st_size == 0)
		r = -EINVAL;
	else if ((uint64_t)st.st_size >= CODE_MAX)
		r = -EFBIG;
	if (r < 0) {
		(void)close(fd);
		return r;
	}
	buf = malloc((size_t)st.st_size + 1);
	while (buf && len < (size_t)st.st_size) {
		ssize_t n = read(fd, buf + len, (size_t)st.st_size - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			r = n < 0 ? -errno : -EIO;
			break;
		}
		len += (size_t)n;
	}
	(void)close(fd);
	if (!buf)
		return -ENOMEM;
	if (r < 0) {
		free(buf);
		return r;
	}
	buf[len] = '\0';
	*ret = buf;
	*ret_len = len;
	return 0;
}

static int print_json(const char *file, uint32_t lang, gpux_status st, const char *log,
		      const struct gpux_module_info *info, const char *key)
{
	json_t *o = json_object();

	if (!o)
		return tool_fail("json", "out of memory");
	(void)json_object_set_new(o, "file", tool_json_text(file));
	(void)json_object_set_new(o, "lang", json_string(lang_names[lang]));
	(void)json_object_set_new(o, "status",
				  json_string(st == GPUX_OK ? "ok" : gpux_strerror(st)));
	(void)json_object_set_new(o, "log", tool_json_text(log ? log : ""));
	if (info) {
		(void)json_object_set_new(o, "key", json_string(key));
		(void)json_object_set_new(o, "device", json_integer(info->device));
		(void)json_object_set_new(o, "source", json_string(source_names[info->source]));
		(void)json_object_set_new(o, "build_ms", tool_json_real(tool_ms(info->build_ns)));
	}
	return tool_json_print(o) == TOOL_OK && st == GPUX_OK ? TOOL_OK : TOOL_FAIL;
}

int tool_compile(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "socket", required_argument, NULL, 's' },
		{ "lang", required_argument, NULL, 'l' },
		{ "options", required_argument, NULL, 'o' },
		{ "json", no_argument, NULL, 'j' },
		{ "help", no_argument, NULL, 'h' },
		{ NULL, 0, NULL, 0 },
	};
	const char *sock = NULL, *options = NULL, *file;
	struct gpux_device_info dev;
	struct gpux_module_info info;
	gpux_module *m = NULL;
	gpux_ctx *ctx;
	char *code = NULL, *log = NULL, key[33];
	size_t len = 0;
	uint32_t lang = 0;
	bool json = false;
	gpux_status st;
	int c, r, rc;

	while ((c = tool_getopt(argc, argv, opts, TOOL_USAGE_COMPILE)) >= 0) {
		if (c == 's') {
			sock = optarg;
		} else if (c == 'o') {
			options = optarg;
		} else if (c == 'j') {
			json = true;
		} else {
			for (lang = GPUX_LANG_CUDA; lang <= GPUX_LANG_HOST; lang++)
				if (strcmp(optarg, lang_names[lang]) == 0)
					break;
			if (lang > GPUX_LANG_HOST)
				tool_usage_error(
					TOOL_USAGE_COMPILE,
					"compile: --lang: bad value \"%s\" (cuda, ptx, cubin "
					"or host)",
					optarg);
		}
	}
	if (optind + 1 != argc)
		tool_usage_error(TOOL_USAGE_COMPILE, "compile: %s",
				 optind == argc ? "no FILE given" : "one FILE only");
	file = argv[optind];
	if (!lang)
		lang = lang_of_name(file);
	if (!lang)
		tool_usage_error(TOOL_USAGE_COMPILE,
				 "compile: %s: which language? (name it .cu, .ptx, .cubin or .c, "
				 "or give --lang)",
				 file);
	r = read_file(file, &code, &len);
	if (r < 0)
		return tool_fail(file, r == -EINVAL  ? "not a file with something in it"
				       : r == -EFBIG ? "larger than 64 MiB"
						     : strerror(-r));
	st = gpux_connect(sock, &ctx);
	if (st < 0) {
		free(code);
		return tool_connect_fail(st);
	}
	/* PTX is text and ends with its NUL; the others are their bytes. */
	st = gpux_module_load(ctx, lang, code, lang == GPUX_LANG_PTX ? len + 1 : len, options, &m,
			      &log);
	free(code);
	if (st == GPUX_OK && gpux_module_info(m, &info) == GPUX_OK) {
		for (unsigned k = 0; k < 16; k++)
			(void)snprintf(key + 2 * k, 3, "%02x", info.key[k]);
	} else {
		memset(&info, 0, sizeof(info));
		key[0] = '\0';
	}
	if (json) {
		rc = print_json(file, lang, st, log, info.source ? &info : NULL, key);
	} else {
		if (log && *log)
			printf("%s%s", log, log[strlen(log) - 1] == '\n' ? "" : "\n");
		if (st == GPUX_OK && info.source &&
		    gpux_device_info(ctx, info.device, &dev) == GPUX_OK)
			printf("%s: %s on device %u (%s), %.1f ms; cache key %s (%s.%s in the "
			       "worker's cache directory)\n",
			       file, source_names[info.source], info.device, dev.name,
			       tool_ms(info.build_ns), key, key,
			       dev.backend == GPUX_BACKEND_CUDA ? "cubin" : "so");
		rc = st == GPUX_OK ? TOOL_OK : tool_fail(file, gpux_strerror(st));
	}
	free(log);
	gpux_module_free(m);
	gpux_disconnect(ctx);
	return rc;
}
