/*
 * check_log: lines as log.c writes them, from outside text that may be
 * long or not UTF-8 (the cases fuzz_log found): one line, valid JSON in
 * the JSON format, escaped control bytes in logfmt; and outbox_log's,
 * which name their outbox and event as the lines spelled them by hand.
 */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "json.h"
#include "log.h"
#include "outbox_log.h"
#include "util.h"

Suite *log_suite(void);

/* stderr, caught in a memory file while a test logs. */
struct sink {
    int fd, saved;
};

static struct sink
sink_open(enum log_level level, enum log_format format)
{
    struct sink k = {memfd_create("check_log", 0), dup(STDERR_FILENO)};
    ck_assert_int_ge(k.fd, 0);
    log_init(level, format);
    dup2(k.fd, STDERR_FILENO);
    return k;
}

/* What was written since sink_open; stderr and the log as they were. */
static char *
sink_close(struct sink *k)
{
    dup2(k->saved, STDERR_FILENO);
    close(k->saved);
    off_t len = lseek(k->fd, 0, SEEK_END);
    char *out = calloc(1, (size_t)len + 1);
    ck_assert_int_eq(pread(k->fd, out, (size_t)len, 0), len);
    close(k->fd);
    log_init(LOG_INFO, LOG_FORMAT_TEXT);
    return out;
}

/* What one log_warn wrote to stderr. */
static char *
capture(enum log_format format, const char *value, const char *msg)
{
    struct sink k = sink_open(LOG_DEBUG, format);
    log_warn(LOG_KV("outbox", "db.t", "event_id", value), "%s", msg);
    return sink_close(&k);
}

static int
count_cb(void *arg, const char *key, size_t keylen, const struct json_value *v)
{
    (void)key;
    (void)keylen;
    ck_assert_int_eq(v->type, JSON_STRING);
    ++*(int *)arg;
    return 0;
}

/* One JSON object per line, with n members. */
static void
assert_json_line(const char *line, int members)
{
    size_t len = strlen(line);
    ck_assert(len > 0 && line[len - 1] == '\n');
    ck_assert_ptr_eq(memchr(line, '\n', len - 1), NULL);
    char *scratch = malloc(len + 1), err[ERR_LEN];
    int n = 0;
    ck_assert_msg(json_object_foreach(line, len - 1, scratch, count_cb, &n, err,
                                      sizeof(err)) == 0,
                  "%s: %.200s", err, line);
    ck_assert_int_eq(n, members);
    free(scratch);
}

/* fuzz_log: bytes that are not UTF-8 went into the JSON line raw. */
START_TEST(test_json_invalid_utf8)
{
    char *line = capture(LOG_FORMAT_JSON, "e\xf0\x9f\x98x\x80\xc0", "caf\xc3");
    assert_json_line(line, 5);
    /* Each byte that starts no valid sequence becomes one U+FFFD. */
    ck_assert_msg(strstr(line, "\"e\\ufffd\\ufffd\\ufffdx\\ufffd\\ufffd\"") !=
                      NULL,
                  "%s", line);
    free(line);
}
END_TEST

/* A value longer than the line: cut, still closed. */
START_TEST(test_json_long_value)
{
    char *big = malloc(20000);
    for (int i = 0; i < 19999; i++)
        big[i] = i % 7 == 0 ? '\x01' : i % 5 == 0 ? '"' : "\xc3\xa9"[i % 2];
    big[19999] = '\0';
    for (int cut = 0; cut < 64; cut++) {
        char *line = capture(LOG_FORMAT_JSON, big + cut, "message");
        ck_assert_uint_le(strlen(line), 4096);
        size_t len = strlen(line);
        char *scratch = malloc(len + 1), err[ERR_LEN];
        int n = 0;
        ck_assert_msg(json_object_foreach(line, len - 1, scratch, count_cb, &n,
                                          err, sizeof(err)) == 0,
                      "cut %d: %s", cut, err);
        free(scratch);
        free(line);
    }
    free(big);
}
END_TEST

START_TEST(test_text_escapes)
{
    char *line = capture(LOG_FORMAT_TEXT, "a\rb\tc\x01\xff", "two\nlines");
    ck_assert_msg(strstr(line, "msg=\"two\\nlines\"") != NULL, "%s", line);
    ck_assert_msg(strstr(line, "event_id=\"a\\rb\\tc\\x01\\xff\"") != NULL,
                  "%s", line);
    ck_assert_ptr_eq(strchr(line, '\r'), NULL);
    free(line);
}
END_TEST

START_TEST(test_text_long_value)
{
    char *big = malloc(10000);
    memset(big, 'x', 9999);
    big[9999] = '\0';
    big[10] = ' ';
    char *line = capture(LOG_FORMAT_TEXT, big, "m");
    size_t len = strlen(line);
    ck_assert_uint_le(len, 4096);
    ck_assert(line[len - 1] == '\n' && line[len - 2] == '"');
    free(line);
    free(big);
}
END_TEST

/* What one line at level wrote to stderr, with JOURNAL_STREAM naming
 * stderr's file (journal) or another one; plain: through log_plain. */
static char *
capture_stream(enum log_level level, bool journal, const char *plain)
{
    int sink = memfd_create("check_log", 0), saved = dup(STDERR_FILENO);
    struct stat st;
    char js[64];
    ck_assert_int_eq(fstat(sink, &st), 0);
    snprintf(js, sizeof(js), "%llu:%llu", (unsigned long long)st.st_dev,
             (unsigned long long)st.st_ino + (journal ? 0 : 1));
    setenv("JOURNAL_STREAM", js, 1);
    dup2(sink, STDERR_FILENO);
    log_init(LOG_DEBUG, LOG_FORMAT_TEXT);
    if (plain != NULL)
        log_plain(level, "%s", plain);
    else
        log_msg(level, NULL, "hello");
    dup2(saved, STDERR_FILENO);
    close(saved);
    unsetenv("JOURNAL_STREAM");
    log_init(LOG_INFO, LOG_FORMAT_TEXT);
    char *out = calloc(1, 512);
    ck_assert_int_gt(pread(sink, out, 511, 0), 0);
    close(sink);
    return out;
}

static char *
capture_journal(enum log_level level, bool journal)
{
    return capture_stream(level, journal, NULL);
}

/* Under the journal each line leads with its syslog priority. */
START_TEST(test_journal_priority)
{
    static const char *const want[] = {"<3>ts=", "<4>ts=", "<6>ts=", "<7>ts="};
    for (int lv = LOG_ERROR; lv <= LOG_DEBUG; lv++) {
        char *out = capture_journal((enum log_level)lv, true);
        ck_assert_msg(strncmp(out, want[lv], strlen(want[lv])) == 0, "%s", out);
        free(out);
    }
    char *out = capture_journal(LOG_ERROR, false);
    ck_assert_msg(strncmp(out, "ts=", 3) == 0, "%s", out);
    free(out);
}
END_TEST

/* Text that is not a log line (configuration errors, usage): each of its
 * lines leads with the priority too, a last one without '\n' ended. */
START_TEST(test_journal_plain)
{
    char *out = capture_stream(LOG_ERROR, true, "a.yaml:1:1: bad\nusage\nend");
    ck_assert_str_eq(out, "<3>a.yaml:1:1: bad\n<3>usage\n<3>end\n");
    free(out);
    out = capture_stream(LOG_WARN, false, "a.yaml:1:1: bad\n");
    ck_assert_str_eq(out, "a.yaml:1:1: bad\n");
    free(out);
}
END_TEST

/* A line past its timestamp, which two lines never share. */
static const char *
after_ts(const char *line, enum log_format format)
{
    const char *rest =
        strstr(line, format == LOG_FORMAT_JSON ? ",\"level\"" : " level=");
    ck_assert_msg(rest != NULL, "%s", line);
    return rest;
}

static const struct outbox_config test_ob = {.name = "db.t"};

/* The line since sink_open is want, past its timestamp. */
static void
expect_text(struct sink *k, const char *want)
{
    char *line = sink_close(k);
    ck_assert_str_eq(after_ts(line, LOG_FORMAT_TEXT), want);
    free(line);
}

/* The helpers write the outbox's name first, as the lines spelled it. */
START_TEST(test_outbox_log_text)
{
    struct sink k = sink_open(LOG_INFO, LOG_FORMAT_TEXT);
    outbox_log(LOG_WARN, &test_ob, "lost %d", 7);
    expect_text(&k, " level=warn msg=\"lost 7\" outbox=db.t\n");
    k = sink_open(LOG_INFO, LOG_FORMAT_TEXT);
    outbox_log_kv(LOG_INFO, &test_ob, LOG_KV("broker", "main", "x", NULL),
                  "relaying");
    expect_text(&k, " level=info msg=relaying outbox=db.t broker=main\n");
}
END_TEST

/* One event: its ids after the outbox, an id that is NULL left out. */
START_TEST(test_outbox_log_row)
{
    struct outbox_row row = {.event_id = "e 1", .aggregate_id = "a-1"};
    struct sink k = sink_open(LOG_INFO, LOG_FORMAT_TEXT);
    outbox_log_row(LOG_ERROR, &test_ob, &row, LOG_KV("trace_id", "t-1"),
                   "DEAD");
    expect_text(&k, " level=error msg=DEAD outbox=db.t event_id=\"e 1\" "
                    "aggregate_id=a-1 trace_id=t-1\n");
    row.event_id = NULL;
    k = sink_open(LOG_INFO, LOG_FORMAT_TEXT);
    outbox_log_row(LOG_WARN, &test_ob, &row, NULL, "RETRY");
    expect_text(&k, " level=warn msg=RETRY outbox=db.t aggregate_id=a-1\n");
}
END_TEST

/* In either format, byte for byte the line the caller used to spell. */
START_TEST(test_outbox_log_same_as_by_hand)
{
    struct outbox_row row = {.event_id = "e\"1", .aggregate_id = "a=1"};
    for (int f = LOG_FORMAT_TEXT; f <= LOG_FORMAT_JSON; f++) {
        struct sink k = sink_open(LOG_INFO, (enum log_format)f);
        outbox_log_row(LOG_WARN, &test_ob, &row, LOG_KV("trace_id", "t"), "%s",
                       "m");
        char *helper = sink_close(&k);
        k = sink_open(LOG_INFO, (enum log_format)f);
        log_warn(LOG_KV("outbox", "db.t", "event_id", "e\"1", "aggregate_id",
                        "a=1", "trace_id", "t"),
                 "%s", "m");
        char *by_hand = sink_close(&k);
        ck_assert_str_eq(after_ts(helper, (enum log_format)f),
                         after_ts(by_hand, (enum log_format)f));
        free(helper);
        free(by_hand);
    }
}
END_TEST

/* Below the level, nothing: the helpers filter as log_msg does. */
START_TEST(test_outbox_log_level)
{
    struct outbox_row row = {.event_id = "e", .aggregate_id = "a"};
    struct sink k = sink_open(LOG_INFO, LOG_FORMAT_TEXT);
    outbox_log(LOG_DEBUG, &test_ob, "quiet");
    outbox_log_row(LOG_DEBUG, &test_ob, &row, NULL, "quiet");
    char *out = sink_close(&k);
    ck_assert_str_eq(out, "");
    free(out);
}
END_TEST

Suite *
log_suite(void)
{
    Suite *s = suite_create("log");
    TCase *tc = tcase_create("lines");
    tcase_add_test(tc, test_json_invalid_utf8);
    tcase_add_test(tc, test_json_long_value);
    tcase_add_test(tc, test_text_escapes);
    tcase_add_test(tc, test_text_long_value);
    tcase_add_test(tc, test_journal_priority);
    tcase_add_test(tc, test_journal_plain);
    tcase_add_test(tc, test_outbox_log_text);
    tcase_add_test(tc, test_outbox_log_row);
    tcase_add_test(tc, test_outbox_log_same_as_by_hand);
    tcase_add_test(tc, test_outbox_log_level);
    suite_add_tcase(s, tc);
    return s;
}
