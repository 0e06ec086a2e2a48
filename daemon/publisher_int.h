/*
 * publisher_int: what the publisher family (publisher_life.c, its life
 * on a connection; publisher_wave.c, a wave published; publisher.c, the
 * frames that settle it) and amqpconn.c (the connection and its channel
 * table) share; no other file includes it.
 */
#ifndef OUTBOXD_PUBLISHER_INT_H
#define OUTBOXD_PUBLISHER_INT_H

#include <amqp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/time.h>

#include "amqpconn.h"
#include "publisher.h"
#include "util.h"

/* What a channel number of the connection is used for. */
enum chan_state {
    CHAN_FREE,
    CHAN_OPEN,  /* a publisher's confirm channel */
    CHAN_CHECK, /* passive exchange.declare: a 404 closes this one */
    /* channel.close sent: its frames are dropped until close-ok comes,
     * and the number is not reused before, so no late frame of it can
     * reach a new channel. */
    CHAN_CLOSING,
    /* A parked publisher's confirm channel, kept open for the next
     * publisher of the connection (conn_channel_park). */
    CHAN_SPARE,
};

struct chan_slot {
    enum chan_state state;
    struct publisher *p; /* OPEN, CLOSING: whose it is; NULL once freed */
};

/*
 * What the check channel said about an exchange.  A publish to a missing
 * exchange closes the channel and fails every row in flight with it, so
 * each exchange is checked once per connection before its first publish:
 * once for all the connection's outboxes, as every outbox of a pattern
 * entry publishes to the same exchange.
 */
struct exchange_seen {
    char *name;
    char *missing;       /* the broker's 404 reply; NULL if it exists */
    uint64_t recheck_ms; /* when a missing one is asked about again */
};

struct amqpconn {
    const struct broker_config *broker;
    char *name;
    char **masked_urls;           /* broker->urls with any password masked */
    size_t url_index;             /* the live url, or the last one tried */
    size_t first_url;             /* where the next connect starts */
    amqp_connection_state_t conn; /* NULL when disconnected */
    bool blocked;
    /*
     * The broker's max_message_size as a 406 channel.close told it, for
     * this connection; 0 until then.  Larger bodies fail before they are
     * published rather than close a channel on everything in flight.
     */
    size_t max_body;
    /* The first nack since the last ack on any channel; 0 after an ack.
     * nack_streak numbers such runs, nacking_publishers counts the
     * publishers nacked in this one. */
    uint64_t nacking_since_ms;
    uint64_t nack_streak;
    size_t nacking_publishers;
    /* The exchanges checked on this connection, oldest first (at most
     * CONN_EXCHANGES_MAX); forgotten when it drops or a channel closes. */
    struct exchange_seen *exchanges;
    size_t nexchanges;
    uint64_t exchange_checks; /* passive declares sent, for tests */
    struct chan_slot *slots;  /* by channel number; [0] is the connection */
    size_t nslots;
    unsigned channel_max;         /* negotiated at login */
    amqp_channel_t check_channel; /* 0 until needed */
    /* The one CHAN_SPARE channel, 0 if none: a pool thread runs one
     * outbox's cycle at a time, so one serves all its tenants in turn.
     * spare_next_tag: the delivery tag its next publish gets. */
    amqp_channel_t spare_channel;
    uint64_t spare_next_tag;
    bool check_open;    /* channel.open done on it */
    size_t npublishers; /* attached, shared or owner */
    /* How a channel's publisher learns that its channel is gone (reason):
     * given by the publishers as they attach (publisher.c), so that the
     * connection never calls up into them. */
    void (*channel_lost_cb)(struct publisher *p, const char *reason);
};

struct inflight {
    struct outbox_row *row;
    const char *returned; /* why the broker returned it; NULL if it did not */
};

struct publisher {
    struct amqpconn *c;
    bool owns_conn; /* publisher_new: a private connection */
    /* publisher_park: its channel given back while the outbox has
     * nothing to publish; the next wave takes the connection's spare or
     * opens one. */
    bool parked;
    /* This outbox's view of the broker: its confirm_timeout, its name. */
    const struct broker_config *broker;
    amqp_channel_t channel; /* 0 when it has none */
    char lost[ERR_LEN];     /* why the channel went, for the next call */
    uint64_t next_tag; /* delivery tag of the next publish on the channel */
    /* Read by the main thread for /metrics (worker_metrics). */
    _Atomic uint64_t late_confirms;
    /* Reused by every wave so the hot path does not allocate. */
    struct inflight *inflight;
    size_t inflight_cap;
    amqp_table_entry_t *headers;
    size_t headers_cap;
    char *scratch;
    size_t scratch_cap;
    /* The relay's stop deadline (another thread sets it), or NULL. */
    const _Atomic uint64_t *stop_deadline_ms;
    /* The first nack since the last ack on this channel; 0 after an ack. */
    uint64_t nacking_since_ms;
    uint64_t nack_streak; /* the connection's run it was last counted in */
    /* The outbox's envelope; its CloudEvents source is the caller's. */
    enum envelope envelope;
    const char *ce_source;
    char ce_time[40]; /* the row's created_at in RFC 3339 */
};

static inline struct timeval
ms_to_tv(uint64_t ms)
{
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

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

/* publisher_life.c: the relay's stop deadline, 0 if none. */
uint64_t publisher_stop_deadline(const struct publisher *p);
/* A parked publisher's channel again, for a wave; -1 and err when the
 * broker refuses one (the connection may be gone with it). */
int publisher_unpark(struct publisher *p, char *err, size_t errlen);

/* publisher.c: the frames a wave reads, and what they settle. */
/* Reads and handles one frame, waiting at most timeout_ms; *got tells
 * whether one came. */
enum frame_result wave_read_frame(struct wave *w, uint64_t timeout_ms,
                                  bool *got);
/* Handles whatever has already arrived, without waiting. */
enum frame_result wave_read_available(struct wave *w);
/* A method on this publisher's channel, or on another (then theirs). */
enum frame_result wave_handle_method(struct wave *w, amqp_channel_t channel,
                                     const amqp_method_t *m);
/* The connection is gone: what is in flight fails, every publisher on it
 * is told. */
enum frame_result wave_lose_connection(struct wave *w, const char *reason);
/* This channel must go: what is in flight fails; a shared connection
 * stays. */
enum frame_result wave_lose_channel(struct wave *w, const char *reason);
/* Every published row not yet settled ends in state to with reason; with
 * over_max, only those over the broker's limit, the others released with
 * other. */
void wave_end_unsettled(struct wave *w, enum row_state to, const char *reason,
                        bool over_max, const char *other);
/* Why the wave's time ran out (confirm_timeout or the stop), in buf. */
const char *wave_timeout_reason(const struct wave *w, char *buf, size_t len);
/* The row's body size, 0 without a payload. */
size_t publisher_body_len(const struct outbox_row *row);

/* An rpc reply in words: "ok", the library's error, "404 NOT_FOUND...". */
void conn_reply_text(amqp_rpc_reply_t r, char *buf, size_t len);
/* Forgets the connection at once; every channel's publisher is told. */
void conn_drop(struct amqpconn *c, const char *reason);
/* What the check channel said of exchange name on c, a fresh entry (never
 * asked) if nothing yet; the oldest entry makes room past a limit. */
struct exchange_seen *conn_exchange_find(struct amqpconn *c, const char *name);
/* Every exchange is asked about again before its next publish. */
void conn_exchanges_forget(struct amqpconn *c);
/* A free channel number marked st for p; 0 with the reason when none. */
amqp_channel_t conn_channel_alloc(struct amqpconn *c, enum chan_state st,
                                  struct publisher *p, char *err,
                                  size_t errlen);
/* The broker closed ch and was told close-ok: the number is free. */
void conn_channel_free(struct amqpconn *c, amqp_channel_t ch);
/* A spare channel for p, its tags going on; else channel.open and
 * confirm.select, tags restarting at 1. */
int conn_channel_open(struct amqpconn *c, struct publisher *p, char *err,
                      size_t errlen);
/* Sends channel.close for p's channel without waiting for close-ok. */
void conn_channel_close(struct amqpconn *c, struct publisher *p);
/* p's channel kept open as a spare for the connection's next publisher,
 * or closed when the connection has enough spares. */
void conn_channel_park(struct amqpconn *c, struct publisher *p);
/*
 * A method on a channel other than the reader's own (or channel 0): to
 * the publisher it concerns.  -1 when the connection had to be dropped,
 * with the reason.
 */
int conn_dispatch(struct amqpconn *c, amqp_channel_t ch, const amqp_method_t *m,
                  char *err, size_t errlen);

#endif
