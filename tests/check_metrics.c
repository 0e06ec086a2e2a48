/*
 * check_metrics: histogram buckets (inclusive upper bounds, +Inf, sum)
 * and the Prometheus text that /metrics serves, line by line.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "metrics.h"
#include "metrics_int.h"

Suite *metrics_suite(void);

static const uint64_t bounds[] = {1000, 10000, 100000}; /* 1ms 10ms 100ms */

START_TEST(test_histogram_buckets)
{
    struct histogram h;
    histogram_init(&h, bounds, 3);
    histogram_observe_us(&h, 0);
    histogram_observe_us(&h, 1000); /* on the bound: le is inclusive */
    histogram_observe_us(&h, 1001);
    histogram_observe_us(&h, 100000);
    histogram_observe_us(&h, 100001);
    histogram_observe_us(&h, -5000); /* clock skew counts as zero */
    ck_assert_uint_eq(h.counts[0], 3);
    ck_assert_uint_eq(h.counts[1], 1);
    ck_assert_uint_eq(h.counts[2], 1);
    ck_assert_uint_eq(h.counts[3], 1);
    ck_assert_uint_eq(histogram_count(&h), 6);
    ck_assert_uint_eq(h.sum_us, 1000 + 1001 + 100000 + 100001);
}
END_TEST

START_TEST(test_histogram_bound_sets_ascend)
{
    for (size_t i = 1; i < metrics_latency_nbounds; i++)
        ck_assert_uint_gt(metrics_latency_bounds_us[i],
                          metrics_latency_bounds_us[i - 1]);
    for (size_t i = 1; i < metrics_batch_nbounds; i++)
        ck_assert_uint_gt(metrics_batch_bounds_us[i],
                          metrics_batch_bounds_us[i - 1]);
    ck_assert_uint_le(metrics_latency_nbounds, HISTOGRAM_MAX_BOUNDS);
    ck_assert_uint_le(metrics_batch_nbounds, HISTOGRAM_MAX_BOUNDS);
}
END_TEST

static char *text;
static struct histogram lat, dur;

static void
render_two(void)
{
    static struct outbox_metrics obs[2];
    memset(obs, 0, sizeof(obs));
    histogram_init(&lat, bounds, 3);
    histogram_init(&dur, bounds, 3);
    histogram_observe_us(&lat, 1500);
    histogram_observe_us(&lat, 2500000);
    histogram_observe_us(&dur, 900);
    obs[0] = (struct outbox_metrics){
        .outbox = "orders.outbox_event",
        .published = 42,
        .failed = 3,
        .retried = 2,
        .dead = 1,
        .expired = 4,
        .batches = 7,
        .wait_broker_us = 12500000,
        .wait_database_us = 250,
        .db_up = true,
        .broker_up = true,
        .rows_known = true,
        .rows = {[OUTBOX_PENDING] = 5, [OUTBOX_DEAD] = 1},
        .rows_counted = {true, true, false, true, true},
        .oldest_pending_age_s = 1.25,
        .commit_to_confirm = &lat,
        .batch_duration = &dur,
    };
    obs[1] = (struct outbox_metrics){
        .outbox = "we\"ird\\db.t",
        .broker_blocked = true,
        .commit_to_confirm = &dur,
        .batch_duration = &dur,
    };
    static const struct binlog_metrics binlogs[] = {
        {.server = "127.0.0.1:3307", .unreadable = 3}};
    struct daemon_metrics dm = {.version = "9.9.9",
                                .last_reload_ok = false,
                                .reloads_failed = 1,
                                .binlogs = binlogs,
                                .nbinlogs = 1};
    size_t len;
    text = metrics_render(&dm, obs, 2, &len);
    ck_assert_uint_eq(strlen(text), len);
}

static void
has_line(const char *line)
{
    char *want = malloc(strlen(line) + 3);
    sprintf(want, "\n%s\n", line);
    /* The page goes to stderr: too long for Check's message. */
    if (strstr(text, want) == NULL)
        fprintf(stderr, "%s", text);
    ck_assert_msg(strstr(text, want) != NULL, "missing line: %s", line);
    free(want);
}

START_TEST(test_render_counters_and_gauges)
{
    render_two();
    has_line("# TYPE outboxd_events_published_total counter");
    has_line("outboxd_events_published_total{outbox=\"orders.outbox_event\"} "
             "42");
    has_line("outboxd_events_failed_total{outbox=\"orders.outbox_event\"} 3");
    has_line("outboxd_events_retried_total{outbox=\"orders.outbox_event\"} 2");
    has_line("outboxd_events_dead_total{outbox=\"orders.outbox_event\"} 1");
    has_line("outboxd_events_expired_total{outbox=\"orders.outbox_event\"} "
             "4");
    has_line("outboxd_batches_total{outbox=\"orders.outbox_event\"} 7");
    has_line("# TYPE outboxd_wait_seconds_total counter");
    has_line("outboxd_wait_seconds_total{outbox=\"orders.outbox_event\","
             "on=\"broker\"} 12.500000");
    has_line("outboxd_wait_seconds_total{outbox=\"orders.outbox_event\","
             "on=\"database\"} 0.000250");
    has_line("outboxd_wait_seconds_total{outbox=\"we\\\"ird\\\\db.t\","
             "on=\"database\"} 0.000000");
    has_line("# TYPE outboxd_rows gauge");
    has_line("outboxd_rows{outbox=\"orders.outbox_event\",status=\"PENDING\"}"
             " 5");
    has_line("outboxd_rows{outbox=\"orders.outbox_event\",status=\"DEAD\"} 1");
    ck_assert_ptr_null(strstr(text, "status=\"SENT\""));
    has_line("outboxd_oldest_pending_age_seconds{outbox=\"orders.outbox_"
             "event\"} 1.250000");
    has_line("outboxd_database_connected{outbox=\"orders.outbox_event\"} 1");
    has_line("outboxd_broker_connected{outbox=\"we\\\"ird\\\\db.t\"} 0");
    has_line("outboxd_broker_blocked{outbox=\"we\\\"ird\\\\db.t\"} 1");
    has_line("outboxd_build_info{version=\"9.9.9\"} 1");
    has_line("outboxd_config_last_reload_successful 0");
    has_line("outboxd_config_reloads_total{result=\"failure\"} 1");
    has_line("# TYPE outboxd_binlog_unreadable_total counter");
    has_line("outboxd_binlog_unreadable_total{server=\"127.0.0.1:3307\"} 3");
    /* an outbox whose rows were never counted has no rows gauge at all */
    ck_assert_ptr_null(strstr(text, "outboxd_rows{outbox=\"we"));
    free(text);
}
END_TEST

START_TEST(test_render_histogram)
{
    render_two();
    has_line("# TYPE outboxd_commit_to_confirm_seconds histogram");
    has_line("outboxd_commit_to_confirm_seconds_bucket{outbox=\"orders."
             "outbox_event\",le=\"0.001\"} 0");
    has_line("outboxd_commit_to_confirm_seconds_bucket{outbox=\"orders."
             "outbox_event\",le=\"0.01\"} 1");
    has_line("outboxd_commit_to_confirm_seconds_bucket{outbox=\"orders."
             "outbox_event\",le=\"0.1\"} 1");
    has_line("outboxd_commit_to_confirm_seconds_bucket{outbox=\"orders."
             "outbox_event\",le=\"+Inf\"} 2");
    has_line("outboxd_commit_to_confirm_seconds_sum{outbox=\"orders.outbox_"
             "event\"} 2.501500");
    has_line("outboxd_commit_to_confirm_seconds_count{outbox=\"orders."
             "outbox_event\"} 2");
    has_line("outboxd_batch_duration_seconds_bucket{outbox=\"orders.outbox_"
             "event\",le=\"0.001\"} 1");
    free(text);
}
END_TEST

/* Each family's HELP and TYPE come once, before all of its samples. */
START_TEST(test_render_families_grouped)
{
    render_two();
    const char *families[] = {"outboxd_events_published_total", "outboxd_rows",
                              "outboxd_commit_to_confirm_seconds",
                              "outboxd_wait_seconds_total"};
    for (size_t i = 0; i < 4; i++) {
        char type[128];
        snprintf(type, sizeof(type), "# TYPE %s ", families[i]);
        const char *first = strstr(text, type);
        ck_assert_ptr_nonnull(first);
        ck_assert_ptr_null(strstr(first + 1, type));
    }
    ck_assert(text[strlen(text) - 1] == '\n');
    free(text);
}
END_TEST

/* ---- groups: one series per member below the limit, one per group past */

static struct histogram glat[3], gdur[3];
static struct outbox_metrics gobs[4];

/*
 * orders.outbox_event has no group; two members form the group
 * "tenants/" "*", one more "shops/" "*".  Every member's values differ so
 * that each combination shows in the text.
 */
static void
group_fixture(void)
{
    memset(gobs, 0, sizeof(gobs));
    for (int i = 0; i < 3; i++) {
        histogram_init(&glat[i], bounds, 3);
        histogram_init(&gdur[i], bounds, 3);
    }
    histogram_observe_us(&glat[0], 500);    /* le 0.001 */
    histogram_observe_us(&glat[1], 2000);   /* le 0.01 */
    histogram_observe_us(&glat[1], 200000); /* +Inf */
    histogram_observe_us(&glat[2], 900);    /* le 0.001 */
    histogram_observe_us(&gdur[1], 50000);  /* le 0.1 */
    gobs[0] = (struct outbox_metrics){
        .outbox = "orders.outbox_event",
        .published = 1000,
        .db_up = true,
        .broker_up = true,
        .commit_to_confirm = &gdur[0],
        .batch_duration = &gdur[0],
    };
    gobs[1] = (struct outbox_metrics){
        .outbox = "tenant_0001.outbox_event",
        .group = "tenants/*",
        .wait_broker_us = 1500000,
        .db_up = true,
        .broker_up = true,
        .wake_live = true,
        .poll_wait_s = 0.5,
        .rows_known = true,
        .rows = {[OUTBOX_PENDING] = 5, [OUTBOX_DEAD] = 1},
        .rows_counted = {true, true, false, true, true},
        .oldest_pending_age_s = 2.5,
        .holds_known = true,
        .held_aggregates = 2,
        .oldest_hold_s = 30,
        .commit_to_confirm = &glat[0],
        .batch_duration = &gdur[0],
    };
    gobs[2] = (struct outbox_metrics){
        .outbox = "tenant_0002.outbox_event",
        .group = "tenants/*",
        .wait_broker_us = 250000,
        .db_up = false,
        .broker_up = true,
        .broker_blocked = true,
        .poll_wait_s = 2,
        .rows_known = true,
        .rows = {[OUTBOX_PENDING] = 7, [OUTBOX_RETRY] = 3},
        .rows_counted = {true, true, false, true, true},
        .oldest_pending_age_s = 400,
        .holds_known = true,
        .held_aggregates = 1,
        .oldest_hold_s = 1000,
        .commit_to_confirm = &glat[1],
        .batch_duration = &gdur[1],
    };
    gobs[3] = (struct outbox_metrics){
        .outbox = "shop_a.outbox_event",
        .group = "shops/*",
        .db_up = true,
        .broker_up = true,
        .commit_to_confirm = &glat[2],
        .batch_duration = &gdur[2],
    };
    /* Each counter family its own value, member 1 and 2 apart: their sum
     * is 3c+3 for family c, nothing else adds up to it. */
    for (size_t c = 0; c < METRICS_NCOUNTERS; c++) {
        uint64_t a = c + 1, b = 2 * c + 2;
        memcpy((char *)&gobs[1] + metrics_counters[c].off, &a, sizeof(a));
        memcpy((char *)&gobs[2] + metrics_counters[c].off, &b, sizeof(b));
    }
}

static char *
render_groups(unsigned limit, struct metrics_groups *mg, size_t n)
{
    struct daemon_metrics dm = {
        .version = "9.9.9", .outbox_series = limit, .groups = mg};
    size_t len;
    char *t = metrics_render(&dm, gobs, n, &len);
    ck_assert_uint_eq(strlen(t), len);
    return t;
}

/* The name of a sample line: up to its labels or its value. */
static size_t
sample_name_len(const char *line)
{
    return strcspn(line, "{ ");
}

static bool
belongs(const char *line, size_t len, const char *family)
{
    static const char *const suffixes[] = {"", "_bucket", "_sum", "_count"};
    size_t flen = strlen(family);
    if (len < flen || strncmp(line, family, flen) != 0)
        return false;
    for (size_t i = 0; i < 4; i++)
        if (len - flen == strlen(suffixes[i]) &&
            strncmp(line + flen, suffixes[i], len - flen) == 0)
            return true;
    return false;
}

/*
 * What Prometheus requires of the page: HELP and TYPE once per family,
 * each sample under its own family's TYPE, no series twice.
 */
static void
check_exposition(const char *t)
{
    char *copy = strdup(t), *save = NULL;
    char **seen = calloc(strlen(t) / 8 + 1, sizeof(*seen));
    size_t nseen = 0;
    char family[128] = "";
    for (char *line = strtok_r(copy, "\n", &save); line != NULL;
         line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# HELP ", 7) == 0)
            continue;
        char *key = line;
        if (strncmp(line, "# TYPE ", 7) == 0) {
            sscanf(line + 7, "%127s", family);
        } else {
            ck_assert_msg(belongs(line, sample_name_len(line), family),
                          "%s outside its family (in %s)", line, family);
            *strrchr(line, ' ') = '\0'; /* the series, without its value */
        }
        for (size_t i = 0; i < nseen; i++)
            ck_assert_msg(strcmp(seen[i], key) != 0, "twice: %s", key);
        seen[nseen++] = key;
    }
    free(seen);
    free(copy);
}

/* promtool, where installed, has the last word on the format. */
static void
check_promtool(const char *t)
{
    if (system("command -v promtool >/dev/null 2>&1") != 0)
        return;
    char path[] = "/tmp/check_metrics_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs(t, f);
    fclose(f);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s", path);
    int rc = system(cmd);
    unlink(path);
    if (rc != 0)
        fprintf(stderr, "%s", t);
    ck_assert_msg(rc == 0, "promtool check metrics failed (%d)", rc);
}

START_TEST(test_groups_below_limit_each_member_own_series)
{
    group_fixture();
    text = render_groups(3, NULL, 4); /* 3 in groups: not past 3 */
    has_line("outboxd_events_published_total{outbox=\"orders.outbox_event\"} "
             "1000");
    has_line("outboxd_events_published_total{outbox=\"tenant_0001.outbox_"
             "event\"} 1");
    has_line("outboxd_events_published_total{outbox=\"tenant_0002.outbox_"
             "event\"} 2");
    has_line("outboxd_database_connected{outbox=\"tenant_0002.outbox_event\"}"
             " 0");
    has_line("outboxd_outboxes{outbox=\"tenant_0001.outbox_event\"} 1");
    has_line("outboxd_outboxes{outbox=\"orders.outbox_event\"} 1");
    has_line("outboxd_outboxes_running 4");
    ck_assert_ptr_null(strstr(text, "tenants/*"));
    ck_assert_ptr_null(strstr(text, "shops/*"));
    check_exposition(text);
    check_promtool(text);
    free(text);
}
END_TEST

static void
has_group_line(const char *name, const char *labels, const char *value)
{
    char line[256];
    snprintf(line, sizeof(line), "%s{outbox=\"tenants/*\"%s} %s", name, labels,
             value);
    has_line(line);
}

START_TEST(test_groups_past_limit_one_series_per_group)
{
    group_fixture();
    text = render_groups(2, NULL, 4);
    ck_assert_ptr_null(strstr(text, "tenant_0001"));
    ck_assert_ptr_null(strstr(text, "shop_a"));
    has_line("outboxd_outboxes{outbox=\"tenants/*\"} 2");
    has_line("outboxd_outboxes{outbox=\"shops/*\"} 1");
    has_line("outboxd_outboxes{outbox=\"orders.outbox_event\"} 1");
    has_line("outboxd_outboxes_running 4");
    /* the outbox without a group keeps its own numbers */
    has_line("outboxd_events_published_total{outbox=\"orders.outbox_event\"} "
             "1000");
    has_line("outboxd_database_connected{outbox=\"orders.outbox_event\"} 1");
    for (size_t c = 0; c < METRICS_NCOUNTERS; c++) {
        char sum[32];
        snprintf(sum, sizeof(sum), "%zu", 3 * c + 3);
        has_group_line(metrics_counters[c].name, "", sum);
    }
    has_group_line("outboxd_wait_seconds_total", ",on=\"broker\"", "1.750000");
    check_exposition(text);
    check_promtool(text);
    free(text);
}
END_TEST

/* Row counts add up, ages take the oldest member, a link is down when
 * one member's is, blocked when one member's is. */
START_TEST(test_groups_fold_gauges)
{
    group_fixture();
    text = render_groups(0, NULL, 4);
    has_group_line("outboxd_rows", ",status=\"PENDING\"", "12");
    has_group_line("outboxd_rows", ",status=\"RETRY\"", "3");
    has_group_line("outboxd_rows", ",status=\"DEAD\"", "1");
    ck_assert_ptr_null(strstr(text, "status=\"SENT\""));
    has_group_line("outboxd_oldest_pending_age_seconds", "", "400.000000");
    has_group_line("outboxd_held_aggregates", "", "3");
    has_group_line("outboxd_oldest_hold_seconds", "", "1000.000");
    has_group_line("outboxd_database_connected", "", "0");
    has_group_line("outboxd_broker_connected", "", "1");
    has_group_line("outboxd_broker_blocked", "", "1");
    has_group_line("outboxd_wake_source", ",source=\"binlog\"", "1");
    has_group_line("outboxd_wake_source", ",source=\"poll\"", "1");
    has_group_line("outboxd_poll_interval_seconds", "", "2.000");
    /* a group with no member counted yet has no rows gauge, as an outbox */
    ck_assert_ptr_null(strstr(text, "outboxd_rows{outbox=\"shops/*\""));
    has_line("outboxd_database_connected{outbox=\"shops/*\"} 1");
    has_line("outboxd_wake_source{outbox=\"shops/*\",source=\"poll\"} 1");
    free(text);
}
END_TEST

START_TEST(test_groups_fold_histograms)
{
    group_fixture();
    text = render_groups(0, NULL, 4);
    const char *bucket = "outboxd_commit_to_confirm_seconds_bucket";
    has_group_line(bucket, ",le=\"0.001\"", "1");
    has_group_line(bucket, ",le=\"0.01\"", "2");
    has_group_line(bucket, ",le=\"0.1\"", "2");
    has_group_line(bucket, ",le=\"+Inf\"", "3");
    has_group_line("outboxd_commit_to_confirm_seconds_sum", "", "0.202500");
    has_group_line("outboxd_commit_to_confirm_seconds_count", "", "3");
    has_group_line("outboxd_batch_duration_seconds_bucket", ",le=\"0.1\"", "1");
    has_line("outboxd_commit_to_confirm_seconds_count{outbox=\"shops/*\"} 1");
    free(text);
}
END_TEST

/* A member whose buckets differ has each count land in the first of the
 * group's buckets that holds it, never in a lower one. */
START_TEST(test_groups_fold_other_buckets)
{
    static const uint64_t other[] = {5000}; /* 5ms */
    group_fixture();
    histogram_init(&glat[1], other, 1);
    histogram_observe_us(&glat[1], 4000);    /* le 0.005: group's le 0.01 */
    histogram_observe_us(&glat[1], 7000000); /* +Inf */
    text = render_groups(0, NULL, 3);
    const char *bucket = "outboxd_commit_to_confirm_seconds_bucket";
    has_group_line(bucket, ",le=\"0.001\"", "1");
    has_group_line(bucket, ",le=\"0.01\"", "2");
    has_group_line(bucket, ",le=\"0.1\"", "2");
    has_group_line(bucket, ",le=\"+Inf\"", "3");
    free(text);
}
END_TEST

static void
set_published(struct outbox_metrics *m, uint64_t v)
{
    m->published = v;
}

/* A member that leaves (or restarts at 0) must not make the group's
 * counter go down: Prometheus would read a reset and count it all again. */
START_TEST(test_groups_counters_never_go_down)
{
    struct metrics_groups *mg = metrics_groups_new();
    group_fixture();
    set_published(&gobs[1], 10);
    set_published(&gobs[2], 20);
    text = render_groups(0, mg, 3);
    has_group_line("outboxd_events_published_total", "", "30");
    has_group_line("outboxd_commit_to_confirm_seconds_count", "", "3");
    free(text);
    gobs[1] = gobs[2]; /* tenant_0001 left */
    text = render_groups(0, mg, 2);
    has_group_line("outboxd_events_published_total", "", "30");
    has_group_line("outboxd_commit_to_confirm_seconds_count", "", "3");
    has_line("outboxd_outboxes{outbox=\"tenants/*\"} 1");
    free(text);
    set_published(&gobs[1], 25);
    text = render_groups(0, mg, 2);
    has_group_line("outboxd_events_published_total", "", "35");
    check_exposition(text);
    free(text);
    /* below the limit the memory follows too: folded again, no jump */
    free(render_groups(10, mg, 2));
    set_published(&gobs[1], 26);
    text = render_groups(0, mg, 2);
    has_group_line("outboxd_events_published_total", "", "36");
    free(text);
    metrics_groups_free(mg);
}
END_TEST

Suite *
metrics_suite(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("metrics");
    tcase_add_test(tc, test_histogram_buckets);
    tcase_add_test(tc, test_histogram_bound_sets_ascend);
    tcase_add_test(tc, test_render_counters_and_gauges);
    tcase_add_test(tc, test_render_histogram);
    tcase_add_test(tc, test_render_families_grouped);
    tcase_add_test(tc, test_groups_below_limit_each_member_own_series);
    tcase_add_test(tc, test_groups_past_limit_one_series_per_group);
    tcase_add_test(tc, test_groups_fold_gauges);
    tcase_add_test(tc, test_groups_fold_histograms);
    tcase_add_test(tc, test_groups_fold_other_buckets);
    tcase_add_test(tc, test_groups_counters_never_go_down);
    suite_add_tcase(s, tc);
    return s;
}
