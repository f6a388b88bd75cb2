"""Shared scaffolding of the Python format tests (test_roundtrip.py,
test_real_model.py): a check runner that counts results, a collector that reports
every mismatch of one check at once, and the gguf value-type groups.

Import it after `gguf` itself, so that a missing gguf package is reported by the
test as a skip."""
import time
import traceback

from gguf import GGUFValueType as VT

RESULTS = {"passed": 0, "failed": 0}

INT_TYPES = {VT.UINT8, VT.INT8, VT.UINT16, VT.INT16, VT.UINT32, VT.INT32, VT.UINT64,
             VT.INT64}
FLOAT_TYPES = {VT.FLOAT32, VT.FLOAT64}


def run_check(name, fn, *args):
    t0 = time.monotonic()
    try:
        fn(*args)
    except Exception as e:  # an assertion or anything unexpected
        RESULTS["failed"] += 1
        msg = str(e) if isinstance(e, AssertionError) else traceback.format_exc()
        print(f"FAIL {name}: {msg}")
    else:
        RESULTS["passed"] += 1
        print(f"ok   {name} ({time.monotonic() - t0:.2f} s)")


def finish():
    """Print the closing "N passed, N failed" line; return the exit status."""
    print(f"{RESULTS['passed']} passed, {RESULTS['failed']} failed")
    return 1 if RESULTS["failed"] else 0


class Mismatches:
    """Collects every discrepancy of one check, so that one run reports them all."""

    def __init__(self):
        self.items = []

    def add(self, msg):
        self.items.append(msg)

    def eq(self, what, got, want):
        if got != want or type(got) is not type(want):
            self.add(f"{what}: got {got!r}, want {want!r}")

    def done(self):
        assert not self.items, f"{len(self.items)} mismatch(es):\n    " + "\n    ".join(
            self.items[:60])
