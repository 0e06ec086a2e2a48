/*
 * http: the operator's endpoints on relay.listen, served by libevent's
 * evhttp on the main thread's event base: /metrics, /healthz, /readyz.
 */
#ifndef OUTBOXD_HTTP_H
#define OUTBOXD_HTTP_H

#include <stdbool.h>
#include <stddef.h>

struct event_base;
struct http_server;

/* What the endpoints ask of the daemon; called on the main thread. */
struct http_handlers {
    /* The Prometheus text, malloc'd; the server frees it. */
    char *(*metrics)(void *arg, size_t *len);
    /* True when ready; otherwise err says why (a line per missing piece). */
    bool (*ready)(void *arg, char *err, size_t errlen);
    void *arg;
};

/*
 * Listens on "HOST:PORT" ("[::1]:9180", ":9180" for every address).
 * NULL with err filled when no socket could be bound.
 */
struct http_server *http_start(struct event_base *base, const char *listen,
                               const struct http_handlers *h, char *err,
                               size_t errlen);
void http_free(struct http_server *s);

/* Splits "HOST:PORT"; host "" for any address.  -1 if malformed. */
int http_split_listen(const char *listen, char *host, size_t hostlen,
                      unsigned *port);

#endif
