#!/usr/bin/env python3
"""Seeds for fuzz_template: each real template of tests/fixtures/jinja/templates with
each conversation of the conformance fixture behind a NUL byte, and each language
snippet with its data. Usage: template_seeds.py OUT_DIR"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
FIX = os.path.join(HERE, "..", "fixtures", "jinja")


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(FIX, "conformance.json"), encoding="utf-8") as f:
        fx = json.load(f)
    convs = fx["conversations"]
    k = 0
    for t in fx["templates"]:
        with open(os.path.join(FIX, "templates", t["file"]), "rb") as f:
            src = f.read()
        for i in (0, 5):  # a plain chat, and one with tools and a tool call
            with open(os.path.join(out, "t%03d" % k), "wb") as f:
                f.write(src + b"\0" + convs[i].encode("utf-8"))
            k += 1
    for c in fx["language"]:
        with open(os.path.join(out, "t%03d" % k), "wb") as f:
            f.write(c["template"].encode("utf-8") + b"\0" + c["data"].encode("utf-8"))
        k += 1
    print("%d seeds in %s" % (k, out))


if __name__ == "__main__":
    main()
