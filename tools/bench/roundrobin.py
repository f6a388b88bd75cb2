#!/usr/bin/env python3
"""Round-robin benchmark of pi-bench against the prebuilt anchor engines.

Runs, in turn and ROUNDS times over (ours, ik_llama.cpp plain, ik_llama.cpp -rtr 1[,
PowerInfer]), each engine's own llama-bench-style program on the same file with the same
-t/-p/-n/-r, so that drift of a shared machine hits every engine alike; then prints one
markdown table per file: each engine's prompt and decode tokens/s as the median over the
rounds with the min-max, and ours / that engine. Each round's figure is the engine's own
median (pi-bench) or mean (llama-bench) over its -r repetitions.

  roundrobin.py --anchors ../shared/anchors/run [--rounds 3] [-t 2] [-p 128] [-n 64] [-r 3]
                [--pi-bench build/tools/pi-bench] MODEL.gguf...
  roundrobin.py --anchors RUN --sparse MODEL.powerinfer.gguf MODEL.dense.gguf [...]

--llamacpp adds llama.cpp through llama-cpp-python (tools/bench/llamacpp_bench.py, its
default repacking, the same -t/-p/-n/-r), --before PI_BENCH another build of ours (the
baseline of a change); --anchors may then be left out (the anchors are built for one
machine kind, and die with SIGILL on another).

--sparse: ours in sparse mode on the PowerInfer file and ours on its dense twin; ik_llama.cpp
(which refuses PWRI files) on the dense twin; PowerInfer's llama-bench (-ngl 0, as its
README requires for sparse files) on the PowerInfer file: quantize that file to Q4_0 or
keep it F16 for PowerInfer (its Q8_0 sparse output is wrong). ANCHORS is the `run` script
of ../shared/anchors (see its README); an engine that fails is reported, not fatal.
"""
import argparse
import os
import re
import shlex
import statistics
import subprocess
import sys


def run(cmd, log):
    with open(log, "w") as f:
        f.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        f.flush()
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT)
    with open(log, errors="replace") as f:
        return r.returncode, f.read()


NUM = r"([0-9]+(?:\.[0-9]+)?)"


def parse_pi(out, mode, test):
    """pi-bench's table: | mode | test | median | min | max | ..."""
    for line in out.splitlines():
        m = re.match(r"^\|\s*(\w+)\s*\|\s*(pp|tg)(\d+)\s*\|\s*" + NUM, line)
        if m and m.group(1) == mode and m.group(2) == test:
            return float(m.group(4))
    return None


def parse_llamacpp_py(out, test):
    """llamacpp_bench.py's table: | pp128 | tokens | median | min | max |"""
    for line in out.splitlines():
        m = re.match(r"^\|\s*" + test + r"\d+\s*\|\s*\d+\s*\|\s*" + NUM, line)
        if m:
            return float(m.group(1))
    return None


def parse_llama_bench(out, test):
    """llama-bench's markdown: the last column is 't/s' as 'MEAN ± SD'; the test column
    'pp128' / 'tg64' (PowerInfer's: 'pp 128')."""
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not any(re.fullmatch(test + r" ?\d+", c) for c in cells):
            continue
        m = re.match(NUM, cells[-1])
        if m:
            return float(m.group(1))
    return None


def summary(vals):
    vals = [v for v in vals if v is not None]
    if not vals:
        return None, "failed"
    med = statistics.median(vals)
    if len(vals) == 1:
        return med, f"{med:.1f}"
    return med, f"{med:.1f} ({min(vals):.1f}-{max(vals):.1f})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--anchors", help="../shared/anchors/run")
    ap.add_argument("--llamacpp", action="store_true",
                    help="also llama.cpp through llama-cpp-python (llamacpp_bench.py)")
    ap.add_argument("--before", help="a baseline build's pi-bench, as 'ours before'")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", type=int, default=os.cpu_count() or 1)
    ap.add_argument("-p", type=int, default=128)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("-r", type=int, default=3)
    ap.add_argument("--pi-bench", default=os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "..", "build", "tools", "pi-bench"))
    ap.add_argument("--sparse", action="store_true",
                    help="two files: a PowerInfer file and its dense twin")
    ap.add_argument("--logs", default=None, help="keep every run's output in this directory")
    ap.add_argument("models", nargs="+")
    a = ap.parse_args()
    if a.rounds < 1 or a.r < 1 or a.t < 1 or a.p < 0 or a.n < 0:
        ap.error("--rounds, -r and -t must be >= 1, -p and -n >= 0")
    if a.sparse and len(a.models) != 2:
        ap.error("--sparse takes MODEL.powerinfer.gguf MODEL.dense.gguf")
    if not (a.anchors or a.llamacpp or a.before):
        ap.error("nothing to compare with: --anchors, --llamacpp and/or --before")
    for f in [x for x in (a.anchors, a.before) if x] + [a.pi_bench] + a.models:
        if not os.path.exists(f):
            ap.error(f"{f}: no such file")
    logs = a.logs or os.path.join("/tmp", f"roundrobin-{os.getpid()}")
    os.makedirs(logs, exist_ok=True)
    common = ["-t", str(a.t), "-p", str(a.p), "-n", str(a.n), "-r", str(a.r)]

    # engines: (label, file shown, command, parser of (output, test))
    def ours(path, mode, label, bench=None):
        cmd = [bench or a.pi_bench, "-m", path, *common, "--no-bandwidth"]
        if mode == "sparse":
            cmd += ["--sparse-mode", "sparse"]
        return (label, path, cmd, lambda out, test: parse_pi(out, mode, test))

    def ik(path, rtr):
        cmd = [a.anchors, "ik", "llama-bench", "-m", path, *common, "-o", "md"]
        if rtr:
            cmd += ["-rtr", "1"]
        return ("ik_llama.cpp -rtr 1" if rtr else "ik_llama.cpp", path, cmd, parse_llama_bench)

    def llamacpp(path):
        py = os.path.join(os.path.dirname(os.path.abspath(__file__)), "llamacpp_bench.py")
        return ("llama.cpp (llama-cpp-python)", path, [sys.executable, py, "-m", path, *common],
                parse_llamacpp_py)

    def others(path, dense):
        e = []
        if a.before:
            e.append(ours(path, "dense" if dense else "sparse", "ours before", a.before))
        if a.llamacpp and dense:
            e.append(llamacpp(path))
        if a.anchors and dense:
            e += [ik(path, False), ik(path, True)]
        return e

    groups = []
    if a.sparse:
        sp, dn = a.models
        eng = [ours(sp, "sparse", "ours, PowerInfer file, sparse"),
               ours(sp, "dense", "ours, PowerInfer file, dense mode"),
               ours(dn, "dense", "ours, dense twin")]
        if a.before:
            eng.append(ours(sp, "sparse", "ours before, sparse", a.before))
        if a.anchors:
            pwi = [a.anchors, "powerinfer", "llama-bench", "-m", sp, *common, "-ngl", "0",
                   "-o", "md"]
            eng.append(("PowerInfer, PowerInfer file", sp, pwi, parse_llama_bench))
        eng += others(dn, True)[1 if a.before else 0:]
        groups.append((os.path.basename(sp), eng))
    else:
        for m in a.models:
            groups.append((os.path.basename(m), [ours(m, "dense", "ours")] + others(m, True)))

    res = {}
    for rnd in range(a.rounds):
        for gname, engines in groups:
            for label, _, cmd, parse in engines:
                log = os.path.join(logs, re.sub(r"[^A-Za-z0-9._-]+", "_",
                                                f"{gname}.{label}.round{rnd + 1}.log"))
                print(f"roundrobin: {gname}: {label}, round {rnd + 1}/{a.rounds}",
                      file=sys.stderr, flush=True)
                rc, out = run(cmd, log)
                for test in ("pp", "tg"):
                    v = parse(out, test) if rc == 0 else None
                    res.setdefault((gname, label, test), []).append(v)
                if rc != 0:
                    print(f"roundrobin: {label} exited {rc} (log: {log})", file=sys.stderr)

    print(f"## round robin: {a.rounds} rounds, -t {a.t} -p {a.p} -n {a.n} -r {a.r}, "
          f"{os.cpu_count()} CPUs, load average at end {os.getloadavg()[0]:.2f}")
    for gname, engines in groups:
        print()
        print(f"{gname}: tokens/s, median over rounds (min-max)")
        print()
        print(f"| engine | file | pp{a.p} | tg{a.n} | ours / it, pp | ours / it, tg |")
        print("|---|---|--:|--:|--:|--:|")
        ref = {t: summary(res[(gname, engines[0][0], t)])[0] for t in ("pp", "tg")}
        for label, path, _, _ in engines:
            cells = []
            ratios = []
            for t in ("pp", "tg"):
                med, text = summary(res[(gname, label, t)])
                cells.append(text)
                ratios.append(f"{ref[t] / med:.2f}" if med and ref[t] else "-")
            print(f"| {label} | {os.path.basename(path)} | {cells[0]} | {cells[1]} | "
                  f"{ratios[0]} | {ratios[1]} |")
    print()
    print(f"Logs: {logs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
