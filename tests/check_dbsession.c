/*
 * check_dbsession: which databases one session may serve, which errors
 * end it for every store on it, and how it backs off a server that is
 * down (no server needed).
 */
#include <arpa/inet.h>
#include <check.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "dbsession.h"
#include "util.h"

Suite *dbsession_suite(void);

static struct database_config
tenant(const char *database)
{
    return (struct database_config){.name = "tenants",
                                    .host = "db1",
                                    .port = 3306,
                                    .user = "relay",
                                    .password = "pw",
                                    .database = (char *)database,
                                    .connect_timeout_ms = 5000};
}

/* Another schema on the same server and account shares the session;
 * another server, port, account, password or TLS setting does not. */
START_TEST(test_serves_same_server_only)
{
    struct database_config a = tenant("tenant_0001"), b = tenant("tenant_0002");
    struct dbsession *s = dbsession_new(&a);
    ck_assert(dbsession_serves(s, &a));
    ck_assert(dbsession_serves(s, &b));
    struct database_config c = b;
    c.host = "db2";
    ck_assert(!dbsession_serves(s, &c));
    c = b;
    c.port = 3307;
    ck_assert(!dbsession_serves(s, &c));
    c = b;
    c.user = "other";
    ck_assert(!dbsession_serves(s, &c));
    c = b;
    c.password = "changed";
    ck_assert(!dbsession_serves(s, &c));
    c = b;
    c.tls.enabled = true;
    ck_assert(!dbsession_serves(s, &c));
    c = b;
    c.socket = "/run/mysqld/mysqld.sock";
    ck_assert(!dbsession_serves(s, &c));
    ck_assert(!dbsession_is_open(s));
    ck_assert_uint_eq(dbsession_generation(s), 0);
    ck_assert_uint_eq(dbsession_connection_id(s), 0);
    dbsession_free(s);
}
END_TEST

/* A shared session keeps its own copy of the entry's hosts: an entry
 * listing other nodes, or the same in another order, is another server. */
START_TEST(test_serves_same_hosts_only)
{
    struct database_host nodes[] = {{"db1", 3306}, {"db2", 3306}};
    struct database_host same[] = {{"db1", 3306}, {"db2", 3306}};
    struct database_host swapped[] = {{"db2", 3306}, {"db1", 3306}};
    struct database_config a = tenant("tenant_0001"), b = tenant("tenant_0002");
    a.hosts = nodes;
    b.hosts = same;
    a.nhosts = b.nhosts = 2;
    struct dbsession *s = dbsession_new(&a);
    nodes[1].host = "db9"; /* the entry may go: the session copied it */
    ck_assert(dbsession_serves(s, &b));
    struct database_config c = b;
    c.nhosts = 1;
    ck_assert(!dbsession_serves(s, &c));
    c = b;
    c.hosts = swapped;
    ck_assert(!dbsession_serves(s, &c));
    c = b;
    c.hosts = NULL;
    c.nhosts = 0;
    ck_assert(!dbsession_serves(s, &c));
    dbsession_free(s);
}
END_TEST

/* A private session has its database as the default schema: it serves
 * that database alone. */
START_TEST(test_private_serves_its_own)
{
    struct database_config a = tenant("tenant_0001"), b = tenant("tenant_0002");
    struct dbsession *s = dbsession_new_private(&a, "tenant_0001.outbox");
    ck_assert(dbsession_serves(s, &a));
    ck_assert(!dbsession_serves(s, &b));
    dbsession_free(s);
}
END_TEST

/* What ends the session for all its stores, and what is one table's. */
START_TEST(test_errors_that_end_the_session)
{
    static const unsigned ends[] = {2006, 2013, 2055, 1053, 1927,
                                    4031, 1290, 1836, 1047};
    static const unsigned stays[] = {1054, 1146, 1142, 1143,
                                     1205, 1213, 4025, 1064};
    for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++)
        ck_assert_msg(dbsession_errno_ends_session(ends[i]), "%u", ends[i]);
    for (size_t i = 0; i < sizeof(stays) / sizeof(stays[0]); i++)
        ck_assert_msg(!dbsession_errno_ends_session(stays[i]), "%u", stays[i]);
    ck_assert(dbsession_errno_is_read_only(1290));
    ck_assert(!dbsession_errno_is_read_only(2013));
}
END_TEST

/* A closed session records the failure without a connection to close. */
START_TEST(test_fail_records_class)
{
    struct database_config a = tenant("tenant_0001");
    struct dbsession *s = dbsession_new(&a);
    ck_assert(!dbsession_fail(s, 1054));
    ck_assert_uint_eq(dbsession_last_errno(s), 1054);
    ck_assert(!dbsession_last_error_is_read_only(s));
    ck_assert(dbsession_fail(s, 1836));
    ck_assert(dbsession_last_error_is_read_only(s));
    ck_assert(!dbsession_is_open(s));
    dbsession_free(s);
}
END_TEST

/* A listening socket on a free local port that accepts one connection
 * at a time and closes it at once: a server that cuts the handshake. */
struct cutter {
    int fd;
    int port;
    int accepted;
    pthread_mutex_t lock;
    pthread_t thread;
};

static void *
cutter_run(void *arg)
{
    struct cutter *c = arg;
    for (;;) {
        int conn = accept(c->fd, NULL, NULL);
        if (conn < 0)
            return NULL;
        /* Counted before the close that the client's open returns on. */
        pthread_mutex_lock(&c->lock);
        c->accepted++;
        pthread_mutex_unlock(&c->lock);
        close(conn);
    }
}

static int
cutter_accepted(struct cutter *c)
{
    pthread_mutex_lock(&c->lock);
    int n = c->accepted;
    pthread_mutex_unlock(&c->lock);
    return n;
}

/* A free port, closed again: connections to it are refused. */
static int
free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static void
cutter_start(struct cutter *c, int port)
{
    *c = (struct cutter){.port = port};
    pthread_mutex_init(&c->lock, NULL);
    c->fd = socket(AF_INET, SOCK_STREAM, 0);
    int on = 1;
    setsockopt(c->fd, SOL_SOCKET, SO_REUSEADDR, &on, sizeof(on));
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    ck_assert_int_eq(bind(c->fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(c->fd, 8), 0);
    ck_assert_int_eq(pthread_create(&c->thread, NULL, cutter_run, c), 0);
}

static void
cutter_stop(struct cutter *c)
{
    shutdown(c->fd, SHUT_RDWR);
    pthread_join(c->thread, NULL);
    close(c->fd);
}

/*
 * The session a worker shares among its tenants does not hammer a
 * server that is down: after a failed open, opens within the backoff
 * fail at once with that error and no connection, and the next attempt
 * comes no sooner than half the first step (500 ms, jittered).
 */
START_TEST(test_open_backs_off)
{
    struct database_config a = tenant("tenant_0001");
    a.host = "127.0.0.1";
    a.port = free_port();
    struct dbsession *s = dbsession_new(&a);
    char err[512], again[512];
    uint64_t failed_at = clock_ms();
    ck_assert_int_eq(dbsession_open(s, err, sizeof(err)), -1);
    struct cutter c;
    cutter_start(&c, a.port); /* the port now answers */
    ck_assert_int_eq(dbsession_open(s, again, sizeof(again)), -1);
    ck_assert_str_eq(again, err);
    ck_assert_int_eq(cutter_accepted(&c), 0);
    uint64_t deadline = clock_ms() + 10000;
    while (cutter_accepted(&c) == 0 && clock_ms() < deadline) {
        ck_assert_int_eq(dbsession_open(s, again, sizeof(again)), -1);
        if (cutter_accepted(&c) == 0)
            nanosleep(&(struct timespec){0, 10 * 1000 * 1000}, NULL);
    }
    ck_assert_int_eq(cutter_accepted(&c), 1);
    ck_assert_uint_ge(clock_ms() - failed_at, 250);
    ck_assert_str_ne(again, err); /* the handshake cut, not the refusal */
    ck_assert(!dbsession_is_open(s));
    cutter_stop(&c);
    dbsession_free(s);
}
END_TEST

START_TEST(test_parse_version)
{
    ck_assert_uint_eq(dbsession_parse_version("10.11.6-MariaDB"), 101106);
    ck_assert_uint_ge(dbsession_parse_version("10.6.0"), DBSESSION_MIN_MARIADB);
    ck_assert_uint_lt(dbsession_parse_version("8.0.0"), DBSESSION_MIN_MYSQL);
}
END_TEST

Suite *
dbsession_suite(void)
{
    Suite *s = suite_create("dbsession");
    TCase *tc = tcase_create("dbsession");
    tcase_add_test(tc, test_serves_same_server_only);
    tcase_add_test(tc, test_serves_same_hosts_only);
    tcase_add_test(tc, test_private_serves_its_own);
    tcase_add_test(tc, test_errors_that_end_the_session);
    tcase_add_test(tc, test_fail_records_class);
    tcase_add_test(tc, test_open_backs_off);
    tcase_add_test(tc, test_parse_version);
    suite_add_tcase(s, tc);
    return s;
}
