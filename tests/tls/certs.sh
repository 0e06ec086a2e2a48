#!/usr/bin/env bash
# Writes a throwaway PKI for the TLS tests (tests/it_tls.c) into DIR:
#
#   ca.pem ca.key            the CA that signs everything below
#   other-ca.pem             a second CA that signed nothing here: "wrong CA"
#   rabbit.pem rabbit.key    RabbitMQ's server cert, for DNS:localhost only
#                            (so 127.0.0.1 fails hostname verification)
#   mariadb.pem mariadb.key  MariaDB's server cert, DNS:localhost, IP:127.0.0.1
#   client.pem client.key    the relay's client cert (CN=outboxd-relay)
#
# Usage: bash tests/tls/certs.sh DIR.  Keys are mode 644: the servers run
# as the rabbitmq and mysql users and these are test keys, nothing more.
set -euo pipefail
dir=${1:?usage: certs.sh DIR}
mkdir -p "$dir"
cd "$dir"

ossl() { openssl "$@" 2>/dev/null; }

ca() { # ca NAME CN
    ossl req -x509 -newkey rsa:2048 -nodes -days 2 -sha256 \
        -subj "/CN=$2" -keyout "$1.key" -out "$1.pem" \
        -addext basicConstraints=critical,CA:TRUE \
        -addext keyUsage=critical,keyCertSign,cRLSign
}

leaf() { # leaf NAME CN EXTFILE-LINES
    local ext
    ext=$(mktemp)
    printf '%s\n' "$3" >"$ext"
    ossl req -newkey rsa:2048 -nodes -subj "/CN=$2" -keyout "$1.key" \
        -out "$1.csr"
    ossl x509 -req -in "$1.csr" -CA ca.pem -CAkey ca.key -CAcreateserial \
        -days 2 -sha256 -extfile "$ext" -out "$1.pem"
    rm -f "$1.csr" "$ext"
}

ca ca "outboxd test CA"
ca other-ca "outboxd wrong CA"
leaf rabbit localhost "subjectAltName=DNS:localhost
extendedKeyUsage=serverAuth"
leaf mariadb localhost "subjectAltName=DNS:localhost,IP:127.0.0.1
extendedKeyUsage=serverAuth"
leaf client outboxd-relay "extendedKeyUsage=clientAuth"
rm -f other-ca.key ca.srl
chmod 755 .
chmod 644 ./*.pem ./*.key
