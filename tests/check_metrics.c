/*
 * check_metrics: histogram buckets (inclusive upper bounds, +Inf, sum)
 * and the Prometheus text that /metrics serves, line by line.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"

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
    struct daemon_metrics dm = {
        .version = "9.9.9", .last_reload_ok = false, .reloads_failed = 1};
    size_t len;
    text = metrics_render(&dm, obs, 2, &len);
    ck_assert_uint_eq(strlen(text), len);
}

static void
has_line(const char *line)
{
    char *want = malloc(strlen(line) + 3);
    sprintf(want, "\n%s\n", line);
    ck_assert_msg(strstr(text, want) != NULL, "missing line: %s\n%s", line,
                  text);
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
    suite_add_tcase(s, tc);
    return s;
}
