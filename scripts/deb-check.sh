#!/usr/bin/env bash
# Tests the Debian package the way a user gets it: builds it (make deb),
# lintian (no error, no warning), installs the .deb with apt so that its
# dependencies resolve, checks the user, the files, the hardening and that
# the service waits for a config, runs the demo against /usr/bin/outboxd and
# outboxctl on the demo's rows, then purges the package, whatever happened.
# As root, on Debian 12, with or without systemd running (CI has none).
#
# Usage: bash scripts/deb-check.sh     (make check-deb; CI runs it)
set -euo pipefail
cd "$(dirname "$0")/.."

DEB_DIR=build/deb
LOG=build/deb-build.log
UNIT=/lib/systemd/system/outboxd.service
WANTS=/etc/systemd/system/multi-user.target.wants/outboxd.service
export DEBIAN_FRONTEND=noninteractive

T0=$SECONDS
step() { printf '\n==> deb-check: %s (%ds)\n' "$*" $((SECONDS - T0)); }
die() { printf 'deb-check: FAILED: %s\n' "$*" >&2; exit 1; }
ok() { printf '    ok: %s\n' "$*"; }
installed() { [[ $(dpkg-query -W -f='${db:Status-Abbrev}' outboxd 2>/dev/null) == i* ]]; }
purge() { apt-get purge -y -q outboxd </dev/null >/dev/null; }

((EUID == 0)) || die "must run as root: it installs the package"
for tool in dpkg-buildpackage dh lintian hardening-check systemd-analyze man; do
    command -v "$tool" >/dev/null ||
        die "$tool not found (bash tests/servers.sh deps installs it)"
done
# A package left by an earlier run would leave apt nothing to install.
if installed; then purge; fi

step "make deb (log in $LOG)"
mkdir -p build
make deb >"$LOG" 2>&1 || { tail -n 40 "$LOG" >&2; die "make deb failed"; }
arch=$(dpkg --print-architecture)
version=$(dpkg-parsechangelog -S Version)
deb=$DEB_DIR/outboxd_${version}_$arch.deb
[[ -f $deb ]] || die "make deb left no $deb"
ls -l "$DEB_DIR"/*.deb

step "lintian: no error, no warning"
# On the .changes: the package, its -dbgsym and the .buildinfo.
rc=0
out=$(lintian --fail-on error,warning --display-info \
    "$DEB_DIR/outboxd_${version}_$arch.changes" 2>&1) || rc=$?
# Its notice about root is no finding.
grep -v '^running with root privileges' <<<"$out" || true
((rc == 0)) || die "lintian exited $rc: errors or warnings above"
ok "lintian: no error, no warning (I: lines are information only)"

step "apt-get install ./$deb"
trap 'installed && purge' EXIT
apt-get install -y -q -o Dpkg::Use-Pty=0 "./$deb" </dev/null
installed || die "outboxd is not installed after apt-get install"

step "the outboxd user, the files, the unit"
IFS=: read -r _ _ uid gid _ home shell < <(getent passwd outboxd) ||
    die "no user outboxd after install"
if ((uid >= 1000)) || [[ $shell != */nologin ]]; then
    die "outboxd is uid $uid with shell $shell: not a system user"
fi
[[ $(getent group outboxd | cut -d: -f3) == "$gid" ]] ||
    die "outboxd's primary group is not the group outboxd"
ok "system user outboxd ($uid:$gid, home $home, shell $shell)"
for f in /usr/bin/outboxd /usr/bin/outboxctl "$UNIT" \
    /usr/lib/sysusers.d/outboxd.conf /etc/outboxd/outboxd.yaml.example \
    /usr/share/outboxd/outboxd-alerts.yml \
    /usr/share/outboxd/outboxd-dashboard.json \
    /usr/share/bash-completion/completions/outboxctl \
    /usr/share/doc/outboxd/copyright; do
    [[ -f $f ]] || die "$f is not installed"
done
for f in sql/*.sql sql/migrations/*.sql; do
    cmp -s "$f" "/usr/share/outboxd/$f" || die "/usr/share/outboxd/$f is not $f"
done
ls /usr/share/doc/outboxd/README.md* >/dev/null || die "no README in /usr/share/doc/outboxd"
ok "binaries, unit, sysusers entry, example config, sql/, alert rules," \
    "dashboard, completion, docs"
for page in 8:outboxd 8:outboxctl 5:outboxd.yaml; do
    path=$(man -w "${page%%:*}" "${page#*:}") ||
        die "man -w ${page/:/ } finds no page (does /etc/dpkg/dpkg.cfg.d drop man pages?)"
    [[ -n $(man -l "$path" 2>/dev/null) ]] || die "man -l $path renders nothing"
    ok "man ${page/:/ }: $path"
done
# Read whole, not piped into grep -q: under pipefail its early exit could
# fail dpkg-query's next write.
conffiles=$(dpkg-query -W -f='${Conffiles}\n' outboxd)
[[ $conffiles == *' /etc/outboxd/outboxd.yaml.example '* ]] ||
    die "/etc/outboxd/outboxd.yaml.example is not a conffile"
out=$(/usr/bin/outboxd --version)
[[ $out == *" ${version%-*}" ]] || die "/usr/bin/outboxd --version says '$out', not ${version%-*}"
ok "/usr/bin/outboxd --version: $out"
hardening-check --nocfprotection /usr/bin/outboxd /usr/bin/outboxctl
# --nocfprotection: Debian 12's crt objects carry no IBT/SHSTK note, so no
# binary linked there can show control-flow protection, whatever its flags.
out=$(systemd-analyze verify --man=no "$UNIT" 2>&1) ||
    die "systemd-analyze verify $UNIT failed: $out"
[[ -z $out ]] || die "systemd-analyze verify $UNIT complained: $out"
ok "systemd-analyze verify $UNIT: silent"

step "the service waits for /etc/outboxd/outboxd.yaml"
[[ ! -e /etc/outboxd/outboxd.yaml ]] || die "the package created /etc/outboxd/outboxd.yaml"
[[ $(readlink -f "$WANTS") == "$(readlink -f "$UNIT")" ]] || die "outboxd.service is not enabled ($WANTS)"
grep -qx 'ConditionPathExists=/etc/outboxd/outboxd.yaml' "$UNIT" ||
    die "$UNIT has no ConditionPathExists on the config"
if [[ -d /run/systemd/system ]]; then
    state=$(systemctl show -p ActiveState --value outboxd)
    result=$(systemctl show -p Result --value outboxd)
    [[ $state == inactive && $result == success ]] ||
        die "outboxd.service is $state ($result) without a config"
    ok "enabled, $state: postinst's start was skipped by the condition"
else
    ok "enabled; no systemd running, so postinst started nothing"
fi

step "a config 0640 root:outboxd is readable by the service's user"
export OUTBOXD_DEMO_DB_PASSWORD=outboxd
install -m 640 -g outboxd conf/demo.yaml /etc/outboxd/outboxd.yaml
trap 'rm -f /etc/outboxd/outboxd.yaml; installed && purge' EXIT
out=$(runuser -u outboxd -- /usr/bin/outboxd -t -c /etc/outboxd/outboxd.yaml 2>&1) ||
    die "outboxd -t as user outboxd: $out"
ok "runuser -u outboxd -- outboxd -t: $out"
rm -f /etc/outboxd/outboxd.yaml

step "the demo against the installed /usr/bin/outboxd"
OUTBOXD_BIN=/usr/bin/outboxd bash scripts/demo.sh
# outboxctl sees the demo's rows, all SENT.
json=$(/usr/bin/outboxctl -c conf/demo.yaml --json status) ||
    die "/usr/bin/outboxctl status failed"
[[ $json == *'"PENDING":0,"PROCESSING":0,"RETRY":0,"DEAD":0,"SENT":'[1-9]* ]] ||
    die "/usr/bin/outboxctl status: $json"
ok "/usr/bin/outboxctl --json status: $json"

step "apt-get purge outboxd"
trap - EXIT
purge
installed && die "outboxd still installed after purge"
for f in /usr/bin/outboxd /etc/outboxd "$UNIT" "$WANTS"; do
    [[ ! -e $f && ! -L $f ]] || die "$f is left after purge"
done
# Debian leaves system users in place, so that files they own keep an owner.
ok "purged: binaries, /etc/outboxd and the unit's enablement gone" \
    "(the system user outboxd stays)"

printf '\ndeb-check: OK in %ds\n' $((SECONDS - T0))
