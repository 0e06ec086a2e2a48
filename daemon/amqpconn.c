/*
 * amqpconn: one librabbitmq-c connection shared by the publishers of one
 * thread: the urls tried in turn, TLS, login, heartbeats, blocked, and the
 * table of its channels, through which every frame reaches its publisher.
 */
#include "amqpconn.h"

#include <amqp.h>
#include <amqp_ssl_socket.h>
#include <amqp_tcp_socket.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "publisher_int.h"
#include "util.h"

/* How long connection.close waits for close-ok. */
#define CLOSE_TIMEOUT_MS 200

#define FRAME_MAX 131072
/* Debian's CA bundle (ca-certificates), used when tls.ca_file is unset. */
#define SYSTEM_CA_BUNDLE "/etc/ssl/certs/ca-certificates.crt"
/* AMQP numbers channels in 16 bits; channel_max 0 means no limit. */
#define CHANNEL_LIMIT 65535

/* ---- urls and errors ---- */

/*
 * "amqp://user:secret@host/" -> "amqp://user:***@host/".  The password is
 * found where amqp_parse_url finds it (components start where they stand
 * in the text: it decodes in place).  A url it refuses has all between
 * "user:" (or "://") and its last '@' masked, or all after "://" when it
 * has no '@': there is no telling which part is the password.
 */
char *
amqpconn_mask_url(const char *url)
{
    char *copy = xstrdup(url);
    struct amqp_connection_info ci;
    char *masked;
    const char *scheme = strstr(url, "://");
    if (amqp_parse_url(copy, &ci) == AMQP_STATUS_OK) {
        /* Without one in the url, ci.password is the library's default. */
        if (ci.password < copy || ci.password > copy + strlen(url)) {
            masked = xstrdup(url);
        } else {
            /* The password ends at the one '@' a valid url has. */
            size_t start = (size_t)(ci.password - copy);
            const char *at = strchr(url + start, '@');
            masked = xasprintf("%.*s***%s", (int)start, url, at);
        }
    } else if (scheme == NULL) {
        masked = xstrdup("***");
    } else {
        /* Up to a "user:" before the last '@' stays, as valid ones show. */
        const char *at = strrchr(scheme, '@');
        const char *colon =
            at ? memchr(scheme + 3, ':', (size_t)(at - scheme - 3)) : NULL;
        const char *keep = colon ? colon + 1 : scheme + 3;
        masked = xasprintf("%.*s***%s", (int)(keep - url), url, at ? at : "");
    }
    free(copy);
    return masked;
}

void
conn_reply_text(amqp_rpc_reply_t r, char *buf, size_t len)
{
    switch (r.reply_type) {
    case AMQP_RESPONSE_NORMAL:
        str_copy(buf, "ok", len);
        return;
    case AMQP_RESPONSE_NONE:
        str_copy(buf, "no reply", len);
        return;
    case AMQP_RESPONSE_LIBRARY_EXCEPTION:
        str_copy(buf, amqp_error_string2(r.library_error), len);
        return;
    case AMQP_RESPONSE_SERVER_EXCEPTION:
        break;
    }
    if (r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        amqp_connection_close_t *m = r.reply.decoded;
        snprintf(buf, len, "%u %.*s", m->reply_code, (int)m->reply_text.len,
                 (const char *)m->reply_text.bytes);
    } else if (r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_t *m = r.reply.decoded;
        snprintf(buf, len, "%u %.*s", m->reply_code, (int)m->reply_text.len,
                 (const char *)m->reply_text.bytes);
    } else {
        snprintf(buf, len, "unexpected method 0x%08x", r.reply.id);
    }
}

/* ---- connect ---- */

static unsigned
heartbeat_s(const struct amqpconn *c)
{
    uint64_t s = c->broker->heartbeat_ms / 1000;
    return s < 1 ? 1 : s > 65535 ? 65535 : (unsigned)s;
}

/*
 * Keepalives and TCP_USER_TIMEOUT bound how long the kernel keeps a dead
 * peer's connection: librabbitmq 0.11 writes with no deadline.
 */
static void
tune_socket(int fd, unsigned hb)
{
    int one = 1, idle = (int)hb, intvl = hb / 3 ? (int)(hb / 3) : 1, cnt = 3;
    unsigned user_timeout = hb * 2000;
    setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
    setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_timeout,
               sizeof(user_timeout));
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Non-blocking connect to one address; -1 with the reason in err. */
static int
connect_addr(const struct addrinfo *ai, uint64_t deadline, unsigned hb,
             char *err, size_t errlen)
{
    int fd =
        socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
               ai->ai_protocol);
    if (fd < 0) {
        err_set(err, errlen, "socket: %s", strerror(errno));
        return -1;
    }
    tune_socket(fd, hb);
    int error = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
        error = errno;
        if (error == EINPROGRESS) {
            uint64_t now = clock_ms();
            struct pollfd pfd = {fd, POLLOUT, 0};
            int ms = now < deadline ? (int)(deadline - now) : 0;
            int rc = poll(&pfd, 1, ms);
            socklen_t len = sizeof(error);
            if (rc == 0)
                error = ETIMEDOUT;
            else if (rc < 0)
                error = errno;
            else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &len) < 0)
                error = errno;
        }
    }
    if (error == 0)
        return fd;
    err_set(err, errlen, "%s",
            error == ETIMEDOUT ? "connect timed out" : strerror(error));
    close(fd);
    return -1;
}

/*
 * Plain TCP is connected here rather than by the library, which reports
 * every failure as "a socket error occurred" instead of its errno.
 */
static int
open_tcp(struct amqpconn *c, const char *host, int port, char *err,
         size_t errlen)
{
    struct addrinfo hints = {0}, *res;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    char service[16];
    snprintf(service, sizeof(service), "%d", port);
    int rc = getaddrinfo(host, service, &hints, &res);
    if (rc != 0) {
        err_set(err, errlen, "%s: %s", host, gai_strerror(rc));
        return -1;
    }
    uint64_t deadline = clock_ms() + c->broker->connect_timeout_ms;
    int fd = -1;
    for (struct addrinfo *ai = res; ai != NULL && fd < 0; ai = ai->ai_next)
        fd = connect_addr(ai, deadline, heartbeat_s(c), err, errlen);
    freeaddrinfo(res);
    if (fd < 0)
        return -1;
    amqp_socket_t *sock = amqp_tcp_socket_new(c->conn);
    if (sock == NULL) {
        close(fd);
        err_set(err, errlen, "cannot create socket");
        return -1;
    }
    amqp_tcp_socket_set_sockfd(sock, fd);
    return 0;
}

/* The library's words for a failed TLS open, made to say what to check. */
static void
tls_failure(int rc, const char *host, const char *ca, char *err, size_t errlen)
{
    switch (rc) {
    case AMQP_STATUS_SSL_PEER_VERIFY_FAILED:
        err_set(err, errlen,
                "TLS certificate verification failed: the broker's "
                "certificate is not signed by a CA in %s",
                ca ? ca : "(no ca_file)");
        break;
    case AMQP_STATUS_SSL_HOSTNAME_VERIFY_FAILED:
        err_set(err, errlen,
                "TLS hostname verification failed: the broker's certificate "
                "does not name \"%s\" (tls.verify_hostname: false skips "
                "this check)",
                host);
        break;
    case AMQP_STATUS_SSL_CONNECTION_FAILED:
    case AMQP_STATUS_SSL_ERROR:
        err_set(err, errlen,
                "TLS handshake failed (%s): is it a TLS port, and does the "
                "broker require a client certificate (tls.cert_file, "
                "tls.key_file) or refuse this one?",
                amqp_error_string2(rc));
        break;
    default:
        err_set(err, errlen, "TLS: %s", amqp_error_string2(rc));
    }
}

static int
open_tls(struct amqpconn *c, const char *host, int port, char *err,
         size_t errlen)
{
    const struct tls_config *tls = &c->broker->tls;
    amqp_socket_t *sock = amqp_ssl_socket_new(c->conn);
    if (sock == NULL) {
        err_set(err, errlen, "cannot create TLS socket");
        return -1;
    }
    amqp_ssl_socket_set_verify_peer(sock, tls->verify_peer);
    amqp_ssl_socket_set_verify_hostname(sock, tls->verify_hostname);
    /* The library trusts nothing by default: without a ca_file, the
     * system's bundle, so that a public CA works as operators expect. */
    const char *ca = tls->ca_file;
    if (ca == NULL && tls->verify_peer && access(SYSTEM_CA_BUNDLE, R_OK) == 0)
        ca = SYSTEM_CA_BUNDLE;
    if (ca != NULL && amqp_ssl_socket_set_cacert(sock, ca) != 0) {
        err_set(err, errlen, "TLS: ca_file %s: cannot load", ca);
        return -1;
    }
    if (tls->cert_file && tls->key_file &&
        amqp_ssl_socket_set_key(sock, tls->cert_file, tls->key_file) != 0) {
        err_set(err, errlen, "TLS: cert_file %s / key_file %s: cannot load",
                tls->cert_file, tls->key_file);
        return -1;
    }
    struct timeval tv = ms_to_tv(c->broker->connect_timeout_ms);
    int rc = amqp_socket_open_noblock(sock, host, port, &tv);
    if (rc != AMQP_STATUS_OK) {
        tls_failure(rc, host, ca, err, errlen);
        return -1;
    }
    tune_socket(amqp_get_sockfd(c->conn), heartbeat_s(c));
    return 0;
}

/* The properties that make the broker send connection.blocked. */
static amqp_rpc_reply_t
login(struct amqpconn *c, const struct amqp_connection_info *ci)
{
    amqp_table_entry_t caps[] = {
        {amqp_cstring_bytes("connection.blocked"),
         {AMQP_FIELD_KIND_BOOLEAN, {.boolean = 1}}},
        {amqp_cstring_bytes("publisher_confirms"),
         {AMQP_FIELD_KIND_BOOLEAN, {.boolean = 1}}},
        {amqp_cstring_bytes("basic.nack"),
         {AMQP_FIELD_KIND_BOOLEAN, {.boolean = 1}}},
        {amqp_cstring_bytes("consumer_cancel_notify"),
         {AMQP_FIELD_KIND_BOOLEAN, {.boolean = 1}}},
        {amqp_cstring_bytes("authentication_failure_close"),
         {AMQP_FIELD_KIND_BOOLEAN, {.boolean = 1}}},
    };
    amqp_table_entry_t props[] = {
        {amqp_cstring_bytes("connection_name"),
         {AMQP_FIELD_KIND_UTF8, {.bytes = amqp_cstring_bytes(c->name)}}},
        {amqp_cstring_bytes("product"),
         {AMQP_FIELD_KIND_UTF8, {.bytes = amqp_cstring_bytes("outboxd")}}},
        {amqp_cstring_bytes("version"),
         {AMQP_FIELD_KIND_UTF8,
          {.bytes = amqp_cstring_bytes(OUTBOXD_VERSION)}}},
        {amqp_cstring_bytes("capabilities"),
         {AMQP_FIELD_KIND_TABLE,
          {.table = {sizeof(caps) / sizeof(caps[0]), caps}}}},
    };
    amqp_table_t table = {sizeof(props) / sizeof(props[0]), props};
    /* An empty vhost ("amqp://host/") means the default one, not "". */
    const char *vhost = ci->vhost && ci->vhost[0] ? ci->vhost : "/";
    /* channel_max 0: no limit of ours, so the broker's (2047 on RabbitMQ)
     * bounds how many publishers share the connection. */
    return amqp_login_with_properties(
        c->conn, vhost, 0, FRAME_MAX, (int)heartbeat_s(c), &table,
        AMQP_SASL_METHOD_PLAIN, ci->user, ci->password);
}

/* The channel_max the login settled on: the broker's, as we ask for
 * no limit of our own. */
static unsigned
negotiated_channel_max(const struct amqpconn *c)
{
    int max = amqp_get_channel_max(c->conn);
    return max <= 0 || max > CHANNEL_LIMIT ? CHANNEL_LIMIT : (unsigned)max;
}

static int
connect_url(struct amqpconn *c, size_t i, char *err, size_t errlen)
{
    char *copy = xstrdup(c->broker->urls[i]);
    struct amqp_connection_info ci;
    amqp_default_connection_info(&ci);
    int rc = -1;
    if (amqp_parse_url(copy, &ci) != AMQP_STATUS_OK) {
        err_set(err, errlen, "not a valid amqp:// or amqps:// url");
        goto out;
    }
    c->conn = amqp_new_connection();
    struct timeval tv = ms_to_tv(c->broker->connect_timeout_ms);
    amqp_set_handshake_timeout(c->conn, &tv);
    amqp_set_rpc_timeout(c->conn, &tv);
    bool tls = ci.ssl || c->broker->tls.enabled;
    if ((tls ? open_tls : open_tcp)(c, ci.host, ci.port, err, errlen) < 0)
        goto out;
    amqp_rpc_reply_t r = login(c, &ci);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        char text[256];
        conn_reply_text(r, text, sizeof(text));
        /* With TLS 1.3 a refused client certificate shows only here. */
        bool tls_error = tls &&
                         r.reply_type == AMQP_RESPONSE_LIBRARY_EXCEPTION &&
                         r.library_error == AMQP_STATUS_SSL_ERROR;
        err_set(err, errlen, "login: %s%s", text,
                tls_error ? ": the TLS session failed; does the broker "
                            "require a client certificate (tls.cert_file, "
                            "tls.key_file) or refuse this one?"
                          : "");
        goto out;
    }
    c->channel_max = negotiated_channel_max(c);
    rc = 0;
out:
    if (rc < 0)
        conn_drop(c, err);
    free(copy);
    return rc;
}

int
amqpconn_connect(struct amqpconn *c, char *err, size_t errlen)
{
    if (c->conn != NULL)
        return 0;
    if (c->broker->nurls == 0) {
        err_set(err, errlen, "broker %s has no url", c->broker->name);
        return -1;
    }
    /*
     * A reconnect starts at the url after the one that was live: that node
     * just failed, and trying it first would cost a connect_timeout per
     * attempt when it is unreachable rather than refusing.
     */
    char all[1024] = "";
    size_t n = c->broker->nurls;
    for (size_t k = 0; k < n; k++) {
        char url_err[ERR_LEN];
        size_t i = (c->first_url + k) % n;
        c->url_index = i;
        if (connect_url(c, i, url_err, sizeof(url_err)) == 0) {
            c->first_url = (i + 1) % n;
            return 0;
        }
        size_t used = strlen(all);
        snprintf(all + used, sizeof(all) - used, "%s%s: %s", k ? "; " : "",
                 c->masked_urls[i], url_err);
        /* A node that fails while another answers is worth knowing. */
        if (k + 1 < n)
            log_warn(LOG_KV("broker", c->broker->name),
                     "%s: %s; trying the next url", c->masked_urls[i], url_err);
    }
    err_set(err, errlen, "%s", all);
    return -1;
}

/* ---- lifecycle ---- */

struct amqpconn *
amqpconn_new(const struct broker_config *broker, const char *name)
{
    struct amqpconn *c = xcalloc(1, sizeof(*c));
    c->broker = broker;
    c->name = xstrdup(name ? name : "outboxd");
    c->masked_urls = xcalloc(broker->nurls + 1, sizeof(*c->masked_urls));
    for (size_t i = 0; i < broker->nurls; i++)
        c->masked_urls[i] = amqpconn_mask_url(broker->urls[i]);
    return c;
}

void
amqpconn_free(struct amqpconn *c)
{
    if (c == NULL)
        return;
    if (c->npublishers > 0) /* they would point at freed memory */
        log_error(LOG_KV("broker", c->broker->name),
                  "amqpconn_free: %zu publishers still attached",
                  c->npublishers);
    amqpconn_disconnect(c);
    conn_exchanges_forget(c);
    free(c->exchanges);
    for (size_t i = 0; i < c->broker->nurls; i++)
        free(c->masked_urls[i]);
    free(c->masked_urls);
    free(c->name);
    free(c);
}

/* Both NULL, or the same text. */
static bool
same_str(const char *a, const char *b)
{
    return a == b || (a != NULL && b != NULL && strcmp(a, b) == 0);
}

static bool
tls_equal(const struct tls_config *a, const struct tls_config *b)
{
    return a->enabled == b->enabled && a->verify_peer == b->verify_peer &&
           a->verify_hostname == b->verify_hostname &&
           same_str(a->ca_file, b->ca_file) &&
           same_str(a->cert_file, b->cert_file) &&
           same_str(a->key_file, b->key_file);
}

bool
amqpconn_serves(const struct amqpconn *c, const struct broker_config *b)
{
    const struct broker_config *a = c->broker;
    if (!same_str(a->name, b->name) || a->nurls != b->nurls ||
        a->heartbeat_ms != b->heartbeat_ms ||
        a->connect_timeout_ms != b->connect_timeout_ms ||
        !tls_equal(&a->tls, &b->tls))
        return false;
    for (size_t i = 0; i < a->nurls; i++)
        if (strcmp(a->urls[i], b->urls[i]) != 0)
            return false;
    return true;
}

/* A pattern's tenants share one exchange; a template over a column may
 * name many, and a publish looks its exchange up here first. */
#define CONN_EXCHANGES_MAX 64

void
conn_exchanges_forget(struct amqpconn *c)
{
    for (size_t i = 0; i < c->nexchanges; i++) {
        free(c->exchanges[i].name);
        free(c->exchanges[i].missing);
    }
    c->nexchanges = 0;
}

struct exchange_seen *
conn_exchange_find(struct amqpconn *c, const char *name)
{
    for (size_t i = c->nexchanges; i-- > 0;) /* the newest first */
        if (strcmp(c->exchanges[i].name, name) == 0)
            return &c->exchanges[i];
    if (c->nexchanges == CONN_EXCHANGES_MAX) {
        free(c->exchanges[0].name);
        free(c->exchanges[0].missing);
        memmove(c->exchanges, c->exchanges + 1,
                --c->nexchanges * sizeof(*c->exchanges));
    }
    c->exchanges =
        xrealloc(c->exchanges, (c->nexchanges + 1) * sizeof(*c->exchanges));
    struct exchange_seen *e = &c->exchanges[c->nexchanges++];
    *e = (struct exchange_seen){.name = xstrdup(name)}; /* never asked */
    return e;
}

/* p's channel is gone: p (if it still has the channel) is told. */
static void
channel_lost(struct amqpconn *c, struct publisher *p, const char *reason)
{
    if (p != NULL && c->channel_lost_cb != NULL)
        c->channel_lost_cb(p, reason);
}

void
conn_drop(struct amqpconn *c, const char *reason)
{
    if (c->conn != NULL)
        amqp_destroy_connection(c->conn);
    c->conn = NULL;
    for (size_t i = 1; i < c->nslots; i++)
        if (c->slots[i].state == CHAN_OPEN)
            channel_lost(c, c->slots[i].p, reason);
    free(c->slots);
    c->slots = NULL;
    c->nslots = 0;
    c->check_channel = 0;
    c->check_open = false;
    c->spare_channel = 0;
    c->blocked = false;
    c->max_body = 0; /* the next broker may be configured otherwise */
    c->nacking_since_ms = 0;
    conn_exchanges_forget(c); /* the next broker may lack one */
}

void
amqpconn_disconnect(struct amqpconn *c)
{
    if (c->conn == NULL)
        return;
    /* A broker that answers takes milliseconds to close; one that hangs
     * must not hold a shutdown for the whole rpc timeout. */
    struct timeval tv = {0, CLOSE_TIMEOUT_MS * 1000};
    amqp_set_rpc_timeout(c->conn, &tv);
    amqp_connection_close(c->conn, AMQP_REPLY_SUCCESS);
    conn_drop(c, "disconnected");
}

uint64_t
amqpconn_exchange_checks(const struct amqpconn *c)
{
    return c->exchange_checks;
}

bool
amqpconn_is_connected(const struct amqpconn *c)
{
    return c->conn != NULL;
}

bool
amqpconn_is_blocked(const struct amqpconn *c)
{
    return c->blocked;
}

size_t
amqpconn_channels(const struct amqpconn *c)
{
    size_t n = 0;
    for (size_t i = 1; i < c->nslots; i++)
        n += c->slots[i].state == CHAN_OPEN ||
             c->slots[i].state == CHAN_CHECK || c->slots[i].state == CHAN_SPARE;
    return n;
}

unsigned
amqpconn_channel_max(const struct amqpconn *c)
{
    return c->channel_max;
}

const char *
amqpconn_url(const struct amqpconn *c)
{
    if (c->broker->nurls == 0)
        return "";
    return c->masked_urls[c->url_index];
}

/* ---- channels ---- */

amqp_channel_t
conn_channel_alloc(struct amqpconn *c, enum chan_state st, struct publisher *p,
                   char *err, size_t errlen)
{
    size_t ch = 1;
    while (ch < c->nslots && c->slots[ch].state != CHAN_FREE)
        ch++;
    if (ch > c->channel_max) {
        err_set(err, errlen,
                "no free channel: the connection has all %u the broker "
                "allows (channel_max) open",
                c->channel_max);
        return 0;
    }
    if (ch >= c->nslots) {
        size_t n = c->nslots ? c->nslots * 2 : 16;
        n = n > (size_t)c->channel_max + 1 ? (size_t)c->channel_max + 1 : n;
        c->slots = xrealloc(c->slots, n * sizeof(*c->slots));
        memset(c->slots + c->nslots, 0, (n - c->nslots) * sizeof(*c->slots));
        c->nslots = n;
    }
    c->slots[ch] = (struct chan_slot){st, p};
    return (amqp_channel_t)ch;
}

void
conn_channel_free(struct amqpconn *c, amqp_channel_t ch)
{
    if (ch < c->nslots)
        c->slots[ch] = (struct chan_slot){CHAN_FREE, NULL};
    if (ch == c->check_channel) {
        c->check_channel = 0;
        c->check_open = false;
    }
    if (ch == c->spare_channel)
        c->spare_channel = 0;
}

/*
 * A failed rpc on channel ch: a channel.close ends ch alone (close-ok
 * sent), anything else the connection.  -1 when the connection went.
 */
static int
rpc_failed(struct amqpconn *c, amqp_channel_t ch, amqp_rpc_reply_t r,
           const char *what, char *err, size_t errlen)
{
    char text[256];
    conn_reply_text(r, text, sizeof(text));
    err_set(err, errlen, "%s: %s", what, text);
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        amqp_channel_close_ok_t ok = {0};
        conn_channel_free(c, ch);
        if (amqp_send_method(c->conn, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) ==
            AMQP_STATUS_OK)
            return 0;
    } else if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
               r.reply.id == AMQP_CONNECTION_CLOSE_METHOD) {
        amqp_connection_close_ok_t ok = {0};
        amqp_send_method(c->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
    }
    /* A timed-out rpc has closed the socket: the connection is done. */
    conn_drop(c, err);
    return -1;
}

/* p on channel ch, whose next publish gets tag next_tag. */
static void
channel_given(struct publisher *p, amqp_channel_t ch, uint64_t next_tag)
{
    p->channel = ch;
    p->next_tag = next_tag;
    p->nacking_since_ms = 0;
    p->lost[0] = '\0';
}

int
conn_channel_open(struct amqpconn *c, struct publisher *p, char *err,
                  size_t errlen)
{
    amqp_channel_t spare = c->spare_channel;
    if (spare != 0) { /* no rpc: the tags go on where they were */
        c->spare_channel = 0;
        c->slots[spare] = (struct chan_slot){CHAN_OPEN, p};
        channel_given(p, spare, c->spare_next_tag);
        return 0;
    }
    amqp_channel_t ch = conn_channel_alloc(c, CHAN_OPEN, p, err, errlen);
    if (ch == 0)
        return -1;
    amqp_channel_open(c->conn, ch);
    amqp_rpc_reply_t r = amqp_get_rpc_reply(c->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        rpc_failed(c, ch, r, "channel.open", err, errlen);
        return -1;
    }
    amqp_confirm_select(c->conn, ch);
    r = amqp_get_rpc_reply(c->conn);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        rpc_failed(c, ch, r, "confirm.select", err, errlen);
        return -1;
    }
    channel_given(p, ch, 1);
    return 0;
}

void
conn_channel_close(struct amqpconn *c, struct publisher *p)
{
    amqp_channel_t ch = p->channel;
    if (ch == 0 || c->conn == NULL)
        return;
    p->channel = 0;
    str_copy(p->lost, "channel closed", sizeof(p->lost));
    amqp_channel_close_t m = {AMQP_REPLY_SUCCESS, amqp_cstring_bytes("closed"),
                              0, 0};
    c->slots[ch].state = CHAN_CLOSING;
    if (amqp_send_method(c->conn, ch, AMQP_CHANNEL_CLOSE_METHOD, &m) !=
        AMQP_STATUS_OK)
        conn_drop(c, "connection lost: sending channel.close");
}

/*
 * A woken tenant's batch on the spare costs the broker no channel.open,
 * confirm.select and channel.close, which took it 2 ms of CPU per event
 * at 1,000 tenants (docs/performance.md).  A parked publisher's waves
 * are over: its acks are in, or given up on
 * and closed with their channel, or released behind a broker alarm.  A
 * late confirm of those names a tag below the next owner's first, which
 * that owner's waves ignore, as they ignore their own earlier ones; a
 * late return can only send a row of the same message_id to RETRY, and
 * a late channel.close ends the next owner's wave as a close of its own
 * would: never a row marked SENT that was not confirmed.
 */
void
conn_channel_park(struct amqpconn *c, struct publisher *p)
{
    amqp_channel_t ch = p->channel;
    if (ch == 0 || c->conn == NULL)
        return;
    if (c->spare_channel != 0) {
        conn_channel_close(c, p);
        return;
    }
    c->slots[ch] = (struct chan_slot){CHAN_SPARE, NULL};
    c->spare_channel = ch;
    c->spare_next_tag = p->next_tag;
    p->channel = 0;
    str_copy(p->lost, "channel parked", sizeof(p->lost));
}

/* ---- frames for whoever they concern ---- */

static int
on_connection_close(struct amqpconn *c, const amqp_connection_close_t *m,
                    char *err, size_t errlen)
{
    err_set(err, errlen, "connection closed by broker: %u %.*s", m->reply_code,
            (int)m->reply_text.len, (const char *)m->reply_text.bytes);
    amqp_connection_close_ok_t ok = {0};
    amqp_send_method(c->conn, 0, AMQP_CONNECTION_CLOSE_OK_METHOD, &ok);
    conn_drop(c, err);
    return -1;
}

static int
connection_method(struct amqpconn *c, const amqp_method_t *m, char *err,
                  size_t errlen)
{
    switch (m->id) {
    case AMQP_CONNECTION_CLOSE_METHOD:
        return on_connection_close(c, m->decoded, err, errlen);
    case AMQP_CONNECTION_BLOCKED_METHOD: {
        const amqp_connection_blocked_t *b = m->decoded;
        if (!c->blocked)
            log_warn(LOG_KV("broker", c->broker->name),
                     "broker blocked publishing: %.*s", (int)b->reason.len,
                     (const char *)b->reason.bytes);
        c->blocked = true;
        return 0;
    }
    case AMQP_CONNECTION_UNBLOCKED_METHOD:
        if (c->blocked)
            log_info(LOG_KV("broker", c->broker->name),
                     "broker unblocked publishing");
        c->blocked = false;
        return 0;
    default:
        log_debug(LOG_KV("broker", c->broker->name),
                  "ignoring method 0x%08x on channel 0", m->id);
        return 0;
    }
}

/*
 * The broker closed ch: close-ok, and its publisher (if idle on it) is
 * disconnected with the broker's words; the other channels go on.
 */
static int
on_peer_close(struct amqpconn *c, amqp_channel_t ch,
              const amqp_channel_close_t *m, char *err, size_t errlen)
{
    char reason[ERR_LEN];
    snprintf(reason, sizeof(reason), "channel closed by broker: %u %.*s",
             m->reply_code, (int)m->reply_text.len,
             (const char *)m->reply_text.bytes);
    struct chan_slot s = ch < c->nslots ? c->slots[ch] : (struct chan_slot){0};
    /* Closes that crossed: the broker answers ours with a close-ok too
     * (as the spec asks), and the number stays taken until it comes. */
    if (s.state != CHAN_CLOSING)
        conn_channel_free(c, ch);
    if (s.state == CHAN_OPEN)
        channel_lost(c, s.p, reason);
    amqp_channel_close_ok_t ok = {0};
    if (amqp_send_method(c->conn, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) ==
        AMQP_STATUS_OK)
        return 0;
    err_set(err, errlen, "connection lost: sending channel.close-ok");
    conn_drop(c, err);
    return -1;
}

int
conn_dispatch(struct amqpconn *c, amqp_channel_t ch, const amqp_method_t *m,
              char *err, size_t errlen)
{
    if (ch == 0)
        return connection_method(c, m, err, errlen);
    struct chan_slot *s = ch < c->nslots ? &c->slots[ch] : NULL;
    switch (m->id) {
    case AMQP_BASIC_ACK_METHOD:
    case AMQP_BASIC_NACK_METHOD:
        /* Of a wave that gave up on its rows: they are settled already,
         * and tags are per channel, so it can confirm nothing else. */
        if (s != NULL && s->p != NULL)
            s->p->late_confirms++;
        return 0;
    case AMQP_CHANNEL_CLOSE_METHOD:
        return on_peer_close(c, ch, m->decoded, err, errlen);
    case AMQP_CHANNEL_CLOSE_OK_METHOD:
        if (s != NULL && s->state == CHAN_CLOSING)
            conn_channel_free(c, ch);
        return 0;
    default:
        /* A basic.return of no wave in flight: its content frames that
         * follow are skipped as stray content by every reader. */
        log_debug(LOG_KV("broker", c->broker->name),
                  "ignoring method 0x%08x on channel %u", m->id, ch);
        return 0;
    }
}

int
amqpconn_poll(struct amqpconn *c, char *err, size_t errlen)
{
    if (c->conn == NULL) {
        err_set(err, errlen, "%s: not connected", amqpconn_url(c));
        return -1;
    }
    for (;;) {
        amqp_frame_t f;
        struct timeval tv = {0, 0};
        amqp_maybe_release_buffers(c->conn);
        int rc = amqp_simple_wait_frame_noblock(c->conn, &f, &tv);
        if (rc == AMQP_STATUS_TIMEOUT)
            return 0;
        char reason[ERR_LEN];
        if (rc != AMQP_STATUS_OK) {
            snprintf(reason, sizeof(reason), "connection lost: %s",
                     amqp_error_string2(rc));
            conn_drop(c, reason);
        } else if (f.frame_type != AMQP_FRAME_METHOD ||
                   conn_dispatch(c, f.channel, &f.payload.method, reason,
                                 sizeof(reason)) == 0) {
            continue;
        }
        err_set(err, errlen, "%s: %s", amqpconn_url(c), reason);
        return -1;
    }
}
