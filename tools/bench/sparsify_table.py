#!/usr/bin/env python3
"""The thresholded-sparsity table of docs/performance.md (issue 17): FFN sparsity S
against perplexity and decode speed for one model.

    python3 tools/bench/sparsify_table.py [-m MODEL] [--build build] [--work DIR]
        [--sparsities 0,0.3,0.4,0.5,0.6,0.7] [--rounds 3] [-t 2] [--down-type T]
        [--method cats|teal] [--order] [--llamacpp]

Text: tests/fixtures/perplexity/text.txt cut at a line boundary into its first half
(calibration) and its second half (evaluation), so that no evaluated token was seen in
calibration. For each S: pi-sparsify -m MODEL --sparsity S --calib first-half; then
pi-perplexity -c 256 --stride 128 on the second half in the file's default
(threshold) mode, and pi-bench -t T -p 128 -n 64 -r 5 decode tokens/s of the same file
in dense and threshold mode. The original file's dense run is the baseline. Speed runs
are alternated over the files, --rounds times, and the medians printed (the machine is
shared); each bench row's MiB/token and active fraction come from pi-bench's telemetry.
--order also writes each S > 0 file with its neurons hottest first (pi-run --profile of
the sparsified file over the calibration half, then pi-sparsify --order-stats) and
benches it; --llamacpp adds llama.cpp's decode of the original file to every round
(tools/bench/llamacpp_bench.py, same -p/-n/-r). Prints a Markdown table."""

import argparse
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
    return r.stdout + r.stderr


def ppl(build, model, text, threads, mode):
    out = run([os.path.join(build, "tools", "pi-perplexity"), "-m", model, "-f", text, "-c",
               "256", "--stride", "128", "-t", str(threads), "--sparse-mode", mode])
    v = float(re.search(r"PPL = ([0-9.]+)", out).group(1))
    print(f"ppl {os.path.basename(model)} {mode}: {v}", file=sys.stderr, flush=True)
    return v


def bench(build, model, threads, mode):
    print(f"bench {os.path.basename(model)} {mode}", file=sys.stderr, flush=True)
    out = run([os.path.join(build, "tools", "pi-bench"), "-m", model, "-t", str(threads),
               "-p", "128", "-n", "64", "-r", "5", "--no-bandwidth", "--sparse-mode", mode])
    row = re.search(r"\|\s*\w+\s*\|\s*tg64\s*\|\s*([0-9.]+)\s*\|[^|]*\|[^|]*\|\s*([0-9.]+)\s*\|"
                    r"\s*([0-9.]+)%", out)
    print(f"  tg64 {row.group(1)} t/s, {row.group(2)} MiB/token, {row.group(3)}% kept",
          file=sys.stderr, flush=True)
    return float(row.group(1)), float(row.group(2)), float(row.group(3))


def bench_llamacpp(model, threads):
    print("bench llama.cpp", file=sys.stderr, flush=True)
    out = run([sys.executable, os.path.join(ROOT, "tools", "bench", "llamacpp_bench.py"),
               "-m", model, "-t", str(threads), "-p", "128", "-n", "64", "-r", "5"])
    v = float(re.search(r"\|\s*tg64\s*\|\s*\d+\s*\|\s*([0-9.]+)", out).group(1))
    print(f"  tg64 {v} t/s", file=sys.stderr, flush=True)
    return v


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default="/tmp/sparsify-table")
    ap.add_argument("--sparsities", default="0,0.3,0.4,0.5,0.6,0.7")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--down-type")
    ap.add_argument("--method", choices=("cats", "teal"), default="cats")
    ap.add_argument("--order", action="store_true")
    ap.add_argument("--llamacpp", action="store_true")
    a = ap.parse_args()
    model = a.model or subprocess.run([sys.executable, os.path.join(ROOT, "tools", "smollm2_path.py")],
                                      capture_output=True, text=True).stdout.strip()
    os.makedirs(a.work, exist_ok=True)
    lines = open(os.path.join(ROOT, "tests", "fixtures", "perplexity", "text.txt"),
                 encoding="utf-8").read().splitlines(True)
    calib, evalt = os.path.join(a.work, "calib.txt"), os.path.join(a.work, "eval.txt")
    open(calib, "w", encoding="utf-8").writelines(lines[:len(lines) // 2])
    open(evalt, "w", encoding="utf-8").writelines(lines[len(lines) // 2:])
    sps = [float(s) for s in a.sparsities.split(",")]
    files = {}
    for s in sps:
        out = os.path.join(a.work, f"{a.method}{int(round(s * 100)):02d}.gguf")
        cmd = [os.path.join(a.build, "tools", "pi-sparsify"), "-m", model, "-o", out,
               "--sparsity", str(s), "--calib", calib, "-t", str(a.threads),
               "--method", a.method]
        if a.down_type:
            cmd += ["--down-type", a.down_type]
        log = run(cmd)
        files[s] = (out, float(re.search(r"max ([0-9.e-]+) over layers", log).group(1)))
    ordered = {}
    for s in (sps if a.order else []):
        if s <= 0:
            continue
        stats = os.path.join(a.work, f"{a.method}{int(round(s * 100)):02d}.stats.gguf")
        run([os.path.join(a.build, "tools", "pi-run"), "-m", files[s][0], "-f", calib, "-n", "1",
             "-t", str(a.threads), "--profile", stats])
        out = files[s][0].replace(".gguf", "o.gguf")
        cmd[cmd.index("-o") + 1] = out
        cmd[cmd.index("--sparsity") + 1] = str(s)
        run(cmd + ["--order-stats", stats])
        ordered[s] = out
    base_ppl = ppl(a.build, model, evalt, a.threads, "dense")
    p = {s: ppl(a.build, f, evalt, a.threads, "auto") for s, (f, _) in files.items()}
    po = {s: ppl(a.build, f, evalt, a.threads, "auto") for s, f in ordered.items()}
    p_dense_file = ppl(a.build, files[sps[0]][0], evalt, a.threads, "dense")
    speed = {("orig", "dense"): [], "llama.cpp": []}
    for s in sps:
        speed[(s, "dense")], speed[(s, "threshold")], speed[(s, "ordered")] = [], [], []
    for _ in range(a.rounds):
        speed[("orig", "dense")].append(bench(a.build, model, a.threads, "dense"))
        if a.llamacpp:
            speed["llama.cpp"].append((bench_llamacpp(model, a.threads),))
        for s in sps:
            for mode in ("dense", "threshold"):
                speed[(s, mode)].append(bench(a.build, files[s][0], a.threads, mode))
            if s in ordered:
                speed[(s, "ordered")].append(bench(a.build, ordered[s], a.threads, "threshold"))

    def med(key, i):
        return statistics.median(x[i] for x in speed[key])
    base = med(("orig", "dense"), 0)
    print(f"model {os.path.basename(model)}, method {a.method}; perplexity on {evalt} "
          f"(second half of text.txt), calibration on the first half; {a.rounds} alternated "
          f"rounds, medians")
    print(f"ffn_down_t error (max over layers): {files[sps[0]][1]:.3g}; "
          f"perplexity of the sparsified file in dense mode: {p_dense_file:.4f}")
    print()
    print("| FFN sparsity S | perplexity | vs dense | decode t/s (threshold) | decode t/s (same file, dense) "
          "| vs original dense | MiB/token | neurons kept |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    print(f"| original, dense | {base_ppl:.2f} | | | {base:.1f} | 1.00x | "
          f"{med(('orig', 'dense'), 1):.1f} | 100% |")
    if a.llamacpp:
        lc = med("llama.cpp", 0)
        print(f"| original, llama.cpp | | | | {lc:.1f} | {lc / base:.2f}x | | 100% |")
    for s in sps:
        t = med((s, "threshold"), 0)
        print(f"| {s:.0%} | {p[s]:.2f} | {p[s] / base_ppl - 1:+.1%} | {t:.1f} | "
              f"{med((s, 'dense'), 0):.1f} | {t / base:.2f}x | {med((s, 'threshold'), 1):.1f} | "
              f"{med((s, 'threshold'), 2):.1f}% |")
        if s in ordered:
            t = med((s, "ordered"), 0)
            print(f"| {s:.0%}, hottest first | {po[s]:.2f} | {po[s] / base_ppl - 1:+.1%} | {t:.1f} | "
                  f"| {t / base:.2f}x | {med((s, 'ordered'), 1):.1f} | "
                  f"{med((s, 'ordered'), 2):.1f}% |")


if __name__ == "__main__":
    main()
