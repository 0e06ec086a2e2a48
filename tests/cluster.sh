#!/usr/bin/env bash
# Starts, stops and checks a three-node RabbitMQ cluster on this machine for
# the broker failover test (tests/it_cluster.c), beside the shared node that
# tests/servers.sh runs on 5672, which it never touches.
#
# Usage: bash tests/cluster.sh start|stop|status|reset
#
#   start   start whichever node is down, join c2 and c3 to c1 if they are
#           not members yet, wait until all three serve AMQP; idempotent
#   stop    stop the three nodes (their data stays)
#   status  one line per node; exit 0 only if all three run, clustered
#   reset   stop, then delete the nodes' data (the next start is a fresh
#           cluster); the way out of a cluster left in a state start refuses
#
# Nodes: outboxd-c1@<short host>, outboxd-c2@, outboxd-c3@; AMQP on
# 127.0.0.1:5701-5703, distribution on 25701-25703, user guest/guest (which
# RabbitMQ accepts from loopback only). Everything else (mnesia, logs, pid
# files, config, plugins) lives under $OUTBOXD_CLUSTER_DIR, default
# /var/lib/rabbitmq/outboxd-cluster. Needs root and the Debian
# rabbitmq-server package; the nodes run as the rabbitmq user, whose HOME
# holds the Erlang cookie they share with the CLI tools.
set -euo pipefail

HOST=$(hostname -s)
NODES=(c1 c2 c3)
BASE=${OUTBOXD_CLUSTER_DIR:-/var/lib/rabbitmq/outboxd-cluster}
TIMEOUT=${OUTBOXD_CLUSTER_TIMEOUT:-180}
LOCKFILE=/run/lock/outboxd-cluster.lock
RABBIT_BIN=/usr/lib/rabbitmq/bin
AMQP_PROBE_QUEUE=outboxd.cluster.probe

export LC_ALL=C.UTF-8

log() { printf 'cluster: %s\n' "$*"; }
die() { printf 'cluster.sh: %s\n' "$*" >&2; exit 1; }

node_name() { printf 'outboxd-%s@%s' "$1" "$HOST"; }
node_index() { printf '%s' "${1#c}"; }
amqp_port() { printf '%d' $((5700 + $(node_index "$1"))); }
dist_port() { printf '%d' $((25700 + $(node_index "$1"))); }
node_dir() { printf '%s/%s' "$BASE" "$1"; }

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

beam_pid() {
    local pid
    pid=$(cat "$(node_dir "$1")/pid" 2>/dev/null) || return 1
    [[ $(ps -o comm= -p "$pid" 2>/dev/null) == beam.smp ]] && alive "$pid" &&
        echo "$pid"
}

beam_gone() { ! beam_pid "$1" >/dev/null; }

port_open() { timeout 2 bash -c "</dev/tcp/127.0.0.1/$1" 2>/dev/null; }

# A login, a channel and a no-op queue.delete: the node serves AMQP.
amqp_answers() {
    timeout 10 amqp-delete-queue -u "amqp://guest:guest@127.0.0.1:$(amqp_port "$1")" \
        -q "$AMQP_PROBE_QUEUE" >/dev/null 2>&1
}

# The CLI runs as the rabbitmq user (the /usr/sbin wrapper does that).
ctl() {
    local node=$1
    shift
    timeout 120 rabbitmqctl -q -n "$(node_name "$node")" "$@"
}

take_lock() {
    mkdir -p "${LOCKFILE%/*}"
    exec 9>"$LOCKFILE"
    flock -w 600 9 || die "another cluster.sh holds $LOCKFILE"
}

require_root() {
    ((EUID == 0)) || die "must run as root (nodes run as the rabbitmq user)"
    command -v rabbitmqctl >/dev/null && [[ -x $RABBIT_BIN/rabbitmq-server ]] ||
        die "rabbitmq-server is not installed; run 'bash tests/servers.sh deps'"
    command -v amqp-delete-queue >/dev/null ||
        die "amqp-tools is not installed; run 'bash tests/servers.sh deps'"
}

# wait_until SECONDS CHECK [ARG]: poll CHECK ARG every 0.2 s.
wait_until() {
    local deadline=$((SECONDS + $1)) check=$2 arg=${3:-}
    until $check $arg; do
        ((SECONDS < deadline)) || return 1
        sleep 0.2
    done
}

# ---------------------------------------------------------------- start

prepare_dir() {
    local dir
    dir=$(node_dir "$1")
    install -d -m 750 -o rabbitmq -g rabbitmq "$BASE" "$dir" "$dir/mnesia" "$dir/log"
    # No plugins (the management plugin's fixed port would clash with the
    # shared node's) and an empty config: /etc/rabbitmq is the shared
    # node's, not ours.
    [[ -f $dir/enabled_plugins ]] || echo '[].' >"$dir/enabled_plugins"
    [[ -f $dir/rabbitmq.conf ]] || : >"$dir/rabbitmq.conf"
    chown rabbitmq:rabbitmq "$dir/enabled_plugins" "$dir/rabbitmq.conf"
    # Erlang refuses a cookie readable by others.
    local cookie=/var/lib/rabbitmq/.erlang.cookie
    if [[ -e $cookie ]]; then
        chown rabbitmq:rabbitmq "$cookie"
        chmod 0400 "$cookie"
    fi
}

# The real script, run as the rabbitmq user with
# env -i, since the /usr/sbin wrapper run as root drops RABBITMQ_*. setsid
# keeps a Ctrl-C of the caller away; su and the script stay as waiting
# parents, so an exited node is reaped rather than left a zombie.
launch() {
    local node=$1 dir
    dir=$(node_dir "$node")
    rm -f "$dir/pid"
    printf '=== %s cluster.sh starting %s\n' "$(date -Is)" "$(node_name "$node")" \
        >>"$dir/log/startup.log"
    setsid su rabbitmq -s /bin/sh -c "exec env -i \
        PATH=/usr/sbin:/usr/bin:/sbin:/bin LANG=C.UTF-8 HOME=/var/lib/rabbitmq \
        RABBITMQ_NODENAME=$(node_name "$node") \
        RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 \
        RABBITMQ_NODE_PORT=$(amqp_port "$node") \
        RABBITMQ_DIST_PORT=$(dist_port "$node") \
        RABBITMQ_MNESIA_BASE=$dir/mnesia \
        RABBITMQ_LOG_BASE=$dir/log \
        RABBITMQ_PID_FILE=$dir/pid \
        RABBITMQ_ENABLED_PLUGINS_FILE=$dir/enabled_plugins \
        RABBITMQ_CONFIG_FILE=$dir/rabbitmq.conf \
        RABBITMQ_ADVANCED_CONFIG_FILE=$dir/advanced.config \
        RABBITMQ_CONF_ENV_FILE=$dir/rabbitmq-env.conf \
        $RABBIT_BIN/rabbitmq-server" \
        </dev/null >>"$dir/log/startup.log" 2>&1 9>&- &
    echo $! >"$dir/launcher.pid"
}

# The su that launched the node (it waits on the node) still runs.
launcher_alive() {
    local pid
    pid=$(cat "$(node_dir "$1")/launcher.pid" 2>/dev/null) && alive "$pid"
}

node_fail() {
    local dir
    dir=$(node_dir "$1")
    tail -n 20 "$dir/log/startup.log" >&2 2>/dev/null || true
    die "$(node_name "$1"): $2 (logs in $dir/log)"
}

# The node's AMQP listener is open, or the node is gone for good.
listener_or_exit() {
    port_open "$(amqp_port "$1")" || { ! launcher_alive "$1" && beam_gone "$1"; }
}

await_node() {
    local node=$1
    wait_until "$TIMEOUT" listener_or_exit "$node" ||
        node_fail "$node" "AMQP port $(amqp_port "$node") not open within ${TIMEOUT}s"
    port_open "$(amqp_port "$node")" || node_fail "$node" "exited during startup"
    ctl "$node" await_startup >/dev/null || node_fail "$node" "did not finish booting"
}

# Nodes restarted together after a full stop wait for each other, and
# now and then one gives up at boot (RabbitMQ 3.10 BOOT FAILED,
# check_cluster_consistency meeting a node not running yet; 1 in 13
# restarts of c3 here), leaving the others waiting.  Each node launched
# here that exits before its AMQP port opens is launched once more.
await_launched() {
    local deadline=$((SECONDS + TIMEOUT)) node waiting again=" "
    while :; do
        waiting=
        for node in "$@"; do
            port_open "$(amqp_port "$node")" && continue
            waiting=$node
            launcher_alive "$node" || ! beam_gone "$node" && continue
            [[ $again != *" $node "* ]] || node_fail "$node" "exited during startup"
            log "$(node_name "$node") exited during startup; starting it once more"
            launch "$node"
            again+="$node "
        done
        [[ -n $waiting ]] || return 0
        ((SECONDS < deadline)) ||
            node_fail "$waiting" "AMQP port $(amqp_port "$waiting") not open within ${TIMEOUT}s"
        sleep 0.2
    done
}

# Does node count c1 as a member of its cluster?
is_member() {
    local status
    status=$(ctl "$1" cluster_status --formatter json 2>/dev/null) || return 1
    # {"disk_nodes":["outboxd-c1@vm",...],...,"running_nodes":[...],...}
    status=${status#*\"disk_nodes\":\[}
    [[ ${status%%]*} == *"\"$(node_name c1)\""* ]]
}

join_node() {
    local node=$1
    is_member "$node" && return
    log "joining $(node_name "$node") to $(node_name c1)"
    ctl "$node" stop_app >/dev/null 2>&1
    ctl "$node" reset >/dev/null 2>&1
    ctl "$node" join_cluster "$(node_name c1)" >/dev/null 2>&1 ||
        node_fail "$node" "join_cluster failed (try: bash $0 reset)"
    ctl "$node" start_app >/dev/null 2>&1
    ctl "$node" await_startup >/dev/null || node_fail "$node" "did not restart"
}

ports_free_for() {
    local node=$1 p
    for p in "$(amqp_port "$node")" "$(dist_port "$node")"; do
        ! port_open "$p" ||
            die "port $p is taken by something that is not $(node_name "$node")"
    done
}

cmd_start() {
    local t0=$EPOCHREALTIME node started=()
    for node in "${NODES[@]}"; do
        beam_pid "$node" >/dev/null && continue
        ports_free_for "$node"
        prepare_dir "$node"
        launch "$node"
        started+=("$node")
    done
    # All at once: nodes restarted after a full stop wait for their peers.
    ((${#started[@]} == 0)) || await_launched "${started[@]}"
    for node in "${NODES[@]}"; do
        await_node "$node"
    done
    join_node c2
    join_node c3
    for node in "${NODES[@]}"; do
        amqp_answers "$node" || node_fail "$node" "guest/guest cannot log in"
    done
    local how="already running"
    ((${#started[@]} == 0)) || how="started ${started[*]} in $(since "$t0")"
    log "ready ($how): $(node_name c1) $(node_name c2) $(node_name c3)," \
        "AMQP on 127.0.0.1:5701-5703"
}

# ---------------------------------------------------------------- stop

stop_node() {
    local node=$1 pid
    pid=$(beam_pid "$node") || return 0
    # shutdown waits until the OS process has exited.
    if ! ctl "$node" shutdown >/dev/null 2>&1; then
        kill -TERM "$pid" 2>/dev/null || true
        kill -CONT "$pid" 2>/dev/null || true
        if ! wait_until 60 beam_gone "$node"; then
            kill -KILL "$pid" 2>/dev/null || true
            wait_until 10 beam_gone "$node" || die "beam.smp ($pid) does not exit"
        fi
    fi
    rm -f "$(node_dir "$node")/pid"
}

cmd_stop() {
    local t0=$EPOCHREALTIME node pids=()
    for node in "${NODES[@]}"; do
        stop_node "$node" &
        pids+=($!)
    done
    local rc=0 pid
    for pid in "${pids[@]}"; do
        wait "$pid" || rc=1
    done
    ((rc == 0)) || die "a node did not stop"
    log "stopped ($(since "$t0"))"
}

cmd_reset() {
    cmd_stop
    rm -rf "$BASE"
    log "reset: removed $BASE"
}

# ---------------------------------------------------------------- status

cmd_status() {
    local node ok=0 pid
    for node in "${NODES[@]}"; do
        if ! pid=$(beam_pid "$node"); then
            log "$(node_name "$node"): down"
            ok=1
        elif ! amqp_answers "$node"; then
            log "$(node_name "$node"): running (pid $pid), AMQP not answering"
            ok=1
        elif [[ $node != c1 ]] && ! is_member "$node"; then
            log "$(node_name "$node"): up on $(amqp_port "$node"), not clustered with c1"
            ok=1
        else
            log "$(node_name "$node"): up on 127.0.0.1:$(amqp_port "$node")"
        fi
    done
    return $ok
}

usage() {
    echo "usage: $0 start|stop|status|reset" >&2
    exit 64
}

(($# == 1)) || usage
case $1 in
start)
    require_root
    take_lock
    cmd_start
    ;;
stop)
    require_root
    take_lock
    cmd_stop
    ;;
status)
    require_root
    cmd_status
    ;;
reset)
    require_root
    take_lock
    cmd_reset
    ;;
*) usage ;;
esac
