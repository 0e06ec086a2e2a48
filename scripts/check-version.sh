#!/usr/bin/env bash
# check-version: every place that names outboxd's version names the one
# the binaries report (daemon/util.h's OUTBOXD_VERSION): NEWS.md's newest
# section, debian/changelog, the image's ARG defaults, README's package
# name and the image tags of docs/operations.md.  Fails naming each
# place that disagrees.
#
# Usage: bash scripts/check-version.sh     (make check-version, make check)
set -euo pipefail
cd "$(dirname "$0")/.."

code=$(sed -n 's/^#define OUTBOXD_VERSION "\(.*\)"$/\1/p' daemon/util.h)
[[ -n $code ]] || { echo "check-version: no OUTBOXD_VERSION in daemon/util.h" >&2; exit 1; }
bad=0
disagree() {
    echo "check-version: $1 says $2, daemon/util.h OUTBOXD_VERSION $code" >&2
    bad=1
}

news=$(sed -n 's/^## \([0-9][^ ]*\) .*/\1/p' NEWS.md | head -n 1)
[[ $news == "$code" ]] || disagree "NEWS.md's newest section" "${news:-nothing}"
deb=$(sed -n '1s/^outboxd (\([^)]*\)).*/\1/p' debian/changelog)
[[ ${deb%-*} == "$code" ]] || disagree debian/changelog "${deb:-nothing}"
args=$(sed -n 's/^ARG OUTBOXD_VERSION=//p' Dockerfile)
[[ -n $args ]] || disagree Dockerfile "no ARG OUTBOXD_VERSION"
for v in $args; do
    [[ $v == "$code" ]] || disagree "Dockerfile's ARG OUTBOXD_VERSION" "$v"
done
while read -r v; do
    [[ $v == "$code" ]] || disagree "README.md's package" "outboxd_$v"
done < <(grep -o 'outboxd_[0-9][^_]*-[0-9]*_' README.md | sed 's/^outboxd_\(.*\)-[0-9]*_$/\1/')
while read -r v; do
    [[ $v == "$code" ]] || disagree "docs/operations.md's image" "outboxd:$v"
done < <(grep -o 'image: outboxd:[0-9][^ ]*' docs/operations.md | sed 's/^image: outboxd://')
((bad == 0)) || exit 1
echo "check-version: $code (NEWS.md, debian/changelog $deb, Dockerfile, README.md, docs/operations.md)"
