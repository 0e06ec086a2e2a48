/*
 * it_retention: the daemon's retention timer against the real MariaDB:
 * exactly the SENT rows past retention.sent go, in batches of
 * retention.batch, while DEAD, unfinished and younger rows stay.
 */
#define _GNU_SOURCE
#include "itest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

Suite *it_retention_suite(void);

static void
fx_open(struct it_fx *f, const char *retention)
{
    char keys[256];
    it_fx_open(f, "it_ret", "sql/outbox.sql");
    f->consumer = it_consumer_new(f->ex, "#");
    snprintf(keys, sizeof(keys), "        retention: %s\n", retention);
    it_fx_write_config(f, keys);
}

/* Rows of one INSERT, each its own aggregate. */
struct rows {
    char *sql;
    size_t len, cap;
    int n;
};

static void
add_row(struct rows *r, const char *id, const char *status, const char *created,
        const char *sent)
{
    r->len += (size_t)snprintf(
        r->sql + r->len, r->cap - r->len,
        "%s('%s','Order','%s','OrderCreated','{}','%s',NOW(6) - INTERVAL %s,"
        "%s)",
        r->n++ ? "," : "", id, id, status, created, sent);
}

/*
 * Ids in this order: 1,030 rows two hours old, of which 1,000 SENT then,
 * 20 DEAD and 10 sent only ten minutes ago (retried late), mixed; then
 * 50 SENT five minutes ago, 20 PENDING and 5 DEAD, all recent.
 */
static void
insert_rows(struct it_fx *f)
{
    struct rows r = {.cap = 400000};
    char id[32];
    r.sql = malloc(r.cap);
    r.len = (size_t)snprintf(r.sql, r.cap,
                             "INSERT INTO outbox_event (event_id, "
                             "aggregate_type, aggregate_id, event_type, "
                             "payload, status, created_at, sent_at) VALUES ");
    for (int i = 0; i < 1030; i++) {
        bool dead = i % 50 == 49, late = !dead && i % 100 == 24 && i < 1000;
        snprintf(id, sizeof(id), "%s-%d",
                 dead   ? "dead"
                 : late ? "late"
                        : "old",
                 i);
        add_row(&r, id, dead ? "DEAD" : "SENT", "7201 SECOND",
                dead   ? "NULL"
                : late ? "NOW(6) - INTERVAL 10 MINUTE"
                       : "NOW(6) - INTERVAL 7200 SECOND");
    }
    for (int i = 0; i < 75; i++) {
        snprintf(id, sizeof(id), "%s-%d",
                 i < 50   ? "new"
                 : i < 70 ? "pend"
                          : "deadnew",
                 i);
        add_row(&r, id,
                i < 50   ? "SENT"
                : i < 70 ? "PENDING"
                         : "DEAD",
                "5 MINUTE", i < 50 ? "NOW(6) - INTERVAL 5 MINUTE" : "NULL");
    }
    it_db_exec(f->sql, "%s", r.sql);
    it_db_exec(f->sql, "COMMIT");
    free(r.sql);
}

static long long
count_like(struct it_fx *f, const char *pattern, const char *status)
{
    long long n = it_db_int(f->sql,
                            "SELECT COUNT(*) FROM outbox_event WHERE "
                            "event_id LIKE '%s' AND status = '%s'",
                            pattern, status);
    it_db_exec(f->sql, "COMMIT");
    return n;
}

/* Sums deleted= and batches= over the daemon's retention log lines. */
static int
sum_log(const struct it_daemon *d, long long *deleted, long long *batches)
{
    FILE *fp = fopen(d->log_path, "r");
    ck_assert_ptr_nonnull(fp);
    char line[4096];
    int runs = 0;
    *deleted = *batches = 0;
    while (fgets(line, sizeof(line), fp) != NULL) {
        if (strstr(line, "retention deleted SENT rows") == NULL)
            continue;
        const char *del = strstr(line, " deleted="),
                   *bat = strstr(line, " batches=");
        ck_assert_msg(del && bat, "log line without counts: %s", line);
        *deleted += atoll(del + strlen(" deleted="));
        *batches += atoll(bat + strlen(" batches="));
        runs++;
    }
    fclose(fp);
    return runs;
}

START_TEST(test_retention_deletes_old_sent_only)
{
    struct it_fx f;
    fx_open(&f, "{ sent: 1h, interval: 1s, batch: 100 }");
    insert_rows(&f);
    ck_assert_int_eq(count_like(&f, "old-%", "SENT"), 1000);
    uint64_t t0 = it_now_ms();
    it_daemon_start(&f.d, f.conf, f.name);
    ck_assert(IT_WAIT(20000, count_like(&f, "old-%", "SENT") == 0));
    fprintf(stderr, "retention: 1000 old SENT rows gone after %llu ms\n",
            (unsigned long long)(it_now_ms() - t0));
    /* The relay keeps working beside it: the PENDING rows are sent. */
    ck_assert(IT_WAIT(20000, count_like(&f, "pend-%", "SENT") == 20));
    /* Two more runs find nothing: the rest stays. */
    it_sleep_ms(2500);
    ck_assert_int_eq(count_like(&f, "dead-%", "DEAD"), 20);
    ck_assert_int_eq(count_like(&f, "deadnew-%", "DEAD"), 5);
    ck_assert_int_eq(count_like(&f, "late-%", "SENT"), 10);
    ck_assert_int_eq(count_like(&f, "new-%", "SENT"), 50);
    ck_assert_int_eq(it_db_int(f.sql, "SELECT COUNT(*) FROM outbox_event"),
                     105);
    long long deleted, batches;
    int runs = sum_log(&f.d, &deleted, &batches);
    fprintf(stderr, "retention: %lld rows in %lld batches over %d run(s)\n",
            deleted, batches, runs);
    if (deleted != 1000 || batches < 10)
        it_daemon_dump_log(&f.d);
    ck_assert_int_eq(deleted, 1000);
    /* batch: 100, so at least ten DELETE statements. */
    ck_assert_int_ge(batches, 10);
    /* Exit 0, also under OUTBOXD_WRAPPER=valgrind --error-exitcode. */
    ck_assert(it_daemon_signal_wait(&f.d, SIGTERM, 20000));
    ck_assert(WIFEXITED(f.d.status) && WEXITSTATUS(f.d.status) == 0);
    it_fx_close(&f);
}
END_TEST

START_TEST(test_retention_zero_keeps_everything)
{
    struct it_fx f;
    fx_open(&f, "{ sent: 0s, interval: 1s, batch: 100 }");
    insert_rows(&f);
    it_daemon_start(&f.d, f.conf, f.name);
    ck_assert(IT_WAIT(20000, count_like(&f, "pend-%", "SENT") == 20));
    it_sleep_ms(2500);
    ck_assert_int_eq(count_like(&f, "old-%", "SENT"), 1000);
    ck_assert_int_eq(it_db_int(f.sql, "SELECT COUNT(*) FROM outbox_event"),
                     1105);
    long long deleted, batches;
    ck_assert_int_eq(sum_log(&f.d, &deleted, &batches), 0);
    it_fx_close(&f);
}
END_TEST

Suite *
it_retention_suite(void)
{
    Suite *s = suite_create("it_retention");
    TCase *tc = tcase_create("retention");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_retention_deletes_old_sent_only);
    tcase_add_test(tc, test_retention_zero_keeps_everything);
    suite_add_tcase(s, tc);
    return s;
}
