"""The model file changing under a running pi-server (issue 12, item 5): started with
--no-mmap the server holds its own copy, so truncating the file or writing other bytes
over it in place changes nothing, the greedy answer included; with the default mapping
the same truncation kills it with SIGBUS at the next request, as include/powerinfer.h
(pi_model_params.load_mode) says. Each server runs on its own copy of the model."""

import os
import shutil
import signal

from conftest import Server, model_path

BODY = {"model": "m", "messages": [{"role": "user", "content": "What is 2+2?"}],
        "max_tokens": 8, "temperature": 0}


def answer(s):
    status, j = s.json("POST", "/v1/chat/completions", BODY)
    assert status == 200, j
    return j["choices"][0]["message"]["content"]


def test_no_mmap_server_survives_its_file_changing(tmp_path):
    copy = tmp_path / "model.gguf"
    shutil.copyfile(model_path(), copy)
    size = os.path.getsize(copy)
    s = Server("-m", copy, "--no-mmap", "--parallel", 1, "-c", 256)
    try:
        want = answer(s)
        os.truncate(copy, 0)
        assert answer(s) == want
        with open(copy, "r+b") as f:  # in place: same inode, other bytes
            f.write(b"\xa5" * size)
        assert answer(s) == want
        assert s.alive()
    finally:
        s.finish()


def test_mapped_server_dies_of_sigbus_on_truncation(tmp_path):
    copy = tmp_path / "model.gguf"
    shutil.copyfile(model_path(), copy)
    s = Server("-m", copy, "--parallel", 1, "-c", 256)
    try:
        answer(s)
        os.truncate(copy, 0)
        try:
            s.request("POST", "/v1/chat/completions", BODY, timeout=30)
        except OSError:
            pass  # the connection dies with the process
        s.proc.wait(timeout=30)
        assert s.proc.returncode == -signal.SIGBUS, s.stderr()[-2000:]
    finally:
        s.stop()
