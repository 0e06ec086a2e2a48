#!/bin/bash
# The container's HEALTHCHECK: exit 0 when outboxd's /healthz answers 200
# on 127.0.0.1:$OUTBOXD_HEALTH_PORT (default 9180).  Plain bash and its
# /dev/tcp, so that the slim image needs no curl.
set -u
port=${OUTBOXD_HEALTH_PORT:-9180}
exec 3<>"/dev/tcp/127.0.0.1/$port" || exit 1
printf 'GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' >&3
read -r -t 3 _ code _ <&3 || exit 1
[[ $code == 200 ]]
