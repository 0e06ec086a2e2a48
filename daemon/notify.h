/*
 * notify: the systemd notification protocol (sd_notify) spoken directly
 * to $NOTIFY_SOCKET, without libsystemd: READY, RELOADING, STOPPING,
 * STATUS and WATCHDOG.
 */
#ifndef OUTBOXD_NOTIFY_H
#define OUTBOXD_NOTIFY_H

#include <stddef.h>
#include <stdint.h>

/*
 * Sends state ("READY=1\nSTATUS=...") as one datagram.  0 when sent or
 * when there is no $NOTIFY_SOCKET (not under systemd), -1 with err filled
 * when the socket is set but the send failed.
 */
int notify_send(const char *state, char *err, size_t errlen);

/*
 * The watchdog interval systemd expects pings within, in microseconds,
 * from $WATCHDOG_USEC; 0 when there is none or it is meant for another
 * process ($WATCHDOG_PID).
 */
uint64_t notify_watchdog_usec(void);

#endif
