/*
 * it_store: the store against a real MariaDB, on the recommended table
 * (sql/outbox.sql) and on the seed's exact DDL: claims, fencing, ordering
 * per aggregate, outcomes, schema errors, index use and a lost server.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "dbsession.h"
#include "itest.h"
#include "stats_sql.h"
#include "store.h"
#include "util.h"

Suite *it_store_suite(void);

#define RELAY "relay-test"

/* Loop tests run once per schema: _i indexes this table. */
static const char *const schema_files[] = {"sql/outbox.sql",
                                           "tests/data/seed_outbox.sql"};
#define NSCHEMAS 2

/* The runner's pid, in every database name, so cleanup is this run's. */
static pid_t runner_pid;

/* What a test works on: its database, the outbox config over it, and
 * what fx_teardown closes after the test. */
#define FX_STORES 4
struct fx {
    char db[64];
    struct database_config dbc;
    struct outbox_config ob;
    MYSQL *sql;
    bool seed;
    struct store *stores[FX_STORES]; /* store_open's */
    size_t nstores;
    struct outbox_batch b;
};

/* One per test process: Check's fixtures take no arguments, so the test
 * calls fx_setup with its schema, and fx_teardown finds it here. */
static struct fx fixture;

/*
 * The start of every test: a fresh database with the table of
 * schema_files[schema] (-1: no table), the outbox config of one relay
 * over it and an empty batch.
 */
static void
fx_init(struct fx *fx, int schema)
{
    char prefix[32];
    memset(fx, 0, sizeof(*fx));
    snprintf(prefix, sizeof(prefix), "it_store_%d", (int)runner_pid);
    it_unique_name(fx->db, sizeof(fx->db), prefix);
    it_db_create(fx->db,
                 schema >= 0 ? it_src_path(schema_files[schema]) : NULL);
    fx->sql = it_db_connect(fx->db);
    fx->seed = schema == 1;
    fx->dbc.name = "test";
    fx->dbc.host = "127.0.0.1";
    fx->dbc.port = 3306;
    fx->dbc.user = IT_DB_USER;
    fx->dbc.password = IT_DB_PASSWORD;
    fx->dbc.database = fx->db;
    fx->dbc.connect_timeout_ms = 5000;
    fx->ob.name = "test.outbox_event";
    fx->ob.table = "outbox_event";
    fx->ob.database = &fx->dbc;
    fx->ob.ordering = ORDERING_AGGREGATE;
    fx->ob.batch_size = 10;
    fx->ob.lease_ms = 30000;
    fx->ob.max_retries = 3;
    fx->ob.backoff_initial_ms = 20000;
    fx->ob.backoff_max_ms = 300000;
    fx->ob.on_sent = ON_SENT_MARK;
    batch_init(&fx->b);
}

static struct fx *
fx_setup(int schema)
{
    fx_init(&fixture, schema);
    return &fixture;
}

/* The checked teardown of every test; after a failed check in a forked
 * test it does not run, and runner_teardown drops the database. */
static void
fx_free(struct fx *fx)
{
    for (size_t i = 0; i < fx->nstores; i++)
        store_free(fx->stores[i]);
    batch_free(&fx->b);
    if (fx->sql != NULL)
        mysql_close(fx->sql);
    if (fx->db[0] != '\0')
        it_db_drop(fx->db);
    memset(fx, 0, sizeof(*fx));
}

static void
fx_teardown(void)
{
    fx_free(&fixture);
}

/* A store connected to the test's database; fx_teardown frees it. */
static struct store *
store_open(struct fx *fx)
{
    char err[ERR_LEN] = "";
    ck_assert_uint_lt(fx->nstores, FX_STORES);
    struct store *st = store_new(&fx->ob, NULL);
    ck_assert_ptr_nonnull(st);
    fx->stores[fx->nstores++] = st;
    ck_assert_msg(store_connect(st, err, sizeof(err)) == 0, "connect: %s", err);
    ck_assert(store_is_connected(st));
    return st;
}

static void
claim_ok(struct store *st, struct outbox_batch *b)
{
    char err[ERR_LEN] = "";
    int rc = store_claim_batch(st, RELAY, b, err, sizeof(err));
    ck_assert_msg(rc == 0, "claim: %s", err);
}

static size_t
finalize_ok(struct store *st, struct outbox_batch *b)
{
    char err[ERR_LEN] = "";
    size_t lost = 99;
    int rc = store_finalize_batch(st, b, &lost, err, sizeof(err));
    ck_assert_msg(rc == 0, "finalize: %s", err);
    return lost;
}

static void
set_outcome(struct outbox_batch *b, struct outbox_row *row, enum row_state to,
            const char *error)
{
    if (to == ROW_ACKED || to == ROW_FAILED || to == ROW_PUBLISHED)
        ck_assert_int_eq(row_enter_state(b, row, ROW_PUBLISHED, NULL), 0);
    if (to != ROW_PUBLISHED)
        ck_assert_int_eq(row_enter_state(b, row, to, error), 0);
}

static void
ack_all(struct outbox_batch *b)
{
    for (size_t i = 0; i < b->n; i++)
        set_outcome(b, &b->rows[i], ROW_ACKED, NULL);
}

static void
insert_event(struct fx *fx, const char *event_id, const char *aggregate)
{
    it_db_exec(fx->sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, status) VALUES "
               "('%s', 'Order', '%s', 'OrderCreated', '{}', 'PENDING')",
               event_id, aggregate);
}

static uint64_t
event_row_id(struct fx *fx, const char *event_id)
{
    return (uint64_t)it_db_int(
        fx->sql, "SELECT id FROM outbox_event WHERE event_id = '%s'", event_id);
}

static bool
has_id(const struct outbox_batch *b, uint64_t id)
{
    for (size_t i = 0; i < b->n; i++)
        if (b->rows[i].id == id)
            return true;
    return false;
}

static long long
count_where(struct fx *fx, const char *cond)
{
    return it_db_int(fx->sql, "SELECT COUNT(*) FROM outbox_event WHERE %s",
                     cond);
}

static void
assert_sorted_claimed(const struct outbox_batch *b)
{
    for (size_t i = 0; i < b->n; i++) {
        ck_assert_int_eq(b->rows[i].state, ROW_CLAIMED);
        if (i > 0)
            ck_assert(b->rows[i - 1].id < b->rows[i].id);
    }
}

/* Gives every claimed row back and checks nothing was lost. */
static void
release_all(struct store *st, struct outbox_batch *b)
{
    ck_assert_uint_eq(finalize_ok(st, b), 0);
    batch_reset(b);
}

/* 1. PENDING up to batch_size -> PROCESSING under a lease -> SENT. */
START_TEST(test_claim_and_ack)
{
    struct fx *fx = fx_setup(_i);
    it_db_insert_events(fx->sql, "outbox_event", "ca", 25, 25, 100);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;

    uint64_t s0 = store_statement_count(st);
    claim_ok(st, b);
    uint64_t claim_cost = store_statement_count(st) - s0;
    ck_assert_uint_eq(b->n, 10);
    assert_sorted_claimed(b);
    ck_assert_msg(strncmp(b->token, RELAY "/", strlen(RELAY) + 1) == 0,
                  "token %s", b->token);
    for (size_t i = 0; i < b->n; i++) {
        ck_assert_int_eq(b->rows[i].claimed_from, OUTBOX_PENDING);
        ck_assert_uint_eq(b->rows[i].retry_count, 0);
        ck_assert_uint_eq(b->rows[i].id, i + 1); /* the oldest first */
    }
    ck_assert_int_eq(count_where(fx, "status = 'PROCESSING'"), 10);
    char *cond = NULL;
    cond = xasprintf("status = 'PROCESSING' AND locked_by = '%s' AND "
                     "locked_until > NOW() + INTERVAL 25 SECOND AND "
                     "locked_until <= NOW() + INTERVAL 31 SECOND",
                     b->token);
    ck_assert_int_eq(count_where(fx, cond), 10);
    free(cond);

    ack_all(b);
    s0 = store_statement_count(st);
    ck_assert_uint_eq(finalize_ok(st, b), 0);
    ck_assert_uint_eq(store_statement_count(st) - s0, 2);
    /* The look for expired leases, the due retries' read, the backlog's
     * read and its lock by id, the ordering check, the update, commit. */
    ck_assert_uint_le(claim_cost, 7);
    ck_assert_int_eq(count_where(fx, "status = 'SENT' AND sent_at IS NOT "
                                     "NULL AND locked_by IS NULL AND "
                                     "locked_until IS NULL"),
                     10);

    /* The next claim takes the next ten. */
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 10);
    ck_assert_uint_eq(b->rows[0].id, 11);
    release_all(st, b);
    ck_assert_int_eq(count_where(fx, "status = 'PENDING' AND locked_by IS "
                                     "NULL AND retry_count = 0"),
                     15);
}
END_TEST

/* 1b. on_sent: delete removes acked rows, and only those. */
START_TEST(test_ack_deletes)
{
    struct fx *fx = fx_setup(_i);
    fx->ob.on_sent = ON_SENT_DELETE;
    it_db_insert_events(fx->sql, "outbox_event", "del", 15, 15, 50);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 10);
    for (size_t i = 0; i < 8; i++)
        set_outcome(b, &b->rows[i], ROW_ACKED, NULL);
    set_outcome(b, &b->rows[8], ROW_RELEASED, NULL);
    ck_assert_uint_eq(finalize_ok(st, b), 0);
    ck_assert_int_eq(count_where(fx, "1"), 7);
    ck_assert_int_eq(count_where(fx, "status = 'PENDING'"), 7);
}
END_TEST

/* 2. Two relays never get the same row. */
START_TEST(test_two_stores_disjoint)
{
    struct fx *fx = fx_setup(_i);
    it_db_insert_events(fx->sql, "outbox_event", "two", 45, 45, 50);
    struct store *a = store_open(fx), *bs = store_open(fx);
    struct outbox_batch ba, bb;
    batch_init(&ba);
    batch_init(&bb);
    claim_ok(a, &ba);
    claim_ok(bs, &bb);
    ck_assert_uint_eq(ba.n, 10);
    ck_assert_uint_eq(bb.n, 10);
    ck_assert_str_ne(ba.token, bb.token);
    for (size_t i = 0; i < bb.n; i++)
        ck_assert_msg(!has_id(&ba, bb.rows[i].id), "row %llu claimed twice",
                      (unsigned long long)bb.rows[i].id);
    /* Alternating until empty: every row exactly once. */
    int seen[46] = {0}, total = 0;
    for (int round = 0; round < 10; round++) {
        struct store *st = round % 2 ? bs : a;
        struct outbox_batch *b = round % 2 ? &bb : &ba;
        for (size_t i = 0; i < b->n; i++)
            seen[b->rows[i].id]++, total++;
        ack_all(b);
        ck_assert_uint_eq(finalize_ok(st, b), 0);
        claim_ok(st, b);
    }
    ck_assert_int_eq(total, 45);
    for (int id = 1; id <= 45; id++)
        ck_assert_int_eq(seen[id], 1);
    batch_free(&ba);
    batch_free(&bb);
}
END_TEST

/* Another session holding the rows of `where` locked, as a claim in
 * flight elsewhere does; its ROLLBACK and close give them back. */
static MYSQL *
hold_rows(struct fx *fx, const char *where)
{
    MYSQL *other = it_db_connect(fx->db);
    it_db_exec(other, "SET SESSION TRANSACTION ISOLATION LEVEL READ "
                      "COMMITTED");
    it_db_exec(other, "START TRANSACTION");
    it_db_exec(other, "SELECT id FROM outbox_event WHERE %s FOR UPDATE", where);
    return other;
}

/*
 * 2b. A claim in flight elsewhere is skipped, not waited for.  Then only
 * part of the located rows held elsewhere: the lock by id takes the
 * others, and the locking read that tops the batch up returns those
 * again among the next ones; it must add only the next ones, once.
 */
START_TEST(test_skip_locked_rows)
{
    struct fx *fx = fx_setup(_i);
    it_db_insert_events(fx->sql, "outbox_event", "sk", 30, 30, 50);
    MYSQL *other = hold_rows(fx, "id <= 10");
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    uint64_t t0 = it_now_ms();
    claim_ok(st, b);
    ck_assert_uint_lt(it_now_ms() - t0, 3000);
    ck_assert_uint_eq(b->n, 10);
    ck_assert_uint_eq(b->rows[0].id, 11);
    ck_assert_uint_eq(b->rows[9].id, 20);
    release_all(st, b);
    it_db_exec(other, "ROLLBACK");
    mysql_close(other);

    other = hold_rows(fx, "id BETWEEN 3 AND 5");
    claim_ok(st, b);
    static const uint64_t want[] = {1, 2, 6, 7, 8, 9, 10, 11, 12, 13};
    ck_assert_uint_eq(b->n, sizeof(want) / sizeof(want[0]));
    for (size_t i = 0; i < b->n; i++)
        ck_assert_uint_eq(b->rows[i].id, want[i]);
    release_all(st, b);
    it_db_exec(other, "ROLLBACK");
    mysql_close(other);
}
END_TEST

/* 2c. Three relays draining one table at once, ordering per aggregate. */
#define DRAIN_EVENTS 3000
#define DRAIN_AGGREGATES 50
#define DRAIN_RELAYS 3

struct drain {
    struct outbox_config *ob;
    pthread_mutex_t mu;
    uint64_t log[DRAIN_EVENTS * 2]; /* ids in the order relays got them */
    size_t nlog;
    _Atomic size_t done;
    _Atomic int failures;
    char error[ERR_LEN];
};

struct drain_relay {
    struct drain *d;
    char id[32];
};

static void
drain_fail(struct drain *d, const char *msg)
{
    pthread_mutex_lock(&d->mu);
    if (d->error[0] == '\0')
        snprintf(d->error, sizeof(d->error), "%s", msg);
    pthread_mutex_unlock(&d->mu);
    d->failures++;
}

/* Logs the batch as if published: in id order, all at once. */
static void
drain_log(struct drain *d, const struct outbox_batch *b)
{
    pthread_mutex_lock(&d->mu);
    for (size_t i = 0; i < b->n && d->nlog < DRAIN_EVENTS * 2; i++)
        d->log[d->nlog++] = b->rows[i].id;
    pthread_mutex_unlock(&d->mu);
}

static void
drain_loop(struct drain *d, struct store *st, const char *relay_id)
{
    char err[ERR_LEN];
    struct outbox_batch b;
    batch_init(&b);
    uint64_t deadline = it_now_ms() + 40000;
    while (d->done < DRAIN_EVENTS && it_now_ms() < deadline) {
        if (store_claim_batch(st, relay_id, &b, err, sizeof(err)) < 0) {
            drain_fail(d, err);
            break;
        }
        if (b.n == 0) {
            it_sleep_ms(2);
            continue;
        }
        drain_log(d, &b);
        for (size_t i = 0; i < b.n; i++) {
            row_enter_state(&b, &b.rows[i], ROW_PUBLISHED, NULL);
            row_enter_state(&b, &b.rows[i], ROW_ACKED, NULL);
        }
        size_t lost = 0;
        if (store_finalize_batch(st, &b, &lost, err, sizeof(err)) < 0 ||
            lost != 0) {
            drain_fail(d, lost ? "rows lost without a fault" : err);
            break;
        }
        d->done += b.n;
    }
    batch_free(&b);
}

static void *
drain_thread(void *arg)
{
    struct drain_relay *r = arg;
    char err[ERR_LEN];
    struct store *st = store_new(r->d->ob, NULL);
    if (store_connect(st, err, sizeof(err)) < 0)
        drain_fail(r->d, err);
    else
        drain_loop(r->d, st, r->id);
    store_free(st);
    return NULL;
}

static void
check_drain_log(struct fx *fx, const struct drain *d)
{
    static unsigned char seen[DRAIN_EVENTS + 1];
    uint64_t last[DRAIN_AGGREGATES] = {0};
    memset(seen, 0, sizeof(seen));
    /* it_db_insert_events: row i (id i+1) is in aggregate i % 50. */
    ck_assert_int_eq(count_where(fx, "aggregate_id <> CONCAT('dr-', "
                                     "(id - 1) % 50)"),
                     0);
    ck_assert_uint_eq(d->nlog, DRAIN_EVENTS);
    for (size_t i = 0; i < d->nlog; i++) {
        uint64_t id = d->log[i];
        ck_assert(id >= 1 && id <= DRAIN_EVENTS);
        ck_assert_msg(seen[id]++ == 0, "row %llu claimed twice",
                      (unsigned long long)id);
        unsigned agg = (unsigned)((id - 1) % DRAIN_AGGREGATES);
        ck_assert_msg(id > last[agg], "aggregate %u: %llu after %llu", agg,
                      (unsigned long long)id, (unsigned long long)last[agg]);
        last[agg] = id;
    }
}

START_TEST(test_concurrent_relays)
{
    struct fx *fx = fx_setup(_i);
    fx->ob.batch_size = 100;
    it_db_insert_events(fx->sql, "outbox_event", "dr", DRAIN_EVENTS,
                        DRAIN_AGGREGATES, 64);
    struct drain *d = calloc(1, sizeof(*d));
    d->ob = &fx->ob;
    pthread_mutex_init(&d->mu, NULL);
    struct drain_relay relays[DRAIN_RELAYS];
    pthread_t th[DRAIN_RELAYS];
    for (int i = 0; i < DRAIN_RELAYS; i++) {
        relays[i].d = d;
        snprintf(relays[i].id, sizeof(relays[i].id), "relay-%d", i);
        pthread_create(&th[i], NULL, drain_thread, &relays[i]);
    }
    for (int i = 0; i < DRAIN_RELAYS; i++)
        pthread_join(th[i], NULL);
    ck_assert_msg(d->failures == 0, "relay failed: %s", d->error);
    check_drain_log(fx, d);
    ck_assert_int_eq(count_where(fx, "status = 'SENT'"), DRAIN_EVENTS);
    pthread_mutex_destroy(&d->mu);
    free(d);
}
END_TEST

/* 3. An expired lease is reclaimed; the old holder's marks are fenced. */
START_TEST(test_fencing)
{
    struct fx *fx = fx_setup(_i);
    it_db_insert_events(fx->sql, "outbox_event", "fe", 5, 5, 50);
    struct store *a = store_open(fx), *bs = store_open(fx);
    struct outbox_batch ba, bb[5];
    batch_init(&ba);
    for (int i = 0; i < 5; i++)
        batch_init(&bb[i]);
    claim_ok(a, &ba);
    ck_assert_uint_eq(ba.n, 5);
    claim_ok(bs, &bb[0]);
    ck_assert_uint_eq(bb[0].n, 0); /* lease still valid */
    it_db_exec(fx->sql, "UPDATE outbox_event SET locked_until = NOW() - "
                        "INTERVAL 1 SECOND");
    /* Expired rows come back one per claim, in id order: the first
     * within a second (leases are looked for once a second), the
     * others at once. */
    ck_assert(IT_WAIT(3000, (claim_ok(bs, &bb[0]), bb[0].n == 1)));
    for (int i = 0; i < 5; i++) {
        if (i > 0)
            claim_ok(bs, &bb[i]);
        ck_assert_uint_eq(bb[i].n, 1);
        ck_assert_uint_eq(bb[i].rows[0].id, (uint64_t)i + 1);
        ck_assert_str_ne(ba.token, bb[i].token);
        ck_assert_int_eq(bb[i].rows[0].claimed_from, OUTBOX_PROCESSING);
        ck_assert_uint_eq(bb[i].rows[0].retry_count, 1);
    }
    char *cond = NULL;
    cond = xasprintf("status = 'PROCESSING' AND locked_by <> '%s' "
                     "AND retry_count = 1",
                     ba.token);
    ck_assert_int_eq(count_where(fx, cond), 5);

    ack_all(&ba);
    ck_assert_uint_eq(finalize_ok(a, &ba), 5); /* all lost to B */
    ck_assert_int_eq(count_where(fx, cond), 5);
    ck_assert_int_eq(count_where(fx, "status = 'SENT'"), 0);
    free(cond);
    for (int i = 0; i < 5; i++) {
        ack_all(&bb[i]);
        ck_assert_uint_eq(finalize_ok(bs, &bb[i]), 0);
        batch_free(&bb[i]);
    }
    ck_assert_int_eq(count_where(fx, "status = 'SENT'"), 5);
    batch_free(&ba);
}
END_TEST

/* X has events 1, 2, 3; Y has 4, 5. */
static void
insert_xy(struct fx *fx, uint64_t id[6])
{
    const char *ev[] = {NULL, "x1", "x2", "x3", "y1", "y2"};
    for (int i = 1; i <= 5; i++)
        insert_event(fx, ev[i], i <= 3 ? "X" : "Y");
    for (int i = 1; i <= 5; i++)
        id[i] = event_row_id(fx, ev[i]);
}

static void
assert_batch_is(const struct outbox_batch *b, const uint64_t *id,
                const char *which)
{
    size_t n = 0;
    for (const char *w = which; *w; w++, n++)
        ck_assert_msg(has_id(b, id[*w - '0']), "event %c not claimed", *w);
    ck_assert_uint_eq(b->n, n);
}

/* Another relay holds row id under a lease that lasts. */
static void
lease_elsewhere(struct fx *fx, uint64_t id)
{
    it_db_exec(fx->sql,
               "UPDATE outbox_event SET status = 'PROCESSING', locked_by = "
               "'other/1', locked_until = NOW() + INTERVAL 1 HOUR "
               "WHERE id = %llu",
               (unsigned long long)id);
}

/* 4. Ordering: a prefix of each aggregate, and nothing past a gap. */
START_TEST(test_ordering_prefix)
{
    uint64_t id[6];
    struct fx *fx = fx_setup(_i);
    insert_xy(fx, id);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    assert_batch_is(b, id, "12345");
    for (unsigned i = 0; i < 3; i++)
        ck_assert_uint_eq(b->rows[i].earlier_unfinished, i);
    release_all(st, b);
    ck_assert_int_eq(count_where(fx, "status = 'PENDING' AND retry_count = 0 "
                                     "AND locked_by IS NULL"),
                     5);
    fx->ob.batch_size = 2;
    claim_ok(st, b);
    assert_batch_is(b, id, "12");
    release_all(st, b);
}
END_TEST

START_TEST(test_ordering_waits_for_retry)
{
    uint64_t id[6];
    struct fx *fx = fx_setup(_i);
    insert_xy(fx, id);
    it_db_exec(fx->sql,
               "UPDATE outbox_event SET status = 'RETRY', retry_count = 1, "
               "next_retry_at = NOW() + INTERVAL 1 HOUR WHERE id = %llu",
               (unsigned long long)id[1]);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    assert_batch_is(b, id, "45");
    release_all(st, b);
    /* Due now: the retry leads its aggregate again. */
    it_db_exec(fx->sql,
               "UPDATE outbox_event SET next_retry_at = NOW() - INTERVAL 1 "
               "SECOND WHERE id = %llu",
               (unsigned long long)id[1]);
    claim_ok(st, b);
    assert_batch_is(b, id, "12345");
    ck_assert_int_eq(b->rows[0].claimed_from, OUTBOX_RETRY);
    release_all(st, b);
}
END_TEST

START_TEST(test_ordering_waits_for_other_relay)
{
    uint64_t id[6];
    struct fx *fx = fx_setup(_i);
    insert_xy(fx, id);
    lease_elsewhere(fx, id[1]);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    assert_batch_is(b, id, "45");
    release_all(st, b);
    fx->ob.ordering = ORDERING_NONE;
    claim_ok(st, b);
    assert_batch_is(b, id, "2345");
    release_all(st, b);
}
END_TEST

/* An earlier event being claimed right now by another relay (locked,
 * still PENDING) must hold its aggregate back, not be skipped past. */
START_TEST(test_ordering_sees_claim_in_flight)
{
    uint64_t id[6];
    struct fx *fx = fx_setup(_i);
    insert_xy(fx, id);
    MYSQL *other = it_db_connect(fx->db);
    it_db_exec(other, "START TRANSACTION");
    it_db_exec(other, "SELECT id FROM outbox_event WHERE id = %llu FOR UPDATE",
               (unsigned long long)id[1]);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    assert_batch_is(b, id, "45");
    release_all(st, b);
    it_db_exec(other, "ROLLBACK");
    mysql_close(other);
}
END_TEST

/*
 * Events "first" and later ones spelling its aggregate otherwise, then
 * "other": of all spellings only the first goes, and with the first
 * leased elsewhere the others wait for it.
 */
static void
assert_first_spelling_goes_in(struct fx *fx, struct store *st)
{
    uint64_t first = event_row_id(fx, "first"),
             other = event_row_id(fx, "other");
    struct outbox_batch b;
    batch_init(&b);
    claim_ok(st, &b);
    ck_assert_uint_eq(b.n, 2);
    ck_assert(has_id(&b, first) && has_id(&b, other));
    release_all(st, &b);
    lease_elsewhere(fx, first);
    claim_ok(st, &b);
    ck_assert_uint_eq(b.n, 1);
    ck_assert(has_id(&b, other));
    release_all(st, &b);
    batch_free(&b);
}

static void
assert_first_spelling_goes(struct fx *fx)
{
    assert_first_spelling_goes_in(fx, store_open(fx));
}

static void
set_aggregate_collation(struct fx *fx, const char *collation)
{
    it_db_exec(fx->sql,
               "ALTER TABLE outbox_event MODIFY aggregate_id VARCHAR(128) "
               "CHARACTER SET utf8mb4 COLLATE %s NOT NULL",
               collation);
}

/*
 * Aggregates equal by the column's collation but not byte for byte
 * ("ab", "AB" and "ab " under utf8mb4_general_ci, PAD SPACE) are one
 * aggregate to the server: the ordering check must judge them as the
 * exact per-candidate count does, never publish past the other spelling.
 */
START_TEST(test_ordering_collation_aliases)
{
    struct fx *fx = fx_setup(_i);
    set_aggregate_collation(fx, "utf8mb4_general_ci");
    insert_event(fx, "first", "ab");
    insert_event(fx, "upper", "AB");
    insert_event(fx, "spaced", "ab ");
    insert_event(fx, "other", "cd");
    assert_first_spelling_goes(fx);
}
END_TEST

/*
 * A collation changed under a running relay (an ALTER TABLE does not end
 * its session): once the claim checks the table again, as it does every
 * minute, spellings the new collation equates are one aggregate.
 */
START_TEST(test_ordering_follows_collation_change)
{
    struct fx *fx = fx_setup(_i);
    set_aggregate_collation(fx, "utf8mb4_bin");
    struct store *st = store_open(fx);
    set_aggregate_collation(fx, "utf8mb4_general_ci");
    insert_event(fx, "first", "ab");
    insert_event(fx, "upper", "AB");
    insert_event(fx, "other", "cd");
    store_recheck_schema(st);
    assert_first_spelling_goes_in(fx, st);
}
END_TEST

/*
 * Under a _bin collation (sql/outbox.sql's utf8mb4_bin) the server still
 * ignores trailing spaces: "ab" and "ab " are one aggregate, and the
 * check that looks for such aliases among the candidates must run even
 * where bytes are otherwise the collation's own judge.
 */
START_TEST(test_ordering_binary_trailing_space)
{
    struct fx *fx = fx_setup(_i);
    insert_event(fx, "first", "ab");
    insert_event(fx, "spaced", "ab ");
    insert_event(fx, "other", "cd");
    assert_first_spelling_goes(fx);
}
END_TEST

/*
 * A column named unfinished that does not say what sql/outbox.sql's says
 * (here it forgets PROCESSING) is not trusted: the ordering check reads
 * status, and an event leased elsewhere still holds its aggregate.
 */
START_TEST(test_ordering_distrusts_other_unfinished)
{
    uint64_t id[6];
    struct fx *fx = fx_setup(0);
    it_db_exec(fx->sql, "ALTER TABLE outbox_event MODIFY unfinished TINYINT "
                        "GENERATED ALWAYS AS (status IN ('PENDING', "
                        "'RETRY')) VIRTUAL");
    insert_xy(fx, id);
    lease_elsewhere(fx, id[1]);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    assert_batch_is(b, id, "45");
    release_all(st, b);
}
END_TEST

/* Handler reads of the whole server since the last call. */
static long long
handler_reads(struct fx *fx)
{
    static long long last;
    long long now = it_db_int(
        fx->sql,
        "SELECT SUM(VARIABLE_VALUE) FROM information_schema."
        "GLOBAL_STATUS WHERE VARIABLE_NAME LIKE 'HANDLER\\_READ\\_%%'");
    long long d = now - last;
    last = now;
    return d;
}

/* A claim of 500 costs the server under 20,000 handler reads. */
static void
assert_cheap_claim(struct fx *fx, const char *what)
{
    struct store *st = store_open(fx);
    struct outbox_batch b;
    batch_init(&b);
    handler_reads(fx);
    claim_ok(st, &b);
    long long reads = handler_reads(fx);
    ck_assert_uint_eq(b.n, 500);
    ck_assert_msg(reads < 20000, "claim of 500 %s made %lld handler reads",
                  what, reads);
    if (getenv("IT_STORE_VERBOSE"))
        fprintf(stderr, "claim of 500 %s: %lld reads\n", what, reads);
    release_all(st, &b);
    batch_free(&b);
}

/*
 * The ordering check reads the unfinished rows of the candidates'
 * aggregates, not their SENT history: a claim of 500 over aggregates
 * with 3,000 SENT events each costs about the same index reads as one
 * over a fresh table (2,700 here; the correlated count made 53,000).
 */
START_TEST(test_ordering_ignores_history)
{
    struct fx *fx = fx_setup(0);
    fx->ob.batch_size = 500;
    it_db_insert_events(fx->sql, "outbox_event", "old", 30000, 10, 16);
    it_db_exec(fx->sql, "UPDATE outbox_event SET status = 'SENT'");
    it_db_insert_events(fx->sql, "outbox_event", "new", 1000, 10, 16);
    it_db_exec(fx->sql, "ANALYZE TABLE outbox_event");
    assert_cheap_claim(fx, "beside 30000 SENT");
}
END_TEST

/*
 * Nor the events waiting behind the candidates: a claim of 500 over ten
 * aggregates with 3,000 events each, beside 5,000 retries backing off,
 * reads about what one over a short backlog does (3,200 here; looking
 * for a held retry among every unfinished event of each candidate's
 * aggregate read 1,500,000).
 */
START_TEST(test_ordering_ignores_backlog_depth)
{
    struct fx *fx = fx_setup(0);
    fx->ob.batch_size = 500;
    /* Retries backing off elsewhere give the optimizer other roads. */
    it_db_insert_events(fx->sql, "outbox_event", "held", 5000, 50, 16);
    it_db_exec(fx->sql, "UPDATE outbox_event SET status = 'RETRY', "
                        "aggregate_type = 'Held', retry_count = 1, "
                        "next_retry_at = NOW() + INTERVAL 1 HOUR");
    it_db_insert_events(fx->sql, "outbox_event", "deep", 30000, 10, 16);
    it_db_exec(fx->sql, "ANALYZE TABLE outbox_event");
    assert_cheap_claim(fx, "from a 30000 backlog in 10 aggregates");
}
END_TEST

/* Seconds from now to next_retry_at of a row, as the database sees it. */
static double
retry_delay_s(struct fx *fx, uint64_t id)
{
    return (double)it_db_int(fx->sql,
                             "SELECT TIMESTAMPDIFF(MICROSECOND, NOW(6), "
                             "next_retry_at) FROM outbox_event WHERE id = %llu",
                             (unsigned long long)id) /
           1e6;
}

static void
assert_row(struct fx *fx, uint64_t id, const char *status, int retry_count,
           const char *last_error)
{
    char *s = it_db_str(fx->sql,
                        "SELECT CONCAT_WS('|', status, retry_count, "
                        "IFNULL(last_error, '-'), IFNULL(locked_by, '-'), "
                        "IFNULL(locked_until, '-')) FROM outbox_event "
                        "WHERE id = %llu",
                        (unsigned long long)id);
    char want[256];
    snprintf(want, sizeof(want), "%s|%d|%s|-|-", status, retry_count,
             last_error ? last_error : "-");
    ck_assert_msg(s && strcmp(s, want) == 0, "row %llu: %s, want %s",
                  (unsigned long long)id, s ? s : "none", want);
    free(s);
}

/* 5. Outcomes: RETRY with backoff, DEAD, released, unconfirmed. */
START_TEST(test_outcomes)
{
    struct fx *fx = fx_setup(_i);
    it_db_insert_events(fx->sql, "outbox_event", "oc", 5, 5, 50);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 5);
    set_outcome(b, &b->rows[0], ROW_FAILED, "nack: boom");
    set_outcome(b, &b->rows[1], ROW_REJECTED, "nack: boom");
    set_outcome(b, &b->rows[2], ROW_FAILED, "NO_ROUTE");
    b->rows[2].dead = true;
    set_outcome(b, &b->rows[3], ROW_RELEASED, NULL);
    set_outcome(b, &b->rows[4], ROW_PUBLISHED, NULL);
    uint64_t s0 = store_statement_count(st);
    ck_assert_uint_eq(finalize_ok(st, b), 0);
    /* retry x2 + unconfirmed (two errors), dead, release, commit */
    ck_assert_uint_eq(store_statement_count(st) - s0, 5);
    for (int i = 0; i < 2; i++) {
        assert_row(fx, b->rows[i].id, "RETRY", 1, "nack: boom");
        double d = retry_delay_s(fx, b->rows[i].id);
        ck_assert_msg(d >= 10 - 1.1 && d <= 20 + 0.1, "delay %.3f s", d);
    }
    assert_row(fx, b->rows[2].id, "DEAD", 1, "NO_ROUTE");
    assert_row(fx, b->rows[3].id, "PENDING", 0, NULL);
    assert_row(fx, b->rows[4].id, "RETRY", 1, "no publisher confirm received");
}
END_TEST

/* 5b. A due RETRY row comes back; the backoff doubles per attempt. */
START_TEST(test_retry_backoff_doubles)
{
    struct fx *fx = fx_setup(_i);
    it_db_insert_events(fx->sql, "outbox_event", "rb", 1, 1, 50);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    set_outcome(b, &b->rows[0], ROW_FAILED, "timeout");
    ck_assert_uint_eq(finalize_ok(st, b), 0);
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 0); /* not due yet */
    it_db_exec(fx->sql, "UPDATE outbox_event SET next_retry_at = NOW() - "
                        "INTERVAL 1 SECOND");
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 1);
    ck_assert_int_eq(b->rows[0].claimed_from, OUTBOX_RETRY);
    ck_assert_uint_eq(b->rows[0].retry_count, 1);
    set_outcome(b, &b->rows[0], ROW_FAILED, "timeout");
    ck_assert_uint_eq(finalize_ok(st, b), 0);
    assert_row(fx, 1, "RETRY", 2, "timeout");
    double d = retry_delay_s(fx, 1);
    ck_assert_msg(d >= 20 - 1.1 && d <= 40 + 0.1, "delay %.3f s", d);
}
END_TEST

/* 5c. A reclaimed row given back unattempted is RETRY and due at once. */
START_TEST(test_release_after_reclaim)
{
    struct fx *fx = fx_setup(_i);
    it_db_insert_events(fx->sql, "outbox_event", "rr", 1, 1, 50);
    it_db_exec(fx->sql, "UPDATE outbox_event SET status = 'PROCESSING', "
                        "locked_by = 'gone/1', locked_until = NOW() - "
                        "INTERVAL 1 SECOND");
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 1);
    ck_assert_uint_eq(b->rows[0].retry_count, 1);
    release_all(st, b);
    assert_row(fx, 1, "RETRY", 1, NULL);
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 1);
    ck_assert_int_eq(b->rows[0].claimed_from, OUTBOX_RETRY);
    release_all(st, b);
}
END_TEST

/* 5d. Error text is cut to the column and made storable, never refused. */
START_TEST(test_error_text_sanitized)
{
    struct fx *fx = fx_setup(_i);
    it_db_insert_events(fx->sql, "outbox_event", "et", 2, 2, 50);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    size_t n = 3000;
    char *e = malloc(2 * n + 8);
    strcpy(e, "\xff\xfe'\\");
    for (size_t i = 0; i < n; i++)
        memcpy(e + 4 + 2 * i, "\xc3\xa9", 2); /* é */
    e[4 + 2 * n] = '\0';
    set_outcome(b, &b->rows[0], ROW_FAILED, e);
    set_outcome(b, &b->rows[1], ROW_FAILED, "emoji \xf0\x9f\x98\x80 ok");
    ck_assert_uint_eq(finalize_ok(st, b), 0);
    ck_assert_int_eq(it_db_int(fx->sql, "SELECT CHAR_LENGTH(last_error) FROM "
                                        "outbox_event WHERE id = 1"),
                     1024);
    char *s = it_db_str(fx->sql, "SELECT LEFT(last_error, 5) FROM "
                                 "outbox_event WHERE id = 1");
    ck_assert_str_eq(s, "?"
                        "?'\\\xc3\xa9"); /* split: no trigraph */
    free(s);
    s = it_db_str(fx->sql, "SELECT last_error FROM outbox_event WHERE id = 2");
    ck_assert_str_eq(s, "emoji \xf0\x9f\x98\x80 ok");
    free(s);
    free(e);
}
END_TEST

/* 6. A lease that expired once too often ends DEAD during the claim. */
START_TEST(test_lease_expiry_dead)
{
    struct fx *fx = fx_setup(_i);
    fx->ob.max_retries = 2;
    insert_event(fx, "ld1", "A");
    insert_event(fx, "ld2", "A");
    insert_event(fx, "ld3", "A");
    it_db_exec(fx->sql, "UPDATE outbox_event SET status = 'PROCESSING', "
                        "locked_by = 'gone/1', locked_until = NOW() - "
                        "INTERVAL 1 SECOND, retry_count = 3 - id WHERE id < 3");
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    /* 1 goes DEAD; 2 (one more attempt left) is reclaimed, alone. */
    ck_assert_uint_eq(b->n, 1);
    ck_assert_uint_eq(b->rows[0].id, 2);
    ck_assert_uint_eq(b->rows[0].retry_count, 2);
    ck_assert_int_eq(b->rows[0].claimed_from, OUTBOX_PROCESSING);
    ck_assert_int_eq(count_where(fx, "id = 1 AND status = 'DEAD' AND "
                                     "retry_count = 3 AND locked_by IS NULL "
                                     "AND last_error LIKE 'lease expired%'"),
                     1);
    ck_assert_int_eq(count_where(fx, "id = 2 AND retry_count = 2 AND "
                                     "status = 'PROCESSING'"),
                     1);
    release_all(st, b);
    /* given back unattempted, 2 is due at once, and 3 follows in order */
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 2);
    ck_assert_uint_eq(b->rows[0].id, 2);
    ck_assert_uint_eq(b->rows[1].id, 3);
    release_all(st, b);
}
END_TEST

static void
connect_fails(struct store *st, char *err, size_t errlen,
              const char *const *names)
{
    err[0] = '\0';
    ck_assert_int_eq(store_connect(st, err, errlen), -1);
    ck_assert(store_last_error_is_schema(st));
    ck_assert(!store_is_connected(st));
    for (; *names; names++)
        ck_assert_msg(strstr(err, *names) != NULL, "'%s' not in: %s", *names,
                      err);
}

/* 7. Missing table or columns: named, schema error, session kept. */
START_TEST(test_missing_table)
{
    struct fx *fx = fx_setup(-1);
    struct store *st = store_new(&fx->ob, NULL);
    char where[128], err[ERR_LEN];
    snprintf(where, sizeof(where), "%.63s.outbox_event", fx->db);
    connect_fails(st, err, sizeof(err),
                  (const char *[]){where, "does not exist", NULL});
    ck_assert_int_eq(it_sh("mariadb -h127.0.0.1 -u%s -p%s %s < '%s'",
                           IT_DB_USER, IT_DB_PASSWORD, fx->db,
                           it_src_path(schema_files[0])),
                     0);
    /* The idle session is reused: only the table is checked again
     * (columns, the UPDATE privilege's EXPLAIN, the CHECK constraints,
     * UPDATE triggers, the session's check_constraint_checks, indexes,
     * commit). */
    uint64_t s0 = store_statement_count(st);
    ck_assert_msg(store_connect(st, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(store_statement_count(st) - s0, 7);
    ck_assert(!store_last_error_is_schema(st));
    store_free(st);
}
END_TEST

START_TEST(test_missing_columns)
{
    struct fx *fx = fx_setup(1);
    it_db_exec(fx->sql, "ALTER TABLE outbox_event DROP COLUMN locked_by, "
                        "DROP COLUMN last_error");
    struct store *st = store_new(&fx->ob, NULL);
    char err[ERR_LEN];
    connect_fails(st, err, sizeof(err),
                  (const char *[]){"locked_by", "last_error", NULL});
    store_free(st);

    char *cols[] = {"event_type", "region"};
    fx->ob.columns = cols;
    fx->ob.ncolumns = 2;
    it_db_exec(fx->sql, "ALTER TABLE outbox_event ADD COLUMN locked_by "
                        "VARCHAR(128) NULL, ADD COLUMN last_error "
                        "VARCHAR(1024) NULL");
    st = store_new(&fx->ob, NULL);
    connect_fails(st, err, sizeof(err), (const char *[]){"region", NULL});
    ck_assert_msg(strstr(err, "event_type") == NULL, "%s", err);
    store_free(st);
}
END_TEST

/* Row contents: bytes unchanged, optional and config columns, time. */
START_TEST(test_row_fields)
{
    struct fx *fx = fx_setup(_i);
    char *cols[] = {"event_type", "aggregate_id"};
    fx->ob.columns = cols;
    fx->ob.ncolumns = 2;
    const char *payload = "{\"name\": \"Zo\xc3\xab \xe2\x9c\x93 "
                          "\xf0\x9d\x84\x9e\", \"n\":  1}";
    it_db_exec(fx->sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, status) VALUES "
               "('rf1', 'Order', 'o-\xc3\xa9', 'OrderPaid', '%s', 'PENDING')",
               payload);
    if (!fx->seed)
        it_db_exec(fx->sql, "UPDATE outbox_event SET headers = '{\"k\": "
                            "\"v\"}', trace_id = 't1', traceparent = "
                            "'00-0af7651916cd43dd8448eb211c80319c-"
                            "b7ad6b7169203331-01'");
    long long now = it_db_int(fx->sql, "SELECT UNIX_TIMESTAMP()");
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 1);
    const struct outbox_row *r = &b->rows[0];
    ck_assert_str_eq(r->event_id, "rf1");
    ck_assert_str_eq(r->aggregate_type, "Order");
    ck_assert_str_eq(r->aggregate_id, "o-\xc3\xa9");
    ck_assert_str_eq(r->event_type, "OrderPaid");
    ck_assert_uint_eq(r->payload_len, strlen(payload));
    ck_assert_mem_eq(r->payload, payload, r->payload_len);
    ck_assert_str_eq(r->columns[0], "OrderPaid");
    ck_assert_str_eq(r->columns[1], "o-\xc3\xa9");
    ck_assert_int_le(llabs(r->created_us / 1000000 - now), 5);
    if (fx->seed) {
        ck_assert_ptr_null(r->headers);
        ck_assert_ptr_null(r->trace_id);
    } else {
        ck_assert_str_eq(r->headers, "{\"k\": \"v\"}");
        ck_assert_str_eq(r->trace_id, "t1");
        ck_assert_uint_eq(strlen(r->traceparent), 55);
    }
    release_all(st, b);
}
END_TEST

/* EXPLAIN of sql under READ COMMITTED; *col: the column named name. */
static MYSQL_RES *
explain(struct fx *fx, const char *sql, const char *name, int *col)
{
    it_db_exec(fx->sql, "SET SESSION TRANSACTION ISOLATION LEVEL READ "
                        "COMMITTED");
    char *q = NULL;
    q = xasprintf("EXPLAIN %s", sql);
    ck_assert_int_eq(mysql_query(fx->sql, q), 0);
    free(q);
    MYSQL_RES *res = mysql_store_result(fx->sql);
    ck_assert_ptr_nonnull(res);
    *col = -1;
    MYSQL_FIELD *f = mysql_fetch_fields(res);
    for (unsigned i = 0; i < mysql_num_fields(res); i++)
        if (strcasecmp(f[i].name, name) == 0)
            *col = (int)i;
    ck_assert_int_ge(*col, 0);
    return res;
}

static void
assert_no_filesort(struct fx *fx, const char *sql)
{
    int extra;
    MYSQL_RES *res = explain(fx, sql, "Extra", &extra);
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res)) != NULL)
        ck_assert_msg(row[extra] == NULL ||
                          strstr(row[extra], "filesort") == NULL,
                      "%s: %s", sql, row[extra]);
    mysql_free_result(res);
}

/* The index each table of the statement's plan reads (EXPLAIN's key). */
static void
assert_plan_key(struct fx *fx, const char *sql, const char *key)
{
    int col;
    MYSQL_RES *res = explain(fx, sql, "key", &col);
    MYSQL_ROW row;
    while ((row = mysql_fetch_row(res)) != NULL)
        ck_assert_msg(row[col] != NULL && strcmp(row[col], key) == 0,
                      "%s: reads %s", sql, row[col] ? row[col] : "no index");
    mysql_free_result(res);
}

/*
 * 8. The claim walks an index: no filesort, so LIMIT bounds the locks.
 * The statements mirror store.c's claim (select list abridged: it does
 * not change the plan's order); the seed's table is claimed in the
 * order of its (status, next_retry_at, created_at) index.
 */
START_TEST(test_claim_uses_index)
{
    struct fx *fx = fx_setup(_i);
    it_db_insert_events(fx->sql, "outbox_event", "ix", 6000, 600, 64);
    it_db_exec(fx->sql, "UPDATE outbox_event SET status = 'SENT' WHERE "
                        "id %% 4 <> 0");
    it_db_exec(fx->sql, "UPDATE outbox_event SET status = 'RETRY', "
                        "next_retry_at = NOW() - INTERVAL id SECOND "
                        "WHERE id %% 40 = 0");
    it_db_exec(fx->sql, "ANALYZE TABLE outbox_event");
    const char *order = fx->seed ? "`next_retry_at`, `created_at`, `id`"
                                 : "`available_at`, `id`";
    /* With available_at, the undelayed PENDING rows (test 8b has the
     * delayed ones) are read by id on the index, forced. */
    const char *pending =
        fx->seed ? "`status` = 'PENDING' ORDER BY `next_retry_at`, "
                   "`created_at`, `id`"
                 : "`status` = 'PENDING' AND `available_at` IS NULL ORDER BY "
                   "`id`";
    const char *from = fx->seed ? "FROM `outbox_event` `c` WHERE "
                                : "FROM `outbox_event` `c` FORCE INDEX "
                                  "(`idx_outbox_status`) WHERE ";
    const char *cols = "SELECT `id`, `event_id`, `aggregate_type`, "
                       "`aggregate_id`, `event_type`, `payload`, "
                       "UNIX_TIMESTAMP(`created_at`), `retry_count` "
                       "FROM `outbox_event` WHERE ";
    char sql[1024];
    snprintf(sql, sizeof(sql),
             "SELECT `id`, `payload` %s%s LIMIT 500 FOR UPDATE SKIP LOCKED",
             from, pending);
    assert_no_filesort(fx, sql);
    /* As the store reads due retries: forcing an index led by
     * next_retry_at where the table has one (see build_claim_sql). */
    char retry_cols[512];
    snprintf(retry_cols, sizeof(retry_cols), "%.*s%s WHERE ",
             (int)(strlen(cols) - strlen(" WHERE ")), cols,
             fx->seed ? "" : " FORCE INDEX (`idx_outbox_due`)");
    snprintf(sql, sizeof(sql),
             "%s`status` = 'RETRY' AND `next_retry_at` <= NOW(6) ORDER BY "
             "`next_retry_at` LIMIT 500 FOR UPDATE SKIP LOCKED",
             retry_cols);
    assert_no_filesort(fx, sql);
    snprintf(sql, sizeof(sql),
             "%s`status` = 'PROCESSING' AND `locked_until` <= NOW(6) ORDER "
             "BY %s LIMIT 500 FOR UPDATE SKIP LOCKED",
             cols, order);
    assert_no_filesort(fx, sql);
    /* The store finds candidates with a plain read along the same index,
     * then locks them by id: by the primary key, whatever the plan's
     * estimates, so that no lock falls outside the located rows. */
    snprintf(sql, sizeof(sql), "SELECT `c`.`id` %s%s LIMIT 500", from, pending);
    assert_no_filesort(fx, sql);
    assert_plan_key(fx,
                    "SELECT `id` FROM `outbox_event` `c` FORCE INDEX "
                    "(PRIMARY) WHERE `c`.`id` IN (4, 8, 12, 2000) AND "
                    "`status` = 'PENDING' FOR UPDATE SKIP LOCKED",
                    "PRIMARY");
    /* And the store claims a full batch over that table. */
    fx->ob.batch_size = 500;
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 500);
    release_all(st, b);
}
END_TEST

/*
 * 8a. A table without a primary key led by id (here id is only unique)
 * cannot have its rows locked by id through one: the claim takes them
 * with the locking read along the status index instead, oldest first as
 * ever.  Forcing PRIMARY there would fail every claim.
 */
START_TEST(test_claim_without_id_primary)
{
    struct fx *fx = fx_setup(_i);
    it_db_exec(fx->sql, "ALTER TABLE outbox_event DROP PRIMARY KEY, ADD "
                        "UNIQUE KEY uk_id (id)");
    it_db_insert_events(fx->sql, "outbox_event", "np", 25, 25, 50);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    for (uint64_t first = 1; first <= 21; first += 10) {
        claim_ok(st, b);
        ck_assert_uint_eq(b->n, first == 21 ? 5 : 10);
        assert_sorted_claimed(b);
        ck_assert_uint_eq(b->rows[0].id, first);
        ack_all(b);
        ck_assert_uint_eq(finalize_ok(st, b), 0);
    }
    ck_assert_int_eq(count_where(fx, "status = 'SENT'"), 25);
}
END_TEST

/* Rows of mysql.innodb_table_stats that keep the test table's
 * persistent statistics. */
static long
persistent_stats_rows(struct fx *fx)
{
    return it_db_int(fx->sql,
                     "SELECT COUNT(*) FROM mysql.innodb_table_stats WHERE "
                     "database_name = '%s' AND table_name = 'outbox_event'",
                     fx->db);
}

/*
 * The recommended table keeps its statistics in memory: a change of
 * its rows never writes mysql.innodb_*_stats (each recalculation there
 * is a transaction of its own, which a thousand small tenants' outboxes
 * paid nearly per event), and sql/migrations/005 gives the seed's table,
 * or one from an earlier sql/outbox.sql, the same; either is claimed,
 * published and recorded as before.
 */
START_TEST(test_table_stats_transient)
{
    struct fx *fx = fx_setup(_i);
    if (fx->seed) {
        ck_assert_int_eq(persistent_stats_rows(fx), 1);
        char *migration =
            it_file_read(it_src_path("sql/migrations/005_transient_stats.sql"));
        it_db_exec(fx->sql, "%s", migration);
        free(migration);
    }
    ck_assert_int_eq(
        it_db_int(fx->sql,
                  "SELECT COUNT(*) FROM information_schema.TABLES WHERE "
                  "TABLE_SCHEMA = '%s' AND TABLE_NAME = 'outbox_event' AND "
                  "CREATE_OPTIONS LIKE '%%stats_persistent=0%%'",
                  fx->db),
        1);
    if (!fx->seed)
        ck_assert_int_eq(persistent_stats_rows(fx), 0);
    it_db_insert_events(fx->sql, "outbox_event", "ts", 30, 30, 50);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    for (int claims = 0; claims < 3; claims++) {
        claim_ok(st, b);
        ck_assert_uint_eq(b->n, 10);
        ack_all(b);
        ck_assert_uint_eq(finalize_ok(st, b), 0);
    }
    ck_assert_int_eq(count_where(fx, "status = 'SENT'"), 30);
    if (!fx->seed)
        ck_assert_int_eq(persistent_stats_rows(fx), 0);
}
END_TEST

/* One event whose payload is a JSON string of exactly len bytes. */
static void
insert_sized(struct fx *fx, int i, size_t len)
{
    it_db_exec(fx->sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, status) VALUES "
               "('sz-%d', 'Order', 'sz', 'OrderCreated', CONCAT('{\"p\":\"', "
               "REPEAT('x', %zu), '\"}'), 'PENDING')",
               i, len - 8);
}

/* Claims until a claim comes back empty; each within batch_bytes.
 * Returns the rows claimed. */
static size_t
claim_all_within(struct store *st, struct outbox_batch *b, size_t budget)
{
    size_t rows = 0;
    for (int claims = 0; claims < 10; claims++) {
        claim_ok(st, b);
        if (b->n == 0)
            return rows;
        size_t bytes = 0;
        for (size_t i = 0; i < b->n; i++)
            bytes += b->rows[i].payload_len;
        ck_assert_msg(bytes <= budget || b->n == 1, "a claim of %zu bytes",
                      bytes);
        rows += b->n;
        ack_all(b);
        ck_assert_uint_eq(finalize_ok(st, b), 0);
    }
    ck_abort_msg("ten claims and the outbox is not empty");
    return rows;
}

/*
 * 8c. docs/contract.md section 1.6: a claim stops before the row that
 * would pass batch_bytes and counts as full, so the next claim follows
 * at once; a larger row goes alone; the rows locked past the cut are
 * left PENDING, unlocked and unmarked, and each row is claimed once.
 * Through the lock by id and through the locking read alike (_i from
 * NSCHEMAS on: a table whose primary key is not id).
 */
START_TEST(test_claim_cut_by_bytes)
{
    struct fx *fx = fx_setup(_i % NSCHEMAS);
    if (_i >= NSCHEMAS)
        it_db_exec(fx->sql, "ALTER TABLE outbox_event DROP PRIMARY KEY, ADD "
                            "UNIQUE KEY uk_id (id)");
    fx->ob.batch_bytes = 65536;
    static const size_t sizes[] = {20000, 20000, 20000, 100000, 20000, 20000};
    for (int i = 0; i < 6; i++)
        insert_sized(fx, i, sizes[i]);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 3);
    ck_assert_uint_eq(b->candidates, fx->ob.batch_size);
    ck_assert_int_eq(count_where(fx, "status = 'PROCESSING'"), 3);
    ck_assert_int_eq(count_where(fx, "status = 'PENDING' AND locked_by IS "
                                     "NULL AND locked_until IS NULL AND "
                                     "retry_count = 0"),
                     3);
    ack_all(b);
    ck_assert_uint_eq(finalize_ok(st, b), 0);
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 1);
    ck_assert_uint_eq(b->rows[0].payload_len, 100000);
    ck_assert_uint_eq(b->candidates, fx->ob.batch_size);
    ack_all(b);
    ck_assert_uint_eq(finalize_ok(st, b), 0);
    ck_assert_uint_eq(claim_all_within(st, b, 65536), 2);
    ck_assert_int_eq(count_where(fx, "status = 'SENT' AND retry_count = 0"), 6);
}
END_TEST

/*
 * 8b. The claim order is that of the table's index: id on the
 * recommended table, (next_retry_at, created_at, id) on the seed's, so
 * with created_at running against id the two claim different rows.
 */
START_TEST(test_claim_order_follows_index)
{
    struct fx *fx = fx_setup(_i);
    fx->ob.batch_size = 2;
    fx->ob.ordering = ORDERING_NONE;
    it_db_insert_events(fx->sql, "outbox_event", "co", 4, 4, 50);
    it_db_exec(fx->sql, "UPDATE outbox_event SET created_at = NOW() - "
                        "INTERVAL id HOUR");
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 2);
    ck_assert_uint_eq(b->rows[0].id, (fx->seed ? 3 : 1));
    ck_assert_uint_eq(b->rows[1].id, (fx->seed ? 4 : 2));
    release_all(st, b);
}
END_TEST

static unsigned long
store_connection_id(struct fx *fx)
{
    return (unsigned long)it_db_int(
        fx->sql,
        "SELECT ID FROM information_schema.PROCESSLIST WHERE DB = '%s' "
        "AND ID <> CONNECTION_ID()",
        fx->db);
}

/* 9. Server gone: the claim fails, the store says so, reconnects. */
START_TEST(test_server_gone)
{
    struct fx *fx = fx_setup(0);
    it_db_insert_events(fx->sql, "outbox_event", "sg", 4, 4, 50);
    fx->ob.batch_size = 2;
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 2);
    it_db_exec(fx->sql, "KILL %lu", store_connection_id(fx));
    /* The finalize fails with the session; the lease keeps the rows. */
    char err[ERR_LEN] = "";
    size_t lost = 0;
    ack_all(b);
    ck_assert_int_eq(store_finalize_batch(st, b, &lost, err, sizeof(err)), -1);
    ck_assert(!store_is_connected(st));
    ck_assert(!store_last_error_is_schema(st));
    ck_assert_msg(strstr(err, fx->db) != NULL, "%s", err);
    ck_assert_int_eq(count_where(fx, "status = 'PROCESSING'"), 2);
    ck_assert_msg(store_connect(st, err, sizeof(err)) == 0, "%s", err);
    ck_assert_uint_eq(finalize_ok(st, b), 0); /* same token, still ours */
    ck_assert_int_eq(count_where(fx, "status = 'SENT'"), 2);

    it_db_exec(fx->sql, "KILL %lu", store_connection_id(fx));
    ck_assert_int_eq(store_claim_batch(st, RELAY, b, err, sizeof(err)), -1);
    ck_assert(!store_is_connected(st));
    ck_assert_int_eq(store_claim_batch(st, RELAY, b, err, sizeof(err)), -1);
    ck_assert_msg(store_connect(st, err, sizeof(err)) == 0, "%s", err);
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 2);
    release_all(st, b);
}
END_TEST

/* The budget: under 20 statements per 1000 events at 500. */
START_TEST(test_statement_budget)
{
    struct fx *fx = fx_setup(_i);
    fx->ob.batch_size = 500;
    it_db_insert_events(fx->sql, "outbox_event", "sb", 1000, 100, 256);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    uint64_t s0 = store_statement_count(st), t0 = it_now_ms();
    size_t sent = 0;
    for (int i = 0; i < 2; i++) {
        claim_ok(st, b);
        sent += b->n;
        ack_all(b);
        ck_assert_uint_eq(finalize_ok(st, b), 0);
    }
    uint64_t used = store_statement_count(st) - s0;
    ck_assert_uint_eq(sent, 1000);
    ck_assert_msg(used < 20, "%llu statements for 1000 events",
                  (unsigned long long)used);
    if (getenv("IT_STORE_VERBOSE"))
        fprintf(stderr, "%s: 1000 events, %llu statements, %llu ms\n",
                schema_files[_i], (unsigned long long)used,
                (unsigned long long)(it_now_ms() - t0));
    /* An empty claim; the next ones of an idle outbox are one probe and
     * a commit each. */
    s0 = store_statement_count(st);
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 0);
    ck_assert_uint_le(store_statement_count(st) - s0, 4);
    for (int i = 0; i < 3; i++) {
        s0 = store_statement_count(st);
        claim_ok(st, b);
        ck_assert_uint_eq(b->n, 0);
        ck_assert_uint_eq(store_statement_count(st) - s0, 2);
    }
}
END_TEST

/*
 * A claim after a short one probes first, and skips the looks the probe
 * answered: an idle outbox woken for one event pays the probe, the
 * locate, the lock, the mark and the commit, with no look for retries,
 * delayed rows or expired leases.  A retry or an expired lease the probe
 * saw due is still claimed, by the same claim.
 */
START_TEST(test_woken_claim_skips_answered_looks)
{
    struct fx *fx = fx_setup(_i);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 0);
    it_db_insert_events(fx->sql, "outbox_event", "wk", 1, 1, 64);
    uint64_t s0 = store_statement_count(st);
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 1);
    uint64_t woken = store_statement_count(st) - s0;
    if (getenv("IT_STORE_VERBOSE"))
        fprintf(stderr, "%s: woken claim of 1 event, %llu statements\n",
                schema_files[_i], (unsigned long long)woken);
    /* The seed's table, without the unfinished column, adds the
     * ordering check's read. */
    ck_assert_uint_eq(woken, fx->seed ? 6 : 5);
    ack_all(b);
    ck_assert_uint_eq(finalize_ok(st, b), 0);
    /* Short of its batch: the next claim probes, and finds nothing. */
    s0 = store_statement_count(st);
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 0);
    ck_assert_uint_eq(store_statement_count(st) - s0, 2);
    it_db_insert_events(fx->sql, "outbox_event", "wr", 2, 2, 64);
    it_db_exec(fx->sql, "UPDATE outbox_event SET status = 'RETRY', "
                        "next_retry_at = NOW(6) - INTERVAL 1 SECOND "
                        "WHERE event_id LIKE 'wr-%%0%%'");
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 2);
    /* A lease run out, nothing pending: the probe, within a second of
     * the last look for expired leases, reads it, and its claim takes
     * the row back at once. */
    ack_all(b);
    ck_assert_uint_eq(finalize_ok(st, b), 0);
    it_db_exec(fx->sql, "UPDATE outbox_event SET status = 'PROCESSING', "
                        "locked_by = 'gone/0', locked_until = NOW(6) - "
                        "INTERVAL 1 SECOND WHERE event_id = 'wk-0'");
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 1);
    ck_assert_int_eq(b->rows[0].claimed_from, OUTBOX_PROCESSING);
}
END_TEST

/*
 * A record is all or nothing: when the server refuses its last
 * statement, the statements before it roll back with it.  Here the SENT
 * group goes first and the RETRY group, which a CHECK refuses, last.
 */
START_TEST(test_refused_last_record_commits_nothing)
{
    struct fx *fx = fx_setup(_i);
    it_db_insert_events(fx->sql, "outbox_event", "rc", 2, 2, 64);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    it_db_exec(fx->sql, "ALTER TABLE outbox_event ADD CONSTRAINT "
                        "no_retries CHECK (`status` <> 'RETRY')");
    store_recheck_schema(st); /* read again by the claim */
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 2);
    set_outcome(b, &b->rows[0], ROW_ACKED, NULL);
    set_outcome(b, &b->rows[1], ROW_FAILED, "broker said no");
    char err[ERR_LEN] = "";
    size_t lost = 0;
    ck_assert_int_eq(store_finalize_batch(st, b, &lost, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "no_retries") != NULL, "%s", err);
    ck_assert_int_eq(it_db_count_status(fx->sql, "PROCESSING"), 2);
    ck_assert_int_eq(it_db_count_status(fx->sql, "SENT"), 0);
    it_db_exec(fx->sql, "ALTER TABLE outbox_event DROP CONSTRAINT no_retries");
    store_recheck_schema(st);
    ck_assert_uint_eq(finalize_ok(st, b), 0);
    ck_assert_int_eq(it_db_count_status(fx->sql, "SENT"), 1);
    ck_assert_int_eq(it_db_count_status(fx->sql, "RETRY"), 1);
}
END_TEST

/* A lean claim of the fresh rows, and a join of those committed since
 * into its transaction (more, reset first). */
static void
lean_claim_ok(struct store *st, struct outbox_batch *b)
{
    batch_reset(b);
    b->lean_allowed = true;
    claim_ok(st, b);
    ck_assert(b->lean);
}

static void
join_ok(struct store *st, struct outbox_batch *b, struct outbox_batch *more)
{
    char err[ERR_LEN] = "";
    batch_reset(more);
    ck_assert_msg(store_claim_more(st, b, more, err, sizeof(err)) == 0,
                  "join: %s", err);
    ck_assert_uint_eq(more->n, 1);
    b->lean_next = more;
}

static long long
prepares(struct fx *fx)
{
    return it_db_int(fx->sql, "SELECT VARIABLE_VALUE FROM information_schema."
                              "GLOBAL_STATUS WHERE VARIABLE_NAME = "
                              "'COM_PREPARE_SQL'");
}

/* One leased claim, SENT: the store's next claims may be lean. */
static void
warm_leased(struct fx *fx, struct store *st)
{
    insert_event(fx, "warm", "w");
    claim_ok(st, &fx->b);
    ack_all(&fx->b);
    finalize_ok(st, &fx->b);
}

/* A store whose next claims may be lean. */
static struct store *
lean_store_open(struct fx *fx)
{
    fx->ob.lean = true;
    struct store *st = store_open(fx);
    warm_leased(fx, st);
    return st;
}

/* n lean claims, each with one join of the event committed after it
 * (no traceparent given), all SENT. */
static void
lean_cycles(struct fx *fx, struct store *st, struct outbox_batch *more, int n)
{
    struct outbox_batch *b = &fx->b;
    for (int i = 0; i < n; i++) {
        char id[16];
        snprintf(id, sizeof(id), "a-%d", i);
        insert_event(fx, id, id);
        lean_claim_ok(st, b);
        snprintf(id, sizeof(id), "j-%d", i);
        insert_event(fx, id, id);
        join_ok(st, b, more);
        ck_assert_str_eq(more->rows[0].event_id, id);
        ck_assert_ptr_null(more->rows[0].traceparent);
        ack_all(b);
        ack_all(more);
        finalize_ok(st, b);
    }
}

/*
 * A lean join prepared on its session follows the table: a column that
 * appears (read at the schema's recheck) is read by the join prepared
 * again, where the server would have re-prepared the old text, and the
 * rows would have come back without it.
 */
START_TEST(test_lean_join_prepared_follows_schema)
{
    struct fx *fx = fx_setup(0);
    it_db_exec(fx->sql, "ALTER TABLE outbox_event DROP COLUMN traceparent");
    struct store *st = lean_store_open(fx);
    struct outbox_batch *b = &fx->b, more;
    batch_init(&more);
    long long before = prepares(fx);
    lean_cycles(fx, st, &more, 10); /* the ninth join prepares */
    ck_assert_int_eq(prepares(fx) - before, 1);
    it_db_exec(fx->sql, "ALTER TABLE outbox_event ADD COLUMN traceparent "
                        "VARCHAR(55) NULL");
    store_recheck_schema(st);
    insert_event(fx, "a-x", "a-x");
    lean_claim_ok(st, b);
    it_db_exec(fx->sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, traceparent) VALUES "
               "('j-x', 'Order', 'j-x', 'OrderCreated', '{}', '00-"
               "0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')");
    join_ok(st, b, &more);
    ck_assert_int_eq(prepares(fx) - before, 2);
    ck_assert_str_eq(more.rows[0].event_id, "j-x");
    ck_assert_ptr_nonnull(more.rows[0].traceparent);
    ck_assert_str_eq(more.rows[0].traceparent,
                     "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
    ack_all(b);
    ack_all(&more);
    finalize_ok(st, b);
    ck_assert_int_eq(it_db_count_status(fx->sql, "SENT"), 23);
    batch_free(&more);
}
END_TEST

/*
 * The session lost at the join that would prepare the read: the
 * PREPARE fails as the join's text would, the store says it is not
 * connected, and the transaction's rows, rolled back by the server, are
 * PENDING for the next claim: none lost, none recorded.
 */
START_TEST(test_lean_join_prepare_session_lost)
{
    struct fx *fx = fx_setup(0);
    struct store *st = lean_store_open(fx);
    struct outbox_batch *b = &fx->b, more;
    batch_init(&more);
    long long before = prepares(fx);
    lean_cycles(fx, st, &more, 8);
    ck_assert_int_eq(prepares(fx) - before, 0); /* the next join prepares */
    insert_event(fx, "a-x", "a-x");
    lean_claim_ok(st, b);
    insert_event(fx, "j-x", "j-x");
    it_db_exec(fx->sql, "KILL %lu", store_connection_id(fx));
    char err[ERR_LEN] = "";
    batch_reset(&more);
    ck_assert_int_eq(store_claim_more(st, b, &more, err, sizeof(err)), -1);
    ck_assert_uint_eq(more.n, 0);
    ck_assert(!store_is_connected(st));
    ck_assert_msg(strstr(err, fx->db) != NULL, "%s", err);
    size_t lost = 0;
    ack_all(b);
    ck_assert_int_eq(store_finalize_batch(st, b, &lost, err, sizeof(err)), -1);
    ck_assert_int_eq(count_where(fx, "status = 'PENDING'"), 2);
    ck_assert_msg(store_connect(st, err, sizeof(err)) == 0, "%s", err);
    batch_reset(b);
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 2);
    ack_all(b);
    finalize_ok(st, b);
    ck_assert_int_eq(it_db_count_status(fx->sql, "SENT"), 1 + 8 * 2 + 2);
    batch_free(&more);
}
END_TEST

/* A claim woken by the binlog, which skips the probe, lean if it may. */
static void
woken_claim(struct store *st, struct outbox_batch *b)
{
    store_set_woken(st, true);
    batch_reset(b);
    b->lean_allowed = true;
    claim_ok(st, b);
}

/*
 * The lean read leaves out the filter past aggregates held back by a
 * RETRY or a delayed row while the last probe saw none: the held
 * aggregate's next event it reads is still not published, and, as it
 * waited, that claim goes leased; the lean reads filter from then on,
 * and stay lean while the row holds its aggregate.
 */
START_TEST(test_lean_read_filters_once_a_row_is_held)
{
    struct fx *fx = fx_setup(0);
    struct store *st = lean_store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b); /* a probe: no RETRY row, no delayed row */
    ck_assert_uint_eq(b->n, 0);
    it_db_exec(fx->sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, status, retry_count, "
               "next_retry_at, created_at) VALUES ('held', 'Order', 'h', "
               "'OrderCreated', '{}', 'RETRY', 1, NOW(6) + INTERVAL 1 HOUR, "
               "NOW(6) - INTERVAL 1 MINUTE), ('behind', 'Order', 'h', "
               "'OrderCreated', '{}', 'PENDING', 0, NULL, "
               "NOW(6) - INTERVAL 1 MINUTE)");
    insert_event(fx, "b-1", "b");
    woken_claim(st, b);
    ck_assert(!b->lean);
    ck_assert_uint_eq(b->n, 1);
    ck_assert_str_eq(b->rows[0].event_id, "b-1");
    ack_all(b);
    finalize_ok(st, b);
    for (int i = 0; i < 2; i++) {
        char id[16];
        snprintf(id, sizeof(id), "c-%d", i);
        insert_event(fx, id, id);
        woken_claim(st, b);
        ck_assert_msg(b->lean, "claim %d after the held row is leased", i);
        ck_assert_uint_eq(b->n, 1);
        ck_assert_str_eq(b->rows[0].event_id, id);
        ack_all(b);
        finalize_ok(st, b);
    }
    ck_assert_int_eq(count_where(fx, "event_id = 'behind' AND status = "
                                     "'PENDING' AND locked_by IS NULL"),
                     1);
}
END_TEST

/* One value the store's session answers: column col of sql's row. */
static long long
session_value(struct store *st, const char *sql, unsigned col)
{
    MYSQL *db = store_session(st);
    ck_assert_ptr_nonnull(db);
    ck_assert_int_eq(mysql_query(db, sql), 0);
    MYSQL_RES *res = mysql_store_result(db);
    MYSQL_ROW r = mysql_fetch_row(res);
    ck_assert_ptr_nonnull(r);
    long long v = atoll(r[col]);
    mysql_free_result(res);
    mysql_commit(db);
    return v;
}

/* The temporary tables the store's session has created so far. */
static long long
session_tmp_tables(struct store *st)
{
    return session_value(st, "SHOW SESSION STATUS LIKE 'Created_tmp_tables'",
                         1);
}

/*
 * On the recommended table the steady state's statements (the lean
 * read, its joins, the record) create no temporary table on the
 * server: MariaDB's cache of a correlated subquery's results is one,
 * built per execution, and their subqueries, keyed by a row's id or
 * aggregate, would never hit it.  (The seed's table, without the
 * `unfinished` column, counts its ordering check in one.)
 */
START_TEST(test_lean_cycle_builds_no_temporary_table)
{
    struct fx *fx = fx_setup(0);
    struct store *st = lean_store_open(fx);
    struct outbox_batch more;
    batch_init(&more);
    long long before = session_tmp_tables(st);
    lean_cycles(fx, st, &more, 3);
    ck_assert_int_eq(session_tmp_tables(st) - before, 0);
    ck_assert_int_eq(it_db_count_status(fx->sql, "SENT"), 1 + 3 * 2);
    batch_free(&more);
}
END_TEST

/* The store session's check_constraint_checks, read on that session. */
static int
session_checks(struct store *st)
{
    return (int)session_value(st, "SELECT @@session.check_constraint_checks",
                              0);
}

/*
 * The JSON payload's CHECK (json_valid) cannot change under a status
 * update, so the store's session leaves it unevaluated; a constraint
 * that names a column the store writes, or an UPDATE trigger, keeps
 * them all evaluated, and still refuses what it refused before.
 */
START_TEST(test_check_constraints_skipped_only_when_unchangeable)
{
    struct fx *fx = fx_setup(_i);
    it_db_insert_events(fx->sql, "outbox_event", "cc", 3, 3, 64);
    struct store *st = store_open(fx);
    ck_assert_int_eq(session_checks(st), 0); /* both schemas' JSON payload */
    it_db_exec(fx->sql, "ALTER TABLE outbox_event ADD CONSTRAINT "
                        "few_tries CHECK (retry_count < 1)");
    store_recheck_schema(st);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    ck_assert_int_eq(session_checks(st), 1);
    ck_assert_uint_eq(b->n, 3);
    /* A retry counts an attempt: the constraint refuses it, as it would
     * without outboxd, and nothing is recorded. */
    for (size_t i = 0; i < b->n; i++)
        set_outcome(b, &b->rows[i], ROW_FAILED, "broker said no");
    char err[ERR_LEN] = "";
    size_t lost = 0;
    ck_assert_int_eq(store_finalize_batch(st, b, &lost, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "few_tries") != NULL, "%s", err);
    ck_assert_int_eq(it_db_count_status(fx->sql, "PROCESSING"), 3);
    it_db_exec(fx->sql, "ALTER TABLE outbox_event DROP CONSTRAINT few_tries");
    it_db_exec(fx->sql, "CREATE TRIGGER cc_audit BEFORE UPDATE ON outbox_event "
                        "FOR EACH ROW SET @cc_audit = 1");
    struct store *st2 = store_open(fx);
    ck_assert_int_eq(session_checks(st2), 1);
    it_db_exec(fx->sql, "DROP TRIGGER cc_audit");
    store_recheck_schema(st2);
    batch_reset(b);
    claim_ok(st2, b);
    ck_assert_int_eq(session_checks(st2), 0);
}
END_TEST

/* Statements one claim of 100 fresh events over `aggregates` takes. */
static uint64_t
claim_statements(struct fx *fx, struct store *st, struct outbox_batch *b,
                 const char *prefix, int aggregates)
{
    it_db_exec(fx->sql, "DELETE FROM outbox_event");
    /* Each counted claim follows an empty one: both probe first. */
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 0);
    it_db_insert_events(fx->sql, "outbox_event", prefix, 100, aggregates, 64);
    uint64_t s0 = store_statement_count(st);
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 100);
    return store_statement_count(st) - s0;
}

/*
 * With the unfinished column, the claim's locate also reads whether each
 * candidate leads its aggregate; a batch of such leaders needs no
 * ordering check.  A batch with a second event of one aggregate still
 * gets the check, and its counts.  Both claims fall between two looks
 * for expired leases (one a second), or the counts would differ by it.
 */
START_TEST(test_leaders_skip_ordering_check)
{
    struct fx *fx = fx_setup(_i);
    fx->ob.batch_size = 500;
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    uint64_t leaders = 0, mixed = 0, took = UINT64_MAX;
    for (int attempt = 0; attempt < 5 && took >= 500; attempt++) {
        claim_ok(st, b); /* looks for expired leases, if due */
        uint64_t t0 = it_now_ms();
        leaders = claim_statements(fx, st, b, "ld", 100);
        mixed = claim_statements(fx, st, b, "nl", 99);
        took = it_now_ms() - t0;
        it_db_exec(fx->sql, "DELETE FROM outbox_event");
    }
    ck_assert_msg(took < 500, "two claims took %llu ms",
                  (unsigned long long)took);
    /* nl-99 is the second event of aggregate nl-0. */
    ck_assert_uint_eq(leaders, (fx->seed ? mixed : mixed - 1));
    for (size_t i = 0; i < b->n; i++)
        ck_assert_uint_eq(b->rows[i].earlier_unfinished, i == 99 ? 1 : 0);
}
END_TEST

/* ---- available_at: delayed rows (recommended table only) ---- */

/* An event of aggregate agg delayed by `seconds` (negative: due). */
static uint64_t
insert_delayed(struct fx *fx, const char *event_id, const char *agg,
               int seconds)
{
    it_db_exec(fx->sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, available_at) VALUES "
               "('%s', 'Order', '%s', 'OrderCreated', '{}', NOW(6) + "
               "INTERVAL %d SECOND)",
               event_id, agg, seconds);
    return event_row_id(fx, event_id);
}

/*
 * 10. A row is not claimed before its available_at: due delayed rows
 * and undelayed ones are, the later events of a delayed one's aggregate
 * wait behind it with ordering: aggregate (not with none), and once it
 * is due it goes with them, in id order.
 */
START_TEST(test_delay_not_before_due)
{
    struct fx *fx = fx_setup(0);
    uint64_t later = insert_delayed(fx, "d-later", "A", 3600);
    insert_event(fx, "a-next", "A");
    uint64_t next = event_row_id(fx, "a-next");
    uint64_t due = insert_delayed(fx, "d-due", "B", -1);
    insert_event(fx, "c-now", "C");
    uint64_t now = event_row_id(fx, "c-now");
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 2);
    ck_assert(has_id(b, due) && has_id(b, now));
    ck_assert_int_eq(b->rows[0].claimed_from, OUTBOX_PENDING);
    release_all(st, b);
    fx->ob.ordering = ORDERING_NONE;
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 3);
    ck_assert(has_id(b, next) && !has_id(b, later));
    release_all(st, b);
    fx->ob.ordering = ORDERING_AGGREGATE;
    it_db_exec(fx->sql,
               "UPDATE outbox_event SET available_at = NOW(6) - INTERVAL 1 "
               "SECOND WHERE id = %llu",
               (unsigned long long)later);
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 4);
    assert_sorted_claimed(b);
    ck_assert(has_id(b, later) && has_id(b, next));
    release_all(st, b);
}
END_TEST

/* Due delayed rows are claimed in available_at order, not id order. */
START_TEST(test_delay_due_order)
{
    struct fx *fx = fx_setup(0);
    uint64_t id[3];
    for (int i = 0; i < 3; i++) {
        char ev[16], agg[16];
        snprintf(ev, sizeof(ev), "due-%d", i);
        snprintf(agg, sizeof(agg), "G%d", i);
        id[i] = insert_delayed(fx, ev, agg, -10 + 3 * i - 9 * (i == 2));
    }
    /* available_at: id[2] -19 s, id[0] -10 s, id[1] -7 s. */
    fx->ob.batch_size = 1;
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    const int want[] = {2, 0, 1};
    for (int i = 0; i < 3; i++) {
        claim_ok(st, b);
        ck_assert_uint_eq(b->n, 1);
        ck_assert_uint_eq(b->rows[0].id, id[want[i]]);
        ack_all(b);
        ck_assert_uint_eq(finalize_ok(st, b), 0);
        batch_reset(b);
    }
}
END_TEST

/*
 * Aggregates held by an event delayed for an hour, each with a later
 * event that could go but for it, more than a batch of them at lower
 * ids: the claim pages past them to the free aggregate, where taking
 * them would fill it with rows the ordering check drops.
 */
START_TEST(test_delay_pages_past_held)
{
    struct fx *fx = fx_setup(0);
    fx->ob.batch_size = 5;
    for (int i = 0; i < 20; i++) {
        char ev[16], agg[16];
        snprintf(agg, sizeof(agg), "H%d", i);
        snprintf(ev, sizeof(ev), "held-%d", i);
        insert_delayed(fx, ev, agg, 3600);
        snprintf(ev, sizeof(ev), "next-%d", i);
        insert_event(fx, ev, agg);
    }
    insert_event(fx, "free", "F");
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 1);
    ck_assert_uint_eq(b->rows[0].id, event_row_id(fx, "free"));
    release_all(st, b);
}
END_TEST

/*
 * The idle probe reports when the next delayed row falls due, so the
 * relay wakes for it without a commit: two statements, as ever.
 */
START_TEST(test_delay_probe_due)
{
    struct fx *fx = fx_setup(0);
    insert_delayed(fx, "soon", "S", 5);
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b); /* empty: the next one probes first */
    ck_assert_uint_eq(b->n, 0);
    uint64_t s0 = store_statement_count(st);
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 0);
    ck_assert_uint_eq(store_statement_count(st) - s0, 2);
    ck_assert_msg(b->due_in_ms > 2000 && b->due_in_ms <= 5000, "due in %llu",
                  (unsigned long long)b->due_in_ms);
    it_db_exec(fx->sql, "UPDATE outbox_event SET available_at = NOW(6)");
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 1);
    release_all(st, b);
}
END_TEST

/* Index entries a statement read (Handler_read_next), on fx's session. */
static long long
rows_read(struct fx *fx, const char *sql)
{
    it_db_exec(fx->sql, "FLUSH STATUS");
    ck_assert_int_eq(mysql_query(fx->sql, sql), 0);
    mysql_free_result(mysql_store_result(fx->sql));
    return it_db_int(fx->sql, "SELECT VARIABLE_VALUE FROM "
                              "information_schema.SESSION_STATUS WHERE "
                              "VARIABLE_NAME = 'HANDLER_READ_NEXT'");
}

/*
 * 8b. Both claims of PENDING rows on a table with available_at, as
 * store_claim.c writes them: no filesort, and neither reads the 5,000
 * rows delayed for a day that sit at lower ids; the probe's look at the
 * next available_at is one index entry.
 */
START_TEST(test_delay_claim_uses_index)
{
    struct fx *fx = fx_setup(0);
    it_db_exec(fx->sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, available_at) SELECT "
               "CONCAT('f', seq), 'F', CONCAT('f', seq), 'T', '{}', NOW(6) + "
               "INTERVAL 1 DAY FROM seq_1_to_5000");
    it_db_insert_events(fx->sql, "outbox_event", "u", 40, 40, 64);
    it_db_exec(fx->sql, "UPDATE outbox_event SET available_at = NOW(6) - "
                        "INTERVAL id SECOND WHERE event_id LIKE 'u-%%' AND "
                        "id %% 2 = 0");
    it_db_exec(fx->sql, "ANALYZE TABLE outbox_event");
    const char *head = "SELECT `c`.`id` FROM `outbox_event` `c` FORCE INDEX "
                       "(`idx_outbox_status`) WHERE ";
    const char *cond[] = {
        "`status` = 'PENDING' AND `available_at` IS NULL ORDER BY `id`",
        "`status` = 'PENDING' AND `available_at` <= NOW(6) ORDER BY "
        "`available_at`, `id`"};
    char sql[512];
    for (int i = 0; i < 2; i++) {
        snprintf(sql, sizeof(sql), "%s%s LIMIT 500", head, cond[i]);
        assert_no_filesort(fx, sql);
        assert_plan_key(fx, sql, "idx_outbox_status");
        long long read = rows_read(fx, sql);
        ck_assert_msg(read <= 25, "%s: read %lld index entries", sql, read);
    }
    long long read = rows_read(fx, "SELECT MIN(`available_at`) FROM "
                                   "`outbox_event` WHERE `status` = "
                                   "'PENDING'");
    ck_assert_int_le(read, 1);
    fx->ob.batch_size = 500;
    struct store *st = store_open(fx);
    struct outbox_batch *b = &fx->b;
    claim_ok(st, b);
    ck_assert_uint_eq(b->n, 40);
    release_all(st, b);
}
END_TEST

/*
 * Tenants (issue 19): schemas of one server holding the same table, one
 * store each, all on one shared session.
 */
#define NTENANTS 3
struct tenants {
    struct fx fx[NTENANTS];
    struct dbsession *sess;
    struct store *st[NTENANTS];
    size_t n;
};

static struct tenants tenants;

static struct tenants *
tenants_setup(int schema, size_t n)
{
    struct tenants *t = &tenants;
    memset(t, 0, sizeof(*t));
    t->n = n;
    for (size_t i = 0; i < n; i++)
        fx_init(&t->fx[i], schema);
    t->sess = dbsession_new(&t->fx[0].dbc);
    for (size_t i = 0; i < n; i++) {
        ck_assert(dbsession_serves(t->sess, &t->fx[i].dbc));
        t->st[i] = store_new(&t->fx[i].ob, t->sess);
    }
    return t;
}

static void
tenants_teardown(void)
{
    struct tenants *t = &tenants;
    for (size_t i = 0; i < t->n; i++)
        store_free(t->st[i]);
    dbsession_free(t->sess);
    for (size_t i = 0; i < t->n; i++)
        fx_free(&t->fx[i]);
    memset(t, 0, sizeof(*t));
}

static void
tenants_insert(struct tenants *t, size_t i, int n)
{
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "t%zu", i);
    it_db_insert_events(t->fx[i].sql, "outbox_event", prefix, n, n, 50);
}

static void
tenant_connect(struct tenants *t, size_t i)
{
    char err[ERR_LEN] = "";
    ck_assert_msg(store_connect(t->st[i], err, sizeof(err)) == 0,
                  "connect %zu: %s", i, err);
    ck_assert(store_is_connected(t->st[i]));
}

/* A claim of tenant i's rows, and of its rows alone. */
static size_t
tenant_claim(struct tenants *t, size_t i)
{
    struct outbox_batch *b = &t->fx[i].b;
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "t%zu-", i);
    batch_reset(b);
    claim_ok(t->st[i], b);
    for (size_t r = 0; r < b->n; r++)
        ck_assert_msg(strncmp(b->rows[r].event_id, prefix, strlen(prefix)) == 0,
                      "tenant %zu claimed %s", i, b->rows[r].event_id);
    return b->n;
}

/* Statements one claim of tenant i sends (its SET included). */
static uint64_t
tenant_claim_cost(struct tenants *t, size_t i)
{
    uint64_t s0 = store_statement_count(t->st[i]);
    tenant_claim(t, i);
    return store_statement_count(t->st[i]) - s0;
}

START_TEST(test_shared_claim_and_finalize)
{
    struct tenants *t = tenants_setup(_i, NTENANTS);
    for (size_t i = 0; i < t->n; i++) {
        tenants_insert(t, i, 4);
        tenant_connect(t, i);
    }
    ck_assert_uint_eq(dbsession_connect_count(t->sess), 1);
    /* No default schema: every statement named its table's schema. */
    MYSQL *db = dbsession_db(t->sess);
    ck_assert_int_eq(mysql_query(db, "SELECT DATABASE()"), 0);
    MYSQL_RES *res = mysql_store_result(db);
    ck_assert_ptr_null(mysql_fetch_row(res)[0]);
    mysql_free_result(res);
    for (size_t i = 0; i < t->n; i++)
        ck_assert_uint_eq(tenant_claim(t, i), 4);
    for (size_t i = 0; i < t->n; i++) {
        struct outbox_counts c;
        char err[ERR_LEN] = "";
        ck_assert_msg(stats_sql_count(t->st[i], &c, err, sizeof(err)) == 0,
                      "%s", err);
        ck_assert_uint_eq(c.rows[OUTBOX_PROCESSING], 4);
        ack_all(&t->fx[i].b);
        ck_assert_uint_eq(finalize_ok(t->st[i], &t->fx[i].b), 0);
    }
    for (size_t i = 0; i < t->n; i++)
        ck_assert_int_eq(it_db_count_status(t->fx[i].sql, "SENT"), 4);
    ck_assert_uint_eq(dbsession_connect_count(t->sess), 1);
}
END_TEST

/* A counter of the shared session's own (SHOW SESSION STATUS). */
static long long
shared_session_status(struct tenants *t, const char *name)
{
    MYSQL *db = dbsession_db(t->sess);
    char sql[128];
    snprintf(sql, sizeof(sql), "SHOW SESSION STATUS LIKE '%s'", name);
    ck_assert_msg(mysql_query(db, sql) == 0, "%s", mysql_error(db));
    MYSQL_RES *res = mysql_store_result(db);
    MYSQL_ROW r = mysql_fetch_row(res);
    ck_assert_ptr_nonnull(r);
    long long v = atoll(r[1]);
    mysql_free_result(res);
    mysql_commit(db);
    return v;
}

/*
 * A tenant that leaves a shared session (removed from the config, its
 * store disconnected) takes its prepared join with it, while the
 * session serves the others on: tenants that come and go must not each
 * leave a statement the server counts against max_prepared_stmt_count.
 */
START_TEST(test_shared_join_deallocated_on_leave)
{
    struct tenants *t = tenants_setup(0, 2);
    struct fx *fx = &t->fx[0];
    fx->ob.lean = true;
    for (size_t i = 0; i < t->n; i++)
        tenant_connect(t, i);
    struct outbox_batch more;
    batch_init(&more);
    warm_leased(fx, t->st[0]);
    long long prepared = shared_session_status(t, "Com_prepare_sql");
    lean_cycles(fx, t->st[0], &more, 10);
    batch_free(&more);
    ck_assert_int_eq(shared_session_status(t, "Com_prepare_sql") - prepared, 1);
    long long deallocated = shared_session_status(t, "Com_dealloc_sql");
    store_disconnect(t->st[0]);
    ck_assert_int_eq(shared_session_status(t, "Com_dealloc_sql") - deallocated,
                     1);
    tenants_insert(t, 1, 3);
    ck_assert_uint_eq(tenant_claim(t, 1), 3);
    ack_all(&t->fx[1].b);
    finalize_ok(t->st[1], &t->fx[1].b);
    ck_assert_int_eq(it_db_count_status(t->fx[1].sql, "SENT"), 3);
    ck_assert_uint_eq(dbsession_connect_count(t->sess), 1);
}
END_TEST

/*
 * A column dropped under one tenant: its claim fails (1054) and its
 * check names the column, while the other tenant claims on, on the same
 * session, never reconnected.
 */
START_TEST(test_shared_schema_fault_isolated)
{
    struct tenants *t = tenants_setup(_i, 2);
    for (size_t i = 0; i < t->n; i++) {
        tenants_insert(t, i, 4);
        t->fx[i].ob.batch_size = 2;
        tenant_connect(t, i);
    }
    unsigned long id = dbsession_connection_id(t->sess);
    it_db_exec(t->fx[0].sql, "ALTER TABLE outbox_event DROP COLUMN event_type");
    char err[ERR_LEN] = "";
    batch_reset(&t->fx[0].b);
    ck_assert_int_eq(
        store_claim_batch(t->st[0], RELAY, &t->fx[0].b, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "event_type") != NULL, "%s", err);
    ck_assert(store_last_error_is_schema(t->st[0]));
    ck_assert(!store_is_connected(t->st[0]));
    ck_assert(store_is_connected(t->st[1]));
    ck_assert_uint_eq(tenant_claim(t, 1), 2);
    release_all(t->st[1], &t->fx[1].b);
    connect_fails(t->st[0], err, sizeof(err),
                  (const char *[]){t->fx[0].db, "event_type", NULL});
    ck_assert_uint_eq(tenant_claim(t, 1), 2);
    ack_all(&t->fx[1].b);
    ck_assert_uint_eq(finalize_ok(t->st[1], &t->fx[1].b), 0);
    ck_assert_int_eq(it_db_count_status(t->fx[1].sql, "SENT"), 2);
    it_db_exec(t->fx[0].sql, "ALTER TABLE outbox_event ADD COLUMN event_type "
                             "VARCHAR(255) NOT NULL DEFAULT 'Readded'");
    tenant_connect(t, 0);
    ck_assert_uint_eq(tenant_claim(t, 0), 2);
    release_all(t->st[0], &t->fx[0].b);
    ck_assert_uint_eq(dbsession_connection_id(t->sess), id);
    ck_assert_uint_eq(dbsession_connect_count(t->sess), 1);
}
END_TEST

/* Statements tenant i's connect (its schema check) sends. */
static uint64_t
tenant_connect_cost(struct tenants *t, size_t i)
{
    uint64_t s0 = store_statement_count(t->st[i]);
    tenant_connect(t, i);
    return store_statement_count(t->st[i]) - s0;
}

/*
 * Tenants of one definition: the session reads its columns and indexes
 * from information_schema for the first alone, though the tables' next
 * AUTO_INCREMENT differ.  A third tenant's table, one column short, is
 * read for itself and refused, naming the column.
 */
START_TEST(test_shared_definition_read_once)
{
    struct tenants *t = tenants_setup(0, NTENANTS);
    tenants_insert(t, 0, 4);
    tenants_insert(t, 1, 7);
    it_db_exec(t->fx[2].sql, "ALTER TABLE outbox_event DROP COLUMN event_type");
    uint64_t first = tenant_connect_cost(t, 0);
    uint64_t second = tenant_connect_cost(t, 1);
    ck_assert_msg(second + 2 <= first,
                  "the second tenant's check sent %llu statements, the "
                  "first's %llu",
                  (unsigned long long)second, (unsigned long long)first);
    char err[ERR_LEN] = "";
    connect_fails(t->st[2], err, sizeof(err),
                  (const char *[]){t->fx[2].db, "event_type", NULL});
    ck_assert(store_last_error_is_schema(t->st[2]));
    const size_t inserted[2] = {4, 7};
    for (size_t i = 0; i < 2; i++) {
        ck_assert_uint_eq(tenant_claim(t, i), inserted[i]);
        release_all(t->st[i], &t->fx[i].b);
    }
    ck_assert_uint_eq(dbsession_connect_count(t->sess), 1);
}
END_TEST

/* Tenant i's table granted to the relay account of tenant 0, which all
 * the tenants then log in with (one account, one session). */
static void
tenants_one_account(struct tenants *t, char *user, size_t ulen, char *pass,
                    size_t plen)
{
    it_db_grant_relay(t->fx[0].db, "outbox_event", user, ulen, pass, plen);
    for (size_t i = 0; i < t->n; i++) {
        for (size_t h = 0; h < 2 && i > 0; h++)
            it_db_exec(t->fx[0].sql,
                       "GRANT SELECT, UPDATE, DELETE ON `%s`.`outbox_event` "
                       "TO '%s'@'%s'",
                       t->fx[i].db, user, h ? "localhost" : "127.0.0.1");
        t->fx[i].dbc.user = user;
        t->fx[i].dbc.password = pass;
    }
    /* A session copies its account when it is made: made anew. */
    for (size_t i = 0; i < t->n; i++)
        store_free(t->st[i]);
    dbsession_free(t->sess);
    t->sess = dbsession_new(&t->fx[0].dbc);
    for (size_t i = 0; i < t->n; i++)
        t->st[i] = store_new(&t->fx[i].ob, t->sess);
}

/*
 * UPDATE revoked on one tenant's table: its claim fails (1142) and its
 * check names the privilege, while the other tenant, on the same
 * account and session, claims on.
 */
START_TEST(test_shared_privilege_fault_isolated)
{
    struct tenants *t = tenants_setup(0, 2);
    char user[64], pass[64], err[ERR_LEN] = "";
    tenants_one_account(t, user, sizeof(user), pass, sizeof(pass));
    for (size_t i = 0; i < t->n; i++) {
        tenants_insert(t, i, 4);
        t->fx[i].ob.batch_size = 2;
        tenant_connect(t, i);
    }
    unsigned long id = dbsession_connection_id(t->sess);
    for (size_t h = 0; h < 2; h++)
        it_db_exec(t->fx[0].sql,
                   "REVOKE UPDATE ON `%s`.`outbox_event` FROM '%s'@'%s'",
                   t->fx[0].db, user, h ? "localhost" : "127.0.0.1");
    batch_reset(&t->fx[0].b);
    ck_assert_int_eq(
        store_claim_batch(t->st[0], RELAY, &t->fx[0].b, err, sizeof(err)), -1);
    ck_assert_msg(strstr(err, "1142") != NULL, "%s", err);
    ck_assert(store_last_error_is_schema(t->st[0]));
    ck_assert(!store_is_connected(t->st[0]));
    ck_assert_uint_eq(tenant_claim(t, 1), 2);
    ack_all(&t->fx[1].b);
    ck_assert_uint_eq(finalize_ok(t->st[1], &t->fx[1].b), 0);
    connect_fails(t->st[0], err, sizeof(err),
                  (const char *[]){"UPDATE privilege", t->fx[0].db, NULL});
    ck_assert_uint_eq(tenant_claim(t, 1), 2);
    release_all(t->st[1], &t->fx[1].b);
    ck_assert_int_eq(it_db_count_status(t->fx[0].sql, "PENDING"), 4);
    ck_assert_uint_eq(dbsession_connection_id(t->sess), id);
    ck_assert_uint_eq(dbsession_connect_count(t->sess), 1);
}
END_TEST

/*
 * The shared session killed: the store that meets it fails, every store
 * is not connected, one reconnects, the other only checks its table
 * again, and both record the batches they had in flight.
 */
START_TEST(test_shared_session_killed)
{
    struct tenants *t = tenants_setup(0, 2);
    for (size_t i = 0; i < t->n; i++) {
        tenants_insert(t, i, 4);
        t->fx[i].ob.batch_size = 2;
        tenant_connect(t, i);
        ck_assert_uint_eq(tenant_claim(t, i), 2);
        ack_all(&t->fx[i].b);
    }
    unsigned long id = dbsession_connection_id(t->sess);
    MYSQL *killer = it_db_connect(NULL); /* the same user may KILL it */
    it_db_exec(killer, "KILL %lu", id);
    mysql_close(killer);
    char err[ERR_LEN] = "";
    size_t lost = 0;
    ck_assert_int_eq(
        store_finalize_batch(t->st[0], &t->fx[0].b, &lost, err, sizeof(err)),
        -1);
    ck_assert(!store_last_error_is_schema(t->st[0]));
    ck_assert(!dbsession_is_open(t->sess));
    ck_assert(!store_is_connected(t->st[0]));
    ck_assert(!store_is_connected(t->st[1]));
    tenant_connect(t, 1);
    ck_assert_uint_eq(dbsession_connect_count(t->sess), 2);
    ck_assert_uint_ne(dbsession_connection_id(t->sess), id);
    ck_assert(!store_is_connected(t->st[0])); /* not checked since */
    tenant_connect(t, 0);
    ck_assert_uint_eq(dbsession_connect_count(t->sess), 2);
    for (size_t i = 0; i < t->n; i++) {
        ck_assert_uint_eq(finalize_ok(t->st[i], &t->fx[i].b), 0);
        ck_assert_int_eq(it_db_count_status(t->fx[i].sql, "SENT"), 2);
        ck_assert_uint_eq(tenant_claim(t, i), 2);
        release_all(t->st[i], &t->fx[i].b);
    }
}
END_TEST

/*
 * check_constraint_checks follows each table's verdict on the shared
 * session: tenants alike send no SET between them; a CHECK constraint
 * on one table turns the checks on for its statements only (its
 * constraint refuses, on a session the others had set off), and the
 * others' verdict stays off.
 */
START_TEST(test_shared_check_constraints_per_table)
{
    struct tenants *t = tenants_setup(_i, NTENANTS);
    tenants_insert(t, 0, 3);
    for (size_t i = 0; i < t->n; i++)
        tenant_connect(t, i);
    ck_assert_int_eq(session_checks(t->st[1]), 0);
    tenant_claim(t, 1); /* the first empty claims probe more */
    tenant_claim(t, 2);
    for (int k = 0; k < 2; k++) {
        ck_assert_uint_eq(tenant_claim_cost(t, 1), 2); /* probe, commit */
        ck_assert_uint_eq(tenant_claim_cost(t, 2), 2);
    }
    it_db_exec(t->fx[0].sql, "ALTER TABLE outbox_event ADD CONSTRAINT "
                             "few_tries CHECK (retry_count < 1)");
    store_recheck_schema(t->st[0]);
    ck_assert_uint_eq(tenant_claim(t, 0), 3);
    ck_assert_int_eq(session_checks(t->st[0]), 1);
    ck_assert_uint_eq(tenant_claim_cost(t, 1), 3); /* its SET back to 0 */
    ck_assert_int_eq(session_checks(t->st[1]), 0);
    ck_assert_uint_eq(tenant_claim_cost(t, 2), 2);
    struct outbox_batch *b = &t->fx[0].b;
    for (size_t i = 0; i < b->n; i++)
        set_outcome(b, &b->rows[i], ROW_FAILED, "broker said no");
    char err[ERR_LEN] = "";
    size_t lost = 0;
    unsigned long id = dbsession_connection_id(t->sess);
    ck_assert_int_eq(store_finalize_batch(t->st[0], b, &lost, err, sizeof(err)),
                     -1);
    ck_assert_msg(strstr(err, "few_tries") != NULL, "%s", err);
    ck_assert_int_eq(it_db_count_status(t->fx[0].sql, "PROCESSING"), 3);
    /* The refusal was the table's: the session goes on for the others. */
    ck_assert_uint_eq(dbsession_connection_id(t->sess), id);
    ck_assert(store_is_connected(t->st[0]));
    ck_assert_uint_eq(tenant_claim_cost(t, 2), 3);
    ck_assert_int_eq(session_checks(t->st[2]), 0);
}
END_TEST

static void
runner_setup(void)
{
    runner_pid = getpid();
}

/* A failed check ends its test before fx_teardown: drop what it left. */
static void
runner_teardown(void)
{
    MYSQL *db = it_db_connect(NULL);
    char sql[128];
    snprintf(sql, sizeof(sql), "SHOW DATABASES LIKE 'it\\_store\\_%d\\_%%'",
             (int)runner_pid);
    ck_assert_int_eq(mysql_query(db, sql), 0);
    MYSQL_RES *res = mysql_store_result(db);
    MYSQL_ROW row;
    while (res != NULL && (row = mysql_fetch_row(res)) != NULL)
        it_db_exec(db, "DROP DATABASE IF EXISTS `%s`", row[0]);
    mysql_free_result(res);
    mysql_close(db);
}

Suite *
it_store_suite(void)
{
    Suite *s = suite_create("it_store");
    TCase *tc = tcase_create("store");
    tcase_set_timeout(tc, 60);
    tcase_add_unchecked_fixture(tc, runner_setup, runner_teardown);
    tcase_add_checked_fixture(tc, NULL, fx_teardown);
    tcase_add_loop_test(tc, test_claim_and_ack, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_ack_deletes, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_two_stores_disjoint, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_skip_locked_rows, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_concurrent_relays, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_fencing, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_ordering_prefix, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_ordering_waits_for_retry, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_ordering_waits_for_other_relay, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_ordering_sees_claim_in_flight, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_ordering_collation_aliases, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_ordering_follows_collation_change, 0,
                        NSCHEMAS);
    tcase_add_loop_test(tc, test_ordering_binary_trailing_space, 0, NSCHEMAS);
    tcase_add_test(tc, test_ordering_ignores_history);
    tcase_add_test(tc, test_ordering_ignores_backlog_depth);
    tcase_add_test(tc, test_ordering_distrusts_other_unfinished);
    tcase_add_loop_test(tc, test_outcomes, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_retry_backoff_doubles, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_release_after_reclaim, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_error_text_sanitized, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_lease_expiry_dead, 0, NSCHEMAS);
    tcase_add_test(tc, test_missing_table);
    tcase_add_test(tc, test_missing_columns);
    tcase_add_loop_test(tc, test_row_fields, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_claim_without_id_primary, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_table_stats_transient, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_claim_cut_by_bytes, 0, 2 * NSCHEMAS);
    tcase_add_loop_test(tc, test_claim_uses_index, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_claim_order_follows_index, 0, NSCHEMAS);
    tcase_add_test(tc, test_server_gone);
    tcase_add_test(tc, test_lean_join_prepared_follows_schema);
    tcase_add_test(tc, test_lean_join_prepare_session_lost);
    tcase_add_test(tc, test_lean_cycle_builds_no_temporary_table);
    tcase_add_test(tc, test_lean_read_filters_once_a_row_is_held);
    tcase_add_loop_test(tc, test_statement_budget, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_woken_claim_skips_answered_looks, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_refused_last_record_commits_nothing, 0,
                        NSCHEMAS);
    tcase_add_loop_test(
        tc, test_check_constraints_skipped_only_when_unchangeable, 0, NSCHEMAS);
    tcase_add_loop_test(tc, test_leaders_skip_ordering_check, 0, NSCHEMAS);
    suite_add_tcase(s, tc);
    TCase *delay = tcase_create("delay");
    tcase_set_timeout(delay, 60);
    tcase_add_unchecked_fixture(delay, runner_setup, runner_teardown);
    tcase_add_checked_fixture(delay, NULL, fx_teardown);
    tcase_add_test(delay, test_delay_not_before_due);
    tcase_add_test(delay, test_delay_due_order);
    tcase_add_test(delay, test_delay_pages_past_held);
    tcase_add_test(delay, test_delay_probe_due);
    tcase_add_test(delay, test_delay_claim_uses_index);
    suite_add_tcase(s, delay);
    TCase *shared = tcase_create("shared");
    tcase_set_timeout(shared, 60);
    tcase_add_unchecked_fixture(shared, runner_setup, runner_teardown);
    tcase_add_checked_fixture(shared, NULL, tenants_teardown);
    tcase_add_loop_test(shared, test_shared_claim_and_finalize, 0, NSCHEMAS);
    tcase_add_loop_test(shared, test_shared_schema_fault_isolated, 0, NSCHEMAS);
    tcase_add_test(shared, test_shared_privilege_fault_isolated);
    tcase_add_test(shared, test_shared_definition_read_once);
    tcase_add_test(shared, test_shared_session_killed);
    tcase_add_loop_test(shared, test_shared_check_constraints_per_table, 0,
                        NSCHEMAS);
    tcase_add_test(shared, test_shared_join_deallocated_on_leave);
    suite_add_tcase(s, shared);
    return s;
}
