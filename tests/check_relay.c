/*
 * check_relay: the cycle's state machine driven with a fake store and a
 * fake broker: waves per aggregate, failures holding back later events,
 * bad rows, broker loss mid-batch, DEAD past max_retries, a broker that
 * blocks publishing, rows given back after a publish.
 */
#include <check.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "relay.h"
#include "util.h"

Suite *relay_suite(void);

#define MAX_ROWS 64

struct fake_row {
    unsigned long long id;
    const char *event_id;
    const char *agg;
    unsigned retry_count;
    bool has_expiry; /* expires_at set: expires_in_us at the claim */
    long long expires_in_us;
    bool expired_at_claim; /* the store made it DEAD as expired */
};

struct fake {
    struct fake_row rows[MAX_ROWS];
    size_t nrows;
    int claim_rc, finalize_rc;
    int claims, claim_fails_at;    /* the claim with this number fails */
    unsigned claim_ms, publish_ms; /* a slow database, a slow broker */
    _Atomic unsigned publishes_done;
    /* publish behaviour */
    unsigned long long fail_id; /* this row is nacked */
    int die_on_wave;            /* the connection dies on this wave (1-based) */
    /* what happened */
    int waves;
    unsigned long long published[MAX_ROWS];
    size_t npublished;
    size_t wave_of[MAX_ROWS]; /* wave number per published position */
    int finalized;
    /* mark_sent: ids per call, what was published by then */
    int marks;
    unsigned long long marked[8][MAX_ROWS];
    size_t nmarked[8], published_at_mark[8];
    size_t mark_lost; /* reported lost by every mark */
    enum row_state final_state[MAX_ROWS];
    bool final_dead[MAX_ROWS];
    char final_error[MAX_ROWS][128];
    char keys[MAX_ROWS][256];
    char expiration[MAX_ROWS][24]; /* per published position, "" if none */
    bool refused;                /* finalize failed as on a read-only server */
    bool lean;                   /* claims are lean where allowed */
    bool lean_allowed[8];        /* per claim: b->lean_allowed */
    int claims_at_last_finalize; /* claims made before the last finalize */
};

/* A claimed row as the store hands it over: an OrderCreated of agg. */
static struct outbox_row *
fake_add_row(struct outbox_batch *b, unsigned long long id,
             const char *event_id, const char *agg)
{
    struct outbox_row *r = batch_add(b);
    r->id = id;
    r->event_id = event_id;
    r->aggregate_type = "Order";
    r->aggregate_id = agg;
    r->event_type = "OrderCreated";
    r->payload = "{}";
    r->payload_len = 2;
    return r;
}

static int
fake_claim(void *arg, const char *relay_id, struct outbox_batch *b, char *err,
           size_t errlen)
{
    struct fake *f = arg;
    (void)relay_id;
    if (f->claim_ms > 0)
        usleep(f->claim_ms * 1000u);
    if (f->claim_rc < 0 || ++f->claims == f->claim_fails_at) {
        err_set(err, errlen, "claim failed");
        return -1;
    }
    if (f->claims <= 8)
        f->lean_allowed[f->claims - 1] = b->lean_allowed;
    b->lean = f->lean && b->lean_allowed;
    for (size_t i = 0; i < f->nrows; i++) {
        struct outbox_row *r =
            fake_add_row(b, f->rows[i].id, f->rows[i].event_id, f->rows[i].agg);
        r->retry_count = f->rows[i].retry_count;
        r->has_expiry = f->rows[i].has_expiry;
        r->expires_in_us = f->rows[i].expires_in_us;
        r->expires_at = "2026-12-01 10:00:00.000000";
        if (f->rows[i].expired_at_claim)
            batch_expire_row(b, r, "expired at claim", true);
    }
    return 0;
}

static int
fake_publish(void *arg, struct outbox_batch *b, struct outbox_row **rows,
             size_t n, bool mandatory, uint64_t deadline_ms, char *err,
             size_t errlen)
{
    struct fake *f = arg;
    (void)mandatory;
    (void)deadline_ms;
    if (f->publish_ms > 0)
        usleep(f->publish_ms * 1000u);
    f->waves++;
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(rows[i]->state, ROW_CLAIMED);
        if (i > 0)
            ck_assert_uint_lt(rows[i - 1]->id, rows[i]->id);
        if (f->die_on_wave == f->waves && i == n / 2) {
            /* the connection dies: published-unsettled rows fail, the
             * rest stay claimed, as the real publisher does */
            for (size_t j = 0; j < i; j++)
                row_enter_state(b, rows[j], ROW_FAILED, "connection lost");
            err_set(err, errlen, "connection lost");
            return -1;
        }
        row_enter_state(b, rows[i], ROW_PUBLISHED, NULL);
        f->wave_of[f->npublished] = (size_t)f->waves;
        f->published[f->npublished++] = rows[i]->id;
        snprintf(f->keys[f->npublished - 1], sizeof(f->keys[0]), "%s|%s",
                 rows[i]->exchange, rows[i]->routing_key);
        snprintf(f->expiration[f->npublished - 1], sizeof(f->expiration[0]),
                 "%s", rows[i]->expiration ? rows[i]->expiration : "");
    }
    for (size_t i = 0; i < n; i++)
        row_enter_state(b, rows[i],
                        rows[i]->id == f->fail_id ? ROW_FAILED : ROW_ACKED,
                        rows[i]->id == f->fail_id ? "broker nack" : NULL);
    f->publishes_done++;
    return 0;
}

static int
fake_finalize(void *arg, struct outbox_batch *b, size_t *lost, char *err,
              size_t errlen)
{
    struct fake *f = arg;
    *lost = 0;
    f->finalized++;
    f->claims_at_last_finalize = f->claims;
    for (size_t i = 0; i < b->n; i++) {
        f->final_state[i] = b->rows[i].state;
        f->final_dead[i] = b->rows[i].dead;
        snprintf(f->final_error[i], sizeof(f->final_error[i]), "%s",
                 b->rows[i].error ? b->rows[i].error : "");
    }
    if (f->finalize_rc < 0) {
        err_set(err, errlen, "finalize failed");
        return -1;
    }
    return 0;
}

static int
fake_mark_sent(void *arg, struct outbox_batch *b, struct outbox_row **rows,
               size_t n, size_t *lost, char *err, size_t errlen)
{
    struct fake *f = arg;
    (void)b;
    (void)err;
    (void)errlen;
    ck_assert_int_lt(f->marks, 8);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(rows[i]->state, ROW_ACKED);
        f->marked[f->marks][i] = rows[i]->id;
        rows[i]->recorded = true;
    }
    f->nmarked[f->marks] = n;
    f->published_at_mark[f->marks++] = f->npublished;
    *lost = f->mark_lost;
    return 0;
}

static const char *
fake_record_later(void *arg)
{
    return ((struct fake *)arg)->refused ? "the next session" : NULL;
}

static struct broker_config broker = {.name = "main",
                                      .confirm_timeout_ms = 1000};
static struct outbox_config ob;
static struct fake fake;
static struct relay relay;

static void
setup(void)
{
    char err[ERR_LEN];
    log_init(LOG_ERROR, LOG_FORMAT_TEXT);
    memset(&ob, 0, sizeof(ob));
    ob.name = "db.outbox_event";
    ob.broker = &broker;
    ob.batch_size = 10;
    ob.lease_ms = 30000;
    ob.max_retries = 3;
    ob.mandatory = true;
    ob.ordering = ORDERING_AGGREGATE;
    ck_assert_int_eq(template_compile("orders", &ob.exchange, err, 128), 0);
    ck_assert_int_eq(template_compile("{aggregate_type}.{event_type}",
                                      &ob.routing_key, err, 128),
                     0);
    memset(&fake, 0, sizeof(fake));
    struct relay_backend be = {.store = &fake,
                               .publisher = &fake,
                               .claim = fake_claim,
                               .finalize = fake_finalize,
                               .publish = fake_publish};
    relay_init(&relay, &ob, "relay-test", &be);
}

static void
teardown(void)
{
    relay_fini(&relay);
    template_free(&ob.exchange);
    template_free(&ob.routing_key);
    free(ob.columns);
}

static void
add_row(unsigned long long id, const char *event_id, const char *agg)
{
    fake.rows[fake.nrows++] =
        (struct fake_row){.id = id, .event_id = event_id, .agg = agg};
}

START_TEST(test_all_acked)
{
    add_row(1, "e1", "A");
    add_row(2, "e2", "B");
    add_row(3, "e3", "C");
    ck_assert_int_eq(relay_cycle(&relay), RELAY_PARTIAL);
    ck_assert_int_eq(fake.waves, 1);
    ck_assert_int_eq(fake.finalized, 1);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(fake.final_state[i], ROW_ACKED);
    ck_assert_uint_eq(relay.stats.published, 3);
    ck_assert_str_eq(fake.keys[0], "orders|Order.OrderCreated");
}
END_TEST

/* The n-th event of an aggregate goes out in wave n, after n-1 acked. */
START_TEST(test_waves_per_aggregate)
{
    add_row(1, "e1", "A");
    add_row(2, "e2", "B");
    add_row(3, "e3", "A");
    add_row(4, "e4", "A");
    add_row(5, "e5", "B");
    ck_assert_int_eq(relay_cycle(&relay), RELAY_PARTIAL);
    ck_assert_int_eq(fake.waves, 3);
    /* wave 1: 1, 2; wave 2: 3, 5; wave 3: 4 */
    unsigned long long want[] = {1, 2, 3, 5, 4};
    size_t want_wave[] = {1, 1, 2, 2, 3};
    ck_assert_uint_eq(fake.npublished, 5);
    for (size_t i = 0; i < 5; i++) {
        ck_assert_uint_eq(fake.published[i], want[i]);
        ck_assert_uint_eq(fake.wave_of[i], want_wave[i]);
    }
}
END_TEST

/* A failed event holds back the later events of its aggregate only. */
START_TEST(test_failure_releases_successors)
{
    add_row(1, "e1", "A");
    add_row(2, "e2", "B");
    add_row(3, "e3", "A");
    add_row(4, "e4", "B");
    add_row(5, "e5", "A");
    fake.fail_id = 1;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_PARTIAL);
    ck_assert_int_eq(fake.final_state[0], ROW_FAILED);
    ck_assert(!fake.final_dead[0]);
    ck_assert_int_eq(fake.final_state[1], ROW_ACKED);
    ck_assert_int_eq(fake.final_state[2], ROW_RELEASED);
    ck_assert_int_eq(fake.final_state[3], ROW_ACKED);
    ck_assert_int_eq(fake.final_state[4], ROW_RELEASED);
    for (size_t i = 0; i < fake.npublished; i++)
        ck_assert_uint_ne(fake.published[i], 3);
    ck_assert_uint_eq(relay.stats.retried, 1);
    ck_assert_uint_eq(relay.stats.released, 2);
}
END_TEST

START_TEST(test_ordering_none_one_wave)
{
    ob.ordering = ORDERING_NONE;
    add_row(1, "e1", "A");
    add_row(2, "e2", "A");
    add_row(3, "e3", "A");
    fake.fail_id = 1;
    relay_cycle(&relay);
    ck_assert_int_eq(fake.waves, 1);
    ck_assert_int_eq(fake.final_state[1], ROW_ACKED);
    ck_assert_int_eq(fake.final_state[2], ROW_ACKED);
}
END_TEST

START_TEST(test_dead_past_max_retries)
{
    add_row(1, "e1", "A");
    add_row(2, "e2", "B");
    fake.rows[0].retry_count = 3; /* max_retries 3: this attempt is the last */
    fake.rows[1].retry_count = 2;
    fake.fail_id = 1;
    relay_cycle(&relay);
    ck_assert_int_eq(fake.final_state[0], ROW_FAILED);
    ck_assert(fake.final_dead[0]);
    ck_assert_uint_eq(relay.stats.dead, 1);
    fake.fail_id = 2;
    relay_cycle(&relay);
    ck_assert_int_eq(fake.final_state[1], ROW_FAILED);
    ck_assert(!fake.final_dead[1]);
}
END_TEST

START_TEST(test_bad_event_ids_dead)
{
    add_row(1, NULL, "A");
    add_row(2, "dup", "B");
    add_row(3, "dup", "C");
    add_row(4, "e4", "A");
    add_row(5, "", "D");
    relay_cycle(&relay);
    ck_assert_int_eq(fake.final_state[0], ROW_REJECTED);
    ck_assert(fake.final_dead[0]);
    ck_assert_msg(strstr(fake.final_error[0], "NULL") != NULL, "%s",
                  fake.final_error[0]);
    ck_assert_int_eq(fake.final_state[1], ROW_ACKED);
    ck_assert_int_eq(fake.final_state[2], ROW_REJECTED);
    ck_assert_msg(strstr(fake.final_error[2], "duplicate") != NULL, "%s",
                  fake.final_error[2]);
    /* the event after a dead one waits for the next claim, as DEAD
     * releases its aggregate only once it is recorded */
    ck_assert_int_eq(fake.final_state[3], ROW_RELEASED);
    ck_assert_int_eq(fake.final_state[4], ROW_REJECTED);
}
END_TEST

/*
 * docs/contract.md section 6: a row the claim made DEAD as expired is
 * counted apart and does not hold back the events behind it.
 */
START_TEST(test_expired_at_claim_does_not_block)
{
    add_row(1, "e1", "A");
    add_row(2, "e2", "A");
    add_row(3, "e3", "B");
    fake.rows[0].expired_at_claim = true;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_PARTIAL);
    ck_assert_uint_eq(fake.npublished, 2);
    ck_assert_int_eq(fake.final_state[0], ROW_REJECTED);
    ck_assert_int_eq(fake.final_state[1], ROW_ACKED);
    ck_assert_int_eq(fake.final_state[2], ROW_ACKED);
    ck_assert_uint_eq(relay.stats.expired, 1);
    ck_assert_uint_eq(relay.stats.dead, 0);
    ck_assert_uint_eq(relay.stats.published, 2);
    /* Clean, but a row went DEAD: the gauges must count (worker.c). */
    ck_assert(relay.last.clean && !relay.last.sent_all);
}
END_TEST

/*
 * Less than a whole millisecond left when due to be published: not
 * published, DEAD as expired, the next event of its aggregate held back
 * until that is recorded; the others carry the time left.
 */
START_TEST(test_expiry_due_at_publish)
{
    ob.expiration_from_expires_at = true;
    add_row(1, "e1", "A");
    add_row(2, "e2", "A");
    add_row(3, "e3", "B");
    add_row(4, "e4", "C");
    fake.rows[0].has_expiry = true;
    fake.rows[0].expires_in_us = 400;
    fake.rows[2].has_expiry = true;
    fake.rows[2].expires_in_us = 60000000;
    relay_cycle(&relay);
    ck_assert_uint_eq(fake.npublished, 2);
    ck_assert_int_eq(fake.final_state[0], ROW_REJECTED);
    static const char head[] = "expired at 2026-12-01 10:00:00.000000 UTC, "
                               "due to be published ";
    ck_assert_msg(strncmp(fake.final_error[0], head, strlen(head)) == 0, "%s",
                  fake.final_error[0]);
    ck_assert_int_eq(fake.final_state[1], ROW_RELEASED);
    ck_assert_uint_eq(fake.published[0], 3);
    long ms = strtol(fake.expiration[0], NULL, 10);
    ck_assert_msg(ms > 55000 && ms <= 60000, "expiration %s",
                  fake.expiration[0]);
    ck_assert_str_eq(fake.expiration[1], ""); /* no expires_at */
    ck_assert_uint_eq(relay.stats.expired, 1);
}
END_TEST

/* Without the key, no expiration goes out, expiry still holds. */
START_TEST(test_expiration_key_off)
{
    add_row(1, "e1", "A");
    fake.rows[0].has_expiry = true;
    fake.rows[0].expires_in_us = 60000000;
    relay_cycle(&relay);
    ck_assert_uint_eq(fake.npublished, 1);
    ck_assert_str_eq(fake.expiration[0], "");
}
END_TEST

/* Broker lost mid-batch: nothing after it is attempted, acked rows are
 * still recorded. */
START_TEST(test_broker_lost_mid_batch)
{
    add_row(1, "e1", "A");
    add_row(2, "e2", "B");
    add_row(3, "e3", "A");
    add_row(4, "e4", "B");
    add_row(5, "e5", "C");
    add_row(6, "e6", "A");
    fake.die_on_wave = 2;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_BROKER_DOWN);
    ck_assert_int_eq(fake.finalized, 1);
    ck_assert_int_eq(fake.final_state[0], ROW_ACKED);
    ck_assert_int_eq(fake.final_state[1], ROW_ACKED);
    ck_assert_int_eq(fake.final_state[4], ROW_ACKED);
    ck_assert_int_eq(fake.waves, 2);
    /* wave 2 was 3 and 4: the first fails, the second was never sent */
    ck_assert_int_eq(fake.final_state[2], ROW_FAILED);
    ck_assert_int_eq(fake.final_state[3], ROW_RELEASED);
    ck_assert_int_eq(fake.final_state[5], ROW_RELEASED);
}
END_TEST

START_TEST(test_store_failures)
{
    add_row(1, "e1", "A");
    fake.claim_rc = -1;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_STORE_DOWN);
    ck_assert_int_eq(fake.waves, 0);
    fake.claim_rc = 0;
    fake.finalize_rc = -1;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_STORE_DOWN);
    ck_assert_uint_eq(relay.stats.published, 0);
}
END_TEST

/*
 * The claim ahead fails while a full batch is published: the batch is
 * still recorded, its confirmed events SENT rather than sent again
 * after their lease, and the cycle reports the database down.
 */
START_TEST(test_claim_ahead_fails)
{
    static char ids[10][8];
    for (int i = 0; i < 10; i++) {
        snprintf(ids[i], sizeof(ids[i]), "e%d", i);
        add_row((unsigned long long)i + 1, ids[i], ids[i]);
    }
    fake.claim_fails_at = 2;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_STORE_DOWN);
    ck_assert_int_eq(fake.claims, 2);
    ck_assert_int_eq(fake.finalized, 1);
    for (int i = 0; i < 10; i++)
        ck_assert_int_eq(fake.final_state[i], ROW_ACKED);
    ck_assert_str_eq(relay.last_error, "claim failed");
    ck_assert_uint_eq(relay.stats.published, 10);
    /* the record fails too: the claim's error is still the one reported */
    fake.claims = 0;
    fake.finalize_rc = -1;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_STORE_DOWN);
    ck_assert_int_eq(fake.finalized, 2);
    ck_assert_str_eq(relay.last_error, "claim failed");
}
END_TEST

START_TEST(test_full_and_idle)
{
    ck_assert_int_eq(relay_cycle(&relay), RELAY_IDLE);
    static char ids[10][8];
    for (int i = 0; i < 10; i++) {
        snprintf(ids[i], sizeof(ids[i]), "e%d", i);
        add_row((unsigned long long)i + 1, ids[i], ids[i]);
    }
    ck_assert_int_eq(relay_cycle(&relay), RELAY_FULL);
}
END_TEST

START_TEST(test_stop_deadline_releases)
{
    add_row(1, "e1", "A");
    relay.stop_deadline_ms = 1; /* long past */
    relay_cycle(&relay);
    ck_assert_int_eq(fake.waves, 0);
    ck_assert_int_eq(fake.final_state[0], ROW_RELEASED);
}
END_TEST

/* A batch never publishes past its lease: another relay may own it. */
START_TEST(test_lease_bounds_publishing)
{
    add_row(1, "e1", "A");
    add_row(2, "e2", "B");
    ob.lease_ms = 100; /* the margin eats the whole lease */
    relay_cycle(&relay);
    ck_assert_int_eq(fake.waves, 0);
    ck_assert_int_eq(fake.final_state[0], ROW_RELEASED);
    ck_assert_int_eq(fake.final_state[1], ROW_RELEASED);
}
END_TEST

static const char *override_cols[] = {"rk"};

START_TEST(test_routing_key_override_and_too_long)
{
    static char long_agg[300];
    memset(long_agg, 'x', sizeof(long_agg) - 1);
    ob.columns = malloc(sizeof(char *));
    ob.columns[0] = (char *)override_cols[0];
    ob.ncolumns = 1;
    ob.routing_key_column = "rk";
    template_free(&ob.routing_key);
    char err[ERR_LEN];
    ck_assert_int_eq(
        template_compile("{aggregate_id}", &ob.routing_key, err, sizeof(err)),
        0);
    add_row(1, "e1", "A");
    add_row(2, "e2", long_agg);
    relay_cycle(&relay);
    ck_assert_int_eq(fake.final_state[0], ROW_ACKED);
    ck_assert_str_eq(fake.keys[0], "orders|A");
    ck_assert_int_eq(fake.final_state[1], ROW_REJECTED);
    ck_assert_msg(strstr(fake.final_error[1], "255") != NULL, "%s",
                  fake.final_error[1]);
}
END_TEST

/* A relay whose backend records confirmed events mid-batch. */
static void
use_mark_sent(void)
{
    struct relay_backend be = {.store = &fake,
                               .publisher = &fake,
                               .claim = fake_claim,
                               .finalize = fake_finalize,
                               .publish = fake_publish,
                               .mark_sent = fake_mark_sent};
    relay_fini(&relay);
    relay_init(&relay, &ob, "relay-test", &be);
}

/* An event goes out only once the one before it is recorded SENT; events
 * with no later one in the batch wait for finalize. */
START_TEST(test_marks_before_next_wave)
{
    use_mark_sent();
    add_row(1, "e1", "A");
    add_row(2, "e2", "B");
    add_row(3, "e3", "A");
    add_row(4, "e4", "A");
    add_row(5, "e5", "B");
    ck_assert_int_eq(relay_cycle(&relay), RELAY_PARTIAL);
    ck_assert_int_eq(fake.waves, 3);
    ck_assert_int_eq(fake.marks, 2);
    /* after wave 1 (1, 2): both have successors */
    ck_assert_uint_eq(fake.published_at_mark[0], 2);
    ck_assert_uint_eq(fake.nmarked[0], 2);
    ck_assert_uint_eq(fake.marked[0][0], 1);
    ck_assert_uint_eq(fake.marked[0][1], 2);
    /* after wave 2 (3, 5): only 3, B ends at 5 */
    ck_assert_uint_eq(fake.published_at_mark[1], 4);
    ck_assert_uint_eq(fake.nmarked[1], 1);
    ck_assert_uint_eq(fake.marked[1][0], 3);
    ck_assert_uint_eq(relay.stats.published, 5);
}
END_TEST

/* Another relay took the lease: no later wave goes out. */
START_TEST(test_lost_lease_mid_batch)
{
    use_mark_sent();
    fake.mark_lost = 1;
    add_row(1, "e1", "A");
    add_row(2, "e2", "A");
    add_row(3, "e3", "A");
    relay_cycle(&relay);
    ck_assert_int_eq(fake.waves, 1);
    ck_assert_int_eq(fake.final_state[1], ROW_RELEASED);
    ck_assert_int_eq(fake.final_state[2], ROW_RELEASED);
    ck_assert_uint_eq(relay.stats.lost, 1);
}
END_TEST

/* ---- a broker that blocks publishing (connection.blocked) ---- */

static struct {
    int unblock_after; /* blocked until this many waits; -1: for good */
    int waits;         /* wait_unblocked calls */
    int stop_after;    /* a stop request arrives during this wait; 0 none */
    int wait_rc;       /* -1: the connection dies while waiting */
} blk;

static bool
fake_is_blocked(void *arg)
{
    (void)arg;
    return blk.unblock_after < 0 || blk.waits < blk.unblock_after;
}

static int
fake_wait_unblocked(void *arg, uint64_t deadline_ms, char *err, size_t errlen)
{
    (void)arg;
    blk.waits++;
    if (blk.stop_after != 0 && blk.waits == blk.stop_after)
        relay.stop_deadline_ms = clock_ms() + 60000; /* SIGTERM */
    if (blk.wait_rc < 0) {
        err_set(err, errlen, "connection lost");
        return -1;
    }
    uint64_t now = clock_ms();
    if (fake_is_blocked(NULL) && deadline_ms > now)
        usleep((useconds_t)(deadline_ms - now) * 1000);
    return 0;
}

static void
use_blocking_broker(int unblock_after)
{
    memset(&blk, 0, sizeof(blk));
    blk.unblock_after = unblock_after;
    relay.backend.is_blocked = fake_is_blocked;
    relay.backend.wait_unblocked = fake_wait_unblocked;
}

/* No wave starts while the broker blocks; the batch goes on after. */
START_TEST(test_blocked_waits_before_wave)
{
    use_blocking_broker(3);
    add_row(1, "e1", "A");
    add_row(2, "e2", "B");
    add_row(3, "e3", "A");
    ck_assert_int_eq(relay_cycle(&relay), RELAY_PARTIAL);
    ck_assert_int_eq(blk.waits, 3);
    ck_assert_int_eq(fake.waves, 2);
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(fake.final_state[i], ROW_ACKED);
}
END_TEST

/* Blocked to the end of the lease: the rows go back, no attempt spent. */
START_TEST(test_blocked_past_lease_releases)
{
    use_blocking_broker(-1);
    ob.lease_ms = 500; /* publishing may go on for 400 ms */
    add_row(1, "e1", "A");
    add_row(2, "e2", "B");
    uint64_t t0 = clock_ms();
    ck_assert_int_eq(relay_cycle(&relay), RELAY_PARTIAL);
    ck_assert_uint_ge(clock_ms() - t0, 350);
    ck_assert_int_eq(fake.waves, 0);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(fake.final_state[i], ROW_RELEASED);
        ck_assert(!fake.final_dead[i]);
    }
    ck_assert_uint_eq(relay.stats.released, 2);
    ck_assert_uint_eq(relay.stats.retried, 0);
    ck_assert_uint_eq(relay.stats.failed, 0);
}
END_TEST

/* A stop request ends the wait at once, whatever is left of the lease. */
START_TEST(test_blocked_stop_request)
{
    use_blocking_broker(-1);
    blk.stop_after = 2;
    add_row(1, "e1", "A");
    uint64_t t0 = clock_ms();
    relay_cycle(&relay);
    ck_assert_uint_lt(clock_ms() - t0, 1000);
    ck_assert_int_eq(blk.waits, 2);
    ck_assert_int_eq(fake.waves, 0);
    ck_assert_int_eq(fake.finalized, 1);
    ck_assert_int_eq(fake.final_state[0], ROW_RELEASED);
}
END_TEST

START_TEST(test_blocked_connection_lost)
{
    use_blocking_broker(-1);
    blk.wait_rc = -1;
    add_row(1, "e1", "A");
    ck_assert_int_eq(relay_cycle(&relay), RELAY_BROKER_DOWN);
    ck_assert_int_eq(fake.waves, 0);
    ck_assert_int_eq(fake.final_state[0], ROW_RELEASED);
    ck_assert_str_eq(relay.last_error, "connection lost");
}
END_TEST

/*
 * The broker closed the channel for row 1's oversized body (406): row 1
 * fails, row 2 was only caught in flight and comes back unattempted, and
 * so does the next event of its aggregate; row 4 went through.
 */
static int
fake_publish_406(void *arg, struct outbox_batch *b, struct outbox_row **rows,
                 size_t n, bool mandatory, uint64_t deadline_ms, char *err,
                 size_t errlen)
{
    struct fake *f = arg;
    (void)mandatory;
    (void)deadline_ms;
    (void)err;
    (void)errlen;
    f->waves++;
    for (size_t i = 0; i < n; i++) {
        row_enter_state(b, rows[i], ROW_PUBLISHED, NULL);
        if (rows[i]->id == 1)
            row_enter_state(b, rows[i], ROW_FAILED, "406 message size");
        else if (rows[i]->id == 2)
            row_enter_state(b, rows[i], ROW_RELEASED, "in flight at a 406");
        else
            row_enter_state(b, rows[i], ROW_ACKED, NULL);
    }
    return 0;
}

START_TEST(test_released_in_flight_not_counted)
{
    relay.backend.publish = fake_publish_406;
    add_row(1, "big", "A");
    add_row(2, "e2", "B");
    add_row(3, "e3", "B");
    add_row(4, "e4", "C");
    ck_assert_int_eq(relay_cycle(&relay), RELAY_PARTIAL);
    ck_assert_int_eq(fake.waves, 1); /* B's second event was held back */
    ck_assert_int_eq(fake.final_state[0], ROW_FAILED);
    ck_assert(!fake.final_dead[0]);
    ck_assert_int_eq(fake.final_state[1], ROW_RELEASED);
    ck_assert_str_eq(fake.final_error[1], "in flight at a 406");
    ck_assert_int_eq(fake.final_state[2], ROW_RELEASED);
    ck_assert_int_eq(fake.final_state[3], ROW_ACKED);
    ck_assert_uint_eq(relay.stats.failed, 1);
    ck_assert_uint_eq(relay.stats.retried, 1);
    ck_assert_uint_eq(relay.stats.released, 2);
}
END_TEST

/* The store found the event_id on an earlier row, claimed long ago. */
static int
fake_claim_dup(void *arg, const char *relay_id, struct outbox_batch *b,
               char *err, size_t errlen)
{
    int rc = fake_claim(arg, relay_id, b, err, errlen);
    if (rc == 0 && b->n > 1)
        b->rows[1].duplicate_of = 7;
    return rc;
}

START_TEST(test_duplicate_of_earlier_row_dead)
{
    relay.backend.claim = fake_claim_dup;
    add_row(10, "e10", "A");
    add_row(11, "e1", "B");
    add_row(12, "e12", "B");
    relay_cycle(&relay);
    ck_assert_int_eq(fake.final_state[0], ROW_ACKED);
    ck_assert_int_eq(fake.final_state[1], ROW_REJECTED);
    ck_assert(fake.final_dead[1]);
    ck_assert_str_eq(fake.final_error[1],
                     "duplicate event_id \"e1\" (also row 7)");
    /* B's next event waits until the duplicate is recorded DEAD */
    ck_assert_int_eq(fake.final_state[2], ROW_RELEASED);
    ck_assert_uint_eq(fake.npublished, 1);
}
END_TEST

/* ---- claiming ahead while a batch is published ---- */

static int claims_made;
static size_t acked_recorded, released_recorded;

/* Two full batches of ten distinct aggregates, then an empty table. */
static int
fake_claim_two_batches(void *arg, const char *relay_id, struct outbox_batch *b,
                       char *err, size_t errlen)
{
    static char ids[20][16];
    (void)arg;
    (void)relay_id;
    (void)err;
    (void)errlen;
    int k = claims_made++;
    for (int i = 0; k < 2 && i < 10; i++) {
        struct outbox_row *r = batch_add(b);
        int n = k * 10 + i;
        snprintf(ids[n], sizeof(ids[n]), "e%d", n);
        r->id = (unsigned long long)n + 1;
        r->event_id = ids[n];
        r->aggregate_type = "Order";
        r->aggregate_id = ids[n];
        r->event_type = "OrderCreated";
    }
    return 0;
}

static int
fake_finalize_counting(void *arg, struct outbox_batch *b, size_t *lost,
                       char *err, size_t errlen)
{
    acked_recorded += batch_count_state(b, ROW_ACKED);
    released_recorded += batch_count_state(b, ROW_RELEASED);
    return fake_finalize(arg, b, lost, err, errlen);
}

static void
setup_claim_ahead(void)
{
    claims_made = 0;
    acked_recorded = released_recorded = 0;
    relay.backend.claim = fake_claim_two_batches;
    relay.backend.finalize = fake_finalize_counting;
}

/* A full batch claims the next one while it publishes, and records its
 * own outcome while the next one publishes. */
START_TEST(test_claims_ahead_while_publishing)
{
    setup_claim_ahead();
    ck_assert_int_eq(relay_cycle(&relay), RELAY_FULL);
    ck_assert_int_eq(claims_made, 2);
    ck_assert_int_eq(fake.finalized, 0); /* recorded beside the next batch */
    ck_assert_int_eq(relay_cycle(&relay), RELAY_FULL);
    ck_assert_int_eq(claims_made, 3); /* the table was empty by then */
    ck_assert_int_eq(fake.finalized, 2);
    ck_assert_uint_eq(acked_recorded, 20);
    ck_assert_uint_eq(relay.stats.published, 20);
    ck_assert_int_eq(relay_cycle(&relay), RELAY_IDLE);
    ck_assert_int_eq(fake.npublished, 20);
}
END_TEST

/* The broker dies: what was claimed ahead goes back unattempted, what
 * was confirmed is recorded. */
START_TEST(test_broker_lost_gives_back_claimed_ahead)
{
    setup_claim_ahead();
    fake.die_on_wave = 2;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_FULL);
    ck_assert_int_eq(relay_cycle(&relay), RELAY_BROKER_DOWN);
    ck_assert_uint_eq(acked_recorded, 10);
    /* batch 2: five failed, five never sent; nothing else claimed */
    ck_assert_uint_eq(released_recorded, 5);
    ck_assert_uint_eq(relay.stats.failed, 5);
}
END_TEST

/* A stop after a full batch: flush records it and returns the next. */
START_TEST(test_flush_gives_back_claimed_ahead)
{
    setup_claim_ahead();
    ck_assert_int_eq(relay_cycle(&relay), RELAY_FULL);
    relay_flush(&relay);
    ck_assert_uint_eq(acked_recorded, 10);
    ck_assert_uint_eq(released_recorded, 10);
    ck_assert_int_eq(fake.npublished, 10);
}
END_TEST

static pthread_t claimed_on[4];
static _Atomic int db_begins, db_ends;

static int
fake_claim_noting_thread(void *arg, const char *relay_id,
                         struct outbox_batch *b, char *err, size_t errlen)
{
    ck_assert_int_lt(claims_made, 4);
    claimed_on[claims_made] = pthread_self();
    return fake_claim_two_batches(arg, relay_id, b, err, errlen);
}

static void
db_begin(void)
{
    db_begins++;
}

static void
db_end(void)
{
    db_ends++;
}

/* Every claim ahead runs on the one helper thread of the relay, whose
 * database hooks run once each: begin before its first job, end in
 * relay_fini. */
START_TEST(test_claims_ahead_on_one_helper_thread)
{
    struct relay_backend be = relay.backend;
    relay_fini(&relay);
    be.thread_begin = db_begin;
    be.thread_end = db_end;
    relay_init(&relay, &ob, "relay-test", &be);
    setup_claim_ahead();
    relay.backend.claim = fake_claim_noting_thread;
    db_begins = db_ends = 0;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_FULL);
    ck_assert_int_eq(relay_cycle(&relay), RELAY_FULL);
    ck_assert_int_eq(relay_cycle(&relay), RELAY_IDLE);
    ck_assert_int_eq(claims_made, 4);
    ck_assert(pthread_equal(claimed_on[0], pthread_self())); /* in line */
    ck_assert(!pthread_equal(claimed_on[1], pthread_self()));
    ck_assert(pthread_equal(claimed_on[1], claimed_on[2]));
    ck_assert(pthread_equal(claimed_on[3], pthread_self()));
    ck_assert_uint_eq(acked_recorded, 20);
    ck_assert_int_eq(db_begins, 1);
    ck_assert_int_eq(db_ends, 0);
    relay_fini(&relay);
    ck_assert_int_eq(db_ends, 1);
    be.thread_begin = be.thread_end = NULL;
    relay_init(&relay, &ob, "relay-test", &be); /* for teardown */
}
END_TEST

static int finalize_calls_before_failure;

/* The database fails while recording the batch before: the job claims
 * nothing ahead after that. */
static int
fake_finalize_fails_later(void *arg, struct outbox_batch *b, size_t *lost,
                          char *err, size_t errlen)
{
    struct fake *f = arg;
    f->finalize_rc = f->finalized >= finalize_calls_before_failure ? -1 : 0;
    return fake_finalize(arg, b, lost, err, errlen);
}

/* The database goes away while the job records the last batch beside
 * the next one's publish: the cycle reports it, and nothing more is
 * claimed ahead on a dead connection. */
START_TEST(test_store_lost_in_job)
{
    setup_claim_ahead();
    relay.backend.finalize = fake_finalize_fails_later;
    finalize_calls_before_failure = 0;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_FULL);
    ck_assert_int_eq(claims_made, 2);
    ck_assert_int_eq(relay_cycle(&relay), RELAY_STORE_DOWN);
    ck_assert_int_eq(claims_made, 2); /* no claim after the failure */
    ck_assert_int_eq(fake.npublished, 20);
    ck_assert_uint_eq(relay.stats.published, 0); /* nothing recorded */
}
END_TEST

/* One reclaimed row (its lease expired), handed out alone. */
static int
fake_claim_reclaimed(void *arg, const char *relay_id, struct outbox_batch *b,
                     char *err, size_t errlen)
{
    (void)arg;
    (void)relay_id;
    (void)err;
    (void)errlen;
    claims_made++;
    struct outbox_row *r = batch_add(b);
    r->id = 1;
    r->event_id = "poison";
    r->aggregate_type = "Order";
    r->aggregate_id = "A";
    r->event_type = "OrderCreated";
    r->claimed_from = OUTBOX_PROCESSING;
    b->candidates = 10; /* more wait: the store cut the batch short */
    return 0;
}

/* A row that may have killed the last relay goes out with nothing else
 * in flight: no claim ahead beside it. */
START_TEST(test_reclaimed_row_published_alone)
{
    setup_claim_ahead();
    relay.backend.claim = fake_claim_reclaimed;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_FULL);
    ck_assert_int_eq(claims_made, 1);
    ck_assert_int_eq(fake.finalized, 1);
}
END_TEST

static uint64_t
waited_ms(enum relay_wait on)
{
    uint64_t us[WAIT_COUNT];
    relay_waits_read(&relay, us);
    return us[on] / 1000;
}

/* The time a batch waits is counted against the server it waits on. */
START_TEST(test_wait_counted_by_server)
{
    add_row(1, "e1", "A");
    add_row(2, "e2", "B");
    fake.publish_ms = 50;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_PARTIAL);
    ck_assert_uint_ge(waited_ms(WAIT_BROKER), 50);
    ck_assert_uint_lt(waited_ms(WAIT_DATABASE), 50);
    uint64_t on_broker = waited_ms(WAIT_BROKER);
    uint64_t db = waited_ms(WAIT_DATABASE);
    fake.publish_ms = 0;
    fake.claim_ms = 50;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_PARTIAL);
    ck_assert_uint_ge(waited_ms(WAIT_DATABASE) - db, 50);
    ck_assert_uint_lt(waited_ms(WAIT_BROKER) - on_broker, 50);
}
END_TEST

/* A claim ahead that ends while the broker confirms costs no wait; one
 * that outlasts publishing is waited for, as the database's time. */
START_TEST(test_overlapped_claim_not_waited_for)
{
    for (unsigned i = 1; i <= 10; i++) /* a full batch: claims ahead */
        add_row(i, "e", i % 2 ? "A" : "B");
    static const char *ids[10] = {"e1", "e2", "e3", "e4", "e5",
                                  "e6", "e7", "e8", "e9", "e10"};
    for (unsigned i = 0; i < 10; i++)
        fake.rows[i].event_id = ids[i];
    fake.claim_ms = 20;
    fake.publish_ms = 200;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_FULL);
    ck_assert_int_eq(fake.claims, 2); /* its own and the one ahead */
    ck_assert_uint_ge(waited_ms(WAIT_BROKER), 200);
    ck_assert_uint_ge(waited_ms(WAIT_DATABASE), 20); /* the first claim */
    ck_assert_uint_lt(waited_ms(WAIT_DATABASE), 200);
    uint64_t db = waited_ms(WAIT_DATABASE);
    fake.claim_ms = 200;
    fake.publish_ms = 0;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_FULL);
    /* The claim ahead started before this batch's (instant) publishing,
     * which overlaps it by a moment: milliseconds under valgrind. */
    ck_assert_uint_ge(waited_ms(WAIT_DATABASE) - db, 150);
    relay_flush(&relay);
}
END_TEST

static void *
cycle_thread(void *arg)
{
    (void)arg;
    relay_cycle(&relay);
    return NULL;
}

/* A wait in progress counts up to now: a publish stuck on a silent
 * broker shows at the next scrape, not when it ends. */
START_TEST(test_wait_in_progress_counted)
{
    add_row(1, "e1", "A");
    fake.publish_ms = 600;
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, cycle_thread, NULL), 0);
    bool seen = false;
    for (uint64_t until = clock_ms() + 3000; !seen && clock_ms() < until;) {
        uint64_t ms = waited_ms(WAIT_BROKER);
        seen = fake.publishes_done == 0 && ms >= 100; /* read after ms */
        usleep(5000);
    }
    pthread_join(th, NULL);
    ck_assert_msg(seen, "the wait did not show while in progress");
    ck_assert_uint_ge(waited_ms(WAIT_BROKER), 600);
}
END_TEST

/*
 * A server that went read-only refused the record of a published batch:
 * the next session records it before it claims anything, so that the
 * new primary, which holds the rows and their token, sees it SENT.
 */
START_TEST(test_refused_record_kept_for_next_session)
{
    relay.backend.record_later = fake_record_later;
    add_row(1, "e1", "A");
    add_row(2, "e2", "B");
    fake.finalize_rc = -1;
    fake.refused = true;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_STORE_DOWN);
    ck_assert_int_eq(fake.finalized, 1);
    ck_assert_uint_eq(relay.stats.published, 0);
    /* Still refused (reconnected to the old primary): kept again. */
    ck_assert_int_eq(relay_cycle(&relay), RELAY_STORE_DOWN);
    ck_assert_int_eq(fake.finalized, 2);
    ck_assert_int_eq(fake.claims, 1);
    /* The new primary: recorded first, then the claim. */
    fake.finalize_rc = 0;
    fake.refused = false;
    fake.nrows = 0;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_IDLE);
    ck_assert_int_eq(fake.finalized, 3);
    ck_assert_int_eq(fake.claims_at_last_finalize, 1);
    ck_assert_int_eq(fake.claims, 2);
    ck_assert_int_eq(fake.final_state[0], ROW_ACKED);
    ck_assert_int_eq(fake.final_state[1], ROW_ACKED);
    ck_assert_uint_eq(relay.stats.published, 2);
}
END_TEST

/*
 * A lean batch's rows are locked by the claim's transaction, not leased:
 * marking a wave SENT would commit and free the rest.  One wave goes;
 * the later events of its aggregates go back unattempted, and the relay
 * claims again at once.
 */
START_TEST(test_lean_publishes_one_wave)
{
    fake.lean = true;
    add_row(1, "e1", "A");
    add_row(2, "e2", "B");
    add_row(3, "e3", "A");
    relay.backend.mark_sent = fake_mark_sent;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_FULL);
    ck_assert(fake.lean_allowed[0]);
    ck_assert_int_eq(fake.waves, 1);
    ck_assert_uint_eq(fake.npublished, 2);
    ck_assert_int_eq(fake.marks, 0);
    ck_assert_int_eq(fake.finalized, 1);
    ck_assert_int_eq(fake.final_state[0], ROW_ACKED);
    ck_assert_int_eq(fake.final_state[1], ROW_ACKED);
    ck_assert_int_eq(fake.final_state[2], ROW_RELEASED);
    ck_assert(relay.last.lean && relay.last.lean_cut && !relay.last.clean &&
              !relay.last.sent_all);
    ck_assert_uint_eq(relay.stats.published, 2);
}
END_TEST

/* Commits told while a lean batch was out: one more batch joins its
 * transaction, published after it, recorded with it in one finalize. */
static uint64_t told_pending;

static uint64_t
fake_take_told(void *owner)
{
    (void)owner;
    uint64_t n = told_pending;
    told_pending = 0;
    return n;
}

static int
fake_claim_more(void *arg, const struct outbox_batch *first,
                struct outbox_batch *b, char *err, size_t errlen)
{
    struct fake *f = arg;
    ck_assert_uint_eq(first->n, 1);
    (void)err;
    (void)errlen;
    f->claims++;
    fake_add_row(b, 100, "e100", "Z");
    b->lean = true;
    return 0;
}

static int
fake_finalize_chain(void *arg, struct outbox_batch *b, size_t *lost, char *err,
                    size_t errlen)
{
    ck_assert_ptr_nonnull(b->lean_next);
    ck_assert_uint_eq(b->lean_next->n, 1);
    ck_assert_int_eq(b->lean_next->rows[0].state, ROW_ACKED);
    return fake_finalize(arg, b, lost, err, errlen);
}

/* One lean cycle of row 1 with a commit told: claim_more joins its
 * transaction, finalize records the chain. */
static void
run_lean_cycle(int (*claim_more)(void *, const struct outbox_batch *,
                                 struct outbox_batch *, char *, size_t),
               int (*finalize)(void *, struct outbox_batch *, size_t *, char *,
                               size_t))
{
    fake.lean = true;
    relay.backend.claim_more = claim_more;
    relay.backend.take_told = fake_take_told;
    relay.backend.finalize = finalize;
    told_pending = 1;
    add_row(1, "e1", "A");
    ck_assert_int_eq(relay_cycle(&relay), RELAY_PARTIAL);
}

START_TEST(test_lean_extended_by_told_commits)
{
    run_lean_cycle(fake_claim_more, fake_finalize_chain);
    ck_assert_int_eq(fake.claims, 2);
    ck_assert_int_eq(fake.finalized, 1);
    ck_assert_uint_eq(fake.npublished, 2);
    ck_assert_uint_eq(fake.published[1], 100);
    ck_assert_uint_eq(relay.stats.published, 2);
    ck_assert_uint_eq(relay.stats.lean_batches, 2);
    ck_assert(relay.last.lean && relay.last.clean && relay.last.sent_all);
    ck_assert_uint_eq(relay.last.rows, 2);
    /* Nothing told during the next one: no extension. */
    relay.backend.finalize = fake_finalize;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_PARTIAL);
    ck_assert_int_eq(fake.claims, 3);
    ck_assert_uint_eq(relay.last.rows, 1);
}
END_TEST

/* A commit told only once the relay waits, its batch confirmed: the
 * wait (the worker's condition) hands it over, until the linger's end. */
static int waits;
static uint64_t wait_until_ms;

static uint64_t
fake_wait_told(void *owner, uint64_t until_ms)
{
    (void)owner;
    wait_until_ms = until_ms;
    return waits++ == 0 ? 1 : 0;
}

/* One lean cycle of row 1, nothing told before it, the relay lingering
 * or not. */
static void
run_lean_cycle_told_later(bool linger)
{
    relay.linger = linger;
    relay.backend.wait_told = fake_wait_told;
    fake.lean = true;
    relay.backend.claim_more = fake_claim_more;
    relay.backend.take_told = fake_take_told;
    told_pending = 0;
    waits = 0;
    add_row(1, "e1", "A");
    ck_assert_int_eq(relay_cycle(&relay), RELAY_PARTIAL);
}

START_TEST(test_lean_linger_waits_for_a_commit)
{
    relay.backend.finalize = fake_finalize_chain;
    uint64_t before = clock_ms();
    run_lean_cycle_told_later(true);
    ck_assert_int_eq(waits, 2); /* told once, then nothing till the end */
    ck_assert_int_eq(fake.claims, 2);
    ck_assert_int_eq(fake.finalized, 1);
    ck_assert_uint_ge(wait_until_ms, before + 20); /* the linger's 20 ms */
    ck_assert_uint_le(wait_until_ms, clock_ms() + 20);
}
END_TEST

/* A relay that may not linger (its thread serves other outboxes) never
 * waits: nothing told, nothing joined. */
START_TEST(test_lean_no_linger_no_wait)
{
    run_lean_cycle_told_later(false);
    ck_assert_int_eq(waits, 0);
    ck_assert_int_eq(fake.claims, 1);
}
END_TEST

/* Each join finds the commit of another told while it was out: joins
 * go on to their cap, and none is claimed into a slot of the chain. */
static int
fake_claim_more_each(void *arg, const struct outbox_batch *first,
                     struct outbox_batch *b, char *err, size_t errlen)
{
    static char event_ids[RELAY_SLOTS][16];
    struct fake *f = arg;
    (void)err;
    (void)errlen;
    size_t held = 0;
    for (const struct outbox_batch *x = first; x != NULL; x = x->lean_next) {
        ck_assert_ptr_ne(x, b);
        held += x->n;
    }
    ck_assert_uint_eq(held, (size_t)f->claims);
    snprintf(event_ids[f->claims], sizeof(event_ids[0]), "e%d",
             100 + f->claims);
    fake_add_row(b, 100 + (unsigned)f->claims, event_ids[f->claims], "Z");
    f->claims++;
    b->lean = true;
    told_pending = 1;
    return 0;
}

/* The whole chain is recorded at once: every batch, each row once. */
static int
fake_finalize_long_chain(void *arg, struct outbox_batch *b, size_t *lost,
                         char *err, size_t errlen)
{
    size_t batches = 0;
    unsigned long long next = 101;
    for (struct outbox_batch *x = b->lean_next; x != NULL; x = x->lean_next) {
        ck_assert_uint_eq(x->n, 1);
        ck_assert_uint_eq(x->rows[0].id, next++);
        ck_assert_int_eq(x->rows[0].state, ROW_ACKED);
        batches++;
    }
    ck_assert_uint_eq(batches, RELAY_SLOTS - 1);
    return fake_finalize(arg, b, lost, err, errlen);
}

START_TEST(test_lean_chain_fills_every_slot)
{
    run_lean_cycle(fake_claim_more_each, fake_finalize_long_chain);
    ck_assert_int_eq(fake.claims, RELAY_SLOTS);
    ck_assert_int_eq(fake.finalized, 1);
    ck_assert_uint_eq(fake.npublished, RELAY_SLOTS);
    for (size_t i = 1; i < fake.npublished; i++)
        ck_assert_uint_eq(fake.published[i], 100 + i);
    ck_assert_uint_eq(relay.last.rows, RELAY_SLOTS);
    told_pending = 0;
}
END_TEST

/* A claim made ahead shares the session with a publish: never lean;
 * nor is a batch claimed ahead of a lean one. */
START_TEST(test_claim_ahead_never_lean)
{
    relay.claim_ahead = true;
    ob.batch_size = 2;
    add_row(1, "e1", "A");
    add_row(2, "e2", "B");
    ck_assert_int_eq(relay_cycle(&relay), RELAY_FULL);
    ck_assert_int_eq(fake.claims, 2);
    ck_assert(fake.lean_allowed[0]);
    ck_assert(!fake.lean_allowed[1]);
    relay_flush(&relay);
    fake.lean = true;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_FULL);
    ck_assert_int_eq(fake.claims, 3); /* lean: nothing claimed ahead */
    ck_assert(relay.last.lean);
}
END_TEST

/* A lean batch whose record failed was rolled back with its transaction:
 * nothing is kept to record later, even where a leased one would be. */
START_TEST(test_lean_failed_record_not_kept)
{
    fake.lean = true;
    relay.backend.record_later = fake_record_later;
    add_row(1, "e1", "A");
    fake.finalize_rc = -1;
    fake.refused = true;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_STORE_DOWN);
    ck_assert_ptr_null(relay.unrecorded[0]);
    ck_assert_ptr_null(relay.unrecorded[1]);
    fake.finalize_rc = 0;
    fake.refused = false;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_PARTIAL);
    ck_assert_int_eq(fake.claims, 2);
    ck_assert(relay.last.lean && relay.last.clean);
}
END_TEST

/* Any other failure to record: the rows come back after their lease. */
START_TEST(test_failed_record_not_kept)
{
    relay.backend.record_later = fake_record_later;
    add_row(1, "e1", "A");
    fake.finalize_rc = -1;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_STORE_DOWN);
    fake.finalize_rc = 0;
    fake.nrows = 0;
    ck_assert_int_eq(relay_cycle(&relay), RELAY_IDLE);
    ck_assert_int_eq(fake.finalized, 1);
    ck_assert_uint_eq(relay.stats.published, 0);
}
END_TEST

Suite *
relay_suite(void)
{
    Suite *s = suite_create("relay");
    TCase *tc = tcase_create("cycle");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_all_acked);
    tcase_add_test(tc, test_lean_publishes_one_wave);
    tcase_add_test(tc, test_claim_ahead_never_lean);
    tcase_add_test(tc, test_lean_failed_record_not_kept);
    tcase_add_test(tc, test_lean_extended_by_told_commits);
    tcase_add_test(tc, test_lean_chain_fills_every_slot);
    tcase_add_test(tc, test_lean_linger_waits_for_a_commit);
    tcase_add_test(tc, test_lean_no_linger_no_wait);
    tcase_add_test(tc, test_waves_per_aggregate);
    tcase_add_test(tc, test_failure_releases_successors);
    tcase_add_test(tc, test_ordering_none_one_wave);
    tcase_add_test(tc, test_dead_past_max_retries);
    tcase_add_test(tc, test_bad_event_ids_dead);
    tcase_add_test(tc, test_expired_at_claim_does_not_block);
    tcase_add_test(tc, test_expiry_due_at_publish);
    tcase_add_test(tc, test_expiration_key_off);
    tcase_add_test(tc, test_broker_lost_mid_batch);
    tcase_add_test(tc, test_store_failures);
    tcase_add_test(tc, test_claim_ahead_fails);
    tcase_add_test(tc, test_full_and_idle);
    tcase_add_test(tc, test_stop_deadline_releases);
    tcase_add_test(tc, test_lease_bounds_publishing);
    tcase_add_test(tc, test_routing_key_override_and_too_long);
    tcase_add_test(tc, test_marks_before_next_wave);
    tcase_add_test(tc, test_lost_lease_mid_batch);
    tcase_add_test(tc, test_blocked_waits_before_wave);
    tcase_add_test(tc, test_blocked_past_lease_releases);
    tcase_add_test(tc, test_blocked_stop_request);
    tcase_add_test(tc, test_blocked_connection_lost);
    tcase_add_test(tc, test_released_in_flight_not_counted);
    tcase_add_test(tc, test_duplicate_of_earlier_row_dead);
    tcase_add_test(tc, test_claims_ahead_while_publishing);
    tcase_add_test(tc, test_broker_lost_gives_back_claimed_ahead);
    tcase_add_test(tc, test_flush_gives_back_claimed_ahead);
    tcase_add_test(tc, test_claims_ahead_on_one_helper_thread);
    tcase_add_test(tc, test_reclaimed_row_published_alone);
    tcase_add_test(tc, test_store_lost_in_job);
    tcase_add_test(tc, test_wait_counted_by_server);
    tcase_add_test(tc, test_overlapped_claim_not_waited_for);
    tcase_add_test(tc, test_wait_in_progress_counted);
    tcase_add_test(tc, test_refused_record_kept_for_next_session);
    tcase_add_test(tc, test_failed_record_not_kept);
    suite_add_tcase(s, tc);
    return s;
}
