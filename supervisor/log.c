/* SPDX-License-Identifier: MIT */
/* supervisor/log.c: gpuxd's log: levels, and stderr, the journal, syslog or a file. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "macro.h"
#include "sup.h"

#define JOURNAL_SOCKET "/run/systemd/journal/socket"
#define LINE_MAX_BYTES 2048

static struct {
	enum sup_log_target target;
	int level;
	int fd;     /* the file, or the journal's datagram socket */
	char *file; /* SUP_LOG_FILE: reopened on SIGHUP */
} logger = { SUP_LOG_STDERR, LOG_INFO, -1, NULL };

static const char *const level_names[] = {
	[LOG_EMERG] = "emerg", [LOG_ALERT] = "alert",     [LOG_CRIT] = "crit",
	[LOG_ERR] = "err",     [LOG_WARNING] = "warning", [LOG_NOTICE] = "notice",
	[LOG_INFO] = "info",   [LOG_DEBUG] = "debug",
};

int sup_log_level_parse(const char *s)
{
	for (int i = 0; i < (int)ARRAY_SIZE(level_names); i++)
		if (strcmp(s, level_names[i]) == 0)
			return i;
	if (strcmp(s, "error") == 0)
		return LOG_ERR;
	if (strcmp(s, "warn") == 0)
		return LOG_WARNING;
	return -EINVAL;
}

/* Whether stderr is the journal's stream (systemd sets $JOURNAL_STREAM to its dev:ino). */
static bool stderr_is_journal(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;

	if (!e || sscanf(e, "%llu:%llu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) < 0)
		return false;
	return st.st_dev == dev && st.st_ino == ino;
}

/* The file's directory, made (0700, as ~/.local/state is) when missing. */
static void make_parent(const char *path)
{
	char dir[PATH_MAX];
	char *slash;

	(void)snprintf(dir, sizeof(dir), "%s", path);
	slash = strrchr(dir, '/');
	if (!slash || slash == dir)
		return;
	*slash = '\0';
	for (char *p = dir + 1; *p; p++)
		if (*p == '/') {
			*p = '\0';
			(void)mkdir(dir, 0700);
			*p = '/';
		}
	(void)mkdir(dir, 0700);
}

static int open_file(const char *path)
{
	int fd;

	make_parent(path);
	fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0600);
	return fd < 0 ? -errno : fd;
}

int sup_log_open(enum sup_log_target target, const char *file, int level)
{
	int fd = -1;

	if (target == SUP_LOG_FILE) {
		fd = open_file(file);
		if (fd < 0)
			return fd;
		logger.file = strdup(file);
		if (!logger.file) {
			(void)close(fd);
			return -ENOMEM;
		}
	} else if (target == SUP_LOG_JOURNAL) {
		fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
	} else if (target == SUP_LOG_SYSLOG) {
		openlog("gpuxd", LOG_PID | LOG_NDELAY, LOG_DAEMON);
	}
	logger.target = target;
	logger.level = level;
	logger.fd = fd;
	return 0;
}

enum sup_log_target sup_log_auto(bool daemonized)
{
	if (stderr_is_journal())
		return SUP_LOG_JOURNAL;
	return daemonized ? SUP_LOG_SYSLOG : SUP_LOG_STDERR;
}

int sup_log_reopen(void)
{
	int fd;

	if (logger.target != SUP_LOG_FILE)
		return 0;
	fd = open_file(logger.file);
	if (fd < 0)
		return fd;
	/* dup3 keeps the number: nothing that holds it has to learn a new one. */
	if (dup3(fd, logger.fd, O_CLOEXEC) < 0) {
		(void)close(fd);
		return -errno;
	}
	(void)close(fd);
	return 0;
}

void sup_log_close(void)
{
	if (logger.target == SUP_LOG_SYSLOG)
		closelog();
	logger.fd = safe_close(logger.fd);
	free(logger.file);
	logger.file = NULL;
	logger.target = SUP_LOG_STDERR;
}

/* The journal's native protocol: one datagram of KEY=value lines. */
static int journal_send(int priority, const char *msg)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX, .sun_path = JOURNAL_SOCKET };
	char buf[LINE_MAX_BYTES + 128];
	int n = snprintf(buf, sizeof(buf), "PRIORITY=%d\nSYSLOG_IDENTIFIER=gpuxd\nMESSAGE=%s\n",
			 priority, msg);

	if (n < 0)
		return -EINVAL;
	if (sendto(logger.fd, buf, MIN((size_t)n, sizeof(buf) - 1), MSG_NOSIGNAL,
		   (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -errno;
	return 0;
}

static void stderr_line(int priority, const char *msg)
{
	(void)fprintf(stderr, "gpuxd: %s%s%s\n",
		      priority <= LOG_WARNING ? level_names[priority] : "",
		      priority <= LOG_WARNING ? ": " : "", msg);
}

void sup_logv(int priority, const char *fmt, va_list ap)
{
	char msg[LINE_MAX_BYTES];
	int saved = errno;

	if (priority > logger.level)
		return;
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	/* One message, one line, whatever a worker or a device's name put in it. */
	for (char *p = msg; *p; p++)
		if (*p == '\n' || *p == '\r')
			*p = ' ';
	switch (logger.target) {
	case SUP_LOG_JOURNAL:
		/* Refused by the journal, it goes to its stream, stderr, all the same. */
		if (journal_send(priority, msg) < 0)
			stderr_line(priority, msg);
		break;
	case SUP_LOG_STDERR:
		stderr_line(priority, msg);
		break;
	case SUP_LOG_SYSLOG:
		syslog(priority, "%s", msg);
		break;
	case SUP_LOG_FILE: {
		struct timespec ts;
		struct tm tm;
		char when[32], zone[8] = "+0000";

		/* Local time with its offset from UTC (RFC 3339): a line means one moment, read
		 * wherever the log is read. */
		(void)clock_gettime(CLOCK_REALTIME, &ts);
		(void)localtime_r(&ts.tv_sec, &tm);
		(void)strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
		(void)strftime(zone, sizeof(zone), "%z", &tm);
		(void)dprintf(logger.fd, "%s.%03ld%.3s:%.2s gpuxd[%d] %s: %s\n", when,
			      ts.tv_nsec / 1000000, zone, zone + 3, (int)getpid(),
			      level_names[priority], msg);
		break;
	}
	}
	errno = saved;
}

void sup_logp(int priority, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sup_logv(priority, fmt, ap);
	va_end(ap);
}

void sup_log(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sup_logv(LOG_INFO, fmt, ap);
	va_end(ap);
}
