#!/usr/bin/env python3
"""Writes fuzz_binlog's MySQL 8 seeds: streams built to MySQL 8.4's
documented event formats (libs/mysql/binlog/event), as no MySQL server is
installable here.  Each packet: a two-byte length, the OK byte, the event.

Usage: python3 tests/fuzz/seed_mysql8.py   (needs the zstd command)
"""
import os
import struct
import subprocess

OUT = os.path.join(os.path.dirname(__file__), "corpus", "fuzz_binlog")
CRC = struct.pack("<I", 0xDEADBEEF)  # not checked by the parser


def lenenc(v):
    if v < 251:
        return bytes([v])
    if v < 1 << 16:
        return b"\xfc" + struct.pack("<H", v)
    if v < 1 << 24:
        return b"\xfd" + struct.pack("<I", v)[:3]
    return b"\xfe" + struct.pack("<Q", v)


def event(etype, body, crc=True):
    tail = CRC if crc else b""
    size = 19 + len(body) + len(tail)
    return struct.pack("<IBIIIH", 1700000000, etype, 1, size, 0, 0) + body + tail


def fde():
    post = bytes([13 if t == 2 else 8 if t == 19 else 10 if 30 <= t <= 32
                  else 42 if t in (33, 34) else 0 for t in range(1, 43)])
    body = struct.pack("<H", 4) + b"8.4.3".ljust(50, b"\0") + struct.pack(
        "<I", 0) + bytes([19]) + post + bytes([1])
    return event(15, body)


def query(db, sql, crc):
    body = struct.pack("<IIBHH", 7, 0, len(db), 0, 0) + db + b"\0" + sql
    return event(2, body, crc)


def table_map(tid, db, tbl, crc):
    body = struct.pack("<Q", tid)[:6] + b"\0\0" + bytes([len(db)]) + db + \
        b"\0" + bytes([len(tbl)]) + tbl + b"\0" + b"\x01\x03"
    return event(19, body, crc)


def rows(tid, crc):
    body = struct.pack("<Q", tid)[:6] + b"\x01\x00\x02\x00" + b"\x01\xfe" + \
        struct.pack("<i", 7)
    return event(30, body, crc)


def xid(crc):
    return event(16, struct.pack("<Q", 42), crc)


def gtid():
    body = b"\0" + bytes(range(0xA0, 0xB0)) + struct.pack("<Q", 42) + \
        b"\x02" + struct.pack("<QQ", 7, 8) + \
        struct.pack("<Q", 1700000000000000)[:7] + lenenc(300) + \
        struct.pack("<I", 80403)
    return event(33, body)


def payload(inner, compression, keep=None):
    """A TRANSACTION_PAYLOAD (Transaction_payload::encode's field order);
    keep: the compressed bytes cut to that many, the size saying so."""
    data = inner
    if compression == 0:
        data = subprocess.run(["zstd", "-q", "-c", "-3"], input=inner,
                              stdout=subprocess.PIPE, check=True).stdout
    data = data[:keep]
    f = b"\x02" + lenenc(len(lenenc(compression))) + lenenc(compression)
    if compression != 255:
        f += b"\x03" + lenenc(len(lenenc(len(inner)))) + lenenc(len(inner))
    f += b"\x01" + lenenc(len(lenenc(len(data)))) + lenenc(len(data)) + b"\0"
    return event(40, f + data)


def heartbeat_v2():
    name = b"binlog.000007"
    body = b"\x01" + lenenc(len(name)) + name + b"\x02" + \
        lenenc(len(lenenc(123456))) + lenenc(123456) + b"\0"
    return event(41, body)


def write(name, events):
    with open(os.path.join(OUT, name), "wb") as f:
        for e in events:
            pkt = b"\0" + e
            f.write(struct.pack("<H", len(pkt)) + pkt)


def main():
    inner = query(b"shop", b"BEGIN", False) + \
        table_map(90, b"shop", b"outbox_event", False) + rows(90, False) + \
        xid(False)
    tagged = event(42, struct.pack("<Q", 0x0102030405060708))
    previous = event(35, struct.pack("<Q", 0))
    write("seed_mysql8_payload", [fde(), previous, gtid(), payload(inner, 0),
                                  heartbeat_v2(), tagged])
    write("seed_mysql8_payload_none", [fde(), gtid(), payload(inner, 255)])
    write("seed_mysql8_payload_cut", [fde(), gtid(), payload(inner, 0, 20)])


if __name__ == "__main__":
    main()
