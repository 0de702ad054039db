/* SPDX-License-Identifier: MIT */
/* metrics/http.c: gpux-metrics' HTTP server: GET /metrics and a page at /, bounded against floods. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gpux/version.h>

#include "macro.h"
#include "mx.h"

struct mx_conn {
	struct mx_server *srv;
	int fd;
	struct ipc_watch *watch;
	struct ipc_timer *timer;
	bool answering; /* the request came whole: only its answer is left */
	uint64_t accepted_ns;
	char req[MX_REQUEST_MAX + 1];
	size_t len;
	char *resp;
	size_t resp_len, resp_off;
	struct mx_conn *prev, *next;
};

struct mx_server {
	struct ipc_loop *loop;
	struct ipc_listener *listener;
	unsigned max_conns, nconns;
	/* In the order they came: first is the oldest. */
	struct mx_conn *first, *last;
	mx_render_fn *render;
	void *userdata;
	/* The last body made, when, and how that went (-errno, why). */
	char *body;
	size_t body_len;
	uint64_t body_ns;
	int body_err;
	char body_why[128];
};

static void conn_free(struct mx_conn *c)
{
	struct mx_server *srv = c->srv;
	char sink[512];

	if (c->prev)
		c->prev->next = c->next;
	else
		srv->first = c->next;
	if (c->next)
		c->next->prev = c->prev;
	else
		srv->last = c->prev;
	srv->nconns--;
	ipc_watch_free(c->watch);
	ipc_timer_free(c->timer);
	/* What the peer sent and nobody read would make close() reset the connection, and the
	 * peer drop the answer it has not read yet. */
	while (recv(c->fd, sink, sizeof(sink), MSG_DONTWAIT) > 0)
		;
	(void)safe_close(c->fd);
	free(c->resp);
	free(c);
}

static void on_conn_timeout(struct ipc_timer *t, void *userdata)
{
	conn_free(userdata);
}

/* ---- the answer ---- */

static const char landing[] =
	"<!DOCTYPE html>\n"
	"<html><head><meta charset=\"utf-8\"><title>gpuxd</title></head>\n"
	"<body><h1>gpuxd " GPUX_VERSION_STRING "</h1>\n"
	"<p>GPU kernels for processes that fork. <a href=\"/metrics\">Metrics</a> "
	"(Prometheus text format).</p></body></html>\n";

/* The body of /metrics: made anew when the last one is older than MX_BODY_MAX_AGE_NS. */
static int body_get(struct mx_server *srv)
{
	uint64_t now = mono_ns();
	char *b = NULL;
	size_t len = 0;
	FILE *f;
	int r;

	if (srv->body_ns && now - srv->body_ns < MX_BODY_MAX_AGE_NS)
		return srv->body_err;
	f = open_memstream(&b, &len);
	if (!f)
		return -ENOMEM;
	srv->body_why[0] = '\0';
	r = srv->render(f, srv->userdata, srv->body_why, sizeof(srv->body_why));
	if (fclose(f) != 0 && r == 0)
		r = -ENOMEM;
	if (r < 0 && !srv->body_why[0])
		(void)snprintf(srv->body_why, sizeof(srv->body_why), "%s", strerror(-r));
	free(srv->body);
	srv->body = r < 0 ? NULL : b;
	srv->body_len = r < 0 ? 0 : len;
	if (r < 0)
		free(b);
	srv->body_ns = now;
	srv->body_err = r;
	return r;
}

/* The whole response to the request in c->req, into c->resp. 0 or -ENOMEM. */
static int respond(struct mx_conn *c)
{
	struct mx_server *srv = c->srv;
	char method[8] = "", path[256] = "", *q, *text = NULL;
	const char *status = "200 OK", *type = "text/plain; version=0.0.4; charset=utf-8";
	const char *body, *allow = "";
	size_t body_len;
	bool head;
	FILE *f;

	(void)sscanf(c->req, "%7s %255s", method, path);
	q = strchr(path, '?');
	if (q)
		*q = '\0';
	head = strcmp(method, "HEAD") == 0;
	if (strcmp(method, "GET") != 0 && !head) {
		status = "405 Method Not Allowed";
		allow = "Allow: GET, HEAD\r\n";
		body = "gpux-metrics serves GET / and GET /metrics\n";
		type = "text/plain; charset=utf-8";
	} else if (strcmp(path, "/") == 0) {
		body = landing;
		type = "text/html; charset=utf-8";
	} else if (strcmp(path, "/metrics") != 0) {
		status = "404 Not Found";
		body = "gpux-metrics serves GET / and GET /metrics\n";
		type = "text/plain; charset=utf-8";
	} else if (body_get(srv) == 0) {
		body = srv->body;
	} else {
		status = "503 Service Unavailable";
		if (asprintf(&text, "gpuxd did not answer: %s\n", srv->body_why) < 0)
			return -ENOMEM;
		body = text;
		type = "text/plain; charset=utf-8";
	}
	body_len = body == srv->body ? srv->body_len : strlen(body);
	f = open_memstream(&c->resp, &c->resp_len);
	if (!f) {
		free(text);
		return -ENOMEM;
	}
	(void)fprintf(f,
		      "HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
		      "Connection: close\r\n\r\n",
		      status, type, body_len, allow);
	if (!head)
		(void)fwrite(body, 1, body_len, f);
	free(text);
	return fclose(f) == 0 ? 0 : -ENOMEM;
}

/* ---- a connection ---- */

static void on_conn_writable(struct ipc_watch *w, int fd, uint32_t revents, void *userdata);

/* Send what the socket takes; the connection ends with the answer (or with the peer). */
static void conn_send(struct mx_conn *c)
{
	while (c->resp_off < c->resp_len) {
		ssize_t n = send(c->fd, c->resp + c->resp_off, c->resp_len - c->resp_off,
				 MSG_NOSIGNAL | MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN) {
			if (!c->watch && ipc_watch_new(c->srv->loop, c->fd, POLLOUT,
						       on_conn_writable, c, &c->watch) < 0)
				break;
			return;
		}
		if (n <= 0)
			break;
		c->resp_off += (size_t)n;
	}
	conn_free(c);
}

static void on_conn_writable(struct ipc_watch *w, int fd, uint32_t revents, void *userdata)
{
	conn_send(userdata);
}

/*
 * Take in what arrived. The request ends at the blank line after its headers, which are not
 * read, only waited for; then the answer goes out. A connection that ends, or sends more
 * than MX_REQUEST_MAX without that end, is closed.
 */
static void conn_read(struct mx_conn *c)
{
	for (;;) {
		size_t from = c->len > 3 ? c->len - 3 : 0;
		ssize_t n = recv(c->fd, c->req + c->len, MX_REQUEST_MAX - c->len, MSG_DONTWAIT);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n <= 0) {
			conn_free(c);
			return;
		}
		c->len += (size_t)n;
		c->req[c->len] = '\0';
		if (memmem(c->req + from, c->len - from, "\r\n\r\n", 4) ||
		    memmem(c->req + from, c->len - from, "\n\n", 2))
			break;
		if (c->len == MX_REQUEST_MAX) {
			conn_free(c);
			return;
		}
	}
	c->answering = true;
	ipc_timer_arm(c->timer, c->accepted_ns + MX_CONN_TIMEOUT_NS);
	ipc_watch_free(c->watch);
	c->watch = NULL;
	if (respond(c) < 0) {
		conn_free(c);
		return;
	}
	conn_send(c);
}

static void on_conn_readable(struct ipc_watch *w, int fd, uint32_t revents, void *userdata)
{
	conn_read(userdata);
}

/* Room for one more: the oldest connection still without its request goes, else the oldest. */
static void make_room(struct mx_server *srv)
{
	struct mx_conn *c = srv->first;

	while (c && c->answering)
		c = c->next;
	conn_free(c ? c : srv->first);
}

static void on_accept(struct ipc_listener *li, int fd, void *userdata)
{
	struct mx_server *srv = userdata;
	struct mx_conn *c;

	if (srv->nconns >= srv->max_conns)
		make_room(srv);
	c = calloc(1, sizeof(*c));
	if (!c || fcntl(fd, F_SETFL, O_NONBLOCK) < 0) {
		free(c);
		(void)close(fd);
		return;
	}
	c->srv = srv;
	c->fd = fd;
	c->prev = srv->last;
	if (srv->last)
		srv->last->next = c;
	else
		srv->first = c;
	srv->last = c;
	srv->nconns++;
	if (ipc_timer_new(srv->loop, on_conn_timeout, c, &c->timer) < 0 ||
	    ipc_watch_new(srv->loop, fd, POLLIN, on_conn_readable, c, &c->watch) < 0) {
		conn_free(c);
		return;
	}
	c->accepted_ns = mono_ns();
	ipc_timer_arm(c->timer, c->accepted_ns + MX_REQUEST_TIMEOUT_NS);
	/* A scraper's request is often here already: answered now, it cannot be pushed out by
	 * connections accepted after it. */
	conn_read(c);
}

int mx_server_new(struct ipc_loop *l, int listen_fd, unsigned max_conns, mx_render_fn *render,
		  void *userdata, struct mx_server **ret)
{
	struct mx_server *srv = calloc(1, sizeof(*srv));
	int r;

	if (!srv)
		return -ENOMEM;
	srv->loop = l;
	srv->max_conns = MAX(max_conns, 1u);
	srv->render = render;
	srv->userdata = userdata;
	r = ipc_listener_new(l, listen_fd, on_accept, srv, &srv->listener);
	if (r < 0) {
		free(srv);
		return r;
	}
	*ret = srv;
	return 0;
}

void mx_server_free(struct mx_server *srv)
{
	if (!srv)
		return;
	while (srv->first)
		conn_free(srv->first);
	ipc_listener_free(srv->listener);
	free(srv->body);
	free(srv);
}
