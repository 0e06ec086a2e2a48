# shellcheck shell=bash
# Helpers that the test-server scripts share (tests/tls/servers.sh,
# tests/failover/servers.sh): sourced, defines functions only.

port_open() { timeout 2 bash -c "</dev/tcp/127.0.0.1/$1" 2>/dev/null; }

wait_until() { # SECONDS CHECK...: polls CHECK until it succeeds or time is up
    local deadline=$((SECONDS + $1))
    shift
    until "$@"; do
        ((SECONDS < deadline)) || return 1
        sleep 0.1
    done
}

# A pid that runs (a zombie does not count: kill -0 would say it lives).
alive() {
    local st
    st=$(ps -o stat= -p "$1" 2>/dev/null) || return 1
    [[ $st != Z* ]]
}

pid_gone() { ! { [[ -n $1 ]] && alive "$1"; }; }
