/*
 * http: /metrics, /healthz and /readyz with evhttp on the main event
 * base.  Handlers only read atomics the workers publish, so they answer
 * while a broker or database hangs a worker thread.
 */
#define _GNU_SOURCE /* SOCK_CLOEXEC, NI_MAXHOST */
#include "http.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "util.h"

/* Scrapers and probes send tiny requests: anything big is not one. */
#define HTTP_MAX_HEADERS 8192
#define HTTP_TIMEOUT_S 10
#define HTTP_BACKLOG 64

struct http_server {
    struct evhttp *http;
    struct http_handlers h;
};

static void
reply_text(struct evhttp_request *req, int code, const char *reason,
           const char *content_type, const char *body, size_t len)
{
    struct evbuffer *buf = evbuffer_new();
    struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
    if (buf == NULL) {
        evhttp_send_error(req, 500, NULL);
        return;
    }
    evhttp_add_header(hdr, "Content-Type", content_type);
    evhttp_add_header(hdr, "Cache-Control", "no-store");
    evbuffer_add(buf, body, len);
    evhttp_send_reply(req, code, reason, buf);
    evbuffer_free(buf);
}

static void
reply_plain(struct evhttp_request *req, int code, const char *reason,
            const char *body)
{
    reply_text(req, code, reason, "text/plain; charset=utf-8", body,
               strlen(body));
}

static void
serve_metrics(struct http_server *s, struct evhttp_request *req)
{
    size_t len;
    char *text = s->h.metrics(s->h.arg, &len);
    reply_text(req, 200, "OK", "text/plain; version=0.0.4; charset=utf-8", text,
               len);
    free(text);
}

static void
serve_ready(struct http_server *s, struct evhttp_request *req)
{
    char why[4096];
    if (s->h.ready(s->h.arg, why, sizeof(why))) {
        reply_plain(req, 200, "OK", "ready\n");
        return;
    }
    reply_plain(req, 503, "Service Unavailable", why);
}

static void
request_cb(struct evhttp_request *req, void *arg)
{
    struct http_server *s = arg;
    const struct evhttp_uri *uri = evhttp_request_get_evhttp_uri(req);
    const char *path = uri ? evhttp_uri_get_path(uri) : NULL;
    if (path == NULL)
        path = "";
    if (strcmp(path, "/healthz") == 0)
        reply_plain(req, 200, "OK", "ok\n");
    else if (strcmp(path, "/readyz") == 0)
        serve_ready(s, req);
    else if (strcmp(path, "/metrics") == 0)
        serve_metrics(s, req);
    else
        reply_plain(req, 404, "Not Found",
                    "not found; try /metrics, /healthz or /readyz\n");
}

int
http_split_listen(const char *listen, char *host, size_t hostlen,
                  unsigned *port)
{
    const char *colon = strrchr(listen, ':');
    unsigned p = colon != NULL ? port_parse(colon + 1) : 0;
    if (p == 0)
        return -1;
    const char *h = listen;
    size_t n = (size_t)(colon - listen);
    /* "[::1]:9180": the brackets only separate the port from the host. */
    if (n >= 2 && h[0] == '[' && h[n - 1] == ']') {
        h++;
        n -= 2;
    }
    if (n >= hostlen)
        return -1;
    memcpy(host, h, n);
    host[n] = '\0';
    *port = p;
    return 0;
}

/* A listening socket on one resolved address; -1 with errno set. */
static int
listen_one(const struct addrinfo *ai)
{
    int one = 1;
    int fd =
        socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* Else [::]:P would collide with 0.0.0.0:P, both asked for by ":P". */
    if (ai->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 ||
        listen(fd, HTTP_BACKLOG) < 0 || evutil_make_socket_nonblocking(fd)) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/* True for an address family or address this host lacks: skip it. */
static bool
absent_address(int e)
{
    return e == EADDRNOTAVAIL || e == EAFNOSUPPORT;
}

/*
 * Binds every address the host resolves to; an address family missing
 * here is skipped, anything else (in use, no permission) fails.
 */
static int
bind_all(struct http_server *s, const char *listen, char *err, size_t errlen)
{
    char host[256], port[8];
    unsigned p;
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE | AI_NUMERICSERV},
                    *res, *ai;
    if (http_split_listen(listen, host, sizeof(host), &p) < 0) {
        err_set(err, errlen, "relay.listen \"%s\" is not HOST:PORT", listen);
        return -1;
    }
    snprintf(port, sizeof(port), "%u", p);
    int rc = getaddrinfo(host[0] ? host : NULL, port, &hints, &res);
    if (rc != 0) {
        err_set(err, errlen, "cannot resolve \"%s\": %s", host,
                gai_strerror(rc));
        return -1;
    }
    int bound = 0, failed = 0;
    for (ai = res; ai != NULL && !failed; ai = ai->ai_next) {
        int fd = listen_one(ai);
        if (fd < 0 && absent_address(errno))
            continue;
        if (fd < 0 || evhttp_accept_socket_with_handle(s->http, fd) == NULL) {
            err_set(err, errlen, "cannot listen on %s: %s", listen,
                    fd < 0 ? strerror(errno) : "evhttp refused the socket");
            if (fd >= 0)
                close(fd);
            failed = 1;
        } else {
            bound++;
        }
    }
    freeaddrinfo(res);
    if (!failed && bound == 0)
        err_set(err, errlen, "cannot listen on %s: no usable address", listen);
    return failed || bound == 0 ? -1 : 0;
}

struct http_server *
http_start(struct event_base *base, const char *listen,
           const struct http_handlers *h, char *err, size_t errlen)
{
    struct http_server *s = xcalloc(1, sizeof(*s));
    s->h = *h;
    s->http = evhttp_new(base);
    if (s->http == NULL) {
        err_set(err, errlen, "cannot create the HTTP server");
        free(s);
        return NULL;
    }
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_HEAD);
    evhttp_set_max_headers_size(s->http, HTTP_MAX_HEADERS);
    evhttp_set_max_body_size(s->http, HTTP_MAX_HEADERS);
    evhttp_set_timeout(s->http, HTTP_TIMEOUT_S);
    evhttp_set_gencb(s->http, request_cb, s);
    if (bind_all(s, listen, err, errlen) < 0) {
        http_free(s);
        return NULL;
    }
    return s;
}

void
http_free(struct http_server *s)
{
    if (s == NULL)
        return;
    evhttp_free(s->http);
    free(s);
}
