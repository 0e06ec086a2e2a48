#!/usr/bin/env bash
# Starts and stops the TLS-only MariaDB and RabbitMQ that tests/it_tls.c
# runs against, beside the shared servers of tests/servers.sh, which it
# never touches.
#
# Usage: bash tests/tls/servers.sh start DIR | stop [DIR] | status
#
#   start DIR  writes a fresh CA and certificates into DIR (certs.sh),
#              then starts, each with its own data under DIR:
#              - mariadbd on 127.0.0.1:3391 (socket DIR/run/mysqld.sock), TLS
#                with DIR/mariadb.pem and require_secure_transport, so only
#                TLS clients (or root on the socket) get in;
#              - a RabbitMQ node outboxd-tls@<short host> whose one
#                listener is amqps on 127.0.0.1:5691, with DIR/rabbit.pem,
#                requiring a client certificate signed by DIR/ca.pem;
#                distribution port 25691, no plugins, user guest/guest.
#              A previous run's servers still up are stopped first.
#   stop       stops both and deletes DIR (default: the last one started)
#   status     says whether each answers; exit 0 only if both do
#
# Needs root, mariadb-server and rabbitmq-server (bash tests/servers.sh
# deps) and openssl. One run at a time: it_tls holds /run/lock/outboxd-tls.lock.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
HOST=$(hostname -s)
NODE=outboxd-tls@$HOST
DB_PORT=3391
AMQPS_PORT=5691
DIST_PORT=25691
STATE=/run/outboxd-tls.dir
TIMEOUT=${OUTBOXD_TLS_TIMEOUT:-180}
RABBIT_BIN=/usr/lib/rabbitmq/bin

export LC_ALL=C.UTF-8

log() { printf 'tls-servers: %s\n' "$*"; }
die() { printf 'tls/servers.sh: %s\n' "$*" >&2; exit 1; }

# shellcheck source=tests/shlib.sh
source "$HERE/../shlib.sh"

# ---------------------------------------------------------------- MariaDB

db_sql() { # DIR SQL
    timeout 10 mariadb --no-defaults -uroot --socket="$1/run/mysqld.sock" \
        --connect-timeout=2 -Nse "$2"
}

db_answers() { db_sql "$1" 'select 1' >/dev/null 2>&1; }

db_start() {
    local dir=$1 data=$1/mariadb
    # The server writes its socket, pid and log as the mysql user.
    install -d -m 750 -o mysql -g mysql "$data"
    install -d -m 755 -o mysql -g mysql "$dir/run"
    mariadb-install-db --no-defaults --user=mysql --datadir="$data" \
        --auth-root-authentication-method=socket --skip-test-db \
        >"$dir/mariadb-install.log" 2>&1 ||
        { tail -n 20 "$dir/mariadb-install.log" >&2; die "mariadb-install-db failed"; }
    setsid env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
        bash -c 'exec /usr/sbin/mariadbd --no-defaults --user=mysql \
            --datadir="$0" --socket="$1/run/mysqld.sock" \
            --pid-file="$1/run/mariadbd.pid" --log-error="$1/run/mariadbd.err" \
            --port='"$DB_PORT"' --bind-address=127.0.0.1 --skip-name-resolve \
            --innodb-buffer-pool-size=32M \
            --ssl-ca="$1/ca.pem" --ssl-cert="$1/mariadb.pem" \
            --ssl-key="$1/mariadb.key" --require-secure-transport=ON' \
        "$data" "$dir" </dev/null >>"$dir/mariadbd.out" 2>&1 9>&- &
    local launcher=$!
    echo $launcher >"$dir/mariadbd.launcher"
    answers_or_gone() { db_answers "$dir" || ! alive "$launcher"; }
    if ! wait_until "$TIMEOUT" answers_or_gone || ! db_answers "$dir"; then
        tail -n 20 "$dir/run/mariadbd.err" >&2 2>/dev/null || true
        die "mariadbd on $DB_PORT did not start (log: $dir/run/mariadbd.err)"
    fi
    log "mariadb: TLS on 127.0.0.1:$DB_PORT ($(db_sql "$dir" 'select @@have_ssl, version()' | tr '\t' ' '))"
}

db_stop() {
    local dir=$1 pid
    pid=$(cat "$dir/mariadbd.launcher" 2>/dev/null) || pid=
    db_sql "$dir" SHUTDOWN >/dev/null 2>&1 || { [[ -z $pid ]] || kill -TERM "$pid" 2>/dev/null; } || true
    wait_until 60 pid_gone "$pid" || kill -KILL "$pid" 2>/dev/null || true
}

# ---------------------------------------------------------------- RabbitMQ

ctl() { timeout 120 rabbitmqctl -q -n "$NODE" "$@"; }

rabbit_start() {
    local dir=$1 r=$1/rabbit
    install -d -m 750 -o rabbitmq -g rabbitmq "$r" "$r/mnesia" "$r/log"
    echo '[].' >"$r/enabled_plugins"
    cat >"$r/rabbitmq.conf" <<CONF
listeners.tcp = none
listeners.ssl.1 = 127.0.0.1:$AMQPS_PORT
ssl_options.cacertfile = $dir/ca.pem
ssl_options.certfile = $dir/rabbit.pem
ssl_options.keyfile = $dir/rabbit.key
ssl_options.verify = verify_peer
ssl_options.fail_if_no_peer_cert = true
CONF
    chown rabbitmq:rabbitmq "$r/enabled_plugins" "$r/rabbitmq.conf"
    local cookie=/var/lib/rabbitmq/.erlang.cookie
    if [[ -e $cookie ]]; then
        chown rabbitmq:rabbitmq "$cookie"
        chmod 0400 "$cookie"
    fi
    # The real script as the rabbitmq user, env -i (see launch() in
    # tests/cluster.sh: the /usr/sbin wrapper run as root drops RABBITMQ_*).
    setsid su rabbitmq -s /bin/sh -c "exec env -i \
        PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/var/lib/rabbitmq \
        RABBITMQ_NODENAME=$NODE \
        RABBITMQ_DIST_PORT=$DIST_PORT \
        RABBITMQ_MNESIA_BASE=$r/mnesia \
        RABBITMQ_LOG_BASE=$r/log \
        RABBITMQ_PID_FILE=$r/pid \
        RABBITMQ_ENABLED_PLUGINS_FILE=$r/enabled_plugins \
        RABBITMQ_CONFIG_FILE=$r/rabbitmq.conf \
        RABBITMQ_ADVANCED_CONFIG_FILE=$r/advanced.config \
        RABBITMQ_CONF_ENV_FILE=$r/rabbitmq-env.conf \
        $RABBIT_BIN/rabbitmq-server" \
        </dev/null >>"$r/log/startup.log" 2>&1 9>&- &
    echo $! >"$dir/rabbit.launcher"
    local launcher=$!
    listener_or_gone() { port_open "$AMQPS_PORT" || ! alive "$launcher"; }
    wait_until "$TIMEOUT" listener_or_gone && port_open "$AMQPS_PORT" || {
        tail -n 30 "$r/log/startup.log" >&2 2>/dev/null || true
        die "$NODE: amqps port $AMQPS_PORT not open within ${TIMEOUT}s (logs in $r/log)"
    }
    ctl await_startup >/dev/null || die "$NODE did not finish booting"
    log "rabbitmq: $NODE, amqps on 127.0.0.1:$AMQPS_PORT (client certificate required)"
}

rabbit_stop() {
    local dir=$1 pid beam
    pid=$(cat "$dir/rabbit.launcher" 2>/dev/null) || pid=
    beam=$(cat "$dir/rabbit/pid" 2>/dev/null) || beam=
    ctl shutdown >/dev/null 2>&1 || true
    for p in $beam $pid; do
        wait_until 30 pid_gone "$p" || kill -KILL "$p" 2>/dev/null || true
    done
}

# ---------------------------------------------------------------- main

cmd_stop() {
    local dir=${1:-$(cat "$STATE" 2>/dev/null || true)}
    [[ -n $dir && -d $dir ]] || { log "nothing to stop"; rm -f "$STATE"; return; }
    rabbit_stop "$dir"
    db_stop "$dir"
    rm -rf "$dir" "$STATE"
    log "stopped, $dir removed"
}

cmd_start() {
    local dir=${1:?usage: servers.sh start DIR}
    ((EUID == 0)) || die "must run as root"
    command -v mariadb-install-db >/dev/null && [[ -x $RABBIT_BIN/rabbitmq-server ]] ||
        die "mariadb-server or rabbitmq-server missing; run 'bash tests/servers.sh deps'"
    [[ ! -e $STATE ]] || cmd_stop
    for p in $DB_PORT $AMQPS_PORT $DIST_PORT; do
        ! port_open "$p" || die "port $p is taken by something else"
    done
    mkdir -p "$dir"
    chmod 755 "$dir"
    echo "$dir" >"$STATE"
    bash "$HERE/certs.sh" "$dir"
    db_start "$dir"
    rabbit_start "$dir"
}

cmd_status() {
    local dir ok=0
    dir=$(cat "$STATE" 2>/dev/null || true)
    if [[ -n $dir ]] && db_answers "$dir"; then log "mariadb: up"; else log "mariadb: down"; ok=1; fi
    if port_open "$AMQPS_PORT" && ctl status >/dev/null 2>&1; then log "rabbitmq: up"; else log "rabbitmq: down"; ok=1; fi
    return $ok
}

case ${1:-} in
start) cmd_start "${2:-}" ;;
stop) cmd_stop "${2:-}" ;;
status) cmd_status ;;
*) echo "usage: $0 start DIR | stop [DIR] | status" >&2; exit 64 ;;
esac
