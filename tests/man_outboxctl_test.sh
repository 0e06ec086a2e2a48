#!/usr/bin/env bash
# man_outboxctl_test: every command outboxctl accepts has its section in
# docs/man/outboxctl.8.scd, with every option that command's --help
# lists; every option of every command is in OPTIONS, every exit status
# in EXIT STATUS.  The lists come from the binary, so the page cannot
# drift from the code.  Usage: tests/man_outboxctl_test.sh path/to/outboxctl
set -uo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
bin=${1:?usage: $0 path/to/outboxctl}
page=$src/docs/man/outboxctl.8.scd
failed=0

# The text of section "# NAME" or subsection "## NAME" of the page.
section() {
    awk -v h="$1" '$0 == h {on = 1; next} on && /^#/ {exit} on' "$page"
}

# check WHAT TEXT WORD...: each WORD appears as *WORD* in TEXT.
check() {
    local what=$1 text=$2 w missing=()
    shift 2
    for w in "$@"; do
        grep -qF -- "*$w*" <<<"$text" || missing+=("$w")
    done
    if ((${#missing[@]})); then
        printf 'FAIL outboxctl(8) %s lacks: %s\n' "$what" "${missing[*]}"
        failed=1
    else
        printf 'ok   outboxctl(8) %s: %s\n' "$what" "$*"
    fi
}

help=$("$bin" --help) || { echo "FAIL $bin --help"; exit 1; }
mapfile -t commands < <(sed -n '/^commands:/,/^[^ c]/p' <<<"$help" |
    awk -F'  +' '/^  [a-z]/ {print $2}')
((${#commands[@]} >= 5)) || { echo "FAIL no commands in --help"; exit 1; }
for cmd in "${commands[@]}"; do
    text=$(section "## $cmd")
    if [[ -z $text ]]; then
        printf 'FAIL outboxctl(8) has no "## %s" under COMMANDS\n' "$cmd"
        failed=1
        continue
    fi
    # shellcheck disable=SC2086
    mapfile -t opts < <("$bin" $cmd --help | sed -n '/^options:/,$p' |
        grep -o -- '--[a-z][a-z-]*' | sort -u)
    check "$cmd" "$text" "outboxctl $cmd" "${opts[@]}"
done
mapfile -t global < <(sed -n '/^options of every command:/,/^[^ o]/p' \
    <<<"$help" | grep -oE -- '(^|[ ,])--?[a-zA-Z][a-z-]*' | tr -d ' ,' | sort -u)
check OPTIONS "$(section "# OPTIONS")" "${global[@]}"
mapfile -t codes < <(sed -n '/^exit status:/,$p' <<<"$help" |
    grep -oE '\b[0-9]+\b' | sort -un)
check "EXIT STATUS" "$(section "# EXIT STATUS")" "${codes[@]}"
exit $failed
