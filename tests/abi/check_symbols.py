#!/usr/bin/env python3
"""The exported symbol set is a visible, reviewed list.

Compares four things that must agree exactly: the functions declared PI_API in
include/powerinfer.h, lib/libpowerinfer.symbols, the names in the version script
lib/libpowerinfer.map, and what `nm -D --defined-only` says the built library exports
(ignoring the version node entries such as PI_0.1); with --def, also the EXPORTS of the
Windows module-definition file lib/libpowerinfer.def."""
import argparse
import re
import subprocess
import sys

ap = argparse.ArgumentParser()
for a in ("--lib", "--nm", "--header", "--symbols", "--map"):
    ap.add_argument(a, required=True)
ap.add_argument("--def", dest="deffile")
args = ap.parse_args()

header = set(re.findall(r"PI_API[^;(]*?\b(pi_\w+)\s*\(", open(args.header).read(), re.S))
listed = {l.strip() for l in open(args.symbols) if l.strip() and not l.startswith("#")}
mapped = set(re.findall(r"^\s*(pi_\w+)\s*;", open(args.map).read(), re.M))
out = subprocess.run([args.nm, "-D", "--defined-only", args.lib], check=True,
                     capture_output=True, text=True).stdout
exported = set()
for line in out.splitlines():
    parts = line.split()
    if len(parts) >= 3 and parts[1] in "TtDdBbRrVvWwi":
        name = parts[2].split("@")[0]
        if not re.fullmatch(r"PI_\d+\.\d+", name):
            exported.add(name)

failed = 0
def compare(name_a, a, name_b, b):
    global failed
    if a != b:
        failed += 1
        print(f"FAIL {name_a} vs {name_b}:")
        for s in sorted(a - b):
            print(f"   only in {name_a}: {s}")
        for s in sorted(b - a):
            print(f"   only in {name_b}: {s}")

compare("libpowerinfer.symbols", listed, "powerinfer.h", header)
compare("libpowerinfer.symbols", listed, "libpowerinfer.map", mapped)
compare("libpowerinfer.symbols", listed, "nm -D", exported)
if args.deffile:
    text = open(args.deffile).read()
    defs = set(re.findall(r"^\s+(pi_\w+)\s*$", text.split("EXPORTS", 1)[-1], re.M))
    compare("libpowerinfer.symbols", listed, "libpowerinfer.def", defs)
bad = [s for s in exported if not s.startswith("pi_")]
if bad:
    failed += 1
    print("FAIL exported symbols without the pi_ prefix:", ", ".join(sorted(bad)))
print(f"{len(listed)} symbols checked")
n_checks = 5 if args.deffile else 4
print(f"{max(n_checks - failed, 0)} passed, {failed} failed")
sys.exit(1 if failed else 0)
