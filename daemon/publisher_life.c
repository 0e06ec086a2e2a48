/*
 * publisher_life: a publisher's life on its connection: made on one of
 * its own or a shared one, connected to a channel, parked and trimmed
 * while its outbox is idle, freed; and what it tells of itself.
 */
#include "publisher.h"

#include <amqp.h>
#include <stdlib.h>

#include "publisher_int.h"
#include "util.h"

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
int
publisher_unpark(struct publisher *p, char *err, size_t errlen)
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

uint64_t
publisher_stop_deadline(const struct publisher *p)
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
