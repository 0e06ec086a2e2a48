#!/usr/bin/env bash
# Checks systemd/outboxd.service without installing it: `systemd-analyze
# verify` on a copy whose commands point at the built binary (verify
# insists that ExecStart exists), silent or it fails, since verify only
# warns about unknown keys; the keys docs/contract.md section 8 promises; and the
# hardening score of `systemd-analyze security`, which must stay "OK".
#
# Usage: bash scripts/systemd-check.sh [BINARY]   (default build/outboxd)
set -euo pipefail
cd "$(dirname "$0")/.."

UNIT=systemd/outboxd.service
BIN=$(realpath "${1:-build/outboxd}")
INSTALLED=/usr/local/bin/outboxd # Makefile: $(PREFIX)/bin, PREFIX=/usr/local
MAX_EXPOSURE=2.0

die() { printf 'systemd-check: %s\n' "$*" >&2; exit 1; }

command -v systemd-analyze >/dev/null ||
    die "systemd-analyze not found (apt-get install systemd)"
[[ -x $BIN ]] || die "$BIN is not built (run make first)"

# The unit must name the binary where `make install` puts it.
grep -q "^ExecStart=$INSTALLED " "$UNIT" ||
    die "$UNIT: ExecStart does not run $INSTALLED"
# shellcheck disable=SC2016 # $MAINPID is literal text in the unit
for key in 'Type=notify' 'WatchdogSec=' 'Restart=on-failure' \
    'ExecReload=/bin/kill -HUP $MAINPID' 'NoNewPrivileges=yes' \
    'ProtectSystem=strict' 'DynamicUser=yes'; do
    grep -qF "$key" "$UNIT" || die "$UNIT: missing $key"
done

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed "s#$INSTALLED#$BIN#g" "$UNIT" >"$tmp/outboxd.service"

out=$(systemd-analyze verify --man=no "$tmp/outboxd.service" 2>&1) ||
    die "systemd-analyze verify failed: $out"
[[ -z $out ]] || die "systemd-analyze verify complained: $out"

score=$(systemd-analyze security --offline=yes --no-pager \
    "$tmp/outboxd.service" 2>&1 |
    sed -n 's/.*Overall exposure level for outboxd.service: \([0-9.]*\).*/\1/p')
[[ -n $score ]] || die "systemd-analyze security gave no exposure level"
awk -v s="$score" -v max="$MAX_EXPOSURE" 'BEGIN { exit !(s <= max) }' ||
    die "exposure level $score is above $MAX_EXPOSURE: hardening regressed"

echo "systemd-check: $UNIT verifies; exposure level $score"
