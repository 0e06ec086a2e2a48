/*
 * it_leaks: a small drain end to end, then SIGTERM and exit 0.  Plain, it
 * is one more drain; under `make SANITIZER=address,undefined` LeakSanitizer
 * turns any leak at exit into a non-zero status; under `make valgrind`
 * (OUTBOXD_WRAPPER="valgrind --error-exitcode=99 ...") so does any memory
 * error or definite/indirect leak.  Sized for valgrind's 20-50x slowdown.
 */
#define _GNU_SOURCE
#include "itest.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

Suite *it_leaks_suite(void);

enum { N = 3000, AGGS = 60 };

static bool
under_valgrind(void)
{
    const char *w = getenv("OUTBOXD_WRAPPER");
    return w != NULL && strstr(w, "valgrind") != NULL;
}

/* Every event once, each aggregate's ids never going down. */
static void
receive_all(struct it_consumer *c)
{
    int *copies = calloc(N, sizeof(*copies));
    long long last[AGGS] = {0};
    long distinct = 0;
    uint64_t deadline = it_now_ms() + 300000;
    struct it_message m;
    while (distinct < N && it_now_ms() < deadline) {
        if (it_consumer_next(c, &m, 1000) == 0)
            continue;
        const char *dash = strrchr(m.message_id, '-');
        long i = dash ? strtol(dash + 1, NULL, 10) : -1;
        ck_assert_msg(i >= 0 && i < N, "unexpected %s", m.message_id);
        long agg = i % AGGS;
        ck_assert_msg(m.h_outbox_id >= last[agg], "aggregate %ld went back",
                      agg);
        last[agg] = m.h_outbox_id;
        distinct += copies[i]++ == 0;
        it_message_free(&m);
    }
    ck_assert_int_eq(distinct, N);
    for (long i = 0; i < N; i++)
        ck_assert_msg(copies[i] == 1, "event %ld arrived %d times", i,
                      copies[i]);
    free(copies);
}

START_TEST(test_drain_then_clean_exit)
{
    char name[64], db[96], ex[96], conf[256];
    it_unique_name(name, sizeof(name), "it_leaks");
    snprintf(db, sizeof(db), "outboxd_test_%s", name);
    snprintf(ex, sizeof(ex), "ex_%s", name);
    snprintf(conf, sizeof(conf), "/tmp/%s.yaml", name);
    it_db_create(db, it_src_path("sql/outbox.sql"));
    MYSQL *sql = it_db_connect(db);
    struct it_consumer *c = it_consumer_new(ex, "#");
    it_write_config(conf, name, db, "outbox_event", ex,
                    "        batch_size: 200\n");
    it_db_insert_events(sql, "outbox_event", "leak", N, AGGS, 256);
    /* A row the broker refuses to route and one with bad headers JSON
     * take the error paths too. */
    it_db_exec(sql, "INSERT INTO outbox_event (event_id, aggregate_type, "
                    "aggregate_id, event_type, payload, headers) VALUES "
                    "('bad-headers', 'Other', 'x', 'T', '{}', '[1]')");
    struct it_daemon d;
    it_daemon_start(&d, conf, name);
    receive_all(c);
    ck_assert(IT_WAIT(60000, it_db_count_status(sql, "SENT") == N));
    ck_assert(IT_WAIT(60000, it_db_int(sql, "SELECT retry_count FROM "
                                            "outbox_event WHERE event_id = "
                                            "'bad-headers'") > 0));
    /* valgrind's leak check at exit takes a while. */
    bool exited = it_daemon_signal_wait(&d, SIGTERM, 120000);
    if (!exited || !WIFEXITED(d.status) || WEXITSTATUS(d.status) != 0)
        it_daemon_dump_log(&d);
    ck_assert_msg(exited, "outboxd did not exit after SIGTERM");
    ck_assert_msg(WIFEXITED(d.status), "outboxd died of signal %d",
                  WIFSIGNALED(d.status) ? WTERMSIG(d.status) : 0);
    ck_assert_msg(WEXITSTATUS(d.status) == 0,
                  "outboxd exited %d (99: valgrind found errors or leaks, "
                  "23: LeakSanitizer found leaks)",
                  WEXITSTATUS(d.status));
    if (under_valgrind())
        ck_assert_msg(
            it_sh("grep -q 'ERROR SUMMARY: 0 errors' '%s'", d.log_path) == 0,
            "no clean valgrind summary in %s", d.log_path);
    it_consumer_free(c);
    mysql_close(sql);
    it_db_drop(db);
    unlink(conf);
}
END_TEST

Suite *
it_leaks_suite(void)
{
    Suite *s = suite_create("it_leaks");
    TCase *tc = tcase_create("drain");
    tcase_set_timeout(tc, 900);
    tcase_add_test(tc, test_drain_then_clean_exit);
    suite_add_tcase(s, tc);
    return s;
}
