#!/usr/bin/env python3
"""check-layers: no call runs up the module map of docs/hacking.md.

Reads the map's table (one row per module or family, from the top
down), places every daemon/*.c in its row, and reads each object's
defined and undefined symbols with nm: a file may use what its own row
or a row below defines, never a row above.  Fails, naming each call
that runs up, and each source file the map does not place.

    python3 scripts/check-layers.py [build/daemon]
"""
import fnmatch
import glob
import os
import re
import subprocess
import sys

MAP = "docs/hacking.md"


def table_rows(text):
    """The module table's rows: (names, patterns) in order, top first."""
    section = text.split("## The modules", 1)[1]
    rows = []
    for line in section.splitlines():
        if line.startswith("| module") or line.startswith("|---"):
            continue
        if not line.startswith("|"):
            if rows:
                break
            continue
        cells = line.strip("|").split(" | ")
        first = cells[0]
        names = re.findall(r"`([A-Za-z0-9_]+)`", first.split("(")[0])
        files = re.findall(r"`([A-Za-z0-9_*]+\.c)`", first + cells[1])
        rows.append((names, files))
    return rows


def row_of(stem, rows):
    """The row index of daemon/<stem>.c, or None."""
    for i, (names, files) in enumerate(rows):
        if stem in names or any(fnmatch.fnmatch(stem + ".c", f) for f in files):
            return i
    best = None
    for i, (names, _) in enumerate(rows):
        for n in names:
            if stem.startswith(n + "_") and (best is None or len(n) > best[1]):
                best = (i, len(n))
    return best[0] if best else None


def symbols(obj):
    """(defined, used) global symbols of one object file."""
    out = subprocess.run(["nm", obj], capture_output=True, text=True,
                         check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TDRBC":
            defined.add(parts[2])
        elif len(parts) == 2 and parts[0] == "U":
            used.add(parts[1])
    return defined, used


def main():
    objdir = sys.argv[1] if len(sys.argv) > 1 else "build/daemon"
    with open(MAP, encoding="utf-8") as f:
        rows = table_rows(f.read())
    where, problems = {}, []
    for src in sorted(glob.glob("daemon/*.c")):
        stem = os.path.basename(src)[:-2]
        where[stem] = row_of(stem, rows)
        if where[stem] is None:
            problems.append(f"{src}: in no row of {MAP}'s module table")
    owner, uses = {}, {}
    for stem in where:
        obj = os.path.join(objdir, stem + ".o")
        if not os.path.exists(obj):
            problems.append(f"{obj}: missing (make all first)")
            continue
        defined, used = symbols(obj)
        uses[stem] = used
        for s in defined:
            owner[s] = stem
    for stem, used in sorted(uses.items()):
        for s in sorted(used):
            callee = owner.get(s)
            if callee is None or where[stem] is None or where[callee] is None:
                continue
            if where[callee] < where[stem]:
                up = "/".join(rows[where[callee]][0])
                problems.append(f"daemon/{stem}.c calls {s} of daemon/"
                                f"{callee}.c: up the map, to {up}")
    for p in problems:
        print(f"check-layers: {p}", file=sys.stderr)
    if problems:
        return 1
    print(f"check-layers: {len(where)} files in {len(rows)} rows of {MAP}, "
          "no call up the map")
    return 0


if __name__ == "__main__":
    sys.exit(main())
