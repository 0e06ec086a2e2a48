/*
 * publisher: one confirm-mode channel of a librabbitmq-c connection
 * (amqpconn), its own or shared.  A wave of rows is published pipelined
 * (publisher_wave.c), then acks, nacks, returns and closes are read as
 * frames until each row is settled or time runs out (here); frames of
 * other channels go to theirs.  publisher_life.c makes, connects, parks
 * and frees it; the family shares publisher_int.h.
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

size_t
publisher_body_len(const struct outbox_row *row)
{
    return row->payload != NULL ? row->payload_len : 0;
}

/*
 * Every published row not yet settled ends in state to (FAILED or
 * RELEASED) with reason; with over_max, only the rows whose body exceeds
 * the broker's limit fail and the others are released with other.
 */
void
wave_end_unsettled(struct wave *w, enum row_state to, const char *reason,
                   bool over_max, const char *other)
{
    for (size_t i = w->low; i < w->published; i++) {
        const struct inflight *e = &w->p->inflight[i];
        struct outbox_row *row = e->row;
        if (row->state != ROW_PUBLISHED)
            continue;
        if (e->returned != NULL) /* unroutable whatever happens next */
            row_enter_state(w->b, row, ROW_FAILED, e->returned);
        else if (over_max && publisher_body_len(row) <= w->p->c->max_body)
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
    wave_end_unsettled(w, ROW_FAILED, reason, false, NULL);
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

const char *
wave_timeout_reason(const struct wave *w, char *buf, size_t len)
{
    uint64_t stop = publisher_stop_deadline(w->p);
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
enum frame_result
wave_lose_connection(struct wave *w, const char *reason)
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
enum frame_result
wave_lose_channel(struct wave *w, const char *reason)
{
    if (w->p->owns_conn)
        return wave_lose_connection(w, reason);
    fail_unsettled(w, reason);
    err_set(w->err, w->errlen, "%s: %s", publisher_url(w->p), reason);
    conn_channel_close(w->p->c, w->p);
    str_copy(w->p->lost, reason, sizeof(w->p->lost));
    return FRAME_LOST;
}

/* ---- frames from the broker ---- */

/* A method for another channel, or the connection: to whom it concerns. */
static enum frame_result
other_channel(struct wave *w, amqp_channel_t channel, const amqp_method_t *m)
{
    char reason[ERR_LEN];
    if (conn_dispatch(w->p->c, channel, m, reason, sizeof(reason)) < 0)
        return wave_lose_connection(w, reason);
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
        return wave_handle_method(w, w->p->channel, &r.reply);
    if (r.reply_type != AMQP_RESPONSE_NORMAL) {
        char text[256], reason[300];
        conn_reply_text(r, text, sizeof(text));
        snprintf(reason, sizeof(reason), "connection lost: %s", text);
        return wave_lose_connection(w, reason);
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
        return wave_lose_connection(w, reason);
    size_t limit = size_limit(m);
    if (limit > 0) {
        p->c->max_body = limit;
        snprintf(other, sizeof(other),
                 "in flight when another message closed the channel (%s)",
                 reason);
        wave_end_unsettled(w, ROW_FAILED, reason, true, other);
    } else {
        fail_unsettled(w, reason);
    }
    conn_exchanges_forget(p->c); /* one was deleted since it was checked */
    char err[ERR_LEN];
    if (conn_channel_open(p->c, p, err, sizeof(err)) < 0) {
        char lost[sizeof(reason) + sizeof("; reopening it: ") + sizeof(err)];
        snprintf(lost, sizeof(lost), "%s; reopening it: %s", reason, err);
        str_copy(p->lost, lost, sizeof(p->lost));
        return p->c->conn == NULL ? wave_lose_connection(w, lost)
                                  : wave_lose_channel(w, lost);
    }
    reset_channel_state(w);
    return FRAME_OK;
}

/* A method on this publisher's channel, or on another (then theirs). */
enum frame_result
wave_handle_method(struct wave *w, amqp_channel_t channel,
                   const amqp_method_t *m)
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
enum frame_result
wave_read_frame(struct wave *w, uint64_t timeout_ms, bool *got)
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
        return wave_lose_connection(w, reason);
    }
    *got = true;
    if (f.frame_type != AMQP_FRAME_METHOD)
        return FRAME_OK; /* stray content: returns are read whole */
    return wave_handle_method(w, f.channel, &f.payload.method);
}

/* Handles whatever has already arrived, without waiting. */
enum frame_result
wave_read_available(struct wave *w)
{
    bool got = true;
    while (got)
        if (wave_read_frame(w, 0, &got) == FRAME_LOST)
            return FRAME_LOST;
    return FRAME_OK;
}
