/*
 * check_http: relay.listen parsing and the errors a bind failure gives
 * (the integration suite it_ops serves real requests).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <check.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "http.h"
#include "util.h"

Suite *http_suite(void);

START_TEST(test_split_listen)
{
    char host[64];
    unsigned port;
    ck_assert_int_eq(http_split_listen("127.0.0.1:9180", host, 64, &port), 0);
    ck_assert_str_eq(host, "127.0.0.1");
    ck_assert_uint_eq(port, 9180);
    ck_assert_int_eq(http_split_listen("[::1]:80", host, 64, &port), 0);
    ck_assert_str_eq(host, "::1");
    ck_assert_uint_eq(port, 80);
    ck_assert_int_eq(http_split_listen(":9180", host, 64, &port), 0);
    ck_assert_str_eq(host, "");
    ck_assert_int_eq(http_split_listen("localhost:65535", host, 64, &port), 0);
    ck_assert_int_eq(http_split_listen("localhost", host, 64, &port), -1);
    ck_assert_int_eq(http_split_listen("h:0", host, 64, &port), -1);
    ck_assert_int_eq(http_split_listen("h:65536", host, 64, &port), -1);
    ck_assert_int_eq(http_split_listen("h:80x", host, 64, &port), -1);
    ck_assert_int_eq(http_split_listen("h:", host, 64, &port), -1);
}
END_TEST

static char *
no_metrics(void *arg, size_t *len)
{
    (void)arg;
    *len = 0;
    return strdup("");
}

static bool
always_ready(void *arg, char *err, size_t errlen)
{
    (void)arg;
    (void)err;
    (void)errlen;
    return true;
}

/* A port somebody else holds is reported with the OS's reason. */
START_TEST(test_port_in_use)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof(a);
    char listen_at[64], err[ERR_LEN];
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    ck_assert_int_eq(listen(fd, 1), 0);
    getsockname(fd, (struct sockaddr *)&a, &len);
    snprintf(listen_at, sizeof(listen_at), "127.0.0.1:%u",
             (unsigned)ntohs(a.sin_port));

    struct event_base *base = event_base_new();
    struct http_handlers h = {no_metrics, always_ready, NULL};
    ck_assert_ptr_null(http_start(base, listen_at, &h, err, sizeof(err)));
    ck_assert_msg(strstr(err, "in use") != NULL, "err: %s", err);
    close(fd);
    /* free again: now it binds */
    struct http_server *s = http_start(base, listen_at, &h, err, sizeof(err));
    ck_assert_msg(s != NULL, "err: %s", err);
    http_free(s);
    /* an address of no interface here (TEST-NET-1), numeric: no DNS */
    ck_assert_ptr_null(
        http_start(base, "192.0.2.1:9180", &h, err, sizeof(err)));
    ck_assert_msg(strstr(err, "no usable address") != NULL, "err: %s", err);
    event_base_free(base);
}
END_TEST

Suite *
http_suite(void)
{
    Suite *s = suite_create("http");
    TCase *tc = tcase_create("http");
    tcase_add_test(tc, test_split_listen);
    tcase_add_test(tc, test_port_in_use);
    suite_add_tcase(s, tc);
    return s;
}
