#!/usr/bin/env bash
# Checks the Dockerfile without a Docker engine, against this machine's
# packages: its runtime stage must install a package for every shared library that the
# built binary links (directly or through the packages' dependencies), its
# build stage must hold the -dev packages behind the Makefile's pkg-config
# modules, and those must be ones tests/servers.sh installs, so the image
# builds what CI tests; and its OCI labels are there, the version the
# binary's.  Package dependencies are read from dpkg, offline.
# scripts/docker-run-check.sh builds and runs the image where Docker runs.
#
# Usage: bash scripts/docker-check.sh [BINARY]   (default build/outboxd)
set -euo pipefail
cd "$(dirname "$0")/.."

BIN=${1:-build/outboxd}
# Runtime packages that are not libraries, with why they are there.
NON_LIBRARY=(ca-certificates) # TLS to the broker or database (amqps://)

die() { printf 'docker-check: %s\n' "$*" >&2; exit 1; }
[[ -x $BIN ]] || die "$BIN is not built (run make first)"

# The packages that `apt-get install` lines of one stage name: stage 1 is
# the build, 2 the runtime.  Continuation lines are joined first.
stage_packages() {
    sed -e ':a' -e '/\\$/N; s/\\\n//; ta' Dockerfile | awk -v want="$1" '
        /^FROM / { stage++ }
        stage == want && /apt-get install/ {
            on = 0
            for (i = 1; i <= NF; i++) {
                if ($i == "&&") on = 0
                else if (on && $i !~ /^-/) print $i
                if ($i == "install") on = 1
            }
        }'
}

# Packages installed here that pkg and its Depends/Pre-Depends pull in.
closure() {
    local -A seen=()
    local queue=("$@") p deps alt
    while ((${#queue[@]})); do
        p=${queue[0]}
        queue=("${queue[@]:1}")
        [[ -n ${seen[$p]:-} ]] && continue
        deps=$(dpkg-query -W -f='${Depends}, ${Pre-Depends}' "$p" 2>/dev/null) ||
            continue # virtual or not installed: nothing to follow
        seen[$p]=1
        echo "$p"
        # "a (>= 1) | b:any, c" -> a b c
        # shellcheck disable=SC2013 # words: package names
        for alt in $(sed -e 's/([^)]*)//g; s/[|,]/ /g; s/:[a-z0-9]*//g' <<<"$deps"); do
            [[ -z ${seen[$alt]:-} ]] && queue+=("$alt")
        done
    done
}

# The package that owns a library path (usrmerge: try both spellings).
owner() {
    local path=$1 real line
    real=$(realpath "$path")
    for p in "$path" "$real" "${real#/usr}" "/usr$path"; do
        # No pipe into head: under pipefail its early exit could fail
        # dpkg-query's next write, and with it the lookup.
        line=$(dpkg-query -S "$p" 2>/dev/null) || continue
        line=${line%%$'\n'*}
        echo "${line%%:*}"
        return
    done
    return 1
}

# Whether word is one of the other arguments.  Not printf | grep -q: under
# pipefail, grep leaving at the first match could fail printf's next
# write and the test with it (CI failed so, 2026-12-06).
listed() {
    local word=$1 x
    shift
    for x in "$@"; do
        [[ $x == "$word" ]] && return 0
    done
    return 1
}

grep -q '^FROM debian:12 AS build$' Dockerfile || die "no 'FROM debian:12 AS build'"
grep -q '^FROM debian:12-slim$' Dockerfile || die "no 'FROM debian:12-slim'"
grep -q '^USER outboxd' Dockerfile || die "the runtime does not run as outboxd"
grep -q '^HEALTHCHECK ' Dockerfile || die "no HEALTHCHECK"
grep -q '/healthz' scripts/docker-healthcheck.sh || die "healthcheck skips /healthz"
grep -q '^ENTRYPOINT .*"-c", "/etc/outboxd/outboxd.yaml"' Dockerfile ||
    die "ENTRYPOINT does not read /etc/outboxd/outboxd.yaml"
# The OCI labels, and a version that is the binary's (the build stage also
# refuses an OUTBOXD_VERSION other than daemon/util.h's).
version=$(sed -n 's/^#define OUTBOXD_VERSION "\(.*\)"$/\1/p' daemon/util.h)
[[ -n $version ]] || die "no OUTBOXD_VERSION in daemon/util.h"
for label in title description version licenses source revision documentation; do
    grep -q "^ *\(LABEL \)\?org\.opencontainers\.image\.$label=" Dockerfile ||
        die "no label org.opencontainers.image.$label"
done
# shellcheck disable=SC2016 # a literal $OUTBOXD_VERSION
grep -q '^ *org\.opencontainers\.image\.version="\$OUTBOXD_VERSION"' Dockerfile ||
    die "the version label is not \$OUTBOXD_VERSION"
while read -r arg; do
    [[ $arg == "ARG OUTBOXD_VERSION=$version" ]] ||
        die "Dockerfile has '$arg', daemon/util.h says $version"
done < <(grep '^ARG OUTBOXD_VERSION' Dockerfile)
# shellcheck disable=SC2013 # words: paths without spaces
for src in $(awk '/^COPY / && !/--from/ { for (i = 2; i < NF; i++) print $i }' Dockerfile); do
    [[ -e $src ]] || die "COPY source $src does not exist"
done

mapfile -t build_pkgs < <(stage_packages 1)
mapfile -t run_pkgs < <(stage_packages 2)
((${#build_pkgs[@]} && ${#run_pkgs[@]})) || die "cannot read the package lists"

# 1. Build stage: a subset of what CI installs, covering every pkg-config
#    module the Makefile compiles against.
servers_pkgs=" $(bash tests/servers.sh packages | tr '\n' ' ') "
for p in "${build_pkgs[@]}"; do
    [[ $servers_pkgs == *" $p "* ]] ||
        die "build stage installs $p, which tests/servers.sh deps does not"
done
mapfile -t build_closure < <(closure "${build_pkgs[@]}")
modules=$(sed -n 's/^PKGS = //p' Makefile)
[[ -n $modules ]] || die "no PKGS line in the Makefile"
for m in $modules; do
    pc=$(pkg-config --path "$m") || die "pkg-config does not know $m"
    p=$(owner "$pc") || die "no package owns $pc"
    listed "$p" "${build_closure[@]}" ||
        die "pkg-config module $m comes from $p, which the build stage lacks"
done

# 2. Runtime stage: every library the binary loads comes from a package
#    it installs, or from one of their dependencies.
for p in "${run_pkgs[@]}"; do
    dpkg-query -W "$p" >/dev/null 2>&1 ||
        die "runtime package $p is not installed here, cannot check it" \
            "(is the name right for Debian 12?)"
done
mapfile -t run_closure < <(closure "${run_pkgs[@]}")
needed=()
while read -r lib; do
    p=$(owner "$lib") || die "no package owns $lib"
    needed+=("$p")
    listed "$p" "${run_closure[@]}" ||
        die "$BIN needs $lib from $p, which the runtime stage does not install"
done < <(ldd "$BIN" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }')

# 3. And nothing there that the binary does not use.
for p in "${run_pkgs[@]}"; do
    [[ " ${NON_LIBRARY[*]} ${needed[*]} " == *" $p "* ]] ||
        die "runtime package $p provides no library $BIN links"
done

echo "docker-check: Dockerfile OK (version $version, OCI labels; build:" \
    "${build_pkgs[*]}; runtime:" \
    "${run_pkgs[*]}; $BIN needs ${#needed[@]} libraries, all provided)"
