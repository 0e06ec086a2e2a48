/*
 * publisher_wave: a wave of rows published pipelined on the channel, each
 * exchange checked before its first publish, then the broker's frames
 * read (publisher.c) until every row is settled or the deadline passes.
 */
#include "publisher.h"

#include <amqp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "publisher_int.h"
#include "util.h"

/* How long an exchange found missing is not asked about again. */
#define MISSING_RECHECK_MS 1000
/* Publishes between non-blocking reads, so acks never pile up unread and
 * a channel.close or connection.blocked is noticed within a few rows. */
#define READ_EVERY 64
/* Waits are cut in slices this long, so that a stop request from another
 * thread (shutdown) is seen in time. */
#define STOP_CHECK_MS 100

/* ---- exchange checks ---- */

/* The broker closed the check channel: confirm, reopen on next use. */
static enum frame_result
close_check_channel(struct wave *w)
{
    amqp_channel_close_ok_t ok = {0};
    struct amqpconn *c = w->p->c;
    amqp_channel_t ch = c->check_channel;
    conn_channel_free(c, ch);
    if (amqp_send_method(c->conn, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) < 0)
        return wave_lose_connection(
            w, "connection lost: sending channel.close-ok");
    return FRAME_OK;
}

/* The check channel opened if it is new, then the passive declare. */
static amqp_rpc_reply_t
check_rpc(struct amqpconn *c, const char *exchange)
{
    if (!c->check_open) {
        amqp_channel_open(c->conn, c->check_channel);
        amqp_rpc_reply_t r = amqp_get_rpc_reply(c->conn);
        if (r.reply_type != AMQP_RESPONSE_NORMAL)
            return r;
        c->check_open = true;
    }
    amqp_exchange_declare(c->conn, c->check_channel,
                          amqp_cstring_bytes(exchange), amqp_empty_bytes, 1, 0,
                          0, 0, amqp_empty_table);
    return amqp_get_rpc_reply(c->conn);
}

/*
 * Passive exchange.declare on the check channel.  Only a 404 counts as
 * missing; any other refusal (permissions) leaves publishing to decide.
 */
static enum frame_result
declare_passive(struct wave *w, struct exchange_seen *e)
{
    struct amqpconn *c = w->p->c;
    amqp_rpc_reply_t r;
    /* The wave's deadline bounds the check too; a timeout drops the
     * connection (the library closes the socket).  The library polls in
     * whole milliseconds rounded down, so its timer can fire up to 1 ms
     * early: 1 ms more keeps the check from ending before the deadline. */
    uint64_t now = clock_ms(), left = c->broker->connect_timeout_ms;
    bool by_deadline = w->deadline_ms <= now || w->deadline_ms - now <= left;
    if (by_deadline)
        left = w->deadline_ms > now ? w->deadline_ms - now + 1 : 1;
    if (c->check_channel == 0) {
        char err[ERR_LEN];
        c->check_channel =
            conn_channel_alloc(c, CHAN_CHECK, NULL, err, sizeof(err));
        if (c->check_channel == 0) /* none to spare: publishing decides */
            return FRAME_OK;
    }
    struct timeval tv = ms_to_tv(left);
    amqp_set_rpc_timeout(c->conn, &tv);
    c->exchange_checks++;
    r = check_rpc(c, e->name);
    tv = ms_to_tv(c->broker->connect_timeout_ms);
    amqp_set_rpc_timeout(c->conn, &tv);
    if (r.reply_type == AMQP_RESPONSE_NORMAL)
        return FRAME_OK;
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION &&
        r.reply.id == AMQP_CHANNEL_CLOSE_METHOD) {
        const amqp_channel_close_t *m = r.reply.decoded;
        if (m->reply_code == 404)
            e->missing = xasprintf("channel closed by broker: %u %.*s",
                                   m->reply_code, (int)m->reply_text.len,
                                   (const char *)m->reply_text.bytes);
        return close_check_channel(w);
    }
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION)
        return wave_handle_method(w, 0, &r.reply);
    char text[256], reason[300];
    if (r.library_error == AMQP_STATUS_TIMEOUT && by_deadline)
        return wave_lose_connection(
            w, wave_timeout_reason(w, reason, sizeof(reason)));
    conn_reply_text(r, text, sizeof(text));
    snprintf(reason, sizeof(reason), "connection lost: %s", text);
    return wave_lose_connection(w, reason);
}

/* Sets *missing to the broker's 404 when exchange does not exist. */
static enum frame_result
check_exchange(struct wave *w, const char *exchange, const char **missing)
{
    *missing = NULL;
    if (exchange[0] == '\0') /* the default exchange always exists */
        return FRAME_OK;
    struct exchange_seen *e = conn_exchange_find(w->p->c, exchange);
    bool asked = e->recheck_ms != 0;
    if (asked && (e->missing == NULL || clock_ms() < e->recheck_ms)) {
        *missing = e->missing;
        return FRAME_OK;
    }
    free(e->missing);
    e->missing = NULL;
    e->recheck_ms = clock_ms() + MISSING_RECHECK_MS;
    if (declare_passive(w, e) == FRAME_LOST)
        return FRAME_LOST;
    *missing = e->missing;
    return FRAME_OK;
}

/* ---- publishing ---- */

/* Rejects a row before publishing; false if it was rejected. */
static bool
check_row(struct wave *w, struct outbox_row *row,
          amqp_basic_properties_t *props)
{
    char err[ERR_LEN];
    size_t frame_max = (size_t)amqp_get_frame_max(w->p->c->conn);
    if (publisher_encode_row(w->p, row, frame_max, props, err, sizeof(err)) ==
        0)
        return true;
    row_enter_state(w->b, row, ROW_REJECTED, err);
    return false;
}

/* Publishes rows[w->next]; -1 (row untouched) when the connection fails. */
static int
publish_next(struct wave *w)
{
    struct outbox_row *row = w->rows[w->next];
    amqp_basic_properties_t props;
    if (row->state != ROW_CLAIMED || !check_row(w, row, &props)) {
        w->next++;
        return 0;
    }
    size_t max_body = w->p->c->max_body;
    if (max_body > 0 && publisher_body_len(row) > max_body) {
        /* Settled as the broker would, without closing the channel. */
        row_enter_state(w->b, row, ROW_PUBLISHED, NULL);
        row_enter_state(w->b, row, ROW_FAILED,
                        batch_sprintf(w->b,
                                      "message size %zu is larger than the "
                                      "broker's max size %zu (it refused "
                                      "such a message: 406 "
                                      "PRECONDITION_FAILED)",
                                      publisher_body_len(row), max_body));
        w->next++;
        return 0;
    }
    const char *missing;
    if (check_exchange(w, row->exchange, &missing) == FRAME_LOST)
        return -1;
    if (missing != NULL) {
        /* Settled as the publish would have been, without the channel
         * taking the rows in flight down with it. */
        row_enter_state(w->b, row, ROW_PUBLISHED, NULL);
        row_enter_state(w->b, row, ROW_FAILED, missing);
        w->next++;
        return 0;
    }
    amqp_bytes_t body = {row->payload ? row->payload_len : 0,
                         (void *)row->payload};
    int rc = amqp_basic_publish(
        w->p->c->conn, w->p->channel, amqp_cstring_bytes(row->exchange),
        amqp_cstring_bytes(row->routing_key), w->mandatory, 0, &props, body);
    if (rc < 0) {
        char reason[300];
        snprintf(reason, sizeof(reason), "connection lost: %s",
                 amqp_error_string2(rc));
        wave_lose_connection(w, reason);
        return -1;
    }
    w->p->inflight[w->published++] = (struct inflight){row, NULL};
    w->p->next_tag++;
    w->unsettled++;
    w->next++;
    row_enter_state(w->b, row, ROW_PUBLISHED, NULL);
    return 0;
}

/*
 * Publishes up to READ_EVERY rows, then reads what the broker sent.  The
 * deadline is checked per row: past the lease another relay may own the
 * batch, and a late publish could overtake its newer events.
 */
static enum frame_result
publish_some(struct wave *w, uint64_t deadline_ms)
{
    for (int i = 0;
         i < READ_EVERY && w->next < w->n && clock_ms() < deadline_ms; i++)
        if (publish_next(w) < 0)
            return FRAME_LOST;
    return wave_read_available(w);
}

/* The wave's own deadline, or a stop request's if that comes first. */
static uint64_t
wave_deadline(const struct wave *w)
{
    uint64_t stop = publisher_stop_deadline(w->p);
    return stop != 0 && stop < w->deadline_ms ? stop : w->deadline_ms;
}

/*
 * Past the deadline: unconfirmed rows fail; unpublished ones stay
 * CLAIMED.  A blocked broker keeps the connection: the rows are stuck
 * behind the alarm through no fault of theirs, so they go back with no
 * attempt counted, and late acks are ignored because tags only grow on a
 * channel.  Any other silence drops it, the broker may be gone.
 */
static int
wave_timeout(struct wave *w)
{
    char reason[128];
    wave_timeout_reason(w, reason, sizeof(reason));
    if (w->unsettled > 0 && !w->p->c->blocked) {
        wave_lose_channel(w, reason);
        return -1;
    }
    if (w->unsettled > 0) {
        size_t len = strlen(reason);
        snprintf(reason + len, sizeof(reason) - len,
                 " (broker blocked publishing)");
        wave_end_unsettled(w, ROW_RELEASED, reason, false, NULL);
    }
    err_set(w->err, w->errlen, "%s: %zu rows not published%s",
            publisher_url(w->p), w->n - w->next,
            w->p->c->blocked ? " (broker blocked publishing)" : "");
    return 0;
}

static void
wave_init(struct wave *w, struct publisher *p, struct outbox_batch *b,
          struct outbox_row **rows, size_t n)
{
    memset(w, 0, sizeof(*w));
    w->p = p;
    w->b = b;
    w->rows = rows;
    w->n = n;
    w->first_tag = p->next_tag;
    if (n > p->inflight_cap) {
        p->inflight_cap = n;
        p->inflight = xrealloc(p->inflight, n * sizeof(*p->inflight));
    }
}

/*
 * A connection on which the broker has nacked every publish for a whole
 * confirm_timeout is given up like one that stopped confirming, and the
 * next connect starts at the next url.  Seen in CI with RabbitMQ 3.10: a
 * quorum queue whose new leader had a quorum nacked every publish of the
 * connection the relay had opened during the election, for minutes.
 * On a shared connection that takes two publishers nacked through it:
 * one channel nacked alone (one tenant's queue refusing everything) is
 * reopened, and the others on the connection stay.
 */
static bool
nacked_too_long(struct wave *w)
{
    struct publisher *p = w->p;
    uint64_t limit = p->broker->confirm_timeout_ms, now = clock_ms();
    uint64_t conn_since = p->c->nacking_since_ms, since = p->nacking_since_ms;
    bool conn = conn_since != 0 && now - conn_since >= limit &&
                (p->owns_conn || p->c->nacking_publishers > 1);
    if (!conn && (since == 0 || now - since < limit))
        return false;
    char span[32];
    duration_format(limit, span, sizeof(span));
    if (conn || p->owns_conn) {
        err_set(w->err, w->errlen,
                "%s: every publish nacked for %s since the last ack: "
                "reconnecting",
                publisher_url(p), span);
        amqpconn_disconnect(p->c);
        return true;
    }
    err_set(w->err, w->errlen,
            "%s: every publish on this channel nacked for %s since its last "
            "ack: reopening it",
            publisher_url(p), span);
    conn_channel_close(p->c, p);
    str_copy(p->lost, w->err, sizeof(p->lost));
    return true;
}

/* True, with why, when p has no channel: never had one, or lost it. */
static bool
not_connected(const struct publisher *p, char *err, size_t errlen)
{
    if (publisher_is_connected(p))
        return false;
    if (p->lost[0] != '\0')
        err_set(err, errlen, "%s: not connected (%s)", publisher_url(p),
                p->lost);
    else
        err_set(err, errlen, "%s: not connected", publisher_url(p));
    return true;
}

int
publisher_publish_wave(struct publisher *p, struct outbox_batch *b,
                       struct outbox_row **rows, size_t n, bool mandatory,
                       uint64_t deadline_ms, char *err, size_t errlen)
{
    if (not_connected(p, err, errlen) || publisher_unpark(p, err, errlen) < 0)
        return -1;
    struct wave w;
    wave_init(&w, p, b, rows, n);
    w.mandatory = mandatory;
    w.deadline_ms = deadline_ms;
    w.err = err;
    w.errlen = errlen;
    while (w.next < w.n || w.unsettled > 0) {
        uint64_t now = clock_ms(), deadline = wave_deadline(&w);
        if (now >= deadline)
            return wave_timeout(&w);
        enum frame_result r;
        if (w.next < w.n && !p->c->blocked) {
            r = publish_some(&w, deadline);
        } else {
            bool got;
            uint64_t wait = deadline - now;
            r = wave_read_frame(&w, wait < STOP_CHECK_MS ? wait : STOP_CHECK_MS,
                                &got);
        }
        if (r == FRAME_LOST)
            return -1;
    }
    return nacked_too_long(&w) ? -1 : 0;
}

int
publisher_wait_unblocked(struct publisher *p, uint64_t deadline_ms, char *err,
                         size_t errlen)
{
    if (not_connected(p, err, errlen) || publisher_unpark(p, err, errlen) < 0)
        return -1;
    struct wave w;
    wave_init(&w, p, NULL, NULL, 0);
    w.err = err;
    w.errlen = errlen;
    for (uint64_t now = clock_ms(); p->c->blocked && now < deadline_ms;
         now = clock_ms()) {
        bool got;
        uint64_t wait = deadline_ms - now;
        if (wave_read_frame(&w, wait < STOP_CHECK_MS ? wait : STOP_CHECK_MS,
                            &got) == FRAME_LOST)
            return -1;
    }
    return 0;
}

int
publisher_poll(struct publisher *p, char *err, size_t errlen)
{
    if (not_connected(p, err, errlen))
        return -1;
    if (p->parked) /* the connection's frames and heartbeats */
        return amqpconn_poll(p->c, err, errlen);
    struct wave w;
    wave_init(&w, p, NULL, NULL, 0);
    w.err = err;
    w.errlen = errlen;
    return wave_read_available(&w) == FRAME_LOST ? -1 : 0;
}
