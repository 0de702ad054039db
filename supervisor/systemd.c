/* SPDX-License-Identifier: MIT */
/* supervisor/systemd.c: what systemd asks of a service: readiness (sd_notify) and sockets it opened. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "macro.h"
#include "sup.h"

#define SD_LISTEN_FDS_START 3

/* $NOTIFY_SOCKET, taken from the environment so that workers do not inherit it. */
static char notify_path[sizeof(((struct sockaddr_un *)0)->sun_path)];

void sup_notify_init(void)
{
	const char *e = getenv("NOTIFY_SOCKET");

	if (e && (*e == '/' || *e == '@') && strlen(e) < sizeof(notify_path))
		memcpy(notify_path, e, strlen(e) + 1);
	(void)unsetenv("NOTIFY_SOCKET");
}

/*
 * The notification protocol: one datagram of KEY=value lines to $NOTIFY_SOCKET, a path or,
 * with a leading '@', an abstract name. No libsystemd is needed for it.
 */
int sup_notify(const char *fmt, ...)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	char msg[512];
	socklen_t len;
	va_list ap;
	int fd, r = 0;

	if (!notify_path[0])
		return 0;
	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(notify_path));
	memcpy(sa.sun_path, notify_path, strlen(notify_path));
	if (sa.sun_path[0] == '@')
		sa.sun_path[0] = '\0';
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa, len) < 0)
		r = -errno;
	(void)close(fd);
	return r;
}

/*
 * Socket activation: when $LISTEN_PID is us and $LISTEN_FDS is at least 1, fd 3 is a
 * socket systemd opened (gpuxd.socket). It must be a listening SOCK_SEQPACKET unix socket.
 * Returns 1 with *ret_fd (now close-on-exec), 0 when there is none, or -errno. The
 * variables are removed: they are not the workers' business.
 */
int sup_listen_fds(int *ret_fd)
{
	const char *pid = getenv("LISTEN_PID"), *n = getenv("LISTEN_FDS");
	int type = 0, listening = 0, r = 0;
	socklen_t len = sizeof(type);
	struct sockaddr_un sa;
	socklen_t salen = sizeof(sa);
	char *end;

	if (pid && n) {
		unsigned long p = strtoul(pid, &end, 10);

		if (*end || p != (unsigned long)getpid() || strtoul(n, &end, 10) < 1 || *end)
			r = 0;
		else if (getsockopt(SD_LISTEN_FDS_START, SOL_SOCKET, SO_TYPE, &type, &len) < 0 ||
			 getsockopt(SD_LISTEN_FDS_START, SOL_SOCKET, SO_ACCEPTCONN, &listening,
				    &(socklen_t){ sizeof(listening) }) < 0 ||
			 getsockname(SD_LISTEN_FDS_START, (struct sockaddr *)&sa, &salen) < 0)
			r = -errno;
		else if (type != SOCK_SEQPACKET || !listening || sa.sun_family != AF_UNIX)
			r = -ENOTSOCK;
		else if (fcntl(SD_LISTEN_FDS_START, F_SETFD, FD_CLOEXEC) < 0)
			r = -errno;
		else
			r = 1;
	}
	(void)unsetenv("LISTEN_PID");
	(void)unsetenv("LISTEN_FDS");
	(void)unsetenv("LISTEN_FDNAMES");
	if (r == 1)
		*ret_fd = SD_LISTEN_FDS_START;
	return r;
}
