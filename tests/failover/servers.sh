#!/usr/bin/env bash
# Starts and stops the MariaDB primary and replica that tests/it_failover.c
# fails over between, beside the shared servers of tests/servers.sh, which
# it never touches.
#
# Usage: bash tests/failover/servers.sh start DIR | stop [DIR] |
#                                       stop-primary | status
#
#   start DIR     a fresh pair, each with its own data under DIR:
#                 - primary on 127.0.0.1:3308 (DIR/primary), binary log on
#                   (ROW), server_id 8;
#                 - replica on 127.0.0.1:3309 (DIR/replica), read_only, its
#                   own binary log with the replicated writes
#                   (log_slave_updates), server_id 9, replicating from the
#                   primary by GTID from its first transaction, so that the
#                   accounts created on the primary reach it too.
#                 Accounts: outboxd/outboxd @localhost and @127.0.0.1 with
#                 ALL on *.*, as tests/servers.sh makes them. A pair still
#                 up from a previous run is stopped and deleted first:
#                 every run starts from new servers (about 3 s), which is
#                 cheaper and surer than undoing a promotion.
#   stop          stops both and deletes DIR (default: the last one started)
#   stop-primary  stops the primary alone (the test's "old primary goes")
#   status        says whether each answers; exit 0 only if both do
#
# Needs root and mariadb-server (bash tests/servers.sh deps). One run at a
# time: it_failover holds /run/lock/outboxd-failover.lock.
set -euo pipefail

PRIMARY_PORT=3308
REPLICA_PORT=3309
STATE=/run/outboxd-failover.dir
TIMEOUT=${OUTBOXD_FAILOVER_TIMEOUT:-60}
DB_USER=outboxd
DB_PASSWORD=outboxd

export LC_ALL=C.UTF-8

log() { printf 'failover-servers: %s\n' "$*"; }
die() { printf 'failover/servers.sh: %s\n' "$*" >&2; exit 1; }

# shellcheck source=tests/shlib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../shlib.sh"

db_sql() { # DIR NAME SQL: as root on that server's socket
    timeout 10 mariadb --no-defaults -uroot --socket="$1/$2/run/mysqld.sock" \
        --connect-timeout=2 -Nse "$3"
}

db_answers() { db_sql "$1" "$2" 'select 1' >/dev/null 2>&1; }

# db_start DIR NAME PORT ARG...: a new datadir and a mariadbd on PORT.
db_start() {
    local dir=$1 name=$2 port=$3 data=$1/$2/data run=$1/$2/run
    shift 3
    install -d -m 750 -o mysql -g mysql "$data"
    install -d -m 755 -o mysql -g mysql "$run"
    mariadb-install-db --no-defaults --user=mysql --datadir="$data" \
        --auth-root-authentication-method=socket --skip-test-db \
        >"$dir/$name/install.log" 2>&1 ||
        { tail -n 20 "$dir/$name/install.log" >&2; die "mariadb-install-db failed"; }
    # setsid: a Ctrl-C of the test run must not reach the server; a shell
    # waits on it so that it is reaped (PID 1 of a container may not).
    setsid env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
        bash -c '/usr/sbin/mariadbd "$@"; echo "=== mariadbd exited: $?"' \
        mariadbd-wrapper --no-defaults --user=mysql --datadir="$data" \
        --socket="$run/mysqld.sock" --pid-file="$run/mariadbd.pid" \
        --log-error="$run/mariadbd.err" --port="$port" \
        --bind-address=127.0.0.1 --skip-name-resolve \
        --innodb-buffer-pool-size=32M --key-buffer-size=8M \
        --aria-pagecache-buffer-size=8M \
        --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
        --log-bin="$data/binlog" --binlog-format=ROW "$@" \
        </dev/null >>"$dir/$name/mariadbd.out" 2>&1 9>&- &
    local launcher=$!
    echo $launcher >"$dir/$name/launcher"
    answers_or_gone() { db_answers "$dir" "$name" || ! alive "$launcher"; }
    if ! wait_until "$TIMEOUT" answers_or_gone || ! db_answers "$dir" "$name"; then
        tail -n 20 "$run/mariadbd.err" >&2 2>/dev/null || true
        die "$name mariadbd on $port did not start (log: $run/mariadbd.err)"
    fi
}

db_stop() { # DIR NAME
    local pid
    pid=$(cat "$1/$2/launcher" 2>/dev/null) || pid=
    db_sql "$1" "$2" SHUTDOWN >/dev/null 2>&1 ||
        kill -TERM "$(cat "$1/$2/run/mariadbd.pid" 2>/dev/null)" 2>/dev/null || true
    wait_until 60 pid_gone "$pid" || kill -KILL "$pid" 2>/dev/null || true
}

primary_accounts() {
    local host sql=""
    for host in localhost 127.0.0.1; do
        sql+="CREATE USER '$DB_USER'@'$host' IDENTIFIED BY '$DB_PASSWORD';
              GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'$host' WITH GRANT OPTION;"
    done
    sql+="CREATE USER 'repl'@'127.0.0.1' IDENTIFIED BY 'repl';
          GRANT REPLICATION SLAVE ON *.* TO 'repl'@'127.0.0.1';"
    db_sql "$1" primary "$sql"
}

replica_follow() {
    db_sql "$1" replica "CHANGE MASTER TO MASTER_HOST='127.0.0.1',
        MASTER_PORT=$PRIMARY_PORT, MASTER_USER='repl', MASTER_PASSWORD='repl',
        MASTER_USE_GTID=slave_pos, MASTER_CONNECT_RETRY=1; START SLAVE;"
    # The accounts have replicated once the replica knows them.
    has_accounts() {
        [[ $(db_sql "$1" replica "select count(*) from mysql.user
                                  where user='$DB_USER'" 2>/dev/null) == 2 ]]
    }
    wait_until "$TIMEOUT" has_accounts "$1" ||
        die "the replica did not catch up: $(db_sql "$1" replica 'show slave status\G' | grep -E 'Running|Error')"
}

cmd_stop() {
    local dir=${1:-$(cat "$STATE" 2>/dev/null || true)}
    [[ -n $dir && -d $dir ]] || { log "nothing to stop"; rm -f "$STATE"; return; }
    db_stop "$dir" replica
    db_stop "$dir" primary
    rm -rf "$dir" "$STATE"
    log "stopped, $dir removed"
}

cmd_start() {
    local dir=${1:?usage: servers.sh start DIR} t0=$SECONDS
    ((EUID == 0)) || die "must run as root"
    command -v mariadb-install-db >/dev/null ||
        die "mariadb-server missing; run 'bash tests/servers.sh deps'"
    [[ ! -e $STATE ]] || cmd_stop
    for p in $PRIMARY_PORT $REPLICA_PORT; do
        ! port_open "$p" || die "port $p is taken by something else"
    done
    mkdir -p "$dir/primary" "$dir/replica"
    chmod 755 "$dir"
    echo "$dir" >"$STATE"
    db_start "$dir" primary $PRIMARY_PORT --server-id=8
    db_start "$dir" replica $REPLICA_PORT --server-id=9 --read-only=1 \
        --log-slave-updates=1
    primary_accounts "$dir"
    replica_follow "$dir"
    log "primary 127.0.0.1:$PRIMARY_PORT, replica 127.0.0.1:$REPLICA_PORT" \
        "(read_only, replicating), $(db_sql "$dir" primary 'select version()')," \
        "in $((SECONDS - t0)) s"
}

cmd_stop_primary() {
    local dir
    dir=$(cat "$STATE" 2>/dev/null) || die "no pair is running"
    db_stop "$dir" primary
    log "primary stopped"
}

cmd_status() {
    local dir ok=0 n
    dir=$(cat "$STATE" 2>/dev/null || true)
    for n in primary replica; do
        if [[ -n $dir ]] && db_answers "$dir" $n; then log "$n: up"; else log "$n: down"; ok=1; fi
    done
    return $ok
}

case ${1:-} in
start) cmd_start "${2:-}" ;;
stop) cmd_stop "${2:-}" ;;
stop-primary) cmd_stop_primary ;;
status) cmd_status ;;
*) echo "usage: $0 start DIR | stop [DIR] | stop-primary | status" >&2; exit 64 ;;
esac
