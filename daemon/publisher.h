/*
 * publisher: one AMQP 0-9-1 connection and confirm-mode channel to one
 * broker (librabbitmq-c).  Publishes a wave of rows pipelined and reads
 * acks, nacks and returns until each row is settled or time runs out.
 */
#ifndef OUTBOXD_PUBLISHER_H
#define OUTBOXD_PUBLISHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "batch.h"
#include "config.h"

struct publisher;

struct publisher *publisher_new(const struct broker_config *broker,
                                const char *connection_name);
void publisher_free(struct publisher *p);

/* Tries each url in turn; opens channel 1 in confirm mode. */
int publisher_connect(struct publisher *p, char *err, size_t errlen)
    __attribute__((warn_unused_result));
void publisher_disconnect(struct publisher *p);
bool publisher_is_connected(const struct publisher *p);
/* connection.blocked received and not yet unblocked. */
bool publisher_is_blocked(const struct publisher *p);
/* The url of the live connection, with any password masked. */
const char *publisher_url(const struct publisher *p);

/*
 * Reads whatever the broker sent while idle, without blocking, and sends
 * heartbeats that are due.  -1 when the connection is gone.
 */
int publisher_poll(struct publisher *p, char *err, size_t errlen);

/*
 * Publishes rows[0..n) (state ROW_CLAIMED, exchange and routing_key
 * set) in order on the confirm channel, then waits until every one is
 * settled or deadline_ms (clock_ms) passes.  Each row ends ACKED; FAILED
 * with the reason (nack, NO_ROUTE with exchange and key: a basic.return
 * is never success; channel closed with the broker's reply; no confirm in
 * time; connection lost); REJECTED when the row cannot be encoded (bad
 * headers JSON, a field over 255 bytes); or still CLAIMED when it was
 * never sent (connection lost first, or the broker blocked publishing
 * until the deadline).  Returns -1 when the connection had to be dropped
 * (the caller reconnects), else 0.
 */
int publisher_publish_wave(struct publisher *p, struct outbox_batch *b,
                           struct outbox_row **rows, size_t n,
                           bool mandatory, uint64_t deadline_ms, char *err,
                           size_t errlen) __attribute__((warn_unused_result));

#endif
