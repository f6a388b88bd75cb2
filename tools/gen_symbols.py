#!/usr/bin/env python3
"""Regenerate lib/libpowerinfer.symbols and lib/libpowerinfer.map from the public header.

Every `PI_API ... pi_name(` declaration in include/powerinfer.h is an exported symbol.
All symbols sit in the node PI_0.1 until the first release; afterwards new symbols go
in a new node (edit the map by hand then). Run after adding API; tests/abi/check_symbols.py
checks header == list == map == the built library."""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
hdr = open(os.path.join(ROOT, "include", "powerinfer.h")).read()
names = sorted(set(re.findall(r"PI_API[^;{(]*?\b(pi_\w+)\s*\(", hdr)))
sym = os.path.join(ROOT, "lib", "libpowerinfer.symbols")
head = [l for l in open(sym).read().splitlines() if l.startswith("#")]
open(sym, "w").write("\n".join(head + names) + "\n")
with open(os.path.join(ROOT, "lib", "libpowerinfer.map"), "w") as f:
    f.write("/* GNU ld version script: one node per release; symbols never move between nodes. */\n")
    f.write("PI_0.1 {\n  global:\n")
    for n in names:
        f.write(f"    {n};\n")
    f.write("  local:\n    *;\n};\n")
print(f"{len(names)} symbols")
