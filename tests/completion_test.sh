#!/usr/bin/env bash
# completion_test: conf/bash-completion/outboxctl, sourced as bash does,
# completes commands, subcommands, each command's options, outbox names
# and files; its option lists agree with `outboxctl COMMAND --help`.
# Usage: tests/completion_test.sh path/to/outboxctl
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bin=$(realpath "${1:?usage: $0 path/to/outboxctl}")
# shellcheck source=conf/bash-completion/outboxctl disable=SC2154
. "$src/conf/bash-completion/outboxctl"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0

# complete "WORDS..." (the last word is the one being completed): COMPREPLY.
complete_line() {
    read -ra COMP_WORDS <<<"$1"
    [[ $1 == *" " ]] && COMP_WORDS+=("")
    COMP_WORDS[0]=$bin
    COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
    COMPREPLY=()
    _outboxctl
    printf '%s\n' "${COMPREPLY[@]}" | sort | tr '\n' ' ' | sed 's/ $//'
}

# expect "LINE" "WANT": the completions, sorted, space-separated.
expect() {
    local got
    got=$(complete_line "$1")
    if [[ $got == "$2" ]]; then
        printf 'ok   %-45s -> %s\n' "'$1'" "$got"
    else
        printf 'FAIL %-45s -> "%s", want "%s"\n' "'$1'" "$got" "$2"
        failed=1
    fi
}

cat >"$tmp/outboxd.yaml" <<'YAML'
brokers:
  main:
    url: amqp://127.0.0.1:1/
databases:
  orders:
    host: 127.0.0.1
    port: 1
    user: u
    database: shop
    outboxes:
      - table: outbox_event
      - table: audit_outbox
  tenants:
    port: 1
    user: u
    database_like: 'tenant\_%'
    outboxes:
      - table: outbox_event
YAML
touch "$tmp/other.txt"

expect "outboxctl " "dead help outboxes purge status"
expect "outboxctl pu" "purge"
expect "outboxctl dead " "list release retry"
expect "outboxctl --json dead r" "release retry"
expect "outboxctl help " "dead help outboxes purge status"
expect "outboxctl help dead " "list release retry"
expect "outboxctl --j" "--json"
expect "outboxctl status --" "--help --json --outbox --version"
expect "outboxctl dead list --" "--help --json --limit --outbox --version"
expect "outboxctl dead retry --" \
    "--all --dry-run --help --json --limit --outbox --version"
expect "outboxctl purge --sent-older-than 7d --d" "--dry-run"
expect "outboxctl purge --" \
    "--dry-run --help --json --limit --outbox --sent-older-than --version"
expect "outboxctl -c $tmp/outboxd.yaml purge --outbox " \
    "orders.audit_outbox orders.outbox_event tenants/\\*"
expect "outboxctl -c $tmp/outboxd.yaml status --outbox t" "tenants/\\*"
expect "outboxctl status --outbox orders.o -c $tmp/outboxd.yaml" \
    "$tmp/outboxd.yaml"
expect "outboxctl -c $tmp/outboxd.yaml dead list --outbox orders.a" \
    "orders.audit_outbox"
expect "outboxctl -c $tmp/ou" "$tmp/outboxd.yaml"
expect "outboxctl purge --sent-older-than 1" "12h 1d 1h"
expect "outboxctl dead list --limit " ""

# The lists above agree with what outboxctl itself accepts.
for cmd in status "dead list" "dead retry" "dead release" purge outboxes; do
    # shellcheck disable=SC2086
    want=$("$bin" $cmd --help | sed -n '/^options:/,$p' |
        grep -o -- '--[a-z][a-z-]*' | sort -u |
        tr '\n' ' ' | sed 's/ $//')
    got=$(tr ' ' '\n' <<<"${_outboxctl_opts[$cmd]}" | sed '/^$/d' | sort -u |
        tr '\n' ' ' | sed 's/ $//')
    if [[ $got == "$want" ]]; then
        printf 'ok   %-45s -> %s\n' "options of $cmd" "$got"
    else
        printf 'FAIL options of %s: completion "%s", --help "%s"\n' \
            "$cmd" "$got" "$want"
        failed=1
    fi
done
want=$("$bin" --help | sed -n '/^commands:/,/^[^ c]/p' |
    awk '/^  [a-z]/ {print $1}' | sort -u | tr '\n' ' ' | sed 's/ $//')
got=$(complete_line "outboxctl ")
[[ $got == "$want" ]] || {
    printf 'FAIL commands: completion "%s", --help "%s"\n' "$got" "$want"
    failed=1
}
exit $failed
