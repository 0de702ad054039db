/* SPDX-License-Identifier: MIT */
/* supervisor/metrics.c: gpuxd --metrics ADDR: a minimal HTTP server of GET /metrics in gpuxd's loop. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "macro.h"
#include "metrics.h"
#include "sup.h"

/*
 * Whoever can reach the port can talk to this, so it is small and bounded: one request per
 * connection, at most HTTP_REQUEST_MAX bytes of it, HTTP_CONNS_MAX connections at once, each
 * closed after HTTP_TIMEOUT_NS whatever it is doing. Only GET (or HEAD) /metrics is served.
 */
#define HTTP_CONNS_MAX 16u
#define HTTP_REQUEST_MAX 4096u
#define HTTP_TIMEOUT_NS (5 * NSEC_PER_SEC)

struct sup_http {
	struct sup *s;
	int fd;
	struct ipc_watch *watch;
	struct ipc_timer *timer;
	char req[HTTP_REQUEST_MAX + 1];
	size_t len;
	char *resp; /* the whole response, once the request is in */
	size_t resp_len, resp_off;
	struct sup_http *prev, *next;
};

static void http_free(struct sup_http *h)
{
	struct sup *s = h->s;

	LIST_REMOVE(s->http, h);
	s->nhttp--;
	ipc_watch_free(h->watch);
	ipc_timer_free(h->timer);
	(void)safe_close(h->fd);
	free(h->resp);
	free(h);
}

static void on_http_timeout(struct ipc_timer *t, void *userdata)
{
	http_free(userdata);
}

static void on_http_writable(struct ipc_watch *w, int fd, uint32_t revents, void *userdata)
{
	struct sup_http *h = userdata;

	while (h->resp_off < h->resp_len) {
		ssize_t n = send(fd, h->resp + h->resp_off, h->resp_len - h->resp_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0)
			break;
		h->resp_off += (size_t)n;
	}
	http_free(h);
}

/* The response to a request: a status, and the metrics when asked for them. */
static int respond(struct sup_http *h)
{
	static struct ipc_dev_status devs[IPC_DEVICES_MAX];
	char method[8] = "", path[64] = "", *body = NULL, *q;
	const char *status = "200 OK";
	size_t body_len = 0;
	bool head = false;
	struct ipc_status st;
	FILE *f;

	(void)sscanf(h->req, "%7s %63s", method, path);
	q = strchr(path, '?');
	if (q)
		*q = '\0';
	head = strcmp(method, "HEAD") == 0;
	if (strcmp(method, "GET") != 0 && !head)
		status = "405 Method Not Allowed";
	else if (strcmp(path, "/metrics") != 0)
		status = "404 Not Found";
	if (strcmp(status, "200 OK") == 0) {
		f = open_memstream(&body, &body_len);
		if (!f)
			return -ENOMEM;
		sup_status_collect(h->s, &st, devs);
		if (ipc_metrics_write(f, &st, devs) < 0 || fclose(f) != 0) {
			free(body);
			return -ENOMEM;
		}
	} else {
		body = strdup("gpuxd serves GET /metrics only\n");
		if (!body)
			return -ENOMEM;
		body_len = strlen(body);
	}
	f = open_memstream(&h->resp, &h->resp_len);
	if (!f) {
		free(body);
		return -ENOMEM;
	}
	(void)fprintf(f,
		      "HTTP/1.1 %s\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
		      "Content-Length: %zu\r\nConnection: close\r\n\r\n",
		      status, body_len);
	if (!head)
		(void)fwrite(body, 1, body_len, f);
	free(body);
	return fclose(f) == 0 ? 0 : -ENOMEM;
}

static void on_http_readable(struct ipc_watch *w, int fd, uint32_t revents, void *userdata)
{
	struct sup_http *h = userdata;
	ssize_t n = recv(fd, h->req + h->len, HTTP_REQUEST_MAX - h->len, MSG_DONTWAIT);

	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return;
	if (n <= 0) {
		http_free(h);
		return;
	}
	h->len += (size_t)n;
	h->req[h->len] = '\0';
	/* Headers are not read, only waited for: their end ends the request. */
	if (!strstr(h->req, "\r\n\r\n") && !strstr(h->req, "\n\n")) {
		if (h->len == HTTP_REQUEST_MAX)
			http_free(h);
		return;
	}
	ipc_watch_free(h->watch);
	h->watch = NULL;
	if (respond(h) < 0 ||
	    ipc_watch_new(h->s->loop, h->fd, POLLOUT, on_http_writable, h, &h->watch) < 0)
		http_free(h);
}

static void on_http_accept(struct ipc_listener *li, int fd, void *userdata)
{
	struct sup *s = userdata;
	struct sup_http *h;

	if (s->nhttp >= HTTP_CONNS_MAX || fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
		(void)close(fd);
		return;
	}
	h = calloc(1, sizeof(*h));
	if (!h) {
		(void)close(fd);
		return;
	}
	h->s = s;
	h->fd = fd;
	LIST_PREPEND(s->http, h);
	s->nhttp++;
	if (ipc_timer_new(s->loop, on_http_timeout, h, &h->timer) < 0 ||
	    ipc_watch_new(s->loop, fd, POLLIN, on_http_readable, h, &h->watch) < 0) {
		http_free(h);
		return;
	}
	ipc_timer_arm(h->timer, mono_ns() + HTTP_TIMEOUT_NS);
}

/* HOST:PORT, [V6]:PORT or :PORT (every address). */
static int parse_addr(const char *addr, char *host, size_t host_len, const char **ret_port)
{
	const char *colon = strrchr(addr, ':');
	size_t n;

	if (!colon || !colon[1])
		return -EINVAL;
	n = (size_t)(colon - addr);
	if (n >= 2 && addr[0] == '[' && addr[n - 1] == ']') {
		addr++;
		n -= 2;
	}
	if (n >= host_len)
		return -ENAMETOOLONG;
	memcpy(host, addr, n);
	host[n] = '\0';
	*ret_port = colon + 1;
	return 0;
}

int sup_metrics_start(struct sup *s, const char *addr)
{
	struct addrinfo hints = { .ai_flags = AI_PASSIVE | AI_NUMERICSERV, .ai_socktype = SOCK_STREAM };
	struct addrinfo *ai = NULL;
	_cleanup_(closep) int fd = -1;
	const char *port;
	char host[256];
	int r;

	r = parse_addr(addr, host, sizeof(host), &port);
	if (r < 0)
		return r;
	r = getaddrinfo(*host ? host : NULL, port, &hints, &ai);
	if (r != 0)
		return r == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0) {
		r = -errno;
		freeaddrinfo(ai);
		return r;
	}
	(void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &(int){ 1 }, sizeof(int));
	r = bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 16) < 0 ? -errno : 0;
	freeaddrinfo(ai);
	if (r < 0)
		return r;
	r = ipc_listener_new(s->loop, fd, on_http_accept, s, &s->metrics_listener);
	if (r < 0)
		return r;
	s->metrics_fd = TAKE_FD(fd);
	return 0;
}

void sup_metrics_free(struct sup *s)
{
	while (s->http)
		http_free(s->http);
	ipc_listener_free(s->metrics_listener);
	s->metrics_listener = NULL;
	s->metrics_fd = safe_close(s->metrics_fd);
}
