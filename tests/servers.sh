#!/usr/bin/env bash
# Installs, starts, stops and checks the local MariaDB servers and RabbitMQ
# that the integration tests, CI (.ci/run), `make bench` and `make demo` run
# against.
#
# Usage: bash tests/servers.sh deps|packages|start|stop|status|
#                              restart-mariadb|restart-mariadb-binlog|
#                              restart-rabbitmq
#
#   deps                    apt-get install what is missing (fast no-op
#                           otherwise)
#   packages                print the packages deps installs, one a line
#   start                   start whichever server does not answer, wait until
#                           all three answer, ensure the test accounts; one
#                           "ready" line each
#   stop                    stop all three
#   status                  say whether each answers; exit 0 only if all do
#   restart-mariadb         stop then start the first MariaDB, waiting for
#                           readiness
#   restart-mariadb-binlog  stop then start the binlog MariaDB, waiting for
#                           readiness
#   restart-rabbitmq        stop then start the RabbitMQ node, waiting for
#                           readiness
#
# Two MariaDB servers run side by side:
#   mariadb         the distribution's server (systemd unit or /etc/mysql
#                   config), binary log off: 127.0.0.1:3306,
#                   /run/mysqld/mysqld.sock, /var/lib/mysql. Most tests.
#   mariadb-binlog  binary log on (ROW), for the tests of waking on commits
#                   read from the binlog: 127.0.0.1:3307,
#                   /run/mysqld/mysqld-binlog.sock, /var/lib/mysql-binlog,
#                   log /var/log/mysql/mariadbd-binlog.log. There is no unit
#                   for it, so it is always launched directly, with every
#                   option on its command line (--no-defaults: the first
#                   server's /etc/mysql config must not leak into it).
#
# Accounts: on both MariaDB servers outboxd/outboxd @localhost and @127.0.0.1
# with ALL on *.* (tests create and drop outboxd_test_* databases); root logs
# in over the socket as the Unix root user. RabbitMQ guest/guest, which
# RabbitMQ only accepts from loopback.
#
# Without systemd (CI containers, this VM) the servers are launched directly,
# not through /etc/init.d: the MariaDB init script leaves a `logger` process
# holding the caller's stdout (a `.ci/run | tee` would never see EOF) and
# polls with whole-second sleeps. Every launched server keeps a waiting shell
# as its parent, because PID 1 in such containers may not reap orphans and a
# zombie would look alive to `kill -0`.
set -euo pipefail

PACKAGES=(build-essential pkg-config mariadb-server rabbitmq-server
    default-libmysqlclient-dev librabbitmq-dev libyaml-dev libevent-dev check
    amqp-tools prometheus clang valgrind libclang-rt-14-dev procps iproute2
    systemd scdoc man-db)
# scripts/dashboard-check.py (make check-alerts).
PACKAGES+=(python3)

# make deb and scripts/deb-check.sh (make check-deb).
PACKAGES+=(debhelper devscripts lintian fakeroot)

# libcrypto's pkg-config file, for outboxd -V (see PKGS in the Makefile).
PACKAGES+=(libssl-dev)

# tests/galera/servers.sh: a three-node Galera cluster, rsync SST.
PACKAGES+=(galera-4 rsync)

# libzstd: MySQL 8's compressed transactions in the binlog (binlog_payload.c).
PACKAGES+=(libzstd-dev)

# tests/it_cloudevents.c's consumer: Node and npm (make cloudevents-deps).
# A Node that brings its own npm (NodeSource's) conflicts with Debian's npm.
PACKAGES+=(nodejs)
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)

MARIADB_SOCKET=/run/mysqld/mysqld.sock
MARIADB_LOG=/var/log/mysql/mariadbd.log
MARIADB_TIMEOUT=${OUTBOXD_MARIADB_TIMEOUT:-60}
DB_USER=outboxd
DB_PASSWORD=outboxd
# Both servers keep the bench's largest backlog (3,000 rows of 64 KiB,
# 300 of 1 MiB) in memory, as a production server keeps the rows just
# written: with Debian's 128M the drain measured the disk, not outboxd.
INNODB_POOL=512M

BINLOG_PORT=3307
BINLOG_SOCKET=/run/mysqld/mysqld-binlog.sock
BINLOG_PIDFILE=/run/mysqld/mysqld-binlog.pid
BINLOG_DATADIR=/var/lib/mysql-binlog
BINLOG_LOG=/var/log/mysql/mariadbd-binlog.log
# --no-defaults must come first. Character set as Debian's 50-server.cnf
# gives the first server, so tests behave the same on either. The caches
# other than InnoDB's are cut from 128M each: this server holds test data
# only, and shares the machine with the first one. The table caches hold
# the bench's 1,000 tenant tables, as on any server of that many schemas
# (docs/operations.md, Many tenants). One schema is left out of the binary
# log, as a user's binlog_ignore_db would (it_wake: its outbox polls).
BINLOG_MARIADBD_ARGS=(--no-defaults --user=mysql --datadir="$BINLOG_DATADIR"
    --port="$BINLOG_PORT" --bind-address=127.0.0.1 --socket="$BINLOG_SOCKET"
    --pid-file="$BINLOG_PIDFILE" --log-error="$BINLOG_LOG"
    --log-bin="$BINLOG_DATADIR/binlog" --server-id=1 --binlog-format=ROW
    --binlog-expire-logs-seconds=86400 --binlog-ignore-db=outboxd_test_unlogged
    --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci
    --innodb-buffer-pool-size="$INNODB_POOL" --innodb-log-buffer-size=8M
    --key-buffer-size=8M --aria-pagecache-buffer-size=8M
    --table-definition-cache=2000 --table-open-cache=8000)

# Same pid file as /etc/init.d/rabbitmq-server, so either can stop the node.
RABBIT_PIDFILE=/run/rabbitmq/pid
RABBIT_WRAPPER_PIDFILE=/run/rabbitmq/wrapper.pid
RABBIT_LOGDIR=/var/log/rabbitmq
RABBIT_TIMEOUT=${OUTBOXD_RABBIT_TIMEOUT:-120}
# No trailing slash: librabbitmq parses ".../" as the empty vhost, not "/".
AMQP_URL=amqp://guest:guest@127.0.0.1:5672
# queue.delete of a missing queue succeeds: a login-and-channel probe that
# leaves nothing behind.
AMQP_PROBE_QUEUE=outboxd.servers.probe

LOCKFILE=/run/lock/outboxd-servers.lock

export LC_ALL=C.UTF-8

log() { printf '%s\n' "$*"; }
die() { printf 'servers.sh: %s\n' "$*" >&2; exit 1; }
need_root() { ((EUID == 0)) || die "must run as root to $*"; }
have_systemd() { [[ -d /run/systemd/system ]]; }

# Seconds since a $EPOCHREALTIME stamp, to one decimal.
since() {
    local us=$((${EPOCHREALTIME/./} - ${1/./}))
    printf '%d.%ds' $((us / 1000000)) $((us / 100000 % 10))
}

# A zombie still answers kill -0, so ask ps for the state instead.
alive() {
    local st
    st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [[ $st != Z* ]]
}

# Live (non-zombie) pids of processes whose command name is $1.
live_pids() { ps -C "$1" -o pid=,stat= 2>/dev/null | awk '$2 !~ /^Z/ {print $1}'; }

# wait_until SECONDS CHECK [GUARD]: poll CHECK every 0.1 s until it succeeds;
# 1 at the deadline, 2 as soon as GUARD (is what we launched alive?) fails.
wait_until() {
    local deadline=$((SECONDS + $1)) check=$2 guard=${3:-}
    until $check; do
        if [[ -n $guard ]] && ! $guard; then return 2; fi
        ((SECONDS < deadline)) || return 1
        sleep 0.1
    done
}

# Serialize start/stop/restart: tests may restart a server while another
# test process calls start.
take_lock() {
    ((EUID == 0)) || return 0
    mkdir -p "${LOCKFILE%/*}"
    exec 9>"$LOCKFILE"
    flock -w 600 9 || die "another servers.sh holds $LOCKFILE"
}

require_tools() {
    local t
    for t in mariadb rabbitmqctl amqp-delete-queue; do
        command -v "$t" >/dev/null ||
            die "$t not found; run 'bash tests/servers.sh deps' first"
    done
}

# ---------------------------------------------------------------- deps

cmd_deps() {
    local installed missing=() p
    installed=$(dpkg-query -W -f='${Package} ${db:Status-Abbrev}\n' \
        "${PACKAGES[@]}" 2>/dev/null | awk '$2 == "ii" {print $1}') || true
    for p in "${PACKAGES[@]}"; do
        grep -qx "$p" <<<"$installed" || missing+=("$p")
    done
    if ((${#missing[@]} == 0)); then
        log "deps: all ${#PACKAGES[@]} packages installed"
        return
    fi
    need_root "install ${missing[*]}"
    log "deps: installing ${missing[*]}"
    # Without systemd, postinst would start the servers through their init
    # scripts (holding our stdout, or failing the install); start does that
    # job instead, so deny service starts while apt runs unless a policy
    # already exists.
    local policy=/usr/sbin/policy-rc.d made_policy=
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        made_policy=1
        # shellcheck disable=SC2064 # expand now: $policy is local
        trap "rm -f $policy" EXIT
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q </dev/null
    apt-get install -y -q --no-install-recommends "${missing[@]}" </dev/null
    if [[ -n $made_policy ]]; then
        rm -f "$policy"
        trap - EXIT
    fi
    log "deps: done"
}

# ---------------------------------------------------------------- MariaDB

# Two mariadbd run, so "is it running" must ask about one of them. The
# binlog one is the mariadbd in its pid file or, as mariadbd writes that
# file only when it opens its socket (after InnoDB recovery), the one whose
# command line names its datadir. The first one is every other mariadbd
# that names no datadir of its own elsewhere: systemd, mysqld_safe and this
# script each start it with other arguments, and the start path must see
# one that is still recovering; the servers a test starts for itself
# (tests/failover, tests/galera) and a developer's own name theirs, and
# are never taken for it.
is_binlog_mariadbd() {
    [[ $(cat "$BINLOG_PIDFILE" 2>/dev/null) == "$1" ]] ||
        tr '\0' '\n' 2>/dev/null <"/proc/$1/cmdline" |
        grep -qxF -- "--datadir=$BINLOG_DATADIR"
}

# has_other_datadir PID: its command line names a datadir not the main one.
has_other_datadir() {
    tr '\0' '\n' 2>/dev/null <"/proc/$1/cmdline" | grep -- '^--datadir=' |
        grep -qvxF -- "--datadir=/var/lib/mysql"
}

# mariadbd_pids main|binlog: live pids of that instance's mariadbd.
mariadbd_pids() {
    local pid
    for pid in $(live_pids mariadbd); do
        if is_binlog_mariadbd "$pid"; then
            [[ $1 != binlog ]] || echo "$pid"
        elif ! has_other_datadir "$pid"; then
            [[ $1 != main ]] || echo "$pid"
        fi
    done
}

mariadbd_gone() { [[ -z $(mariadbd_pids "$1") ]]; }

# root_answers SOCKET: root logs in over SOCKET (unix_socket auth).
root_answers() {
    timeout 10 mariadb -uroot --socket="$1" --connect-timeout=2 \
        -Nse 'select 1' >/dev/null 2>&1
}

# tcp_query PORT SQL: run SQL as the test user over TCP, like the tests do.
tcp_query() {
    MYSQL_PWD=$DB_PASSWORD timeout 10 mariadb --protocol=tcp -h127.0.0.1 \
        -P"$1" -u"$DB_USER" --connect-timeout=2 -Nse "$2"
}

mariadb_answers() {
    if ((EUID == 0)); then
        root_answers "$MARIADB_SOCKET"
    else
        mariadb_tcp_answers
    fi
}

mariadb_tcp_answers() { tcp_query 3306 'select 1' >/dev/null 2>&1; }

mariadb_no_process() { mariadbd_gone main; }

# spawn_mariadbd LOG ARG...: run /usr/sbin/mariadbd ARG... in the background,
# output appended to LOG; SPAWNED is the pid of its wrapper.
SPAWNED=
spawn_mariadbd() {
    local log=$1
    shift
    printf '=== %s servers.sh starting mariadbd\n' "$(date -Is)" >>"$log"
    # setsid: a Ctrl-C or hangup of the test run must not reach the server.
    # The bash wrapper waits on mariadbd so it gets reaped, and notes its end.
    # It first closes every inherited descriptor above stderr: a caller's
    # flock(1) lock kept open by mariadbd would never be released.
    # shellcheck disable=SC2016 # expanded by the wrapper, not here
    setsid env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
        bash -c 'for fd in $(ls /proc/$$/fd); do
                     [ "$fd" -gt 2 ] && eval "exec $fd>&-" 2>/dev/null
                 done
                 /usr/sbin/mariadbd "$@"
                 echo "=== mariadbd exited with status $?"' mariadbd-wrapper "$@" \
        </dev/null >>"$log" 2>&1 9>&- &
    SPAWNED=$!
}

MARIADB_WRAPPER=
mariadb_wrapper_alive() { alive "$MARIADB_WRAPPER"; }

mariadb_launch() {
    install -d -m 755 -o mysql -g root /run/mysqld
    install -d -m 750 -o mysql -g adm /var/log/mysql
    if [[ ! -d /var/lib/mysql/mysql ]]; then
        mariadb-install-db --user=mysql --datadir=/var/lib/mysql \
            >>"$MARIADB_LOG" 2>&1 || die "mariadb-install-db failed, see $MARIADB_LOG"
    fi
    spawn_mariadbd "$MARIADB_LOG" --user=mysql \
        --innodb-buffer-pool-size="$INNODB_POOL"
    MARIADB_WRAPPER=$SPAWNED
}

# mariadb_ensure_users SOCKET. Kept out of the binary log: a `start` run by
# one test must not show up as events in the binlog another test reads.
mariadb_ensure_users() {
    local host sql="SET SESSION sql_log_bin = 0;"
    for host in localhost 127.0.0.1; do
        sql+="CREATE USER IF NOT EXISTS '$DB_USER'@'$host' IDENTIFIED BY '$DB_PASSWORD';
              ALTER USER '$DB_USER'@'$host' IDENTIFIED BY '$DB_PASSWORD';
              GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'$host' WITH GRANT OPTION;"
    done
    mariadb -uroot --socket="$1" -e "$sql"
}

cmd_start_mariadb() {
    local t0=$EPOCHREALTIME how="already running" rc=0
    if ! mariadb_answers; then
        need_root "start MariaDB"
        if have_systemd; then
            systemctl start mariadb
            wait_until "$MARIADB_TIMEOUT" mariadb_answers || rc=$?
        elif mariadb_no_process; then
            mariadb_launch
            wait_until "$MARIADB_TIMEOUT" mariadb_answers mariadb_wrapper_alive || rc=$?
        else
            # A mariadbd is up but not answering yet (recovering, or started
            # by someone else a moment ago): wait for it, never start a second.
            wait_until "$MARIADB_TIMEOUT" mariadb_answers || rc=$?
        fi
        if ((rc != 0)); then
            [[ -f $MARIADB_LOG ]] && tail -n 20 "$MARIADB_LOG" >&2
            ((rc == 2)) && die "mariadbd exited during startup, see $MARIADB_LOG"
            die "MariaDB did not answer within ${MARIADB_TIMEOUT}s"
        fi
        how="started in $(since "$t0")"
    fi
    if ((EUID == 0)); then
        mariadb_ensure_users "$MARIADB_SOCKET"
    fi
    # The daemon and the tests connect over TCP; Debian binds 127.0.0.1:3306
    # by default, but a local config could turn networking off or move it.
    mariadb_tcp_answers || die "MariaDB answers on $MARIADB_SOCKET but" \
        "$DB_USER/$DB_PASSWORD cannot log in on 127.0.0.1:3306" \
        "(check bind-address, port, skip-networking in /etc/mysql)"
    local version
    version=$(tcp_query 3306 'select version()')
    log "mariadb: ready ($how), $version on 127.0.0.1:3306 and $MARIADB_SOCKET, user $DB_USER/$DB_PASSWORD"
}

# stop_mariadbd main|binlog SOCKET NAME: stop that instance's mariadbd
# directly (no systemd unit), leaving the other one alone.
stop_mariadbd() {
    local which=$1 socket=$2 name=$3 t0=$EPOCHREALTIME
    local -a pids
    mapfile -t pids < <(mariadbd_pids "$which")
    if ((${#pids[@]} == 0)); then
        log "$name: not running"
        return
    fi
    # A clean shutdown when it answers (the SQL statement returns at once,
    # where mariadb-admin polls its pid file once a second); signals when it
    # hangs (a test may have frozen it with SIGSTOP, hence the SIGCONT).
    if ! timeout 10 mariadb -uroot --socket="$socket" --connect-timeout=2 \
        -e SHUTDOWN >/dev/null 2>&1; then
        kill -TERM "${pids[@]}" 2>/dev/null || true
        kill -CONT "${pids[@]}" 2>/dev/null || true
    fi
    if ! wait_until 60 "mariadbd_gone $which"; then
        kill -KILL "${pids[@]}" 2>/dev/null || true
        wait_until 10 "mariadbd_gone $which" ||
            die "mariadbd (${pids[*]}) does not exit"
    fi
    log "$name: stopped ($(since "$t0"))"
}

cmd_stop_mariadb() {
    local t0=$EPOCHREALTIME
    need_root "stop MariaDB"
    if have_systemd; then
        systemctl stop mariadb
        log "mariadb: stopped ($(since "$t0"))"
        return
    fi
    stop_mariadbd main "$MARIADB_SOCKET" mariadb
}

# ---------------------------------------------------------------- MariaDB, binlog on

binlog_answers() {
    if ((EUID == 0)); then
        root_answers "$BINLOG_SOCKET"
    else
        tcp_query "$BINLOG_PORT" 'select 1' >/dev/null 2>&1
    fi
}

binlog_no_process() { mariadbd_gone binlog; }

BINLOG_WRAPPER=
binlog_wrapper_alive() { alive "$BINLOG_WRAPPER"; }

binlog_launch() {
    install -d -m 755 -o mysql -g root /run/mysqld
    install -d -m 750 -o mysql -g adm /var/log/mysql
    # mariadbd opens --log-error as mysql; our own >> would create it root's.
    [[ -e $BINLOG_LOG ]] || install -m 640 -o mysql -g adm /dev/null "$BINLOG_LOG"
    # Left by a killed server; its pid may be reused, even by the first one.
    rm -f "$BINLOG_PIDFILE"
    if [[ ! -d $BINLOG_DATADIR/mysql ]]; then
        mariadb-install-db --no-defaults --user=mysql --datadir="$BINLOG_DATADIR" \
            >>"$BINLOG_LOG" 2>&1 || die "mariadb-install-db failed, see $BINLOG_LOG"
    fi
    spawn_mariadbd "$BINLOG_LOG" "${BINLOG_MARIADBD_ARGS[@]}"
    BINLOG_WRAPPER=$SPAWNED
}

cmd_start_mariadb_binlog() {
    local t0=$EPOCHREALTIME how="already running" rc=0
    if ! binlog_answers; then
        need_root "start the binlog MariaDB"
        if binlog_no_process; then
            binlog_launch
            wait_until "$MARIADB_TIMEOUT" binlog_answers binlog_wrapper_alive || rc=$?
        else
            # As for the first server: one is starting, never start a second.
            wait_until "$MARIADB_TIMEOUT" binlog_answers || rc=$?
        fi
        if ((rc != 0)); then
            [[ -f $BINLOG_LOG ]] && tail -n 20 "$BINLOG_LOG" >&2
            ((rc == 2)) && die "binlog mariadbd exited during startup, see $BINLOG_LOG"
            die "binlog MariaDB did not answer within ${MARIADB_TIMEOUT}s"
        fi
        how="started in $(since "$t0")"
    fi
    if ((EUID == 0)); then
        mariadb_ensure_users "$BINLOG_SOCKET"
    fi
    local row version log_bin format
    row=$(tcp_query "$BINLOG_PORT" 'select version(), @@log_bin, @@binlog_format') ||
        die "binlog MariaDB answers on $BINLOG_SOCKET but $DB_USER/$DB_PASSWORD" \
            "cannot log in on 127.0.0.1:$BINLOG_PORT"
    IFS=$'\t' read -r version log_bin format <<<"$row"
    # Whatever holds the port must really log ROW events, or the binlog
    # tests would wait for events that never come.
    [[ $log_bin == 1 && $format == ROW ]] ||
        die "127.0.0.1:$BINLOG_PORT has log_bin=$log_bin binlog_format=$format," \
            "not the binlog server this script starts"
    log "mariadb-binlog: ready ($how), $version on 127.0.0.1:$BINLOG_PORT, binlog on ($format), user $DB_USER/$DB_PASSWORD"
}

# Even with systemd: there is no unit for this server.
cmd_stop_mariadb_binlog() {
    need_root "stop the binlog MariaDB"
    stop_mariadbd binlog "$BINLOG_SOCKET" mariadb-binlog
    rm -f "$BINLOG_PIDFILE" # if it had to be killed
}

# ---------------------------------------------------------------- RabbitMQ

rabbit_answers() {
    timeout 10 amqp-delete-queue -u "$AMQP_URL" -q "$AMQP_PROBE_QUEUE" \
        >/dev/null 2>&1
}

rabbit_port_open() { timeout 2 bash -c '</dev/tcp/127.0.0.1/5672' 2>/dev/null; }

# The Erlang node (not the AMQP listener) is up; rabbitmqctl's wrapper runs
# as the rabbitmq user, whose HOME holds the cookie.
rabbit_node_up() { timeout 20 rabbitmq-diagnostics -q ping --timeout 10 >/dev/null 2>&1; }

rabbit_wrapper_alive() {
    local pid
    pid=$(cat "$RABBIT_WRAPPER_PIDFILE" 2>/dev/null) && alive "$pid"
}

rabbit_beam_pid() {
    local pid
    pid=$(cat "$RABBIT_PIDFILE" 2>/dev/null) || return 1
    [[ $(ps -o comm= -p "$pid" 2>/dev/null) == beam.smp ]] && alive "$pid" &&
        echo "$pid"
}

rabbit_beam_gone() { ! rabbit_beam_pid >/dev/null; }

rabbit_fix_cookie() {
    # Erlang refuses a cookie readable by others; rabbitmqctl then cannot
    # talk to the node. postinst creates it 0400, a copied tree may not.
    local cookie=/var/lib/rabbitmq/.erlang.cookie
    if [[ -e $cookie ]]; then
        chown rabbitmq:rabbitmq "$cookie"
        chmod 0400 "$cookie"
    fi
}

rabbit_launch() {
    install -d -m 755 -o rabbitmq -g rabbitmq /run/rabbitmq "$RABBIT_LOGDIR"
    rm -f "$RABBIT_PIDFILE" "$RABBIT_WRAPPER_PIDFILE"
    # As the Debian init script does: start-stop-daemon switches to the
    # rabbitmq user (HOME=/var/lib/rabbitmq, where the cookie is), detaches
    # and points the fds at /dev/null. The wrapper logs to startup_{log,err}.
    # env -i keeps stray RABBITMQ_* variables of the caller away from it.
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
        RABBITMQ_PID_FILE="$RABBIT_PIDFILE" \
        start-stop-daemon --start --quiet --chuid rabbitmq --background \
        --make-pidfile --pidfile "$RABBIT_WRAPPER_PIDFILE" \
        --exec /usr/sbin/rabbitmq-server 9>&-
}

rabbit_ensure_guest() {
    rabbitmqctl -q add_user guest guest >/dev/null 2>&1 ||
        rabbitmqctl -q change_password guest guest
    rabbitmqctl -q set_permissions -p / guest '.*' '.*' '.*'
    rabbitmqctl -q set_user_tags guest administrator
}

rabbit_fail() {
    tail -n 20 "$RABBIT_LOGDIR/startup_err" "$RABBIT_LOGDIR/startup_log" >&2 2>/dev/null || true
    die "$* (logs in $RABBIT_LOGDIR)"
}

# Brings the node and its AMQP listener up, whichever way it is down.
rabbit_start_node() {
    local rc=0
    if have_systemd; then
        systemctl start rabbitmq-server
        wait_until "$RABBIT_TIMEOUT" rabbit_port_open || rc=$?
    elif rabbit_node_up; then
        # The node runs but AMQP is closed: a test's stop_app, or a boot in
        # progress. start_app is a no-op for an app that is up.
        rabbitmqctl -q start_app >/dev/null 2>&1 || true
        wait_until "$RABBIT_TIMEOUT" rabbit_port_open || rc=$?
    else
        rabbit_launch
        wait_until "$RABBIT_TIMEOUT" rabbit_port_open rabbit_wrapper_alive || rc=$?
    fi
    ((rc != 2)) || rabbit_fail "rabbitmq-server exited during startup"
    ((rc != 1)) || rabbit_fail "AMQP port 5672 not open within ${RABBIT_TIMEOUT}s"
}

cmd_start_rabbitmq() {
    local t0=$EPOCHREALTIME how="already running"
    if ((EUID == 0)); then rabbit_fix_cookie; fi
    if ! rabbit_port_open; then
        need_root "start RabbitMQ"
        rabbit_start_node
        how="started in $(since "$t0")"
    fi
    if ! rabbit_answers; then
        need_root "check RabbitMQ's boot and user guest"
        # The listener opens late in the boot; await_startup covers the rest.
        timeout "$RABBIT_TIMEOUT" rabbitmqctl -q await_startup >/dev/null ||
            rabbit_fail "RabbitMQ did not finish booting"
        if ! rabbit_answers; then
            rabbit_ensure_guest
            rabbit_answers || rabbit_fail "guest/guest cannot log in on $AMQP_URL"
            log "rabbitmq: reset user guest/guest and its permissions on vhost /"
        fi
        [[ $how == already* ]] || how="started in $(since "$t0")"
    fi
    log "rabbitmq: ready ($how), AMQP on 127.0.0.1:5672, user guest/guest"
}

cmd_stop_rabbitmq() {
    local t0=$EPOCHREALTIME pid
    need_root "stop RabbitMQ"
    if have_systemd; then
        systemctl stop rabbitmq-server
    elif rabbit_node_up; then
        # shutdown (unlike stop) waits until the OS process has exited.
        timeout 120 rabbitmqctl -q shutdown >/dev/null ||
            die "rabbitmqctl shutdown failed"
    elif pid=$(rabbit_beam_pid); then
        # The VM runs but does not answer the CLI: hung or frozen.
        kill -TERM "$pid" 2>/dev/null || true
        kill -CONT "$pid" 2>/dev/null || true
        if ! wait_until 60 rabbit_beam_gone; then
            kill -KILL "$pid" 2>/dev/null || true
            wait_until 10 rabbit_beam_gone || die "beam.smp ($pid) does not exit"
        fi
    else
        log "rabbitmq: not running"
        return
    fi
    rm -f "$RABBIT_PIDFILE" "$RABBIT_WRAPPER_PIDFILE"
    log "rabbitmq: stopped ($(since "$t0"))"
}

# ---------------------------------------------------------------- main

cmd_status() {
    local ok=0
    if mariadb_answers; then log "mariadb: up"; else log "mariadb: down"; ok=1; fi
    if binlog_answers; then
        log "mariadb-binlog: up"
    else
        log "mariadb-binlog: down"
        ok=1
    fi
    if rabbit_answers; then log "rabbitmq: up"; else log "rabbitmq: down"; ok=1; fi
    return $ok
}

usage() {
    echo "usage: $0 deps|packages|start|stop|status|restart-mariadb|restart-mariadb-binlog|restart-rabbitmq" >&2
    exit 64
}

(($# == 1)) || usage
case $1 in
deps) cmd_deps ;;
packages) printf '%s\n' "${PACKAGES[@]}" ;;
start)
    require_tools
    take_lock
    cmd_start_mariadb
    cmd_start_mariadb_binlog
    cmd_start_rabbitmq
    ;;
stop)
    require_tools
    take_lock
    cmd_stop_mariadb
    cmd_stop_mariadb_binlog
    cmd_stop_rabbitmq
    ;;
status)
    require_tools
    cmd_status
    ;;
restart-mariadb)
    require_tools
    take_lock
    cmd_stop_mariadb
    cmd_start_mariadb
    ;;
restart-mariadb-binlog)
    require_tools
    take_lock
    cmd_stop_mariadb_binlog
    cmd_start_mariadb_binlog
    ;;
restart-rabbitmq)
    require_tools
    take_lock
    cmd_stop_rabbitmq
    cmd_start_rabbitmq
    ;;
*) usage ;;
esac
