/*
 * it_bytes: rows of every size through the real servers, byte for byte
 * (4 KiB, 1 MiB, nearly max_allowed_packet, binary), and batch_bytes
 * bounding what one claim takes, seen in the table itself by a trigger.
 */
#define _GNU_SOURCE
#include "itest.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Suite *it_bytes_suite(void);

#define MIB (1024 * 1024)

static void
fx_open(struct it_fx *f, const char *extra_keys)
{
    it_fx_open(f, "it_bytes", "sql/outbox.sql");
    f->consumer = it_consumer_new(f->ex, "#");
    it_fx_write_config(f, extra_keys);
}

/* A JSON payload of exactly len bytes (len >= 16), different per seed. */
static char *
json_payload(size_t len, unsigned seed)
{
    static const char digits[] = "0123456789abcdef";
    char *p = malloc(len + 1);
    int head = snprintf(p, len, "{\"seq\":%u,\"d\":\"", seed);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = (size_t)head; i < len - 2; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = digits[(x >> 16) & 15];
    }
    memcpy(p + len - 2, "\"}", 3);
    return p;
}

/* Every byte value, NULs and invalid UTF-8 included. */
static char *
binary_payload(size_t len)
{
    char *p = malloc(len);
    for (size_t i = 0; i < len; i++)
        p[i] = (char)(i * 7 + i / 256);
    return p;
}

/* One row, the payload escaped into a statement of its own. */
static void
insert_row(struct it_fx *f, const char *event_id, const char *aggregate,
           const char *payload, size_t len)
{
    size_t cap = 2 * len + 512;
    char *sql = malloc(cap);
    int n = snprintf(sql, cap,
                     "INSERT INTO outbox_event (event_id, aggregate_type, "
                     "aggregate_id, event_type, payload) VALUES ('%s', "
                     "'Doc', '%s', 'DocStored', '",
                     event_id, aggregate);
    size_t at = (size_t)n;
    at += mysql_real_escape_string(f->sql, sql + at, payload, len);
    at += (size_t)snprintf(sql + at, cap - at, "')");
    ck_assert_msg(mysql_real_query(f->sql, sql, at) == 0, "insert %s: %s",
                  event_id, mysql_error(f->sql));
    it_db_exec(f->sql, "COMMIT");
    free(sql);
}

static long
event_index(const char *event_id)
{
    const char *dash = event_id ? strrchr(event_id, '-') : NULL;
    return dash ? strtol(dash + 1, NULL, 10) : -1;
}

/*
 * Receives n events "<x>-<i>" and checks each body against want[i], byte
 * for byte, each event once and, per aggregate, ids never going down.
 */
static void
expect_bodies(struct it_fx *f, char **want, const size_t *len, int n,
              int timeout_ms)
{
    int *copies = calloc((size_t)n, sizeof(*copies));
    long long last[64] = {0};
    int got = 0;
    uint64_t deadline = it_now_ms() + (uint64_t)timeout_ms;
    struct it_message m;
    while (got < n && it_now_ms() < deadline) {
        if (it_consumer_next(f->consumer, &m, 500) == 0)
            continue;
        long i = event_index(m.message_id);
        ck_assert_msg(i >= 0 && i < n, "unexpected message %s", m.message_id);
        ck_assert_msg(m.body_len == len[i] &&
                          memcmp(m.body, want[i], len[i]) == 0,
                      "event %ld: body of %zu bytes differs from the row's "
                      "%zu",
                      i, m.body_len, len[i]);
        long agg = event_index(m.h_aggregate_id);
        ck_assert(agg >= 0 && agg < 64);
        ck_assert_msg(m.h_outbox_id >= last[agg],
                      "aggregate %ld went from id %lld to %lld", agg, last[agg],
                      m.h_outbox_id);
        last[agg] = m.h_outbox_id;
        got += copies[i]++ == 0;
        it_message_free(&m);
    }
    if (got < n)
        it_daemon_dump_log(&f->d);
    ck_assert_msg(got == n, "%d of %d events arrived", got, n);
    free(copies);
}

static void
expect_all_sent(struct it_fx *f, int n)
{
    ck_assert(IT_WAIT(20000, it_db_int(f->sql, "SELECT COUNT(*) FROM "
                                               "outbox_event WHERE status = "
                                               "'SENT'") == n));
    ck_assert_int_eq(it_db_int(f->sql, "SELECT COUNT(*) FROM outbox_event "
                                       "WHERE status = 'DEAD'"),
                     0);
}

/*
 * Rows up to the server's max_allowed_packet (16 MiB here, less the
 * statement around the row) and past the broker's frame_max (128 KiB,
 * so in many body frames) arrive as they are in the table.
 */
START_TEST(test_sizes_byte_for_byte)
{
    struct it_fx f;
    fx_open(&f, "        poll_interval: 100ms\n");
    long long max_packet = it_db_int(f.sql, "SELECT @@max_allowed_packet");
    const size_t sizes[] = {4096, 1 * MIB, 3 * MIB + 7,
                            (size_t)max_packet - 64 * 1024};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    char *want[N];
    size_t len[N];
    for (int i = 0; i < N; i++) {
        char id[32], agg[32];
        len[i] = sizes[i];
        want[i] = json_payload(len[i], (unsigned)i + 1);
        snprintf(id, sizeof(id), "doc-%d", i);
        snprintf(agg, sizeof(agg), "a-%d", i % 2);
        insert_row(&f, id, agg, want[i], len[i]);
    }
    it_daemon_start(&f.d, f.conf, f.name);
    expect_bodies(&f, want, len, N, 60000);
    expect_all_sent(&f, N);
    for (int i = 0; i < N; i++)
        free(want[i]);
    it_fx_close(&f);
}
END_TEST

/* A payload that is no text at all: NUL and every other byte value, in
 * a LONGBLOB column (docs/contract.md section 7: the body is the bytes). */
START_TEST(test_binary_payload)
{
    struct it_fx f;
    fx_open(&f, "        poll_interval: 100ms\n");
    it_db_exec(f.sql, "ALTER TABLE outbox_event MODIFY payload LONGBLOB "
                      "NOT NULL");
    const size_t sizes[] = {4096, 300 * 1024 + 3};
    enum { N = sizeof(sizes) / sizeof(sizes[0]) };
    char *want[N];
    size_t len[N];
    for (int i = 0; i < N; i++) {
        len[i] = sizes[i];
        want[i] = binary_payload(len[i]);
        char id[32];
        snprintf(id, sizeof(id), "bin-%d", i);
        insert_row(&f, id, "a-0", want[i], len[i]);
    }
    it_daemon_start(&f.d, f.conf, f.name);
    expect_bodies(&f, want, len, N, 30000);
    expect_all_sent(&f, N);
    for (int i = 0; i < N; i++)
        free(want[i]);
    it_fx_close(&f);
}
END_TEST

/* Each claim's rows, as the claim wrote them: a trigger on the mark. */
static void
log_claims(struct it_fx *f)
{
    it_db_exec(f->sql, "CREATE TABLE claim_log (id BIGINT UNSIGNED, "
                       "token VARCHAR(128), bytes BIGINT)");
    it_db_exec(f->sql,
               "CREATE TRIGGER log_claim AFTER UPDATE ON outbox_event FOR "
               "EACH ROW INSERT INTO claim_log SELECT NEW.id, NEW.locked_by, "
               "LENGTH(NEW.payload) FROM DUAL WHERE NEW.status = "
               "'PROCESSING' AND NOT (NEW.locked_by <=> OLD.locked_by)");
}

/*
 * docs/contract.md section 1.6: with batch_bytes 4MiB, rows of 1,000,000
 * bytes go at most four to a claim, a row larger than the budget goes
 * alone, every event still arrives once and in order per aggregate, and
 * each row is claimed once: those a claim locked past its cut are left
 * as they were.
 */
START_TEST(test_batch_bytes_bounds_each_claim)
{
    struct it_fx f;
    fx_open(&f, "        batch_bytes: 4MiB\n        poll_interval: 100ms\n");
    log_claims(&f);
    enum { N = 24, BIG = 9 };
    char *want[N];
    size_t len[N];
    for (int i = 0; i < N; i++) {
        char id[32], agg[32];
        len[i] = i == BIG ? 6 * MIB : 1000000;
        want[i] = json_payload(len[i], (unsigned)i + 100);
        snprintf(id, sizeof(id), "big-%d", i);
        snprintf(agg, sizeof(agg), "a-%d", i % 3);
        insert_row(&f, id, agg, want[i], len[i]);
    }
    it_daemon_start(&f.d, f.conf, f.name);
    expect_bodies(&f, want, len, N, 60000);
    expect_all_sent(&f, N);
    long long claimed = it_db_int(f.sql, "SELECT COUNT(*) FROM claim_log");
    long long most = it_db_int(f.sql, "SELECT MAX(n) FROM (SELECT COUNT(*) "
                                      "n FROM claim_log GROUP BY token) x");
    long long over =
        it_db_int(f.sql, "SELECT COUNT(*) FROM (SELECT token FROM "
                         "claim_log GROUP BY token HAVING SUM(bytes) > "
                         "4 * 1048576 AND COUNT(*) > 1) x");
    long long big_with = it_db_int(
        f.sql,
        "SELECT COUNT(*) FROM claim_log WHERE token IN (SELECT token FROM "
        "claim_log c JOIN outbox_event e ON e.id = c.id WHERE e.event_id = "
        "'big-%d')",
        BIG);
    long long retried = it_db_int(f.sql, "SELECT SUM(retry_count) FROM "
                                         "outbox_event");
    /* The rows each claim locked past the cut were not marked: a row
     * marked and left out of the batch would be claimed again once its
     * lease ran out, counting a retry. */
    ck_assert_msg(claimed == N && retried == 0,
                  "%lld claims of %d rows, %lld retries", claimed, N, retried);
    ck_assert_msg(most == 4, "the fullest claim held %lld rows, not 4", most);
    ck_assert_msg(over == 0, "%lld claims held more than 4 MiB", over);
    ck_assert_msg(big_with == 1, "the 6 MiB row was claimed with %lld rows",
                  big_with - 1);
    for (int i = 0; i < N; i++)
        free(want[i]);
    it_fx_close(&f);
}
END_TEST

Suite *
it_bytes_suite(void)
{
    Suite *s = suite_create("it_bytes");
    TCase *tc = tcase_create("bytes");
    tcase_set_timeout(tc, 180);
    tcase_add_test(tc, test_sizes_byte_for_byte);
    tcase_add_test(tc, test_binary_payload);
    tcase_add_test(tc, test_batch_bytes_bounds_each_claim);
    suite_add_tcase(s, tc);
    return s;
}
