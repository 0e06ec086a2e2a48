/*
 * it_delay: available_at end to end with a real consumer: a delayed
 * event arrives no earlier than its available_at by the database's
 * clock, and soon after it with no commit to wake the relay; the later
 * events of its aggregate after it, other aggregates at once; the seed's
 * DDL, without the column, relays as before.
 */
#define _GNU_SOURCE
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

Suite *it_delay_suite(void);

/* One event as the consumer saw it. */
struct arrival {
    char event_id[32];
    long long outbox_id;
    int64_t at_us; /* on the database's clock, at the latest */
};

static int64_t
wall_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/*
 * How far the database's clock is ahead of ours, at most: NOW(6) read
 * between two readings of ours.  An arrival stamped on our clock plus
 * this is no earlier, on the database's, than the moment it happened.
 */
static int64_t
db_clock_ahead_us(MYSQL *sql)
{
    int64_t before = wall_now_us();
    char *now = it_db_str(sql, "SELECT UNIX_TIMESTAMP(NOW(6)) * 1000000");
    int64_t db = strtoll(now, NULL, 10);
    free(now);
    return db - before;
}

/* Receives n messages, stamping each as it comes. */
static void
receive(struct it_fx *f, struct arrival *got, int n, int timeout_ms)
{
    int64_t ahead = db_clock_ahead_us(f->sql);
    uint64_t deadline = it_now_ms() + (uint64_t)timeout_ms;
    for (int i = 0; i < n;) {
        struct it_message m;
        ck_assert_msg(it_now_ms() < deadline, "%d of %d events arrived", i, n);
        if (it_consumer_next(f->consumer, &m, 500) == 0)
            continue;
        got[i].at_us = wall_now_us() + ahead;
        snprintf(got[i].event_id, sizeof(got[i].event_id), "%s", m.message_id);
        got[i].outbox_id = m.h_outbox_id;
        it_message_free(&m);
        i++;
    }
}

static const struct arrival *
find(const struct arrival *got, int n, const char *event_id)
{
    for (int i = 0; i < n; i++)
        if (strcmp(got[i].event_id, event_id) == 0)
            return &got[i];
    ck_abort_msg("event %s never arrived", event_id);
    return NULL;
}

/* available_at of the event, on the database's clock, in microseconds. */
static int64_t
available_us(struct it_fx *f, const char *event_id)
{
    char *v = it_db_str(f->sql,
                        "SELECT UNIX_TIMESTAMP(available_at) * 1000000 FROM "
                        "outbox_event WHERE event_id = '%s'",
                        event_id);
    ck_assert_ptr_nonnull(v);
    int64_t us = strtoll(v, NULL, 10);
    free(v);
    return us;
}

static void
insert(struct it_fx *f, const char *event_id, const char *aggregate,
       const char *available_at)
{
    it_db_exec(f->sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, available_at) VALUES "
               "('%s', 'Payment', '%s', 'PaymentDue', '{}', %s)",
               event_id, aggregate, available_at);
}

/*
 * poll_interval is a minute: only the probe's look at the next
 * available_at can bring the delayed events out within seconds.
 */
static void
open_delay(struct it_fx *f, const char *ordering)
{
    it_fx_open(f, "it_delay", "sql/outbox.sql");
    f->consumer = it_consumer_new(f->ex, "#");
    char keys[128];
    snprintf(keys, sizeof(keys),
             "        ordering: %s\n        poll_interval: 60s\n", ordering);
    it_fx_write_config(f, keys);
}

/* The relay is idle, well into its backoff, before anything is due. */
static void
start_idle(struct it_fx *f)
{
    it_fx_start(f);
    struct it_message m;
    ck_assert_int_eq(it_consumer_next(f->consumer, &m, 1500), 0);
}

/*
 * docs/contract.md section 5: A's reminder waits until its available_at
 * and A's next event behind it; B, undelayed, goes at once; C's delayed
 * event alone goes at its own time.
 */
START_TEST(test_delay_end_to_end)
{
    struct it_fx f;
    open_delay(&f, "aggregate");
    start_idle(&f);
    insert(&f, "a-reminder", "A", "NOW(6) + INTERVAL 3 SECOND");
    insert(&f, "a-next", "A", "NULL");
    insert(&f, "c-later", "C", "NOW(6) + INTERVAL 2 SECOND");
    insert(&f, "b-now", "B", "NULL");
    it_db_exec(f.sql, "COMMIT");
    struct arrival got[4];
    receive(&f, got, 4, 20000);
    const struct arrival *rem = find(got, 4, "a-reminder");
    const struct arrival *next = find(got, 4, "a-next");
    const struct arrival *now = find(got, 4, "b-now");
    const struct arrival *later = find(got, 4, "c-later");
    int64_t rem_at = available_us(&f, "a-reminder");
    int64_t later_at = available_us(&f, "c-later");
    ck_assert_msg(rem->at_us >= rem_at, "a-reminder %lld us early",
                  (long long)(rem_at - rem->at_us));
    ck_assert_msg(later->at_us >= later_at, "c-later %lld us early",
                  (long long)(later_at - later->at_us));
    ck_assert_msg(now->at_us < later_at, "b-now waited for the delays");
    ck_assert(next > rem);
    ck_assert_int_lt(rem->outbox_id, next->outbox_id);
    /* Woken for it, where the poll's doubling wait would be seconds
     * late by then (and its ceiling a minute). */
    ck_assert_msg(rem->at_us - rem_at < 2500000, "a-reminder %lld ms late",
                  (long long)((rem->at_us - rem_at) / 1000));
    ck_assert(IT_WAIT(10000, it_db_count_status(f.sql, "SENT") == 4));
    it_fx_close(&f);
}
END_TEST

/* With ordering: none a delayed event delays nothing but itself. */
START_TEST(test_delay_ordering_none)
{
    struct it_fx f;
    open_delay(&f, "none");
    start_idle(&f);
    insert(&f, "a-reminder", "A", "NOW(6) + INTERVAL 2 SECOND");
    insert(&f, "a-next", "A", "NULL");
    it_db_exec(f.sql, "COMMIT");
    struct arrival got[2];
    receive(&f, got, 2, 20000);
    ck_assert_str_eq(got[0].event_id, "a-next");
    ck_assert_str_eq(got[1].event_id, "a-reminder");
    ck_assert(got[1].at_us >= available_us(&f, "a-reminder"));
    it_fx_close(&f);
}
END_TEST

/* The seed's table has no available_at: every event goes, as before. */
START_TEST(test_delay_seed_unchanged)
{
    struct it_fx f;
    it_fx_open(&f, "it_delay", "tests/data/seed_outbox.sql");
    f.consumer = it_consumer_new(f.ex, "#");
    it_fx_write_config(&f, NULL);
    it_db_insert_events(f.sql, "outbox_event", "seed", 50, 5, 64);
    it_fx_start(&f);
    struct arrival got[50];
    receive(&f, got, 50, 20000);
    ck_assert(IT_WAIT(10000, it_db_count_status(f.sql, "SENT") == 50));
    ck_assert(!it_file_has(f.d.log_path, "available_at"));
    it_fx_close(&f);
}
END_TEST

/* outboxd_oldest_pending_age_seconds of the fixture's outbox; -1: none. */
static double
oldest_age(struct it_fx *f, unsigned port)
{
    char *body = NULL, series[192];
    if (it_http_get(port, "/metrics", &body) != 200) {
        free(body);
        return -1;
    }
    snprintf(series, sizeof(series),
             "outboxd_oldest_pending_age_seconds{outbox=\"%s.outbox_event\"} ",
             f->db);
    const char *at = strstr(body, series);
    double v = at ? strtod(at + strlen(series), NULL) : -1;
    free(body);
    return v;
}

/* outboxctl status --json: oldest_pending_age_seconds ("null" with
 * nothing claimable pending), or "none" without the key. */
static char *
ctl_status_age(struct it_fx *f)
{
    static char age[32];
    struct it_ctl_run r = it_ctl(f->conf, "--json status");
    ck_assert_msg(r.rc == 0, "%s", r.err);
    const char *key = "\"oldest_pending_age_seconds\":";
    const char *at = strstr(r.out, key);
    snprintf(age, sizeof(age), "%.20s", at ? at + strlen(key) : "none");
    it_ctl_free(&r);
    return age;
}

/* A RETRY event of aggregate H backing off for an hour, and behind it
 * an event created an hour ago: delayed until available_at, or not. */
static void
insert_held(struct it_fx *f, const char *available_at)
{
    it_db_exec(f->sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, status, retry_count, "
               "next_retry_at) VALUES ('h-retry', 'Payment', 'H', 'T', "
               "'{}', 'RETRY', 1, NOW() + INTERVAL 1 HOUR)");
    it_db_exec(f->sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, status, created_at%s) "
               "VALUES ('h-next', 'Payment', 'H', 'T', '{}', 'PENDING', "
               "NOW() - INTERVAL 1 HOUR%s%s)",
               available_at ? ", available_at" : "", available_at ? ", " : "",
               available_at ? available_at : "");
    it_db_exec(f->sql, "COMMIT");
}

/*
 * The oldest pending age, which the backlog alert reads, counts a
 * delayed event from its available_at: one delayed a day is no backlog,
 * one due for two minutes and held is two minutes behind, however old
 * its created_at.
 */
START_TEST(test_delay_oldest_pending_age)
{
    struct it_fx f;
    open_delay(&f, "aggregate");
    unsigned port = it_fx_listen(&f);
    it_db_exec(f.sql,
               "INSERT INTO outbox_event (event_id, aggregate_type, "
               "aggregate_id, event_type, payload, created_at, available_at) "
               "VALUES ('tomorrow', 'Payment', 'T', 'T', '{}', NOW() - "
               "INTERVAL 1 HOUR, NOW() + INTERVAL 1 DAY)");
    it_db_exec(f.sql, "COMMIT");
    it_fx_start(&f);
    ck_assert(IT_WAIT(15000, oldest_age(&f, port) == 0));
    ck_assert_msg(strncmp(ctl_status_age(&f), "null", 4) == 0,
                  "outboxctl: oldest pending %s", ctl_status_age(&f));
    insert_held(&f, "NOW() - INTERVAL 2 MINUTE");
    ck_assert(IT_WAIT(15000, oldest_age(&f, port) >= 119));
    double age = oldest_age(&f, port);
    ck_assert_msg(age < 600, "oldest pending age %f", age);
    char *ctl_age = ctl_status_age(&f);
    ck_assert_msg(strtod(ctl_age, NULL) >= 119 && strtod(ctl_age, NULL) < 600,
                  "outboxctl: oldest pending %s s", ctl_age);
    it_fx_close(&f);
}
END_TEST

/* The same on the seed's table, without the column: by created_at. */
START_TEST(test_delay_oldest_pending_age_seed)
{
    struct it_fx f;
    it_fx_open(&f, "it_delay", "tests/data/seed_outbox.sql");
    it_fx_write_config(&f, NULL);
    unsigned port = it_fx_listen(&f);
    insert_held(&f, NULL);
    it_fx_start(&f);
    ck_assert(IT_WAIT(15000, oldest_age(&f, port) >= 3599));
    it_fx_close(&f);
}
END_TEST

Suite *
it_delay_suite(void)
{
    Suite *s = suite_create("it_delay");
    TCase *tc = tcase_create("delay");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_delay_end_to_end);
    tcase_add_test(tc, test_delay_ordering_none);
    tcase_add_test(tc, test_delay_seed_unchanged);
    tcase_add_test(tc, test_delay_oldest_pending_age);
    tcase_add_test(tc, test_delay_oldest_pending_age_seed);
    suite_add_tcase(s, tc);
    return s;
}
