/*
 * amqpconn: one AMQP connection to one broker, shared by the publishers
 * of one thread, each on a confirm channel of its own (publisher.h).
 */
#ifndef OUTBOXD_AMQPCONN_H
#define OUTBOXD_AMQPCONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "config.h"

struct amqpconn;

/*
 * Not connected until amqpconn_connect or a publisher's connect; name is
 * the connection_name the broker shows.  broker must outlive it.
 */
struct amqpconn *amqpconn_new(const struct broker_config *broker,
                              const char *name);
/* Every publisher on c must be freed first. */
void amqpconn_free(struct amqpconn *c);
/* Whether c connects as b would: same name, urls, TLS and timeouts. */
bool amqpconn_serves(const struct amqpconn *c, const struct broker_config *b);

/*
 * Tries each url in turn, starting after the one of the last connection;
 * opens no channel.  0 at once when already connected.
 */
int amqpconn_connect(struct amqpconn *c, char *err, size_t errlen)
    __attribute__((warn_unused_result));
/* connection.close; every publisher on c sees itself disconnected. */
void amqpconn_disconnect(struct amqpconn *c);
bool amqpconn_is_connected(const struct amqpconn *c);
/* connection.blocked received and not yet unblocked. */
bool amqpconn_is_blocked(const struct amqpconn *c);
/* Channels open now (publishers' and the exchange check's). */
size_t amqpconn_channels(const struct amqpconn *c);
/* Passive exchange.declares sent on it so far (for tests). */
uint64_t amqpconn_exchange_checks(const struct amqpconn *c);
/* The most channels the broker allows on it (channel_max), once connected. */
unsigned amqpconn_channel_max(const struct amqpconn *c);
/* The url of the live connection (or the last one tried), masked. */
const char *amqpconn_url(const struct amqpconn *c);

/*
 * Reads whatever the broker sent, without blocking, and sends heartbeats
 * that are due; each frame goes to the publisher of its channel (a late
 * confirm is counted, never applied; a channel.close ends that channel
 * alone).  -1 when the connection is gone: every publisher on it is then
 * disconnected.
 */
int amqpconn_poll(struct amqpconn *c, char *err, size_t errlen);

/* url with its password masked, malloc'd: what logs and errors show. */
char *amqpconn_mask_url(const char *url);

#endif
