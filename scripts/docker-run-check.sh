#!/usr/bin/env bash
# The Dockerfile built and run for real (make check-docker, in CI): starts
# dockerd if none answers, makes the Debian 12 base images with mmdebstrap
# (no registry is needed), builds the image, and runs it as a sidecar on the
# host network against the servers tests/servers.sh starts: config mounted
# read-only, database password from the environment. It passes only if a
# consumer receives each of 2,000 committed events exactly once, the
# container turns healthy and `docker stop` ends it with exit code 0 within
# the grace period. Prints how long each of those took.
#
# Usage (as root): bash scripts/docker-run-check.sh
#   OUTBOXD_DOCKER_REBASE=1  make the base images even if they exist
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's client, the one that matches its dockerd (another may be first
# on PATH).
DOCKER=/usr/bin/docker
IMAGE=outboxd:check
CONTAINER=outboxd-docker-check
DB=outboxd_docker_check
QUEUE=outboxd.docker-check
EVENTS=2000
STOP_GRACE=10 # docker stop's default, and relay.shutdown_timeout's
WORK=build/docker-check
AMQP_URL=amqp://guest:guest@127.0.0.1:5672
export OUTBOXD_DOCKER_DB_PASSWORD=outboxd # tests/servers.sh's account

step() { printf '\n--> %s\n' "$*"; }
# Once the sidecar runs, its log is what tells why.
fail() {
    if [[ -n ${started:-} ]]; then
        $DOCKER logs --tail 20 "$CONTAINER" 2>&1 | sed 's/^/    outboxd| /' >&2 || true
    fi
    printf 'docker-run-check: FAILED: %s\n' "$*" >&2
    exit 1
}
running() { [[ $(ps -o stat= -p "$1" 2>/dev/null) == [^Z]* ]]; }
# Seconds since an $EPOCHREALTIME stamp, to one decimal.
since() {
    local us=$((${EPOCHREALTIME/./} - ${1/./}))
    printf '%d.%ds' $((us / 1000000)) $((us / 100000 % 10))
}
sql() {
    MYSQL_PWD=$OUTBOXD_DOCKER_DB_PASSWORD mariadb --protocol=tcp -h127.0.0.1 \
        -P3307 -uoutboxd "$@"
}

# wait_for SECONDS WHAT CHECK [GUARD]: poll CHECK every 0.2 s; fail at the
# deadline, or as soon as GUARD (is what we wait on still alive?) fails.
wait_for() {
    local deadline=$((SECONDS + $1)) what=$2 check=$3 guard=${4:-}
    until $check; do
        if [[ -n $guard ]] && ! $guard; then fail "$what: $guard failed"; fi
        ((SECONDS < deadline)) || fail "$what: not within $1s"
        sleep 0.2
    done
}

declare -A took=()
cleanup_cmds=()
cleanup() {
    local i
    for ((i = ${#cleanup_cmds[@]} - 1; i >= 0; i--)); do
        eval "${cleanup_cmds[i]}" >/dev/null 2>&1 || true
    done
}
trap cleanup EXIT
on_exit() { cleanup_cmds+=("$1"); }

# ------------------------------------------------------------ the engine

install_tools() {
    local missing=()
    [[ -x $DOCKER ]] && command -v dockerd >/dev/null || missing+=(docker.io)
    command -v mmdebstrap >/dev/null || missing+=(mmdebstrap)
    ((${#missing[@]})) || return 0
    echo "installing ${missing[*]}"
    # This script starts dockerd with its own options: no init script may.
    local policy=/usr/sbin/policy-rc.d made=
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
        made=1
        on_exit "rm -f $policy"
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q </dev/null
    apt-get install -y -q -o DPkg::Lock::Timeout=300 \
        --no-install-recommends "${missing[@]}" </dev/null
    [[ -z $made ]] || rm -f "$policy"
}

docker_answers() { $DOCKER info >/dev/null 2>&1; }
dockerd_alive() { running "$dockerd_pid"; }

# Host networking only: no bridge, and no iptables rules on the machine.
start_dockerd() {
    if docker_answers; then
        echo "dockerd: already running"
        return
    fi
    local t0=$EPOCHREALTIME
    mkdir -p "$WORK"
    dockerd --iptables=false --bridge=none \
        >"$WORK/dockerd.log" 2>&1 </dev/null &
    dockerd_pid=$!
    on_exit "kill -TERM $dockerd_pid; wait $dockerd_pid"
    wait_for 60 "dockerd (log: $WORK/dockerd.log)" docker_answers dockerd_alive
    took[dockerd]=$(since "$t0")
    echo "dockerd: started in ${took[dockerd]} ($WORK/dockerd.log)"
}

# The machine's own Debian 12 sources, which apt here reaches.
debian_sources() {
    # shellcheck disable=SC2016 # apt's own $(FIELD) syntax
    apt-get indextargets --format '$(SITE) $(RELEASE)' \
        'Created-By: Packages' 'Component: main' |
        awk '$2 ~ /^bookworm(-updates|-security)?$/ { print "deb " $1 " " $2 " main" }' |
        sort -u
}

# One minbase tree (useradd needs passwd, which --variant=apt lacks) with
# docs, man pages and locales left out as in the slim image, tagged as both
# base images the Dockerfile names.
make_base() {
    local tags=() t t0=$EPOCHREALTIME
    for t in debian:12 debian:12-slim; do
        if [[ -n ${OUTBOXD_DOCKER_REBASE:-} ]] ||
            ! $DOCKER image inspect "$t" >/dev/null 2>&1; then
            tags+=("$t")
        fi
    done
    if ((${#tags[@]} == 0)); then
        echo "base: debian:12 and debian:12-slim exist (OUTBOXD_DOCKER_REBASE=1 remakes them)"
        return
    fi
    local sources
    mapfile -t sources < <(debian_sources)
    ((${#sources[@]})) || fail "apt has no bookworm sources"
    local list
    printf -v list '%s; ' "${sources[@]}"
    echo "base: mmdebstrap --variant=minbase from: ${list%; }"
    mmdebstrap --variant=minbase --quiet \
        --dpkgopt='path-exclude=/usr/share/doc/*' \
        --dpkgopt='path-include=/usr/share/doc/*/copyright' \
        --dpkgopt='path-exclude=/usr/share/man/*' \
        --dpkgopt='path-exclude=/usr/share/info/*' \
        --dpkgopt='path-exclude=/usr/share/locale/*' \
        bookworm - "${sources[@]}" |
        $DOCKER import --change 'CMD ["bash"]' - "${tags[0]}" >/dev/null ||
        fail "mmdebstrap | docker import"
    for t in "${tags[@]:1}"; do $DOCKER tag "${tags[0]}" "$t"; done
    took[mmdebstrap]=$(since "$t0")
    echo "base: ${tags[*]} made in ${took[mmdebstrap]}"
}

# ------------------------------------------------------------ the image

version() { sed -n 's/^#define OUTBOXD_VERSION "\(.*\)"$/\1/p' daemon/util.h; }

build_image() {
    local t0=$EPOCHREALTIME rev
    rev=$(git rev-parse HEAD 2>/dev/null) || rev=
    mkdir -p "$WORK"
    $DOCKER build --network host --build-arg OUTBOXD_VERSION="$(version)" \
        --build-arg OUTBOXD_REVISION="$rev" -t "$IMAGE" . >"$WORK/build.log" 2>&1 ||
        { tail -n 40 "$WORK/build.log"; fail "docker build (log: $WORK/build.log)"; }
    took[build]=$(since "$t0")
    echo "built $IMAGE in ${took[build]}, $($DOCKER image inspect -f '{{.Size}}' "$IMAGE" |
        awk '{ printf "%.0f MB", $1 / 1e6 }') (log: $WORK/build.log)"
}

label() {
    $DOCKER image inspect -f "{{index .Config.Labels \"org.opencontainers.image.$1\"}}" "$IMAGE"
}

check_labels() {
    local want
    for want in "title=outboxd" "version=$(version)" "licenses=ISC"; do
        [[ $(label "${want%%=*}") == "${want#*=}" ]] ||
            fail "label org.opencontainers.image.${want%%=*} is '$(label "${want%%=*}")', not '${want#*=}'"
    done
    [[ -n $(label description) && -n $(label documentation) ]] ||
        fail "labels description and documentation must not be empty"
    echo "labels: title, version $(version), licenses ISC, description, documentation"
}

# ------------------------------------------------------------ the servers

setup_database() {
    bash tests/servers.sh start
    sql -e "DROP DATABASE IF EXISTS $DB; CREATE DATABASE $DB"
    on_exit "sql -e 'DROP DATABASE IF EXISTS $DB'"
    sql "$DB" <sql/outbox.sql
}

# As scripts/demo.sh: amqp-consume declares and binds the queue; a marker
# that comes back says the binding is in place. One body per line.
marker='{"docker-check": "binding ready"}'
marker_back() { grep -qxF "$marker" "$received"; }
consumer_alive() { running "$consumer_pid"; }
bind_marker() {
    amqp-publish -u "$AMQP_URL" -e amq.topic -r DockerCheck.marker -b "$marker"
    marker_back
}

start_consumer() {
    received=$WORK/received
    amqp-delete-queue -u "$AMQP_URL" -q "$QUEUE" >/dev/null
    amqp-consume -u "$AMQP_URL" -q "$QUEUE" -e amq.topic -r 'DockerCheck.#' \
        -- sh -c 'cat; echo' >"$received" 2>&1 </dev/null &
    consumer_pid=$!
    on_exit "kill -TERM $consumer_pid; amqp-delete-queue -u $AMQP_URL -q $QUEUE"
    wait_for 10 "queue $QUEUE bound" bind_marker consumer_alive
    echo "queue $QUEUE bound to amq.topic (DockerCheck.#) and consumed"
}

# Host networking shares the machine's ports: take a free one.
free_port() {
    local p
    for p in $(seq 29180 29280); do
        [[ -z $(ss -Htln "sport = :$p") ]] && { echo "$p"; return; }
    done
    fail "no free port in 29180-29280"
}

write_config() {
    port=$(free_port)
    config=$PWD/$WORK/outboxd.yaml
    cat >"$config" <<YAML
relay:
  id: docker-check
  listen: 127.0.0.1:$port
brokers:
  local:
    url: $AMQP_URL/
databases:
  docker_check:
    host: 127.0.0.1
    port: 3307
    user: outboxd
    password_env: OUTBOXD_DOCKER_DB_PASSWORD
    database: $DB
    outboxes:
      - table: outbox_event
        broker: local
        exchange: amq.topic
        routing_key: "{aggregate_type}.{event_type}"
YAML
    chmod 644 "$config" # read by uid 10001 in the container
}

# ------------------------------------------------------------ the sidecar

# docker run with what every run here shares: the host network only, the
# config read-only, the password passed by name from this environment; and
# the restrictions docs/operations.md's Kubernetes example sets.
docker_run() {
    $DOCKER run --network host --read-only --cap-drop ALL \
        --security-opt no-new-privileges \
        -v "$config:/etc/outboxd/outboxd.yaml:ro" \
        -e OUTBOXD_DOCKER_DB_PASSWORD -e OUTBOXD_HEALTH_PORT="$port" "$@"
}

check_config() {
    local out
    out=$(docker_run --rm "$IMAGE" -t 2>&1) || fail "outboxd -t in the image: $out"
    echo "outboxd -t in the image: $out"
}

state() { $DOCKER inspect -f "{{$1}}" "$CONTAINER"; }
container_running() { [[ $(state .State.Running) == true ]]; }

start_container() {
    $DOCKER rm -f "$CONTAINER" >/dev/null 2>&1 || true
    started=$EPOCHREALTIME
    docker_run -d --name "$CONTAINER" "$IMAGE" >/dev/null
    on_exit "$DOCKER rm -f $CONTAINER"
    [[ $(state .HostConfig.NetworkMode) == host ]] || fail "not on the host network"
    local user
    user=$($DOCKER exec "$CONTAINER" id -un) || fail "docker exec id"
    [[ $user == outboxd ]] || fail "outboxd runs as $user in the container"
    echo "container $CONTAINER started on the host network, read-only," \
        "no capabilities, as user $user; /metrics on 127.0.0.1:$port"
}

# The application's commit: EVENTS rows over 50 aggregates, one transaction
# (seq_1_to_N is MariaDB's sequence engine).
commit_events() {
    sql "$DB" -e "INSERT INTO outbox_event
            (event_id, aggregate_type, aggregate_id, event_type, payload)
        SELECT UUID(), 'DockerCheck', seq % 50, 'Relayed', JSON_OBJECT('n', seq)
        FROM seq_1_to_$EVENTS"
}

unsent() { sql -N "$DB" -e "SELECT COUNT(*) FROM outbox_event WHERE status <> 'SENT'"; }
all_sent() { (($(unsent) == 0)); }
payloads() { grep -vxF "$marker" "$received" || true; }
all_received() { (($(payloads | wc -l) >= EVENTS)); }

relay_events() {
    local t0=$EPOCHREALTIME
    commit_events
    wait_for 60 "$EVENTS rows SENT" all_sent container_running
    took[sent]=$(since "$t0")
    wait_for 30 "$EVENTS messages consumed" all_received consumer_alive
    took[relay]=$(since "$t0")
    # Each body once: n = 1..EVENTS, no duplicates and nothing else.
    diff <(payloads | sort) <(seq "$EVENTS" | sed 's/.*/{"n": &}/' | sort) \
        >/dev/null ||
        fail "the messages are not each of the $EVENTS payloads once: $(payloads | sort | uniq -c | sort -rn | head -n 3)"
    echo "$EVENTS events committed: all SENT in ${took[sent]}, all consumed" \
        "exactly once in ${took[relay]}"
}

healthy() {
    local h
    h=$(state .State.Health.Status)
    [[ $h != unhealthy ]] || fail "container unhealthy: $(state '(index .State.Health.Log 0).Output')"
    [[ $h == healthy ]]
}

await_healthy() {
    wait_for 60 "container healthy" healthy container_running
    took[healthy]=$(since "$started")
    echo "container healthy ${took[healthy]} after docker run (HEALTHCHECK every 15s)"
}

stop_container() {
    local t0=$EPOCHREALTIME us rc
    $DOCKER stop -t "$STOP_GRACE" "$CONTAINER" >/dev/null || fail "docker stop"
    took[stop]=$(since "$t0")
    us=$((${EPOCHREALTIME/./} - ${t0/./}))
    rc=$(state .State.ExitCode)
    $DOCKER logs "$CONTAINER" >"$WORK/outboxd.log" 2>&1
    echo "docker stop: ${took[stop]}, exit code $rc; the end of $WORK/outboxd.log:"
    $DOCKER logs --tail 4 "$CONTAINER" 2>&1 | sed 's/^/    outboxd| /'
    ((us < STOP_GRACE * 1000000)) || fail "docker stop took the whole ${STOP_GRACE}s grace"
    ((rc == 0)) || fail "outboxd exited with $rc on SIGTERM"
}

# ------------------------------------------------------------ main

((EUID == 0)) || fail "run as root (it installs and starts dockerd)"
mkdir -p "$WORK"
step "Docker engine"
install_tools
start_dockerd
echo "docker: $($DOCKER version -f 'client {{.Client.Version}}, server {{.Server.Version}}')," \
    "storage driver $($DOCKER info -f '{{.Driver}}')"
step "Base images"
make_base
step "docker build --network host"
build_image
check_labels
step "Sidecar against MariaDB (127.0.0.1:3307, database $DB) and RabbitMQ"
setup_database
start_consumer
write_config
check_config
start_container
relay_events
await_healthy
stop_container
printf '\ndocker-run-check: OK: base %s, build %s, healthy %s, %d events SENT %s and consumed %s, stop %s\n' \
    "${took[mmdebstrap]:-reused}" "${took[build]}" "${took[healthy]}" "$EVENTS" \
    "${took[sent]}" "${took[relay]}" "${took[stop]}"
