/*
 * publisher: one confirm-mode AMQP 0-9-1 channel to one broker
 * (librabbitmq-c), on a connection of its own or one shared with other
 * publishers of the same thread (amqpconn.h).  Publishes a wave of rows
 * pipelined and reads acks, nacks and returns until each row is settled
 * or time runs out.
 */
#ifndef OUTBOXD_PUBLISHER_H
#define OUTBOXD_PUBLISHER_H

#include <amqp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "amqpconn.h"
#include "batch.h"
#include "config.h"

struct publisher;

/* With a connection of its own, made by publisher_connect. */
struct publisher *publisher_new(const struct broker_config *broker,
                                const char *connection_name);
/*
 * On a channel of c, which another thread must never use meanwhile.
 * broker is this publisher's view of c's broker (its confirm_timeout;
 * amqpconn_serves(c, broker) holds), or NULL for c's.  Free it before c.
 */
struct publisher *publisher_new_shared(struct amqpconn *c,
                                       const struct broker_config *broker);
/* Frees the buffers a wave grew (between two batches of a tenant). */
void publisher_trim(struct publisher *p);
/*
 * publisher_trim, and on a shared connection its channel given back
 * while the outbox has nothing to publish: the client library keeps a
 * frame_max page per channel it ever read on, and the broker a process
 * per channel.  The connection keeps it open for its next publisher
 * (conn_channel_park).  It still counts as connected; the next wave
 * takes that spare channel, or opens one.
 */
void publisher_park(struct publisher *p);
void publisher_free(struct publisher *p);

/*
 * Connects: its own connection anew, trying each url in turn, starting
 * after the one of the last connection; a shared one only if it is not
 * connected.  Then opens a channel of its own in confirm mode (a clear
 * error when the connection has no channel number left).
 */
int publisher_connect(struct publisher *p, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* Closes its own connection, or on a shared one its channel alone. */
void publisher_disconnect(struct publisher *p);
/* The connection is open and so is this publisher's channel. */
bool publisher_is_connected(const struct publisher *p);
/* Its channel number, 0 when it has none. */
amqp_channel_t publisher_channel(const struct publisher *p);
/*
 * Confirms that came after their wave had given up on them (a timeout):
 * counted, never applied to any row.
 */
uint64_t publisher_late_confirms(const struct publisher *p);
/* connection.blocked received and not yet unblocked (on its connection). */
bool publisher_is_blocked(const struct publisher *p);
/*
 * Reads frames (and sends heartbeats) until the broker lifts its block or
 * deadline_ms (clock_ms) passes; 0 either way, -1 when the connection is
 * gone.  The caller decides whether to keep waiting.
 */
int publisher_wait_unblocked(struct publisher *p, uint64_t deadline_ms,
                             char *err, size_t errlen)
    __attribute__((warn_unused_result));
/*
 * Points the publisher at a stop deadline that another thread may set
 * (clock_ms, 0 for none): every wait ends by then, so that a shutdown
 * never waits out a silent broker's confirm_timeout.
 */
void publisher_set_stop_deadline(struct publisher *p,
                                 const _Atomic uint64_t *stop_deadline_ms);
/*
 * What each message carries besides outboxd's own properties and headers
 * (docs/contract.md section 7); source is the CloudEvents source, kept by
 * the caller.  ENVELOPE_OUTBOXD until set.
 */
void publisher_set_envelope(struct publisher *p, enum envelope envelope,
                            const char *source);
/* The url of the live connection, with any password masked. */
const char *publisher_url(const struct publisher *p);

/*
 * The properties and headers a publish of row carries, checked against a
 * frame of frame_max bytes; they point into row and p's buffers until the
 * next call.  -1 with the reason when the row cannot be sent as it is (bad
 * headers JSON, a field over 255 bytes, too large for a frame; under
 * the cloudevents envelope, an empty id or type or a row header that
 * would set a CloudEvents attribute).
 */
int publisher_encode_row(struct publisher *p, const struct outbox_row *row,
                         size_t frame_max, amqp_basic_properties_t *props,
                         char *err, size_t errlen);

/*
 * Reads whatever the broker sent while idle, without blocking, and sends
 * heartbeats that are due; frames of other channels go to theirs.  -1
 * when the connection is gone or this publisher's channel is.
 */
int publisher_poll(struct publisher *p, char *err, size_t errlen);

/*
 * Publishes rows[0..n) (state ROW_CLAIMED, exchange and routing_key
 * set) in order on the confirm channel, then waits until every one is
 * settled or deadline_ms (clock_ms) passes.  Each row ends ACKED; FAILED
 * with the reason (nack, NO_ROUTE with exchange and key: a basic.return
 * is never success; channel closed with the broker's reply; no confirm in
 * time; connection lost; a body over the broker's max_message_size);
 * REJECTED when the row cannot be encoded (bad headers JSON, a field over
 * 255 bytes); RELEASED when its outcome is unknown through no fault of
 * its own (the broker blocked publishing until the deadline, or closed
 * the channel for another row's oversized body); or still CLAIMED when
 * it was never sent (connection lost first, or blocked).  Returns -1
 * when the publisher is disconnected (the caller reconnects): the
 * connection lost, or silent past the deadline, or nacking every publish
 * for a whole confirm_timeout since its last ack.  On a shared
 * connection, silence or nacks on this channel alone close the channel,
 * not the connection; a channel.close by the broker (404, 406, 403) fails
 * what is in flight and a new channel takes over, as on its own.  Else
 * 0.
 */
int publisher_publish_wave(struct publisher *p, struct outbox_batch *b,
                           struct outbox_row **rows, size_t n, bool mandatory,
                           uint64_t deadline_ms, char *err, size_t errlen)
    __attribute__((warn_unused_result));

#endif
