#!/usr/bin/env python3
"""tools/check_skips.py on synthetic meson test logs: every kind of skip it must see
(a whole test's SKIP, a TAP `# SKIP`, pytest's -rs lines and its bare count, a printed
`skip ...` line), the allow-list (build and name globs), required tests that are
absent, and unreadable logs or allow-lists.

    test_check_skips.py [--checker tools/check_skips.py]

Exit status: 0 all passed, 1 a check failed. The last line printed is
"N passed, N failed"."""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = {"passed": 0, "failed": 0}

ALLOW = """# comment
build-cuda | gpu-kernels | needs a device
*          | pt-reader::skip torch* | torch is not installed
build      | server::test_web.py: chromium* | example rule
"""


def entry(name, result="OK", stdout="", suite="unit"):
    return {"name": f"powerinfer:{suite} / {name}", "result": result, "stdout": stdout,
            "returncode": 77 if result == "SKIP" else 0}


def run(tmp, build, entries, *extra, allow=ALLOW):
    d = os.path.join(tmp, build)
    os.makedirs(os.path.join(d, "meson-logs"), exist_ok=True)
    if entries is not None:
        with open(os.path.join(d, "meson-logs", "testlog.json"), "w") as f:
            for e in entries:
                f.write(json.dumps(e) + "\n")
    else:
        try:
            os.remove(os.path.join(d, "meson-logs", "testlog.json"))
        except FileNotFoundError:
            pass
    apath = os.path.join(tmp, "allow.txt")
    with open(apath, "w") as f:
        f.write(allow)
    r = subprocess.run([sys.executable, ARGS.checker, d, "--allow", apath, *extra],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    return r.returncode, r.stdout


def case(name, tmp, build, entries, want_rc, want_text=None, *extra, allow=ALLOW):
    rc, out = run(tmp, build, entries, *extra, allow=allow)
    ok = rc == want_rc and (want_text is None or want_text in out)
    RESULTS["passed" if ok else "failed"] += 1
    if ok:
        print(f"ok   {name}")
    else:
        print(f"FAIL {name}: exit {rc} (want {want_rc}), want {want_text!r} in:\n{out}")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        ok = [entry("types"), entry("kernels", stdout="1..2\nok 1 - a\nok 2 - b\n")]
        case("all OK", tmp, "build", ok, 0, "2 tests, 0 skip(s), ok")
        case("whole-test SKIP", tmp, "build", ok + [entry("gguf-package-roundtrip", "SKIP")],
             1, "SKIP not allowed: gguf-package-roundtrip")
        case("whole-test SKIP on the allow-list", tmp, "build-cuda",
             ok + [entry("gpu-kernels", "SKIP", suite="gpu")], 0, "skip allowed: gpu-kernels")
        case("allow-list rule for another build", tmp, "build-hip",
             ok + [entry("gpu-kernels", "SKIP", suite="gpu")], 1, "SKIP not allowed")
        case("--as names the build", tmp, "build-x",
             ok + [entry("gpu-kernels", "SKIP", suite="gpu")], 0, None, "--as", "build-cuda")
        case("TAP sub-test skip", tmp, "build",
             [entry("tokenizer", stdout="1..2\nok 1 - a\nok 2 # SKIP test_smollm2_ids\n")],
             1, "tokenizer::test_smollm2_ids")
        case("pytest -rs skip", tmp, "build",
             [entry("server", stdout="..s\nSKIPPED [1] tests/server/test_openai.py:9: "
                    "pip install openai\n2 passed, 1 skipped in 3.0s\n", suite="server")],
             1, "server::test_openai.py: pip install openai")
        case("pytest -rs skip on the allow-list", tmp, "build",
             [entry("server", stdout="SKIPPED [2] tests/server/test_web.py:22: chromium "
                    "missing\n5 passed, 2 skipped in 3.0s\n", suite="server")], 0)
        case("pytest skips without -rs", tmp, "build",
             [entry("python", stdout="...ss\n3 passed, 2 skipped in 1.0s\n", suite="python")],
             1, "2 unnamed pytest skip(s)")
        case("pytest summary with -q decoration", tmp, "build",
             [entry("python", stdout="==== 1 failed, 3 passed, 1 skipped in 1.0s ====\n",
                    suite="python")], 1, "1 unnamed pytest skip(s)")
        case("printed skip line", tmp, "build",
             [entry("powerinfer-convert", stdout="ok   a\nskip (5): no --pirun\n"
                    "1 passed, 0 failed\n", suite="format")], 1,
             "powerinfer-convert::skip (5): no --pirun")
        case("printed skip line on the allow-list", tmp, "build",
             [entry("pt-reader", stdout="skip torch.save/torch.load comparison: no torch\n",
                    suite="format")], 0)
        case("'skipped' inside a word is not a skip", tmp, "build",
             [entry("sparse", stdout="# rows skipped: 12\nskipping is fine\n")], 0)
        case("required test absent", tmp, "build", ok, 1,
             "required test did not run: server", "--require", "server", "--require", "types")
        case("required tests present", tmp, "build", ok, 0, None, "--require", "types")
        case("failed test listed", tmp, "build", ok + [entry("model", "FAIL")], 1,
             "test model: FAIL")
        case("missing log", tmp, "build-none", None, 2, "cannot read the test log")
        case("empty log", tmp, "build", [], 1, "lists no tests")
        case("malformed allow-list", tmp, "build", ok, 2, "want 'BUILD-GLOB | SKIP-GLOB",
             allow="build gpu-kernels no separators\n")
    print(f"{RESULTS['passed']} passed, {RESULTS['failed']} failed")
    return 1 if RESULTS["failed"] else 0


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--checker", default=os.path.join(HERE, "..", "..", "tools", "check_skips.py"))
    ARGS = ap.parse_args()
    sys.exit(main())
