/*
 * check_notify: sd_notify without libsystemd, against a socket this test
 * binds the way systemd does: a path, an @abstract name, none at all.
 */
#define _GNU_SOURCE
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "notify.h"
#include "util.h"

Suite *notify_suite(void);

/* Binds a datagram socket at name ("@..." for an abstract one). */
static int
listen_at(const char *name)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    int fd = socket(AF_UNIX, SOCK_DGRAM, 0);
    ck_assert_int_ge(fd, 0);
    memcpy(a.sun_path, name, n);
    if (name[0] == '@')
        a.sun_path[0] = '\0';
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, len), 0);
    struct timeval tv = {2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void
expect_datagram(int fd, const char *want)
{
    char buf[512];
    ssize_t n = recv(fd, buf, sizeof(buf) - 1, 0);
    ck_assert_int_gt(n, 0);
    buf[n] = '\0';
    ck_assert_str_eq(buf, want);
}

START_TEST(test_path_socket)
{
    char path[64], err[ERR_LEN];
    snprintf(path, sizeof(path), "/tmp/check_notify_%d.sock", (int)getpid());
    unlink(path);
    int fd = listen_at(path);
    setenv("NOTIFY_SOCKET", path, 1);
    ck_assert_int_eq(notify_send("READY=1\nSTATUS=up", err, sizeof(err)), 0);
    expect_datagram(fd, "READY=1\nSTATUS=up");
    close(fd);
    unlink(path);
    /* the socket is gone: an error for the caller, never a crash */
    ck_assert_int_eq(notify_send("WATCHDOG=1", err, sizeof(err)), -1);
    ck_assert_ptr_nonnull(strstr(err, path));
}
END_TEST

START_TEST(test_abstract_socket)
{
    char name[64], err[ERR_LEN];
    snprintf(name, sizeof(name), "@check_notify_%d", (int)getpid());
    int fd = listen_at(name);
    setenv("NOTIFY_SOCKET", name, 1);
    ck_assert_int_eq(notify_send("STOPPING=1", err, sizeof(err)), 0);
    expect_datagram(fd, "STOPPING=1");
    close(fd);
}
END_TEST

START_TEST(test_no_socket)
{
    char err[ERR_LEN];
    unsetenv("NOTIFY_SOCKET");
    ck_assert_int_eq(notify_send("READY=1", err, sizeof(err)), 0);
    setenv("NOTIFY_SOCKET", "relative/path", 1);
    ck_assert_int_eq(notify_send("READY=1", err, sizeof(err)), -1);
}
END_TEST

START_TEST(test_watchdog_usec)
{
    char pid[32];
    unsetenv("WATCHDOG_PID");
    unsetenv("WATCHDOG_USEC");
    ck_assert_uint_eq(notify_watchdog_usec(), 0);
    setenv("WATCHDOG_USEC", "30000000", 1);
    ck_assert_uint_eq(notify_watchdog_usec(), 30000000);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    setenv("WATCHDOG_PID", pid, 1);
    ck_assert_uint_eq(notify_watchdog_usec(), 30000000);
    /* meant for another process (our parent, say): not ours to ping */
    setenv("WATCHDOG_PID", "1", 1);
    ck_assert_uint_eq(notify_watchdog_usec(), 0);
    unsetenv("WATCHDOG_PID");
    setenv("WATCHDOG_USEC", "30s", 1);
    ck_assert_uint_eq(notify_watchdog_usec(), 0);
    unsetenv("WATCHDOG_USEC");
}
END_TEST

Suite *
notify_suite(void)
{
    Suite *s = suite_create("notify");
    TCase *tc = tcase_create("notify");
    tcase_add_test(tc, test_path_socket);
    tcase_add_test(tc, test_abstract_socket);
    tcase_add_test(tc, test_no_socket);
    tcase_add_test(tc, test_watchdog_usec);
    suite_add_tcase(s, tc);
    return s;
}
