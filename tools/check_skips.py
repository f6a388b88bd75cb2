#!/usr/bin/env python3
"""Fail a CI run whose tests skipped something that is not allowed to skip.

    check_skips.py BUILD_DIR [--allow FILE] [--as NAME] [--require TEST ...]
    check_skips.py --pytest-log LOG --name NAME --build-name BUILD [--allow FILE]

`meson test` counts a skipped test (exit 77) as a success, and a test that skips part
of its work still reports OK. This reads BUILD_DIR/meson-logs/testlog.json (one JSON
object per test, written by the last `meson test` in that directory) and finds:

  - whole tests whose result is SKIP;
  - sub-test skips in a test's output: TAP lines `ok N ... # SKIP ...` (cmocka),
    pytest's `-rs` lines `SKIPPED [n] FILE:LINE: REASON` (a pytest summary that counts
    skips without naming them is itself an error), and lines that begin with `SKIP` or
    `skip` (the Python format tests' and the shell tests' convention);
  - required tests (--require) that did not run at all: a suite that a missing
    dependency kept from being registered is not in the log.

Each skip is named `TEST` (a whole test) or `TEST::DETAIL` (a sub-test: the TAP test
name, `FILE: REASON` for pytest, the printed line otherwise) and must match a line of
the allow-list (default tests/skip-allowed.txt):

    BUILD-GLOB | SKIP-GLOB | REASON

BUILD-GLOB matches the build directory's name (or --as NAME: `build-cuda`, `build`), SKIP-GLOB
the skip's name (fnmatch, case-sensitive); the reason is required. `#` starts a comment.

Every test that failed or timed out is listed too (meson test has already failed the
run in that case). Exit status: 0 when nothing unexpected skipped and every required
test ran, 1 otherwise, 2 on a usage error or an unreadable log.
"""
import argparse
import fnmatch
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_ALLOW = os.path.join(HERE, "..", "tests", "skip-allowed.txt")

TAP_SKIP = re.compile(r"^(?:not )?ok\b[^#]*#\s*skip\b(.*)$", re.IGNORECASE)
TAP_NAME = re.compile(r"^(?:not )?ok\s*\d*\s*-?\s*([^#]*?)\s*#", re.IGNORECASE)
PYTEST_SKIPPED = re.compile(r"^SKIPPED \[(\d+)\] ([^:]+):\d+: (.*)$")
PYTEST_SUMMARY = re.compile(r"\b(\d+) skipped\b")
PYTEST_SUMMARY_LINE = re.compile(r"^=*\s*(?:\d+ (?:passed|failed|skipped|errors?|"
                                 r"deselected|xfailed|xpassed|warnings?)[, ]*)+(?:in .*)?=*$")
PLAIN_SKIP = re.compile(r"^\s*skip\b", re.IGNORECASE)


def load_allow(path):
    rules = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = [x.strip() for x in line.split("|", 2)]
            if len(parts) < 3 or not all(parts):
                raise ValueError(f"{path}:{n}: want 'BUILD-GLOB | SKIP-GLOB | REASON'")
            rules.append((parts[0], parts[1], parts[2]))
    return rules


def allowed(rules, build, name):
    for bglob, sglob, reason in rules:
        if fnmatch.fnmatchcase(build, bglob) and fnmatch.fnmatchcase(name, sglob):
            return reason
    return None


def skips_in_output(test, out):
    """The sub-test skips that a test's output reports, as TEST::DETAIL names."""
    found = []
    named_pytest = 0
    summary_skips = 0
    for raw in out.splitlines():
        line = raw.rstrip()
        m = TAP_SKIP.match(line)
        if m:
            n = TAP_NAME.match(line)
            detail = (n.group(1) if n and n.group(1) else "") or m.group(1).strip()
            found.append(f"{test}::{detail}")
            continue
        m = PYTEST_SKIPPED.match(line)
        if m:
            named_pytest += int(m.group(1))  # -rs folds identical skips into one line
            found.append(f"{test}::{os.path.basename(m.group(2))}: {m.group(3).strip()}")
            continue
        if PYTEST_SUMMARY_LINE.match(line.strip()):
            m = PYTEST_SUMMARY.search(line)
            if m:
                summary_skips += int(m.group(1))
            continue
        if PLAIN_SKIP.match(line):
            found.append(f"{test}::{line.strip()}")
    if summary_skips > named_pytest:
        # pytest without -rs: the skips cannot be matched against the allow-list
        found.append(f"{test}::{summary_skips - named_pytest} unnamed pytest skip(s) "
                     "(run pytest with -rs)")
    return found


def report(build, skips, rules, missing, failed):
    bad = 0
    for name in skips:
        why = allowed(rules, build, name)
        if why is None:
            print(f"{build}: SKIP not allowed: {name}")
            bad += 1
        else:
            print(f"{build}: skip allowed: {name} ({why})")
    for name in missing:
        print(f"{build}: required test did not run: {name}")
        bad += 1
    for name, res in failed:
        print(f"{build}: test {name}: {res}")
        bad += 1
    return bad


def test_name(logged):
    """'powerinfer:format / pt-reader' (project:suite / name, as meson logs it) -> 'pt-reader'."""
    name = logged.split(":", 1)[1] if ":" in logged else logged
    return name.split(" / ", 1)[1] if " / " in name else name


def check_build(args, rules):
    build = args.as_name or os.path.basename(os.path.normpath(args.build_dir))
    path = os.path.join(args.build_dir, "meson-logs", "testlog.json")
    try:
        with open(path, encoding="utf-8") as f:
            entries = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as e:
        print(f"{build}: cannot read the test log {path}: {e}")
        return 2
    if not entries:
        print(f"{build}: {path} lists no tests")
        return 1
    skips, failed, ran = [], [], set()
    for e in entries:
        name = test_name(e["name"])
        ran.add(name)
        res = e.get("result")
        if res == "SKIP":  # as a whole: its own skip lines would only repeat that
            skips.append(name)
            continue
        if res not in ("OK", "EXPECTEDFAIL"):
            failed.append((name, res))
        skips += skips_in_output(name, (e.get("stdout") or "") + "\n" + (e.get("stderr") or ""))
    missing = [r for r in args.require if r not in ran]
    bad = report(build, skips, rules, missing, failed)
    print(f"{build}: {len(entries)} tests, {len(skips)} skip(s), "
          f"{'FAILED' if bad else 'ok'}")
    return 1 if bad else 0


def check_pytest_log(args, rules):
    try:
        with open(args.pytest_log, encoding="utf-8", errors="replace") as f:
            out = f.read()
    except OSError as e:
        print(f"cannot read {args.pytest_log}: {e}")
        return 2
    skips = skips_in_output(args.name, out)
    bad = report(args.build_name, skips, rules, [], [])
    print(f"{args.build_name}: {args.name}: {len(skips)} skip(s), {'FAILED' if bad else 'ok'}")
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build_dir", nargs="?")
    ap.add_argument("--allow", default=DEFAULT_ALLOW)
    ap.add_argument("--as", dest="as_name", metavar="NAME",
                    help="match the allow-list as if the build directory were NAME")
    ap.add_argument("--require", action="append", default=[], metavar="TEST",
                    help="a test that must be in the log (repeatable)")
    ap.add_argument("--pytest-log", help="check a saved pytest -rs output instead")
    ap.add_argument("--name", default="pytest", help="the test name for --pytest-log")
    ap.add_argument("--build-name", default="build", help="the build name for --pytest-log")
    args = ap.parse_args()
    try:
        rules = load_allow(args.allow)
    except (OSError, ValueError) as e:
        print(f"cannot read the allow-list: {e}")
        return 2
    if args.pytest_log:
        return check_pytest_log(args, rules)
    if not args.build_dir:
        ap.error("BUILD_DIR or --pytest-log is required")
    return check_build(args, rules)


if __name__ == "__main__":
    sys.exit(main())
