#!/usr/bin/env bash
# Checks systemd/outboxd.service without installing it: `systemd-analyze
# verify` on a copy whose commands point at the built binary (verify
# insists that ExecStart exists), silent or it fails, since verify only
# warns about unknown keys; the keys docs/contract.md section 8 promises; and the
# hardening score of `systemd-analyze security`, which must stay "OK".
# It then checks that systemd/outboxd.sysusers creates the unit's user.
#
# Usage: bash scripts/systemd-check.sh [BINARY]   (default build/outboxd)
set -euo pipefail
cd "$(dirname "$0")/.."

UNIT=systemd/outboxd.service
SYSUSERS=systemd/outboxd.sysusers
BIN=$(realpath "${1:-build/outboxd}")
INSTALLED=/usr/bin/outboxd # the package's; make install rewrites it to $(BINDIR)
MAX_EXPOSURE=2.0

die() { printf 'systemd-check: %s\n' "$*" >&2; exit 1; }

command -v systemd-analyze >/dev/null ||
    die "systemd-analyze not found (apt-get install systemd)"
[[ -x $BIN ]] || die "$BIN is not built (run make first)"

# The unit must name the binary where the package puts it.
grep -q "^ExecStart=$INSTALLED " "$UNIT" ||
    die "$UNIT: ExecStart does not run $INSTALLED"
# shellcheck disable=SC2016 # $MAINPID is literal text in the unit
for key in 'Type=notify' 'WatchdogSec=' 'Restart=on-failure' \
    'ExecReload=/bin/kill -HUP $MAINPID' 'NoNewPrivileges=yes' \
    'ProtectSystem=strict' 'User=outboxd' 'Group=outboxd' \
    'ConditionPathExists=/etc/outboxd/outboxd.yaml' \
    'Documentation=man:outboxd(8) man:outboxd.yaml(5)'; do
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

# The user the unit runs as is the one the sysusers entry creates, static
# (a system uid) and without a login shell.
mkdir "$tmp/root" "$tmp/root/etc"
out=$(systemd-sysusers --root="$tmp/root" - <"$SYSUSERS" 2>&1) ||
    die "systemd-sysusers rejects $SYSUSERS: $out"
IFS=: read -r name _ uid _ _ _ shell <"$tmp/root/etc/passwd" ||
    die "$SYSUSERS creates no user"
if [[ $name != outboxd || $shell != */nologin ]] || ((uid >= 1000)); then
    die "$SYSUSERS: user $name uid $uid shell $shell, not a system user outboxd"
fi

echo "systemd-check: $UNIT verifies; exposure level $score;" \
    "$SYSUSERS creates system user $name"
