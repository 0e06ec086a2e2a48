/*
 * publisher: one confirm-mode channel of a librabbitmq-c connection
 * (amqpconn), its own or shared.  A wave of rows is published pipelined,
 * then acks, nacks, returns and closes are read as frames until each row
 * is settled or time runs out; frames of other channels go to theirs.
 */
#include "publisher.h"

#include <amqp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"
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

/* One call of publisher_publish_wave (or publisher_poll, with n == 0). */
struct wave {
    struct publisher *p;
    struct outbox_batch *b;
    struct outbox_row **rows;
    size_t n, next; /* rows[next..n) not published yet */
    bool mandatory;
    uint64_t deadline_ms;
    uint64_t first_tag; /* tag of inflight[0] on the current channel */
    size_t published;   /* inflight entries on the current channel */
    size_t low;         /* inflight[0..low) are all settled */
    size_t unsettled;
    size_t return_cursor; /* returns come in publish order: search from here */
    char *err;
    size_t errlen;
};

/* What reading one frame did to the wave. */
enum frame_result { FRAME_OK, FRAME_LOST };

/* ---- lifecycle ---- */

/* p's channel is gone (reason): it reopens one on its next connect. */
static void
channel_lost_cb(struct publisher *p, const char *reason)
{
    p->channel = 0;
    str_copy(p->lost, reason, sizeof(p->lost));
    p->nacking_since_ms = 0;
    conn_exchanges_forget(p->c); /* one may be deleted before the next */
}

static struct publisher *
publisher_attach(struct amqpconn *c, const struct broker_config *broker)
{
    struct publisher *p = xcalloc(1, sizeof(*p));
    p->c = c;
    p->broker = broker;
    c->npublishers++;
    c->channel_lost_cb = channel_lost_cb;
    return p;
}

struct publisher *
publisher_new(const struct broker_config *broker, const char *connection_name)
{
    struct publisher *p =
        publisher_attach(amqpconn_new(broker, connection_name), broker);
    p->owns_conn = true;
    return p;
}

struct publisher *
publisher_new_shared(struct amqpconn *c, const struct broker_config *broker)
{
    return publisher_attach(c, broker != NULL ? broker : c->broker);
}

/*
 * Its own connection is closed with the channel; a shared one stays for
 * the others unless it failed, which ended every channel already.
 */
void
publisher_disconnect(struct publisher *p)
{
    p->parked = false;
    if (p->owns_conn)
        amqpconn_disconnect(p->c);
    else
        conn_channel_close(p->c, p);
}

void
publisher_park(struct publisher *p)
{
    publisher_trim(p);
    if (p->owns_conn || p->channel == 0 || p->c->conn == NULL)
        return;
    conn_channel_park(p->c, p);
    p->parked = true;
}

/* A parked publisher's channel again, for a wave; -1 and err when the
 * broker refuses one (the connection may be gone with it). */
static int
unpark(struct publisher *p, char *err, size_t errlen)
{
    if (!p->parked || p->c->conn == NULL)
        return 0;
    char why[ERR_LEN];
    p->parked = false;
    if (conn_channel_open(p->c, p, why, sizeof(why)) == 0)
        return 0;
    err_set(err, errlen, "%s: %s", publisher_url(p), why);
    return -1;
}

void
publisher_trim(struct publisher *p)
{
    free(p->inflight);
    free(p->headers);
    free(p->scratch);
    p->inflight = NULL;
    p->headers = NULL;
    p->scratch = NULL;
    p->inflight_cap = p->headers_cap = p->scratch_cap = 0;
}

void
publisher_free(struct publisher *p)
{
    if (p == NULL)
        return;
    publisher_disconnect(p);
    struct amqpconn *c = p->c;
    for (size_t i = 1; i < c->nslots; i++) /* a closing channel's */
        if (c->slots[i].p == p)
            c->slots[i].p = NULL;
    c->npublishers--;
    if (p->owns_conn)
        amqpconn_free(c);
    free(p->inflight);
    free(p->headers);
    free(p->scratch);
    free(p);
}

bool
publisher_is_connected(const struct publisher *p)
{
    return p->c->conn != NULL && (p->channel != 0 || p->parked);
}

bool
publisher_is_blocked(const struct publisher *p)
{
    return p->c->blocked;
}

uint64_t
publisher_late_confirms(const struct publisher *p)
{
    return p->late_confirms;
}

amqp_channel_t
publisher_channel(const struct publisher *p)
{
    return p->channel;
}

void
publisher_set_envelope(struct publisher *p, enum envelope envelope,
                       const char *source)
{
    p->envelope = envelope;
    p->ce_source = source;
}

void
publisher_set_stop_deadline(struct publisher *p,
                            const _Atomic uint64_t *stop_deadline_ms)
{
    p->stop_deadline_ms = stop_deadline_ms;
}

static uint64_t
stop_deadline(const struct publisher *p)
{
    return p->stop_deadline_ms != NULL ? *p->stop_deadline_ms : 0;
}

const char *
publisher_url(const struct publisher *p)
{
    return amqpconn_url(p->c);
}

/* ---- connect ---- */

/*
 * Its own connection is made anew, starting at the url after the last
 * one; a shared one is connected only if it is not.  Then a channel.
 */
int
publisher_connect(struct publisher *p, char *err, size_t errlen)
{
    publisher_disconnect(p);
    /* What arrived first: a connection.close, close-oks that free the
     * numbers of closed channels.  A dead connection is made anew. */
    char ignored[ERR_LEN];
    if (amqpconn_is_connected(p->c))
        (void)amqpconn_poll(p->c, ignored, sizeof(ignored));
    if (amqpconn_connect(p->c, err, errlen) < 0)
        return -1;
    char why[ERR_LEN];
    if (conn_channel_open(p->c, p, why, sizeof(why)) == 0)
        return 0;
    err_set(err, errlen, "%s: %s", publisher_url(p), why);
    if (p->owns_conn)
        conn_drop(p->c, why);
    return -1;
}

/* ---- settling ---- */

static void
settle_entry(struct wave *w, struct inflight *e, bool ack)
{
    if (e->row->state != ROW_PUBLISHED)
        return;
    if (e->returned != NULL)
        row_enter_state(w->b, e->row, ROW_FAILED, e->returned);
    else if (ack)
        row_enter_state(w->b, e->row, ROW_ACKED, NULL);
    else
        row_enter_state(
            w->b, e->row, ROW_FAILED,
            batch_sprintf(w->b,
                          "broker nack (a queue refused the message, or "
                          "the broker could not store it): exchange \"%s\" "
                          "routing key \"%s\"",
                          e->row->exchange, e->row->routing_key));
    w->unsettled--;
}

/* A nack: the runs of nacks of this channel and of the connection. */
static void
count_nack(struct publisher *p)
{
    struct amqpconn *c = p->c;
    uint64_t now = clock_ms();
    if (p->nacking_since_ms == 0)
        p->nacking_since_ms = now;
    if (c->nacking_since_ms == 0) {
        c->nacking_since_ms = now;
        c->nack_streak++;
        c->nacking_publishers = 0;
    }
    if (p->nack_streak != c->nack_streak) {
        p->nack_streak = c->nack_streak;
        c->nacking_publishers++;
    }
}

/* basic.ack / basic.nack, with `multiple` covering every tag up to tag. */
static void
settle(struct wave *w, uint64_t tag, bool multiple, bool ack)
{
    if (tag < w->first_tag || tag - w->first_tag >= w->published) {
        /* Of an earlier wave that gave up on its rows: tags only grow
         * on a channel, so it can confirm nothing of this one. */
        log_debug(LOG_KV("broker", w->p->broker->name),
                  "ignoring confirm for unknown delivery tag %llu",
                  (unsigned long long)tag);
        w->p->late_confirms++;
        return;
    }
    if (ack) {
        w->p->nacking_since_ms = 0;
        w->p->c->nacking_since_ms = 0;
    } else {
        count_nack(w->p);
    }
    size_t k = (size_t)(tag - w->first_tag);
    struct inflight *inflight = w->p->inflight;
    if (multiple)
        for (size_t i = w->low; i <= k; i++)
            settle_entry(w, &inflight[i], ack);
    else
        settle_entry(w, &inflight[k], ack);
    while (w->low < w->published &&
           inflight[w->low].row->state != ROW_PUBLISHED)
        w->low++;
}

static size_t
body_len(const struct outbox_row *row)
{
    return row->payload != NULL ? row->payload_len : 0;
}

/*
 * Every published row not yet settled ends in state to (FAILED or
 * RELEASED) with reason; with over_max, only the rows whose body exceeds
 * the broker's limit fail and the others are released with other.
 */
static void
end_unsettled(struct wave *w, enum row_state to, const char *reason,
              bool over_max, const char *other)
{
    for (size_t i = w->low; i < w->published; i++) {
        const struct inflight *e = &w->p->inflight[i];
        struct outbox_row *row = e->row;
        if (row->state != ROW_PUBLISHED)
            continue;
        if (e->returned != NULL) /* unroutable whatever happens next */
            row_enter_state(w->b, row, ROW_FAILED, e->returned);
        else if (over_max && body_len(row) <= w->p->c->max_body)
            row_enter_state(w->b, row, ROW_RELEASED, other);
        else
            row_enter_state(w->b, row, to, reason);
        w->unsettled--;
    }
    w->low = w->published;
}

/* Every published row not yet settled fails with reason. */
static void
fail_unsettled(struct wave *w, const char *reason)
{
    end_unsettled(w, ROW_FAILED, reason, false, NULL);
}

/* A new channel numbers its deliveries from 1 again. */
static void
reset_channel_state(struct wave *w)
{
    w->published = 0;
    w->low = 0;
    w->return_cursor = 0;
    w->first_tag = w->p->next_tag;
}

static const char *
timeout_reason(const struct wave *w, char *buf, size_t len)
{
    uint64_t stop = stop_deadline(w->p);
    if (stop != 0 && clock_ms() >= stop) {
        snprintf(buf, len, "no confirm before the shutdown deadline");
        return buf;
    }
    char limit[32];
    duration_format(w->p->broker->confirm_timeout_ms, limit, sizeof(limit));
    snprintf(buf, len, "no confirm within %s", limit);
    return buf;
}

/* The connection is gone: fail what is in flight, forget the connection
 * (every publisher on it is told). */
static enum frame_result
lose_connection(struct wave *w, const char *reason)
{
    fail_unsettled(w, reason);
    err_set(w->err, w->errlen, "%s: %s", publisher_url(w->p), reason);
    conn_drop(w->p->c, reason);
    str_copy(w->p->lost, reason, sizeof(w->p->lost));
    return FRAME_LOST;
}

/*
 * This channel must go (no confirms in time, a reopen refused): fail what
 * is in flight.  Its own connection goes with it, as a fresh one is the
 * cure for a broker that stopped answering; a shared one stays for the
 * other publishers, and a silent broker shows there soon enough (rpc
 * timeouts, heartbeats).
 */
static enum frame_result
lose_channel(struct wave *w, const char *reason)
{
    if (w->p->owns_conn)
        return lose_connection(w, reason);
    fail_unsettled(w, reason);
    err_set(w->err, w->errlen, "%s: %s", publisher_url(w->p), reason);
    conn_channel_close(w->p->c, w->p);
    str_copy(w->p->lost, reason, sizeof(w->p->lost));
    return FRAME_LOST;
}

/* ---- frames from the broker ---- */

/* The broker closed the check channel: confirm, reopen on next use. */
static enum frame_result
close_check_channel(struct wave *w)
{
    amqp_channel_close_ok_t ok = {0};
    struct amqpconn *c = w->p->c;
    amqp_channel_t ch = c->check_channel;
    conn_channel_free(c, ch);
    if (amqp_send_method(c->conn, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) < 0)
        return lose_connection(w, "connection lost: sending channel.close-ok");
    return FRAME_OK;
}

/* A method for another channel, or the connection: to whom it concerns. */
static enum frame_result
other_channel(struct wave *w, amqp_channel_t channel, const amqp_method_t *m)
{
    char reason[ERR_LEN];
    if (conn_dispatch(w->p->c, channel, m, reason, sizeof(reason)) < 0)
        return lose_connection(w, reason);
    return FRAME_OK;
}

static int64_t
returned_outbox_id(const amqp_basic_properties_t *props)
{
    if (!(props->_flags & AMQP_BASIC_HEADERS_FLAG))
        return -1;
    for (int i = 0; i < props->headers.num_entries; i++) {
        const amqp_table_entry_t *e = &props->headers.entries[i];
        if (e->key.len == 9 && memcmp(e->key.bytes, "outbox_id", 9) == 0 &&
            e->value.kind == AMQP_FIELD_KIND_I64)
            return e->value.value.i64;
    }
    return -1;
}

static bool
returned_matches(const struct outbox_row *row, int64_t id,
                 const amqp_basic_properties_t *props)
{
    if (id >= 0)
        return row->id == (uint64_t)id;
    if (!(props->_flags & AMQP_BASIC_MESSAGE_ID_FLAG) || row->event_id == NULL)
        return false;
    return strlen(row->event_id) == props->message_id.len &&
           memcmp(row->event_id, props->message_id.bytes,
                  props->message_id.len) == 0;
}

/* The in-flight entry a returned message belongs to, or NULL. */
static struct inflight *
find_returned(struct wave *w, const amqp_basic_properties_t *props)
{
    int64_t id = returned_outbox_id(props);
    for (size_t n = 0; n < w->published; n++) {
        size_t i = (w->return_cursor + n) % w->published;
        struct inflight *e = &w->p->inflight[i];
        if (e->row->state == ROW_PUBLISHED &&
            returned_matches(e->row, id, props)) {
            w->return_cursor = i + 1;
            return e;
        }
    }
    return NULL;
}

static enum frame_result handle_method(struct wave *w, amqp_channel_t channel,
                                       const amqp_method_t *m);

/*
 * basic.return: the content frames follow at once.  The ack that covers
 * the message comes after, and settles it as failed.
 */
static enum frame_result
on_return(struct wave *w, const amqp_basic_return_t *ret)
{
    amqp_message_t msg;
    amqp_rpc_reply_t r =
        amqp_read_message(w->p->c->conn, w->p->channel, &msg, 0);
    if (r.reply_type == AMQP_RESPONSE_SERVER_EXCEPTION)
        return handle_method(w, w->p->channel, &r.reply);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        char text[256], reason[300];
        conn_reply_text(r, text, sizeof(text));
        snprintf(reason, sizeof(reason), "connection lost: %s", text);
        return lose_connection(w, reason);
    }
    struct inflight *e = find_returned(w, &msg.properties);
    if (e != NULL)
        e->returned = batch_sprintf(
            w->b, "%.*s: exchange \"%.*s\" routing key \"%.*s\"",
            (int)ret->reply_text.len, (const char *)ret->reply_text.bytes,
            (int)ret->exchange.len, (const char *)ret->exchange.bytes,
            (int)ret->routing_key.len, (const char *)ret->routing_key.bytes);
    else
        log_debug(LOG_KV("broker", w->p->broker->name),
                  "basic.return for a message not in flight");
    amqp_destroy_message(&msg);
    return FRAME_OK;
}

/*
 * RabbitMQ refuses a body over its max_message_size by closing the
 * channel: "406 PRECONDITION_FAILED - message size 100000 is larger than
 * configured max size 65536".  The limit, or 0 for any other close.
 */
static size_t
size_limit(const amqp_channel_close_t *m)
{
    char text[512];
    snprintf(text, sizeof(text), "%.*s", (int)m->reply_text.len,
             (const char *)m->reply_text.bytes);
    const char *max = strstr(text, "max size ");
    if (m->reply_code != 406 || strstr(text, "message size") == NULL ||
        max == NULL)
        return 0;
    return (size_t)strtoull(max + strlen("max size "), NULL, 10);
}

/*
 * channel.close (404 no exchange, 406 too large...): what was in flight
 * fails with the broker's words, and a fresh channel takes over.  A body
 * too large names the culprit: it alone fails, the rest in flight goes
 * back unattempted, and the limit stops any larger body before it is
 * published.
 */
static enum frame_result
on_channel_close(struct wave *w, const amqp_channel_close_t *m)
{
    char reason[ERR_LEN], other[600];
    snprintf(reason, sizeof(reason), "channel closed by broker: %u %.*s",
             m->reply_code, (int)m->reply_text.len,
             (const char *)m->reply_text.bytes);
    struct publisher *p = w->p;
    amqp_channel_close_ok_t ok = {0};
    amqp_channel_t ch = p->channel;
    conn_channel_free(p->c, ch);
    p->channel = 0;
    if (amqp_send_method(p->c->conn, ch, AMQP_CHANNEL_CLOSE_OK_METHOD, &ok) < 0)
        return lose_connection(w, reason);
    size_t limit = size_limit(m);
    if (limit > 0) {
        p->c->max_body = limit;
        snprintf(other, sizeof(other),
                 "in flight when another message closed the channel (%s)",
                 reason);
        end_unsettled(w, ROW_FAILED, reason, true, other);
    } else {
        fail_unsettled(w, reason);
    }
    conn_exchanges_forget(p->c); /* one was deleted since it was checked */
    char err[ERR_LEN];
    if (conn_channel_open(p->c, p, err, sizeof(err)) < 0) {
        char lost[sizeof(reason) + sizeof("; reopening it: ") + sizeof(err)];
        snprintf(lost, sizeof(lost), "%s; reopening it: %s", reason, err);
        str_copy(p->lost, lost, sizeof(p->lost));
        return p->c->conn == NULL ? lose_connection(w, lost)
                                  : lose_channel(w, lost);
    }
    reset_channel_state(w);
    return FRAME_OK;
}

/* A method on this publisher's channel, or on another (then theirs). */
static enum frame_result
handle_method(struct wave *w, amqp_channel_t channel, const amqp_method_t *m)
{
    if (channel == 0 || channel != w->p->channel)
        return other_channel(w, channel, m);
    switch (m->id) {
    case AMQP_BASIC_ACK_METHOD: {
        const amqp_basic_ack_t *a = m->decoded;
        settle(w, a->delivery_tag, a->multiple, true);
        return FRAME_OK;
    }
    case AMQP_BASIC_NACK_METHOD: {
        const amqp_basic_nack_t *a = m->decoded;
        settle(w, a->delivery_tag, a->multiple, false);
        return FRAME_OK;
    }
    case AMQP_BASIC_RETURN_METHOD:
        return on_return(w, m->decoded);
    case AMQP_CHANNEL_CLOSE_METHOD:
        return on_channel_close(w, m->decoded);
    default:
        log_debug(LOG_KV("broker", w->p->broker->name),
                  "ignoring method 0x%08x on channel %u", m->id, channel);
        return FRAME_OK;
    }
}

/*
 * Reads and handles one frame, waiting at most timeout_ms.  *got tells
 * whether a frame came; heartbeats are answered inside the library.
 */
static enum frame_result
read_frame(struct wave *w, uint64_t timeout_ms, bool *got)
{
    amqp_frame_t f;
    struct timeval tv = ms_to_tv(timeout_ms);
    *got = false;
    /* Recycles frames already handled; channels with frames still queued
     * in the library keep theirs. */
    amqp_maybe_release_buffers(w->p->c->conn);
    int rc = amqp_simple_wait_frame_noblock(w->p->c->conn, &f, &tv);
    if (rc == AMQP_STATUS_TIMEOUT)
        return FRAME_OK;
    if (rc != AMQP_STATUS_OK) {
        char reason[300];
        snprintf(reason, sizeof(reason), "connection lost: %s",
                 amqp_error_string2(rc));
        return lose_connection(w, reason);
    }
    *got = true;
    if (f.frame_type != AMQP_FRAME_METHOD)
        return FRAME_OK; /* stray content: returns are read whole */
    return handle_method(w, f.channel, &f.payload.method);
}

/* Handles whatever has already arrived, without waiting. */
static enum frame_result
read_available(struct wave *w)
{
    bool got = true;
    while (got)
        if (read_frame(w, 0, &got) == FRAME_LOST)
            return FRAME_LOST;
    return FRAME_OK;
}

/* ---- exchange checks ---- */

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
        return handle_method(w, 0, &r.reply);
    char text[256], reason[300];
    if (r.library_error == AMQP_STATUS_TIMEOUT && by_deadline)
        return lose_connection(w, timeout_reason(w, reason, sizeof(reason)));
    conn_reply_text(r, text, sizeof(text));
    snprintf(reason, sizeof(reason), "connection lost: %s", text);
    return lose_connection(w, reason);
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
    if (max_body > 0 && body_len(row) > max_body) {
        /* Settled as the broker would, without closing the channel. */
        row_enter_state(w->b, row, ROW_PUBLISHED, NULL);
        row_enter_state(w->b, row, ROW_FAILED,
                        batch_sprintf(w->b,
                                      "message size %zu is larger than the "
                                      "broker's max size %zu (it refused "
                                      "such a message: 406 "
                                      "PRECONDITION_FAILED)",
                                      body_len(row), max_body));
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
        lose_connection(w, reason);
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
    return read_available(w);
}

/* The wave's own deadline, or a stop request's if that comes first. */
static uint64_t
wave_deadline(const struct wave *w)
{
    uint64_t stop = stop_deadline(w->p);
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
    timeout_reason(w, reason, sizeof(reason));
    if (w->unsettled > 0 && !w->p->c->blocked) {
        lose_channel(w, reason);
        return -1;
    }
    if (w->unsettled > 0) {
        size_t len = strlen(reason);
        snprintf(reason + len, sizeof(reason) - len,
                 " (broker blocked publishing)");
        end_unsettled(w, ROW_RELEASED, reason, false, NULL);
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
    if (not_connected(p, err, errlen) || unpark(p, err, errlen) < 0)
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
            r = read_frame(&w, wait < STOP_CHECK_MS ? wait : STOP_CHECK_MS,
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
    if (not_connected(p, err, errlen) || unpark(p, err, errlen) < 0)
        return -1;
    struct wave w;
    wave_init(&w, p, NULL, NULL, 0);
    w.err = err;
    w.errlen = errlen;
    for (uint64_t now = clock_ms(); p->c->blocked && now < deadline_ms;
         now = clock_ms()) {
        bool got;
        uint64_t wait = deadline_ms - now;
        if (read_frame(&w, wait < STOP_CHECK_MS ? wait : STOP_CHECK_MS, &got) ==
            FRAME_LOST)
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
    return read_available(&w) == FRAME_LOST ? -1 : 0;
}
