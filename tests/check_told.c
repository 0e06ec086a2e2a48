/*
 * check_told: the commits told to an outbox, taken once each, and the
 * wait for the next one, woken by it rather than by its deadline; the
 * ids they inserted, taken once each, or lost as a whole.
 */
#include <check.h>
#include <pthread.h>
#include <sched.h>

#include "told.h"
#include "util.h"

Suite *told_suite(void);

static struct told t;

static void
setup(void)
{
    told_init(&t);
}

static void
teardown(void)
{
    told_free(&t);
}

START_TEST(test_take_counts_each_commit_once)
{
    ck_assert(!told_pending(&t));
    told_commit(&t, NULL, 0, false);
    told_commit(&t, NULL, 0, false);
    told_commit(&t, NULL, 0, false);
    ck_assert(told_pending(&t));
    ck_assert_uint_eq(told_take(&t), 3);
    ck_assert(!told_pending(&t));
    ck_assert_uint_eq(told_take(&t), 0);
}
END_TEST

/* The ids of the commits told since the last take, in order; a commit
 * whose ids are unknown, or that would not fit, loses them all until
 * the next take, which starts afresh. */
START_TEST(test_ids_taken_once_or_lost)
{
    struct told_ids ids = {0};
    told_commit(&t, (uint64_t[]){7}, 1, true);
    told_commit(&t, (uint64_t[]){8, 9}, 2, true);
    told_take_ids(&t, &ids);
    ck_assert(!ids.lost);
    ck_assert_uint_eq(ids.n, 3);
    ck_assert_uint_eq(ids.id[0], 7);
    ck_assert_uint_eq(ids.id[2], 9);
    ids = (struct told_ids){0};
    told_take_ids(&t, &ids);
    ck_assert(!ids.lost && ids.n == 0);

    told_commit(&t, (uint64_t[]){10}, 1, true);
    told_commit(&t, NULL, 0, false);
    told_take_ids(&t, &ids);
    ck_assert(ids.lost);

    uint64_t many[TOLD_IDS];
    for (size_t i = 0; i < TOLD_IDS; i++)
        many[i] = i + 1;
    ids = (struct told_ids){0};
    told_commit(&t, many, TOLD_IDS, true);
    told_take_ids(&t, &ids);
    ck_assert(!ids.lost && ids.n == TOLD_IDS);
    told_commit(&t, many, 1, true); /* one past what the taker holds */
    told_take_ids(&t, &ids);
    ck_assert(ids.lost);
}
END_TEST

/* A doubt (a change, a stream restarted) goes with the next take alone,
 * with the ids told beside it, and wakes nobody: no commit is counted. */
START_TEST(test_doubt_taken_once)
{
    struct told_ids ids = {0};
    told_commit(&t, (uint64_t[]){7}, 1, true);
    told_doubt(&t);
    ck_assert_uint_eq(told_take(&t), 1);
    told_take_ids(&t, &ids);
    ck_assert(ids.doubt && !ids.lost);
    ck_assert_uint_eq(ids.n, 1);
    ids = (struct told_ids){0};
    told_take_ids(&t, &ids);
    ck_assert(!ids.doubt);
    told_doubt(&t);
    ck_assert(!told_pending(&t));
    told_take_ids(&t, &ids);
    ck_assert(ids.doubt && ids.n == 0);
}
END_TEST

/* The tail is the last id of the last thing told, when that was a commit
 * of ids known: a doubt or a commit of ids unknown after it hides it,
 * across takes too, and a take with nothing told keeps the one before. */
START_TEST(test_tail_is_the_last_commit_told)
{
    struct told_ids ids = {0};
    told_doubt(&t);
    told_commit(&t, (uint64_t[]){7, 8}, 2, true);
    told_take_ids(&t, &ids);
    ck_assert(ids.tail_known);
    ck_assert_uint_eq(ids.tail, 8);
    told_take_ids(&t, &ids);
    ck_assert(ids.tail_known && ids.tail == 8);

    told_commit(&t, (uint64_t[]){9}, 1, true);
    told_doubt(&t);
    told_take_ids(&t, &ids);
    ck_assert(!ids.tail_known);

    told_commit(&t, (uint64_t[]){10}, 1, true);
    told_commit(&t, NULL, 0, false);
    told_take_ids(&t, &ids);
    ck_assert(!ids.tail_known);

    told_commit(&t, NULL, 0, true); /* inserted, no id named: lost */
    told_take_ids(&t, &ids);
    ck_assert(!ids.tail_known && ids.lost);
}
END_TEST

/* A commit told before the wait is taken at once. */
START_TEST(test_wait_takes_a_pending_commit_at_once)
{
    told_commit(&t, NULL, 0, false);
    uint64_t until = clock_ms() + 10000;
    ck_assert_uint_eq(told_wait(&t, until), 1);
    ck_assert_uint_lt(clock_ms(), until);
}
END_TEST

START_TEST(test_wait_without_commit_ends_at_its_deadline)
{
    uint64_t until = clock_ms() + 30;
    ck_assert_uint_eq(told_wait(&t, until), 0);
    ck_assert_uint_ge(clock_ms(), until);
}
END_TEST

/* Tells one commit once the waiter sleeps. */
static void *
tell_while_waiting(void *arg)
{
    (void)arg;
    uint64_t give_up = clock_ms() + 10000;
    while (!atomic_load(&t.waiting) && clock_ms() < give_up)
        sched_yield();
    told_commit(&t, NULL, 0, false);
    return NULL;
}

/* The commit wakes the wait long before its deadline. */
START_TEST(test_wait_woken_by_a_commit)
{
    pthread_t th;
    pthread_create(&th, NULL, tell_while_waiting, NULL);
    uint64_t until = clock_ms() + 60000;
    ck_assert_uint_eq(told_wait(&t, until), 1);
    ck_assert_uint_lt(clock_ms(), until);
    pthread_join(th, NULL);
}
END_TEST

enum { MANY = 20000 };

static void *
tell_many(void *arg)
{
    (void)arg;
    for (int i = 0; i < MANY; i++)
        told_commit(&t, NULL, 0, false);
    return NULL;
}

/* Commits told as fast as one thread can while another waits and
 * takes: every one counted once, and no wait left to its deadline while
 * commits came (a lost signal would leave one there). */
START_TEST(test_waits_beside_a_stream_of_commits)
{
    pthread_t th;
    pthread_create(&th, NULL, tell_many, NULL);
    uint64_t taken = 0;
    while (taken < MANY) {
        uint64_t n = told_wait(&t, clock_ms() + 60000);
        ck_assert_uint_gt(n, 0);
        taken += n;
    }
    pthread_join(th, NULL);
    ck_assert_uint_eq(taken, MANY);
    ck_assert(!told_pending(&t));
}
END_TEST

Suite *
told_suite(void)
{
    Suite *s = suite_create("told");
    TCase *tc = tcase_create("told");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_take_counts_each_commit_once);
    tcase_add_test(tc, test_ids_taken_once_or_lost);
    tcase_add_test(tc, test_doubt_taken_once);
    tcase_add_test(tc, test_tail_is_the_last_commit_told);
    tcase_add_test(tc, test_wait_takes_a_pending_commit_at_once);
    tcase_add_test(tc, test_wait_without_commit_ends_at_its_deadline);
    tcase_add_test(tc, test_wait_woken_by_a_commit);
    tcase_add_test(tc, test_waits_beside_a_stream_of_commits);
    suite_add_tcase(s, tc);
    return s;
}
