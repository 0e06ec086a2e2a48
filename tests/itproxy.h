/*
 * itproxy: a TCP forwarder on a free loopback port for the integration
 * tests, that can move to another server (cutting the old connections or
 * not), stall the binlog dumps it carries, and stall or delay every
 * server's replies.
 */
#ifndef OUTBOXD_ITPROXY_H
#define OUTBOXD_ITPROXY_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

struct it_proxy {
    int fd;
    unsigned port; /* where the relay connects */
    pthread_t thread;
    _Atomic unsigned target, epoch;
    /* cut: connections made before the last move are closed, as a
     * proxy or a moved VIP does; without, they stay with the old server,
     * as after a DNS change. */
    _Atomic bool cut;
    /* A connection whose client asked for the binlog (COM_BINLOG_DUMP)
     * gets nothing more from the server, as a hung dump thread or a
     * half-dead path would do, while every other session goes on. */
    _Atomic bool stall_dump;
    /* Every connection gets nothing more from its server (a broker's
     * confirms held back) until cleared; what the client sends goes on. */
    _Atomic bool stall_replies;
    /* Every server's reply waits this long before it is passed on (a
     * broker's confirm late by that much); 0: at once. */
    _Atomic unsigned delay_replies_ms;
    _Atomic bool stop;
    _Atomic int pumps;
};

/* Listens and forwards new connections to 127.0.0.1:target. */
void it_proxy_start(struct it_proxy *px, unsigned target);
void it_proxy_move(struct it_proxy *px, unsigned target, bool cut);
/* Stops listening and waits until every connection is closed. */
void it_proxy_stop(struct it_proxy *px);

#endif
