"""pi-server with a device budget (--device cpu: a second CPU backend standing in for a
GPU, so no GPU is needed): the plan counts every slot's KV cache, /health and /metrics
report the placement, and the answers are those of the CPU-only server."""

import re
import subprocess

import pytest

from conftest import Server, model_path, server_binary

PROMPTS = ["The capital of France is", "1, 2, 3, 4,"]


def complete(srv, prompt):
    st, j = srv.json("POST", "/v1/completions",
                     {"prompt": prompt, "max_tokens": 12, "temperature": 0})
    assert st == 200, j
    return j["choices"][0]["text"]


def metrics(srv):
    st, _, body = srv.request("GET", "/metrics")
    assert st == 200
    out = {}
    for line in body.decode().splitlines():
        if line and not line.startswith("#"):
            name, value = line.split(" ")
            out[name] = float(value)
    return out


def dry_run(*args):
    cmd = [server_binary(), "-m", model_path(), "--device", "cpu", "--no-plan-cache",
           "--dry-run", *[str(a) for a in args]]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "pi-server: plan (device cpu 0): planned now (not cached)" in r.stderr
    m = re.search(r"kv cache +([0-9.]+) MiB +on the device", r.stdout)
    assert m, r.stdout
    return float(m.group(1))


def test_cpu_only_server_reports_no_device(server):
    assert server.health()["placement"] == {"device": "none"}
    v = metrics(server)
    assert v["pi_device_bytes"] == 0 and v["pi_device_budget_bytes"] == 0
    assert v["pi_device_attention_layers"] == 0 and v["pi_device_kv_cache"] == 0


def test_plan_counts_every_slot():
    # -c is the total over the slots: 4 slots of 1024 positions hold 4 times the KV cache
    # of one slot of 1024, 4 slots of 4096 sixteen times
    one = dry_run("--vram-budget", 1000, "--parallel", 1, "-c", 1024)
    four = dry_run("--vram-budget", 1000, "--parallel", 4, "-c", 4096)
    big = dry_run("--vram-budget", 1000, "--parallel", 4, "-c", 16384)
    assert one > 0
    assert four == pytest.approx(4 * one, rel=1e-3)
    assert big == pytest.approx(16 * one, rel=1e-3)


@pytest.fixture(scope="module")
def reference():
    s = Server("--parallel", 2, "-c", 1024)
    texts = [complete(s, p) for p in PROMPTS]
    s.finish()
    return texts


@pytest.mark.parametrize("budget", ["0", "0.02", "1000"])
def test_hybrid_server_answers_as_cpu_only(reference, budget):
    s = Server("--parallel", 2, "-c", 1024, "--device", "cpu", "--vram-budget", budget,
               "--no-plan-cache")
    try:
        assert "pi-server: plan (device cpu 0): planned now (not cached)" in s.stderr()
        p = s.health()["placement"]
        assert p["device"] == "cpu" and p["device_index"] == 0
        assert p["budget_bytes"] == int(float(budget) * 2**30)
        assert p["device_bytes"] <= p["budget_bytes"]
        assert p["layers"] == 30 and p["ffn_neurons"] == 30 * 1536
        if budget == "1000":
            assert p["attention_layers_on_device"] == 30
            assert p["ffn_neurons_on_device"] == p["ffn_neurons"]
            assert p["output_on_device"] and p["kv_cache_on_device"]
        if budget == "0":
            assert p["device_bytes"] == 0 and p["attention_layers_on_device"] == 0
        if budget == "0.02":  # some attention, no room for the whole model
            assert 0 < p["device_bytes"] <= 0.02 * 2**30
            assert p["ffn_neurons_on_device"] < p["ffn_neurons"]
        v = metrics(s)
        assert v["pi_device_bytes"] == p["device_bytes"]
        assert v["pi_device_budget_bytes"] == p["budget_bytes"]
        assert v["pi_device_ffn_neurons"] == p["ffn_neurons_on_device"]
        assert v["pi_plan_ffn_neurons"] == p["ffn_neurons"]
        assert v["pi_device_attention_layers"] == p["attention_layers_on_device"]
        assert v["pi_device_output"] == int(p["output_on_device"])
        assert v["pi_device_kv_cache"] == int(p["kv_cache_on_device"])
        assert [complete(s, q) for q in PROMPTS] == reference
    finally:
        s.finish()


@pytest.mark.parametrize("args,message", [
    (["--device-index", "1"], "--device-index needs a device"),
    (["--plan-stats", "x.stats"], "--plan-stats needs a device"),
    (["--vram-budget", "lots"], "--vram-budget wants GiB"),
    (["--device", "tpu"], "--device wants gpu, cpu or none"),
    (["--device", "cpu", "--no-plan-cache", "--reset-plan"], "--no-plan-cache contradicts"),
    (["--device", "cpu", "--plan-stats", "/nonexistent.stats"],
     "cannot read the activation statistics"),
])
def test_bad_device_options_fail_cleanly(args, message):
    r = subprocess.run([server_binary(), "-m", model_path(), "--port", "0", *args],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode in (1, 2), r.stderr
    assert message in r.stderr
