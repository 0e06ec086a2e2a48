/*
 * worker_backend: a worker's store and publisher on its thread's shared
 * session and connection, and the relay_backend that gives them to its
 * relay.
 */
#include "worker_int.h"

#include <stdlib.h>

#include "amqpconn.h"
#include "dbsession.h"
#include "publisher.h"
#include "store.h"
#include "util.h"

static int
claim_fn(void *store, const char *relay_id, struct outbox_batch *b, char *err,
         size_t errlen)
{
    return store_claim_batch(store, relay_id, b, err, errlen);
}

static int
claim_more_fn(void *store, const struct outbox_batch *first,
              struct outbox_batch *b, char *err, size_t errlen)
{
    return store_claim_more(store, first, b, err, errlen);
}

/* The relay's claims take the commits told (relay.c extend_lean). */
static uint64_t
take_told_fn(void *owner)
{
    return worker_take_told(owner);
}

/* The linger's wait for the next commit (relay.c told_until). */
static uint64_t
wait_told_fn(void *owner, uint64_t until_ms)
{
    return worker_wait_told(owner, until_ms);
}

static int
finalize_fn(void *store, struct outbox_batch *b, size_t *lost, char *err,
            size_t errlen)
{
    return store_finalize_batch(store, b, lost, err, errlen);
}

static int
mark_sent_fn(void *store, struct outbox_batch *b, struct outbox_row **rows,
             size_t n, size_t *lost, char *err, size_t errlen)
{
    return store_mark_sent(store, b, rows, n, lost, err, errlen);
}

static int
publish_fn(void *pub, struct outbox_batch *b, struct outbox_row **rows,
           size_t n, bool mandatory, uint64_t deadline_ms, char *err,
           size_t errlen)
{
    return publisher_publish_wave(pub, b, rows, n, mandatory, deadline_ms, err,
                                  errlen);
}

static const char *
record_later_fn(void *store)
{
    if (store_last_error_is_read_only(store))
        return "the next session (on a new primary that holds their rows)";
    if (store_last_error_is_lock_wait(store))
        return "the next cycle (another session holds a lock on the table)";
    return NULL;
}

/* The relay's helper thread uses the session this thread opened: the
 * client library's per-thread state, which MySQL's library needs and
 * MariaDB Connector/C keeps none of. */
static void
db_thread_begin_fn(void)
{
    mysql_thread_init();
}

struct pool_hooks
worker_pool_hooks(void)
{
    return (struct pool_hooks){.thread_begin = db_thread_begin_fn,
                               .thread_end = store_thread_end};
}

static bool
is_blocked_fn(void *pub)
{
    return publisher_is_blocked(pub);
}

static int
wait_unblocked_fn(void *pub, uint64_t deadline_ms, char *err, size_t errlen)
{
    return publisher_wait_unblocked(pub, deadline_ms, err, errlen);
}

/* The outboxes of a thread share a session per server (dbsession.h). */
static bool
session_serves(const void *obj, const void *key)
{
    return dbsession_serves(obj, key);
}

static void *
session_make(const void *key)
{
    return dbsession_new(key);
}

static void
session_drop(void *obj)
{
    dbsession_free(obj);
}

static void
session_close(void *obj)
{
    dbsession_close(obj);
}

static const struct pool_share_kind session_kind = {
    session_serves, session_make, session_drop, session_close};

/* And a broker connection per broker, named after the relay. */
struct conn_key {
    const struct broker_config *broker;
    const char *relay_id;
};

static bool
conn_serves(const void *obj, const void *key)
{
    return amqpconn_serves(obj, ((const struct conn_key *)key)->broker);
}

static void *
conn_make(const void *key)
{
    const struct conn_key *k = key;
    char *name = xasprintf("outboxd %s", k->relay_id);
    struct amqpconn *c = amqpconn_new(k->broker, name);
    free(name);
    return c;
}

static void
conn_drop(void *obj)
{
    amqpconn_free(obj);
}

static void
conn_close(void *obj)
{
    amqpconn_disconnect(obj);
}

static const struct pool_share_kind conn_kind = {conn_serves, conn_make,
                                                 conn_drop, conn_close};

/* The relay drives the store and the publisher through these. */
static void
relay_open(struct worker *w)
{
    struct relay_backend backend = {
        .store = w->store,
        .publisher = w->pub,
        .claim = claim_fn,
        .finalize = finalize_fn,
        .publish = publish_fn,
        .mark_sent = mark_sent_fn,
        .is_blocked = is_blocked_fn,
        .wait_unblocked = wait_unblocked_fn,
        .record_later = record_later_fn,
        .claim_more = claim_more_fn,
        .take_told = take_told_fn,
        .wait_told = wait_told_fn,
        .thread_begin = db_thread_begin_fn,
        .thread_end = store_thread_end,
    };
    backend.owner = w;
    relay_init(&w->relay, w->ob, w->relay_id, &backend);
    relay_share_helper(&w->relay, pool_thread_helper(w->thread));
}

void
worker_backend_open(struct worker *w)
{
    const struct outbox_config *ob = w->cfg_ob;
    w->session = pool_thread_share(w->thread, &session_kind, ob->database);
    w->store = store_new(w->ob, w->session);
    /* The connection reads the running config's broker, whose keys it
     * uses never change live; the channel, this worker's live copy. */
    struct conn_key key = {ob->broker, w->relay_id};
    w->conn = pool_thread_share(w->thread, &conn_kind, &key);
    w->pub = publisher_new_shared(w->conn, w->ob->broker);
    publisher_set_envelope(w->pub, w->ob->envelope, w->ob->cloudevents_source);
    relay_open(w);
    /* A shutdown cuts the publisher's waits short, not only the relay's. */
    publisher_set_stop_deadline(w->pub, &w->relay.stop_deadline_ms);
}

void
worker_backend_close(struct worker *w)
{
    relay_fini(&w->relay);
    store_free(w->store); /* before its session, which it may be last on */
    pool_thread_unshare(w->thread, &session_kind, w->session);
    publisher_free(w->pub); /* before its connection */
    pool_thread_unshare(w->thread, &conn_kind, w->conn);
}
