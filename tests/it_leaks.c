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
    struct it_fx f;
    it_fx_open(&f, "it_leaks", "sql/outbox.sql");
    f.consumer = it_consumer_new(f.ex, "#");
    it_fx_write_config(&f, "        batch_size: 200\n");
    it_db_insert_events(f.sql, "outbox_event", "leak", N, AGGS, 256);
    /* A row the broker refuses to route and one with bad headers JSON
     * take the error paths too. */
    it_db_exec(f.sql, "INSERT INTO outbox_event (event_id, aggregate_type, "
                      "aggregate_id, event_type, payload, headers) VALUES "
                      "('bad-headers', 'Other', 'x', 'T', '{}', '[1]')");
    it_fx_start(&f);
    receive_all(f.consumer);
    ck_assert(IT_WAIT(60000, it_db_count_status(f.sql, "SENT") == N));
    ck_assert(IT_WAIT(60000, it_db_int(f.sql, "SELECT retry_count FROM "
                                              "outbox_event WHERE event_id = "
                                              "'bad-headers'") > 0));
    /* valgrind's leak check at exit takes a while. */
    bool exited = it_daemon_signal_wait(&f.d, SIGTERM, 120000);
    if (!exited || !WIFEXITED(f.d.status) || WEXITSTATUS(f.d.status) != 0)
        it_daemon_dump_log(&f.d);
    ck_assert_msg(exited, "outboxd did not exit after SIGTERM");
    ck_assert_msg(WIFEXITED(f.d.status), "outboxd died of signal %d",
                  WIFSIGNALED(f.d.status) ? WTERMSIG(f.d.status) : 0);
    ck_assert_msg(WEXITSTATUS(f.d.status) == 0,
                  "outboxd exited %d (99: valgrind found errors or leaks, "
                  "23: LeakSanitizer found leaks)",
                  WEXITSTATUS(f.d.status));
    if (under_valgrind())
        ck_assert_msg(
            it_sh("grep -q 'ERROR SUMMARY: 0 errors' '%s'", f.d.log_path) == 0,
            "no clean valgrind summary in %s", f.d.log_path);
    it_fx_close(&f);
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
