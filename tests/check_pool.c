/*
 * check_pool: the workers' threads: outboxes are placed on the least
 * loaded one, each thread runs its own loop and hooks, and relay.workers
 * picks a count that fits the machine and the outboxes.
 */
#include <check.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

#include "config.h"
#include "pool.h"
#include "util.h"

Suite *pool_suite(void);

static _Atomic int begins, ends, ran;
static pthread_t ran_on[4];

static void
begin_hook(void)
{
    begins++;
}

static void
end_hook(void)
{
    ends++;
}

START_TEST(test_assign_least_loaded)
{
    struct pool_hooks hooks = {0};
    struct pool *p = pool_new(3, &hooks);
    ck_assert_ptr_nonnull(p);
    struct pool_thread *a = pool_assign(p), *b = pool_assign(p);
    struct pool_thread *c = pool_assign(p);
    ck_assert(a != b && b != c && a != c);
    ck_assert_ptr_eq(pool_assign(p), a); /* all at 1: the first */
    pool_unassign(b);
    ck_assert_ptr_eq(pool_assign(p), b); /* b fell to 0 */
    ck_assert_uint_eq(pool_thread_load(a), 2);
    ck_assert_uint_eq(pool_thread_load(b), 1);
    pool_free(p);
}
END_TEST

struct run_arg {
    int slot;
};

static void
run_cb(evutil_socket_t fd, short what, void *arg)
{
    struct run_arg *ra = arg;
    (void)fd;
    (void)what;
    ran_on[ra->slot] = pthread_self();
    ran++;
}

/* An event placed on a thread's base runs on that thread, each on its
 * own; every thread runs both hooks once; stop ends them all. */
START_TEST(test_threads_run_their_loops)
{
    evthread_use_pthreads();
    struct pool_hooks hooks = {.thread_begin = begin_hook,
                               .thread_end = end_hook};
    begins = ends = ran = 0;
    struct pool *p = pool_new(2, &hooks);
    ck_assert_int_eq(pool_start(p), 0);
    struct run_arg args[2] = {{0}, {1}};
    struct event *ev[2];
    for (int i = 0; i < 2; i++) {
        ev[i] = event_new(pool_thread_base(pool_assign(p)), -1, 0, run_cb,
                          &args[i]);
        event_active(ev[i], 0, 0);
    }
    uint64_t deadline = clock_ms() + 5000;
    while (ran < 2 && clock_ms() < deadline)
        usleep(1000);
    ck_assert_int_eq(ran, 2);
    ck_assert(!pthread_equal(ran_on[0], ran_on[1]));
    ck_assert(!pthread_equal(ran_on[0], pthread_self()));
    pool_stop(p);
    ck_assert_int_eq(begins, 2);
    ck_assert_int_eq(ends, 2);
    for (int i = 0; i < 2; i++)
        event_free(ev[i]);
    pool_free(p);
}
END_TEST

/* A fake shared object: a key's copy, dropped into a counter. */
static int drops;

static bool
int_serves(const void *obj, const void *key)
{
    return *(const int *)obj == *(const int *)key;
}

static void *
int_make(const void *key)
{
    int *obj = xmalloc(sizeof(*obj));
    *obj = *(const int *)key;
    return obj;
}

static void
int_drop(void *obj)
{
    drops++;
    free(obj);
}

static const struct pool_share_kind int_kind = {int_serves, int_make, int_drop,
                                                NULL};

/* Outboxes of one server share one session per thread, never across
 * threads; the last user's leaving closes it. */
START_TEST(test_shares_per_thread_and_key)
{
    struct pool_hooks hooks = {0};
    struct pool *p = pool_new(2, &hooks);
    struct pool_thread *t1 = pool_assign(p), *t2 = pool_assign(p);
    int k1 = 1, k2 = 2;
    drops = 0;
    void *a = pool_thread_share(t1, &int_kind, &k1);
    void *b = pool_thread_share(t1, &int_kind, &k1);
    void *c = pool_thread_share(t1, &int_kind, &k2);
    void *d = pool_thread_share(t2, &int_kind, &k1);
    ck_assert_ptr_eq(a, b);
    ck_assert_ptr_ne(a, c);
    ck_assert_ptr_ne(a, d);
    ck_assert_uint_eq(pool_thread_shared(t1, &int_kind), 2);
    pool_thread_unshare(t1, &int_kind, a);
    ck_assert_int_eq(drops, 0); /* b still uses it */
    pool_thread_unshare(t1, &int_kind, b);
    ck_assert_int_eq(drops, 1);
    ck_assert_uint_eq(pool_thread_shared(t1, &int_kind), 1);
    pool_free(p); /* drops what is left: c and d */
    ck_assert_int_eq(drops, 3);
}
END_TEST

START_TEST(test_workers_fit_machine_and_outboxes)
{
    struct relay_config r = {0};
    ck_assert_uint_eq(config_workers(&r, 1000, 2), 8);
    ck_assert_uint_eq(config_workers(&r, 1000, 0), 4);   /* unknown CPUs */
    ck_assert_uint_eq(config_workers(&r, 1000, 64), 32); /* capped */
    ck_assert_uint_eq(config_workers(&r, 3, 2), 3); /* a thread an outbox */
    ck_assert_uint_eq(config_workers(&r, 0, 2), 1);
    r.workers = 2;
    ck_assert_uint_eq(config_workers(&r, 1000, 64), 2);
    ck_assert_uint_eq(config_workers(&r, 1, 64), 1);
}
END_TEST

Suite *
pool_suite(void)
{
    Suite *s = suite_create("pool");
    TCase *tc = tcase_create("pool");
    tcase_add_test(tc, test_assign_least_loaded);
    tcase_add_test(tc, test_threads_run_their_loops);
    tcase_add_test(tc, test_shares_per_thread_and_key);
    tcase_add_test(tc, test_workers_fit_machine_and_outboxes);
    suite_add_tcase(s, tc);
    return s;
}
