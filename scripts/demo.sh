#!/usr/bin/env bash
# The demo behind `make demo`: an application commits orders together with
# their outbox events, outboxd relays them to RabbitMQ, and we show the rows
# turning SENT and the messages arriving in a queue. Exits 0 only if every
# row was SENT, every payload arrived exactly once and outboxd exited 0.
# OUTBOXD_BIN runs another binary, such as the package's /usr/bin/outboxd.
set -euo pipefail
cd "$(dirname "$0")/.."

OUTBOXD=${OUTBOXD_BIN:-build/outboxd}
CONFIG=conf/demo.yaml
DB=outboxd_demo
QUEUE=outboxd.demo
SENT_DEADLINE=20
# No trailing slash: amqp-tools (librabbitmq) read ".../" as the empty vhost.
AMQP_URL=amqp://guest:guest@127.0.0.1:5672
export OUTBOXD_DEMO_DB_PASSWORD=outboxd

step() { printf '\n==> %s\n' "$*"; }
fail() { printf 'demo: FAILED: %s\n' "$*" >&2; exit 1; }
# kill -0 also succeeds for a child that exited but was not waited for.
running() { [[ $(ps -o stat= -p "$1" 2>/dev/null) == [^Z]* ]]; }

# The application's connection: the same account and TCP port outboxd uses,
# the test server that keeps a binary log (tests/servers.sh), so that
# outboxd is woken by commits.
sql() {
    MYSQL_PWD=$OUTBOXD_DEMO_DB_PASSWORD mariadb --protocol=tcp -h127.0.0.1 \
        -P3307 -uoutboxd "$@"
}

[[ -x $OUTBOXD ]] || fail "$OUTBOXD not built (run make)"

step "Start MariaDB and RabbitMQ"
bash tests/servers.sh start

step "Create database $DB: sql/outbox.sql and a business table, orders"
sql -e "DROP DATABASE IF EXISTS $DB; CREATE DATABASE $DB"
sql "$DB" <sql/outbox.sql
sql "$DB" -e "CREATE TABLE orders (
    id BIGINT AUTO_INCREMENT PRIMARY KEY,
    customer VARCHAR(64),
    amount DECIMAL(10,2),
    created_at TIMESTAMP(6) DEFAULT CURRENT_TIMESTAMP(6))"

# commit_order CUSTOMER AMOUNT PAID: the order and its events, one transaction.
commit_order() {
    local customer=$1 amount=$2 paid=$3 paid_event=
    if [[ $paid == yes ]]; then
        paid_event="INSERT INTO outbox_event
              (event_id, aggregate_type, aggregate_id, event_type, payload)
            VALUES (UUID(), 'Order', @order_id, 'OrderPaid',
              JSON_OBJECT('order_id', CAST(@order_id AS UNSIGNED), 'paid', $amount));"
    fi
    sql "$DB" -e "START TRANSACTION;
        INSERT INTO orders (customer, amount) VALUES ('$customer', $amount);
        SET @order_id = LAST_INSERT_ID();
        -- CAST: JSON_OBJECT would quote a user variable as a string.
        INSERT INTO outbox_event
            (event_id, aggregate_type, aggregate_id, event_type, payload)
          VALUES (UUID(), 'Order', @order_id, 'OrderCreated',
            JSON_OBJECT('order_id', CAST(@order_id AS UNSIGNED),
                        'customer', '$customer', 'amount', $amount));
        $paid_event
        COMMIT;"
}

step "Commit 5 orders, each with its outbox events in the same transaction"
# customer amount paid-at-checkout
orders=("alice 19.90 yes" "bob 5.00 no" "carol 120.00 yes" "dave 42.42 no"
    "erin 7.50 yes")
for o in "${orders[@]}"; do
    read -r customer amount paid <<<"$o"
    commit_order "$customer" "$amount" "$paid"
done
sql -t "$DB" -e "SELECT * FROM orders;
    SELECT id, aggregate_id, event_type, status, payload FROM outbox_event"
events=$(sql -N "$DB" -e "SELECT COUNT(*) FROM outbox_event")

step "Consume queue $QUEUE, bound to amq.topic with Order.#"
# amqp-tools has no bind command: amqp-consume declares the queue (not
# durable, auto-delete) and binds it, so it runs for the whole demo as the
# downstream service would. Each message body becomes one line.
amqp-delete-queue -u "$AMQP_URL" -q "$QUEUE" >/dev/null
received=$(mktemp)
amqp-consume -u "$AMQP_URL" -q "$QUEUE" -e amq.topic -r 'Order.#' \
    -- sh -c 'cat; echo' >"$received" 2>&1 </dev/null &
consumer_pid=$!
trap 'kill -TERM $consumer_pid 2>/dev/null || true; rm -f "$received"' EXIT
# Once a marker sent through amq.topic comes back, the binding is in place;
# until then markers are unroutable and dropped, so keep sending.
marker='{"demo": "binding ready"}'
deadline=$((SECONDS + 10))
until grep -qxF "$marker" "$received"; do
    running "$consumer_pid" || fail "amqp-consume: $(cat "$received")"
    ((SECONDS < deadline)) || fail "queue $QUEUE not bound within 10s"
    amqp-publish -u "$AMQP_URL" -e amq.topic -r Order.demo -b "$marker"
    sleep 0.2
done
echo "queue $QUEUE bound and consumed"

step "Start $OUTBOXD -c $CONFIG"
# Its log lines (stderr) are shown indented as they come.
"$OUTBOXD" -c "$CONFIG" </dev/null 2> >(sed -u 's/^/    outboxd| /' >&2) &
outboxd_pid=$!
# Never leave it or the consumer running, whatever goes wrong below.
trap 'kill -TERM $outboxd_pid $consumer_pid 2>/dev/null || true
      rm -f "$received"' EXIT

step "Wait until all $events outbox rows are SENT (at most ${SENT_DEADLINE}s)"
deadline=$((SECONDS + SENT_DEADLINE))
while :; do
    unsent=$(sql -N "$DB" -e "SELECT COUNT(*) FROM outbox_event WHERE status <> 'SENT'")
    ((unsent == 0)) && break
    running "$outboxd_pid" || break
    ((SECONDS < deadline)) || break
    sleep 0.2
done
echo "$((events - unsent)) of $events rows SENT"

step "Commit one more order while outboxd is idle: its commit wakes outboxd"
# Long enough for the idle claims to back off to their ceiling: only the
# binlog's wake makes this one quick.
sleep 2
commit_order frank 3.30 no
events=$((events + 1))
deadline=$((SECONDS + SENT_DEADLINE))
until [[ $(sql -N "$DB" -e "SELECT COUNT(*) FROM outbox_event
        WHERE status <> 'SENT'") == 0 ]]; do
    if ! running "$outboxd_pid" || ((SECONDS >= deadline)); then break; fi
    sleep 0.05
done
sql -t "$DB" -e "SELECT id, event_type, status,
    TIMESTAMPDIFF(MICROSECOND, created_at, sent_at) / 1000 AS commit_to_sent_ms
    FROM outbox_event ORDER BY id DESC LIMIT 1"
unsent=$(sql -N "$DB" -e "SELECT COUNT(*) FROM outbox_event WHERE status <> 'SENT'")
sql -t "$DB" -e "SELECT id, event_id, aggregate_id, event_type, status, sent_at
    FROM outbox_event ORDER BY id"

step "Messages received from $QUEUE (bodies, in arrival order)"
payloads() { grep -vxF "$marker" "$received" || true; }
# Sent rows were confirmed, so their messages are queued: a short wait.
deadline=$((SECONDS + (unsent == 0 ? 10 : 1)))
while (($(payloads | wc -l) < events && SECONDS < deadline)); do
    sleep 0.2
done
kill -TERM "$consumer_pid" 2>/dev/null || true
wait "$consumer_pid" 2>/dev/null || true
payloads | sed 's/^/    /'
got=$(payloads | wc -l)
# Every payload arrives unchanged and exactly once (no faults, no duplicates).
if diff <(payloads | sort) \
    <(sql -N -r "$DB" -e "SELECT payload FROM outbox_event" | sort) >/dev/null; then
    match=yes
else
    match=no
fi
echo "$got messages for $events events; each payload exactly once: $match"

step "Stop outboxd with SIGTERM"
rc=0 stop_problem=
if running "$outboxd_pid"; then
    kill -TERM "$outboxd_pid"
    wait "$outboxd_pid" || rc=$?
    echo "outboxd exited with status $rc"
    ((rc == 0)) || stop_problem="outboxd exited with status $rc on SIGTERM"
else
    # It must run until told to stop, whatever its status.
    wait "$outboxd_pid" || rc=$?
    echo "outboxd had already exited, with status $rc"
    stop_problem="outboxd exited on its own with status $rc"
fi

problems=()
((unsent == 0)) || problems+=("$unsent outbox rows not SENT within ${SENT_DEADLINE}s")
[[ $match == yes ]] || problems+=("messages from $QUEUE do not match the outbox payloads")
[[ -z $stop_problem ]] || problems+=("$stop_problem")
if ((${#problems[@]} > 0)); then
    printf 'demo: FAILED: %s\n' "${problems[@]}" >&2
    exit 1
fi
step "Demo OK: $events events committed, relayed, confirmed and consumed"
