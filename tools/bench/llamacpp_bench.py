#!/usr/bin/env python3
"""llama.cpp's prompt-processing and decode speed on a GGUF file, measured the way
tools/pi-bench measures libpowerinfer, through the low-level `llama_cpp` ctypes API of
llama-cpp-python (which bundles libllama).  Output has the same table as pi-bench.

Method (mirrors pi-bench.c):
  * model: CPU only (n_gpu_layers 0), llama.cpp's default load mode (mmap) and default
    weight repacking; context: n_ctx = p + n + 8, n_batch = n_ubatch = p,
    n_threads = n_threads_batch = -t (default: all processors), flash attention per
    --flash-attn (default: llama.cpp's "auto").
  * tokens: the same LCG stream as pi-bench (seed 12345), reduced modulo n_vocab.
  * warm-up: one p-token decode.  Then per repetition: clear the KV memory, decode the p
    prompt tokens as one batch (only the last token's logits requested) = pp; then n
    single-token decodes continuing after the prompt = tg.
  * tokens/s per repetition; median/min/max over the repetitions.

usage: llamacpp_bench.py -m MODEL.gguf [-t THREADS] [-p 128] [-n 64] [-r 5]
                         [--tb THREADS_BATCH] [--flash-attn auto|on|off]
                         [--no-repack] [--no-mmap] [--bandwidth GBS] [--verbose]
"""
import argparse
import ctypes
import os
import sys
import time

import llama_cpp as L


def lcg_tokens(count, n_vocab):
    rng = 12345
    out = []
    for _ in range(count):
        rng = (rng * 1664525 + 1013904223) & 0xFFFFFFFF
        out.append((rng >> 8) % n_vocab)
    return out


def summarize(v):
    s = sorted(v)
    n = len(s)
    med = s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])
    return med, s[0], s[-1]


def bytes_per_token(path):
    """Weight bytes a decode step reads (same rule as pi-bench): every tensor once, except
    that token_embd contributes one row, or all of it when there is no output.weight."""
    try:
        from gguf import GGUFReader
    except ImportError:
        return None, None
    r = GGUFReader(path)
    sizes = {t.name: (int(t.n_bytes), [int(x) for x in t.shape]) for t in r.tensors}
    total = sum(nb for nb, _ in sizes.values())
    if "token_embd.weight" in sizes and "output.weight" in sizes:
        eb, shape = sizes["token_embd.weight"]
        n_vocab = shape[-1]  # GGUF order: ne0 = n_embd, ne1 = n_vocab
        total -= eb - eb // n_vocab
    return total, sum(nb for nb, _ in sizes.values())


def main():
    ap = argparse.ArgumentParser(description="llama.cpp speed, pi-bench style")
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", type=int, default=0, help="threads (0 = all processors)")
    ap.add_argument("--tb", type=int, default=0, help="batch threads (default: -t)")
    ap.add_argument("-p", type=int, default=128, help="prompt tokens")
    ap.add_argument("-n", type=int, default=64, help="generated tokens")
    ap.add_argument("-r", type=int, default=5, help="repetitions")
    ap.add_argument("--flash-attn", choices=("auto", "on", "off"), default="auto")
    ap.add_argument("--bandwidth", type=float, default=0.0,
                    help="read bandwidth in GB/s (e.g. pi-bench's) to print an eta line")
    ap.add_argument("--no-repack", action="store_true",
                    help="disable llama.cpp's weight repacking (use_extra_bufts = false)")
    ap.add_argument("--no-mmap", action="store_true", help="load with LLAMA_LOAD_MODE_NONE")
    ap.add_argument("--verbose", action="store_true", help="keep llama.cpp's log")
    a = ap.parse_args()
    if a.t < 0 or a.p < 1 or a.n < 1 or not 1 <= a.r <= 1000:
        ap.error("bad -t/-p/-n/-r")
    threads = a.t or os.cpu_count() or 1
    threads_batch = a.tb or threads

    # Silence llama.cpp/ggml; keep errors (level 3) unless --verbose keeps everything.
    @L.llama_log_callback
    def log_cb(level, text, _ud):
        if a.verbose or level == 3:
            sys.stderr.write(text.decode("utf-8", "replace"))
    L.llama_log_set(log_cb, ctypes.c_void_p(0))
    L.llama_backend_init()

    mp = L.llama_model_default_params()
    mp.n_gpu_layers = 0
    if a.no_repack:
        mp.use_extra_bufts = False
    if a.no_mmap:
        mp.load_mode = L.LLAMA_LOAD_MODE_NONE
    t0 = time.perf_counter()
    model = L.llama_model_load_from_file(a.model.encode(), mp)
    if not model:
        sys.exit(f"llamacpp_bench: cannot load {a.model}")
    load_ms = (time.perf_counter() - t0) * 1e3

    cp = L.llama_context_default_params()
    cp.n_ctx = a.p + a.n + 8
    cp.n_batch = a.p
    cp.n_ubatch = a.p
    cp.n_seq_max = 1
    cp.n_threads = threads
    cp.n_threads_batch = threads_batch
    cp.flash_attn_type = {"auto": L.LLAMA_FLASH_ATTN_TYPE_AUTO, "on": L.LLAMA_FLASH_ATTN_TYPE_ENABLED,
                          "off": L.LLAMA_FLASH_ATTN_TYPE_DISABLED}[a.flash_attn]
    cp.no_perf = True
    ctx = L.llama_init_from_model(model, cp)
    if not ctx:
        sys.exit("llamacpp_bench: cannot create a context")
    mem = L.llama_get_memory(ctx)

    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    toks = (L.llama_token * (a.p + a.n))(*lcg_tokens(a.p + a.n, n_vocab))
    tok_size = ctypes.sizeof(L.llama_token)

    def decode(offset, count):
        ptr = ctypes.cast(ctypes.addressof(toks) + offset * tok_size, ctypes.POINTER(L.llama_token))
        rc = L.llama_decode(ctx, L.llama_batch_get_one(ptr, count))
        if rc != 0:
            sys.exit(f"llamacpp_bench: llama_decode returned {rc}")
        L.llama_synchronize(ctx)

    decode(0, a.p)  # warm-up: touch every weight once
    pp, tg = [], []
    for _ in range(a.r):
        L.llama_memory_clear(mem, True)
        s = time.perf_counter()
        decode(0, a.p)
        pp.append(a.p / (time.perf_counter() - s))
        s = time.perf_counter()
        for i in range(a.n):
            decode(a.p + i, 1)
        tg.append(a.n / (time.perf_counter() - s))

    sp, sg = summarize(pp), summarize(tg)
    desc = ctypes.create_string_buffer(256)
    L.llama_model_desc(model, desc, ctypes.sizeof(desc))
    size = L.llama_model_size(model)
    bpt, file_bytes = bytes_per_token(a.model)
    print(f"model:       {a.model}")
    print(f"arch:        llama.cpp {L.__version__} ({desc.value.decode()}), {L.llama_model_n_layer(model)} layers, "
          f"n_embd {L.llama_model_n_embd(model)}, {size / 1048576.0:.1f} MiB of weights")
    print(f"threads:     {L.llama_n_threads(ctx)} (batch {L.llama_n_threads_batch(ctx)}), "
          f"load {load_ms:.1f} ms, n_ctx {L.llama_n_ctx(ctx)}, flash-attn {a.flash_attn}, "
          f"repack {'off' if a.no_repack else 'default'}, mmap {'off' if a.no_mmap else 'default'}")
    print("| test   | tokens | t/s median | t/s min | t/s max |")
    print("|--------|-------:|-----------:|--------:|--------:|")
    print(f"| pp{a.p:<4d} | {a.p:6d} | {sp[0]:10.2f} | {sp[1]:7.2f} | {sp[2]:7.2f} |")
    print(f"| tg{a.n:<4d} | {a.n:6d} | {sg[0]:10.2f} | {sg[1]:7.2f} | {sg[2]:7.2f} |")
    if bpt is not None:
        print(f"weights read per decoded token: {bpt / 1048576.0:.1f} MiB")
        if a.bandwidth > 0:
            eta = bpt * sg[0] / (a.bandwidth * 1e9)
            print(f"read bandwidth (given): {a.bandwidth:.2f} GB/s -> decode ceiling "
                  f"{a.bandwidth * 1e9 / bpt:.2f} t/s, eta {eta:.3f}")
    sys.stdout.flush()
    L.llama_free(ctx)
    L.llama_model_free(model)
    L.llama_backend_free()


if __name__ == "__main__":
    main()
