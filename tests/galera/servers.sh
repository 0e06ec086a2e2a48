#!/usr/bin/env bash
# Starts and stops the three-node MariaDB Galera cluster that
# tests/it_galera.c relays from, beside the shared servers of
# tests/servers.sh, which it never touches.
#
# Usage: bash tests/galera/servers.sh start DIR | stop [DIR] |
#                                     stop-node N | status
#
#   start DIR     a fresh cluster, each node with its own data under
#                 DIR/nodeN: node N on 127.0.0.1:331N, group communication
#                 on 45N1 (N=1..3: 4571, 4581, 4591), SST on 45N2, IST on
#                 45N3; binary log on (ROW) with the writes of the other
#                 nodes (log_slave_updates), as the issue's cluster had.
#                 Node 1 bootstraps (--wsrep-new-cluster), nodes 2 and 3
#                 join it by rsync SST. Accounts: outboxd/outboxd
#                 @localhost and @127.0.0.1 with ALL on *.*, made on node 1
#                 and replicated. A cluster still up from a previous run
#                 is stopped and deleted first.
#   stop          stops every node and deletes DIR (default: the last one)
#   stop-node N   stops node N alone (a node that leaves mid-drain)
#   status        says whether each node answers and is synced
#
# Needs root, mariadb-server, galera-4 and rsync (bash tests/servers.sh
# deps). One run at a time: it_galera holds /run/lock/outboxd-galera.lock.
set -euo pipefail

STATE=/run/outboxd-galera.dir
TIMEOUT=${OUTBOXD_GALERA_TIMEOUT:-90}
PROVIDER=/usr/lib/galera/libgalera_smm.so
# More mariadbd options for every node, for experiments ("--max-binlog-size=1M").
EXTRA=${OUTBOXD_GALERA_EXTRA:-}
DB_USER=outboxd
DB_PASSWORD=outboxd

export LC_ALL=C.UTF-8

log() { printf 'galera-servers: %s\n' "$*"; }
die() { printf 'galera/servers.sh: %s\n' "$*" >&2; exit 1; }

# shellcheck source=tests/shlib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../shlib.sh"

port() { echo $((3310 + $1)); }
gport() { echo $((4561 + 10 * $1 + ${2:-0})); } # N [offset]: 4571.. per node

node_sql() { # DIR N SQL: as root on that node's socket
    timeout 10 mariadb --no-defaults -uroot --socket="$1/node$2/run/mysqld.sock" \
        --connect-timeout=2 -Nse "$3"
}

node_synced() {
    [[ $(node_sql "$1" "$2" "show status like 'wsrep_local_state_comment'" \
        2>/dev/null | cut -f2) == Synced ]]
}

# The cluster address a node joins: the nodes started before it.
peers() {
    local n=$1 i list=""
    for ((i = 1; i < n; i++)); do list+="${list:+,}127.0.0.1:$(gport "$i")"; done
    echo "$list"
}

# node_launch DIR N ARG...: mariadbd of node N on its existing datadir.
node_launch() {
    local dir=$1 n=$2 data=$1/node$2/data run=$1/node$2/run
    shift 2
    # setsid: a Ctrl-C of the test run must not reach the server; a shell
    # waits on it so that it is reaped (PID 1 of a container may not).
    setsid env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 \
        bash -c 'exe=$1; shift; "$exe" "$@"; echo "=== mariadbd exited: $?"' \
        mariadbd-wrapper /usr/sbin/mariadbd --no-defaults --user=mysql --datadir="$data" \
        --socket="$run/mysqld.sock" --pid-file="$run/mariadbd.pid" \
        --log-error="$run/mariadbd.err" --port="$(port "$n")" \
        --bind-address=127.0.0.1 --skip-name-resolve --server-id=$((30 + n)) \
        --innodb-buffer-pool-size=64M --key-buffer-size=8M \
        --aria-pagecache-buffer-size=8M --innodb-autoinc-lock-mode=2 \
        --character-set-server=utf8mb4 --collation-server=utf8mb4_general_ci \
        --log-bin="$data/binlog" --binlog-format=ROW --log-slave-updates=1 \
        --wsrep-on=1 --wsrep-provider="$PROVIDER" \
        --wsrep-cluster-name=outboxd_it --wsrep-node-name="node$n" \
        --wsrep-node-address="127.0.0.1:$(gport "$n")" \
        --wsrep-provider-options="gmcast.listen_addr=tcp://127.0.0.1:$(gport "$n"); ist.recv_addr=127.0.0.1:$(gport "$n" 2); gcache.size=64M" \
        --wsrep-sst-method=rsync \
        --wsrep-sst-receive-address="127.0.0.1:$(gport "$n" 1)" \
        --wsrep-cluster-address="gcomm://$(peers "$n")" "$@" $EXTRA \
        </dev/null >>"$dir/node$n/mariadbd.out" 2>&1 9>&- &
    echo $! >"$dir/node$n/launcher"
}

node_start() { # DIR N ARG...
    local dir=$1 n=$2 data=$1/node$2/data run=$1/node$2/run launcher
    install -d -m 750 -o mysql -g mysql "$data"
    install -d -m 755 -o mysql -g mysql "$run"
    if ((n == 1)); then
        mariadb-install-db --no-defaults --user=mysql --datadir="$data" \
            --auth-root-authentication-method=socket --skip-test-db \
            >"$dir/node$n/install.log" 2>&1 ||
            { tail -n 20 "$dir/node$n/install.log" >&2; die "mariadb-install-db failed"; }
    fi
    node_launch "$@"
    launcher=$(cat "$dir/node$n/launcher")
    synced_or_gone() { node_synced "$dir" "$n" || ! alive "$launcher"; }
    if ! wait_until "$TIMEOUT" synced_or_gone || ! node_synced "$dir" "$n"; then
        tail -n 30 "$run/mariadbd.err" >&2 2>/dev/null || true
        die "node$n on $(port "$n") did not reach Synced (log: $run/mariadbd.err)"
    fi
}

node_stop() { # DIR N
    local pid
    pid=$(cat "$1/node$2/launcher" 2>/dev/null) || pid=
    [[ -n $pid ]] || return 0
    kill -TERM "$(cat "$1/node$2/run/mariadbd.pid" 2>/dev/null)" 2>/dev/null || true
    wait_until 60 pid_gone "$pid" || kill -KILL -- "-$pid" "$pid" 2>/dev/null || true
    rm -f "$1/node$2/launcher"
}

accounts() {
    local host sql=""
    for host in localhost 127.0.0.1; do
        sql+="CREATE USER '$DB_USER'@'$host' IDENTIFIED BY '$DB_PASSWORD';
              GRANT ALL PRIVILEGES ON *.* TO '$DB_USER'@'$host' WITH GRANT OPTION;"
    done
    node_sql "$1" 1 "$sql"
}

cmd_stop() {
    local dir=${1:-$(cat "$STATE" 2>/dev/null || true)} n
    [[ -n $dir && -d $dir ]] || { log "nothing to stop"; rm -f "$STATE"; return; }
    # The joiners first: the last node down needs no quorum to stop.
    for n in 3 2 1; do node_stop "$dir" $n; done
    rm -rf "$dir" "$STATE"
    log "stopped, $dir removed"
}

cmd_start() {
    local dir=${1:?usage: servers.sh start DIR} t0=$SECONDS n
    ((EUID == 0)) || die "must run as root"
    [[ -e $PROVIDER ]] || die "galera-4 missing; run 'bash tests/servers.sh deps'"
    command -v rsync >/dev/null || die "rsync missing; run 'bash tests/servers.sh deps'"
    [[ ! -e $STATE ]] || cmd_stop
    for n in 1 2 3; do
        for p in $(port $n) $(gport $n) $(gport $n 1) $(gport $n 2); do
            ! port_open "$p" || die "port $p is taken by something else"
        done
    done
    mkdir -p "$dir"/node{1,2,3}
    chmod 755 "$dir"
    echo "$dir" >"$STATE"
    node_start "$dir" 1 --wsrep-new-cluster
    accounts "$dir"
    node_start "$dir" 2
    node_start "$dir" 3
    log "nodes 127.0.0.1:3311-3313 synced," \
        "$(node_sql "$dir" 1 "show status like 'wsrep_cluster_size'" | cut -f2) in" \
        "the cluster, $(node_sql "$dir" 1 'select version()'), in $((SECONDS - t0)) s"
}

cmd_stop_node() {
    local dir n=${1:?usage: servers.sh stop-node N}
    dir=$(cat "$STATE" 2>/dev/null) || die "no cluster is running"
    node_stop "$dir" "$n"
    log "node$n stopped"
}

cmd_status() {
    local dir ok=0 n
    dir=$(cat "$STATE" 2>/dev/null || true)
    for n in 1 2 3; do
        if [[ -n $dir ]] && node_synced "$dir" $n; then log "node$n: synced"
        else log "node$n: down or not synced"; ok=1; fi
    done
    return $ok
}

case ${1:-} in
start) cmd_start "${2:-}" ;;
stop) cmd_stop "${2:-}" ;;
stop-node) cmd_stop_node "${2:-}" ;;
status) cmd_status ;;
*) echo "usage: $0 start DIR | stop [DIR] | stop-node N | status" >&2; exit 64 ;;
esac
