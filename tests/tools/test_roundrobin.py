#!/usr/bin/env python3
"""tools/bench/roundrobin.py: its parsers read pi-bench's, ik_llama.cpp's and PowerInfer's
tables and llamacpp_bench.py's (as those programs print them), the summary is the median with the min-max, and
bad arguments exit 2. (TAP; the benchmark itself needs the anchors and an idle machine.)"""
import importlib.util
import os
import subprocess
import sys

root = sys.argv[1]
path = os.path.join(root, "tools", "bench", "roundrobin.py")
spec = importlib.util.spec_from_file_location("roundrobin", path)
rr = importlib.util.module_from_spec(spec)
spec.loader.exec_module(rr)

PI = """arch:        llama, PowerInfer (sparse), 4 layers
| mode   | test   | t/s median | t/s min | t/s max | MiB/token | active | eta  |
|--------|--------|-----------:|--------:|--------:|----------:|-------:|-----:|
| sparse | pp16   |   14938.58 | 14000.00 | 15000.00 |           |        |      |
| sparse | tg8    |   12382.02 | 12382.02 | 12382.02 |       0.7 |  10.4% | 0.00 |
| dense  | pp16   |     900.50 |   900.00 |   901.00 |           |        |      |
| dense  | tg8    |      90.25 |    90.00 |    91.00 |       0.7 | 100.0% | 0.00 |
"""
IK = """| model                          |       size |     params | backend    | threads | rtr |          test |              t/s |
| ------------------------------ | ---------: | ---------: | ---------- | ------: | --: | ------------: | ---------------: |
| qwen3moe ?B Q4_0               |   4.07 GiB |     7.75 B | CPU        |       2 |   1 |         pp128 |    288.67 ± 8.92 |
| qwen3moe ?B Q4_0               |   4.07 GiB |     7.75 B | CPU        |       2 |   1 |          tg64 |     46.57 ± 6.37 |
"""
LCPP = """| test   | tokens | t/s median | t/s min | t/s max |
|--------|-------:|-----------:|--------:|--------:|
| pp16   |     16 |     116.01 |  116.01 |  116.01 |
| tg4    |      4 |      41.19 |   40.00 |   42.00 |
"""
PWI = """| model                          |       size |     params | backend    |    threads | test       |              t/s |
| ------------------------------ | ---------: | ---------: | ---------- | ---------: | ---------- | ---------------: |
| llama ?B mostly Q4_0           |   1.87 MiB |     3.47 M | CPU        |          2 | pp 16      |   3073.13 ± 0.00 |
| llama ?B mostly Q4_0           |   1.87 MiB |     3.47 M | CPU        |          2 | tg 8       |     52.63 ± 0.00 |
"""
checks = [
    ("pi-bench sparse pp", rr.parse_pi(PI, "sparse", "pp"), 14938.58),
    ("pi-bench sparse tg", rr.parse_pi(PI, "sparse", "tg"), 12382.02),
    ("pi-bench dense tg", rr.parse_pi(PI, "dense", "tg"), 90.25),
    ("pi-bench: a mode it did not run", rr.parse_pi(PI, "oracle", "tg"), None),
    ("ik pp", rr.parse_llama_bench(IK, "pp"), 288.67),
    ("ik tg", rr.parse_llama_bench(IK, "tg"), 46.57),
    ("PowerInfer pp (its 'pp 16')", rr.parse_llama_bench(PWI, "pp"), 3073.13),
    ("PowerInfer tg", rr.parse_llama_bench(PWI, "tg"), 52.63),
    ("llamacpp_bench.py pp", rr.parse_llamacpp_py(LCPP, "pp"), 116.01),
    ("llamacpp_bench.py tg", rr.parse_llamacpp_py(LCPP, "tg"), 41.19),
    ("a failed run", rr.parse_llama_bench("main: error: failed to load model", "tg"), None),
    ("summary", rr.summary([3.0, None, 1.0, 2.0]), (2.0, "2.0 (1.0-3.0)")),
    ("summary of one", rr.summary([5.0]), (5.0, "5.0")),
    ("summary of none", rr.summary([None, None]), (None, "failed")),
]
n = 0
fails = 0
for name, got, want in checks:
    n += 1
    if got == want:
        print(f"ok {n} - {name}")
    else:
        fails += 1
        print(f"not ok {n} - {name}: {got!r}, want {want!r}")
for args in (["--anchors", "/nonexistent/run", "x.gguf"], ["x.gguf"],
             ["--anchors", path, "--sparse", path]):
    n += 1
    r = subprocess.run([sys.executable, path, *args], capture_output=True, text=True)
    if r.returncode == 2 and "usage" in r.stderr:
        print(f"ok {n} - bad arguments {args[:2]} exit 2")
    else:
        fails += 1
        print(f"not ok {n} - bad arguments {args}: exit {r.returncode}: {r.stderr[-300:]}")
print(f"1..{n}")
sys.exit(1 if fails else 0)
