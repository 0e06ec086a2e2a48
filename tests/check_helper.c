/*
 * check_helper: the long-lived job thread: jobs run on it one at a time,
 * helper_wait waits for the one in flight, helper_fini runs a job still
 * queued before it ends the thread, and without a thread jobs run in line.
 */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <unistd.h>

#include "helper.h"
#include "util.h"

Suite *helper_suite(void);

/* A door a thread waits at until the test opens it. */
struct gate {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    bool open;
};

static struct gate begin_gate, job_gate;
static _Atomic int begins, ends, jobs_done;
static pthread_t begun_on, ended_on;
static struct helper helper;

static void
gate_init(struct gate *g, bool open)
{
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->cond, NULL);
    g->open = open;
}

static void
gate_pass(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    while (!g->open)
        pthread_cond_wait(&g->cond, &g->lock);
    pthread_mutex_unlock(&g->lock);
}

static void
gate_open(struct gate *g)
{
    pthread_mutex_lock(&g->lock);
    g->open = true;
    pthread_cond_broadcast(&g->cond);
    pthread_mutex_unlock(&g->lock);
}

static void
gate_destroy(struct gate *g)
{
    pthread_cond_destroy(&g->cond);
    pthread_mutex_destroy(&g->lock);
}

static void
on_begin(void)
{
    begun_on = pthread_self();
    begins++;
    gate_pass(&begin_gate);
}

static void
on_end(void)
{
    ended_on = pthread_self();
    ends++;
}

struct job {
    pthread_t ran_on;
    bool done;
    unsigned work_ms; /* how long the job itself takes */
};

static void
job_fn(void *arg)
{
    struct job *j = arg;
    gate_pass(&job_gate);
    if (j->work_ms > 0)
        usleep(j->work_ms * 1000u);
    j->ran_on = pthread_self();
    j->done = true;
    jobs_done++;
}

static void
setup(void)
{
    begins = ends = jobs_done = 0;
    gate_init(&begin_gate, true);
    gate_init(&job_gate, true);
    helper_init(&helper, on_begin, on_end);
}

static void
teardown(void)
{
    gate_open(&begin_gate);
    gate_open(&job_gate);
    helper_fini(&helper);
    gate_destroy(&begin_gate);
    gate_destroy(&job_gate);
}

/* Every job runs on the same thread, not the caller's; the thread's
 * begin hook runs once, before the first job, and its end hook once,
 * in helper_fini. */
START_TEST(test_jobs_share_one_thread)
{
    struct job j[3] = {{0}};
    for (int i = 0; i < 3; i++) {
        ck_assert(helper_submit(&helper, job_fn, &j[i]));
        helper_wait(&helper);
        ck_assert(j[i].done);
    }
    ck_assert(!pthread_equal(j[0].ran_on, pthread_self()));
    ck_assert(pthread_equal(j[0].ran_on, j[1].ran_on));
    ck_assert(pthread_equal(j[1].ran_on, j[2].ran_on));
    ck_assert_int_eq(begins, 1);
    ck_assert(pthread_equal(begun_on, j[0].ran_on));
    ck_assert_int_eq(ends, 0);
    helper_fini(&helper);
    ck_assert_int_eq(ends, 1);
    ck_assert(pthread_equal(ended_on, j[0].ran_on));
    helper_init(&helper, on_begin, on_end); /* for teardown */
}
END_TEST

/* The caller goes on while the job runs, and helper_wait returns only
 * once it finished. */
START_TEST(test_wait_waits_for_the_job)
{
    struct job j = {.work_ms = 50};
    job_gate.open = false;
    ck_assert(helper_submit(&helper, job_fn, &j)); /* in line: hangs */
    ck_assert_int_eq(jobs_done, 0);
    gate_open(&job_gate);
    helper_wait(&helper);
    ck_assert(j.done);
    helper_wait(&helper); /* nothing in flight: returns at once */
}
END_TEST

static void *
fini_main(void *arg)
{
    helper_fini(arg);
    return NULL;
}

static bool
stop_asked(struct helper *h)
{
    pthread_mutex_lock(&h->lock);
    bool stopping = h->stopping;
    pthread_mutex_unlock(&h->lock);
    return stopping;
}

/* A job submitted but not yet picked up when the stop comes still runs
 * before the thread ends: none is lost. */
START_TEST(test_fini_runs_queued_job)
{
    struct job j = {0};
    begin_gate.open = false; /* the thread holds in its begin hook */
    ck_assert(helper_submit(&helper, job_fn, &j));
    pthread_t closer;
    ck_assert_int_eq(pthread_create(&closer, NULL, fini_main, &helper), 0);
    uint64_t until = clock_ms() + 5000;
    while (!stop_asked(&helper) && clock_ms() < until)
        usleep(1000);
    ck_assert_msg(stop_asked(&helper), "helper_fini never asked to stop");
    ck_assert_int_eq(jobs_done, 0);
    gate_open(&begin_gate);
    pthread_join(closer, NULL);
    ck_assert(j.done);
    ck_assert_int_eq(ends, 1);
    helper_init(&helper, on_begin, on_end); /* for teardown */
}
END_TEST

static int spawn_calls;

static int
spawn_fails(pthread_t *thread, void *(*start)(void *), void *arg)
{
    (void)thread;
    (void)start;
    (void)arg;
    spawn_calls++;
    return -1;
}

/* No thread to be had: the job runs at once on the caller's thread, and
 * the next submit tries to start the thread again. */
START_TEST(test_no_thread_runs_in_line)
{
    int (*spawn)(pthread_t *, void *(*)(void *), void *) = helper.spawn;
    struct job j[2] = {{0}};
    spawn_calls = 0;
    helper.spawn = spawn_fails;
    ck_assert(!helper_submit(&helper, job_fn, &j[0]));
    ck_assert(j[0].done);
    ck_assert(pthread_equal(j[0].ran_on, pthread_self()));
    ck_assert_int_eq(begins, 0);
    helper_wait(&helper);
    ck_assert(!helper_submit(&helper, job_fn, &j[1]));
    ck_assert_int_eq(spawn_calls, 2);
    helper.spawn = spawn;
    ck_assert(helper_submit(&helper, job_fn, &j[1]));
    helper_wait(&helper);
    ck_assert(!pthread_equal(j[1].ran_on, pthread_self()));
}
END_TEST

/* A helper that never ran a job ends without ever starting a thread. */
START_TEST(test_fini_unused)
{
    helper_fini(&helper);
    ck_assert_int_eq(begins, 0);
    ck_assert_int_eq(ends, 0);
    helper_init(&helper, on_begin, on_end); /* for teardown */
}
END_TEST

Suite *
helper_suite(void)
{
    Suite *s = suite_create("helper");
    TCase *tc = tcase_create("thread");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, test_jobs_share_one_thread);
    tcase_add_test(tc, test_wait_waits_for_the_job);
    tcase_add_test(tc, test_fini_runs_queued_job);
    tcase_add_test(tc, test_no_thread_runs_in_line);
    tcase_add_test(tc, test_fini_unused);
    suite_add_tcase(s, tc);
    return s;
}
