#!/bin/sh
# pi-run and pi-bench on a PowerInfer model: a tiny synthetic ReLU-Llama (PWRI, Q4_0, with
# a dense twin) made by tools/bench/make_synthetic_powerinfer.py (numpy + gguf).
#  - pi-run generates sparsely by default and says so; --sparse-mode dense/oracle work;
#    a predictor that marks every neuron (--sparse-threshold -1e30) gives the dense text;
#  - sparse modes on a dense file fail with a clear message;
#  - --stats/--diagnostic print telemetry; --profile writes a statistics side file that
#    the gguf package reads as specified (docs/formats.md);
#  - pi-bench runs several modes on the same weights.
#  - an F16 PowerInfer model quantized by pi-quantize to Q4_0 FFN weights and Q5_0
#    predictors (what PowerInfer's own quantize makes for non-Q4_0 targets) and to Q8_0
#    runs sparse, and its oracle text equals its dense text.
# Args: PI_RUN PI_BENCH PI_QUANTIZE SOURCE_ROOT WORK_DIR
set -u
pirun=$1
bench=$2
quant=$3
root=$4
work=$5/sparse-tools-test
rm -rf "$work"
mkdir -p "$work"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok - $1"; }
bad() { fail=$((fail + 1)); echo "not ok - $1"; }
expect() { # NAME FILE PATTERN
    if grep -q -- "$3" "$2"; then ok "$1: $3"; else bad "$1: '$3' not in output"; sed 's/^/#   /' "$2"; fi
}

python3 "$root/tools/bench/make_synthetic_powerinfer.py" --preset tiny -o "$work/m" > "$work/gen.txt" 2>&1 \
    && ok "synthetic model written" || { bad "synthetic model"; cat "$work/gen.txt"; echo "1..$((pass + fail))"; exit 1; }
sp=$work/m.powerinfer.gguf
dn=$work/m.dense.gguf

"$pirun" -m "$sp" -p "a b c" -n 12 --temp 0 -t 2 > "$work/sparse.txt" 2> "$work/sparse.err" \
    && ok "sparse generation exits 0" || bad "sparse generation exits 0"
expect default "$work/sparse.err" "PowerInfer model, sparse (predictor-driven) FFN, threshold 0"
"$pirun" -m "$sp" -p "a b c" -n 12 --temp 0 -t 2 --sparse-mode dense > "$work/dense.txt" 2> "$work/dense.err" \
    && ok "--sparse-mode dense exits 0" || bad "--sparse-mode dense"
expect dense "$work/dense.err" "PowerInfer model, dense FFN"
"$pirun" -m "$sp" -p "a b c" -n 12 --temp 0 -t 1 --sparse-mode oracle > "$work/oracle.txt" 2> "$work/oracle.err" \
    && ok "--sparse-mode oracle exits 0" || bad "--sparse-mode oracle"
expect oracle "$work/oracle.err" "oracle"
cmp -s "$work/dense.txt" "$work/oracle.txt" && ok "oracle text = dense text" || bad "oracle text differs from dense"
"$pirun" -m "$sp" -p "a b c" -n 12 --temp 0 -t 3 --sparse-threshold -1e30 > "$work/all.txt" 2>/dev/null
cmp -s "$work/dense.txt" "$work/all.txt" && ok "predictor marking every neuron = dense text" || bad "all-neuron predictor differs from dense"
"$pirun" -m "$dn" -p "a b c" -n 12 --temp 0 > "$work/twin.txt" 2>/dev/null \
    && ok "dense twin runs" || bad "dense twin runs"

"$pirun" -m "$dn" -p "a b c" -n 4 --sparse-mode sparse > "$work/bad.txt" 2>&1
[ $? -eq 1 ] && ok "sparse mode on a dense file exits 1" || bad "sparse mode on a dense file exits 1"
expect bad-mode "$work/bad.txt" "needs a PowerInfer model"
"$pirun" -m "$sp" -p "x" --sparse-mode fast > "$work/bad2.txt" 2>&1
[ $? -eq 2 ] && ok "unknown mode exits 2" || bad "unknown mode exits 2"

"$pirun" -m "$sp" -p "a b c d e f" -n 6 --diagnostic > /dev/null 2> "$work/diag.err" \
    && ok "--diagnostic exits 0" || bad "--diagnostic"
expect diagnostic "$work/diag.err" "weights read per token: .* MiB = FFN"
expect diagnostic "$work/diag.err" "time per token in layers"
grep -E '^all +[0-9. ]+%' "$work/diag.err" | grep -q -- '-' && bad "diagnostic recall missing" || ok "diagnostic shows recall and precision"

printf 'one two three four five six seven eight nine ten' > "$work/prompt.txt"
"$pirun" -m "$sp" -f "$work/prompt.txt" -n 5 --profile "$work/act.gguf" > /dev/null 2> "$work/profile.err" \
    && ok "--profile exits 0" || bad "--profile"
expect profile "$work/profile.err" "wrote activation statistics"
python3 - "$work/act.gguf" "$sp" > "$work/profile.txt" 2>&1 <<'PY'
import sys
import gguf
r = gguf.GGUFReader(sys.argv[1])
m = open(sys.argv[2], "rb").read(4)
kv = {f.name: f for f in r.fields.values()}
def val(k):
    f = kv[k]
    return f.parts[f.data[0]].tobytes().decode() if f.types[0] == gguf.GGUFValueType.STRING else int(f.parts[f.data[0]][0])
assert val("general.architecture") == "activation_stats", val("general.architecture")
L, F = val("activation_stats.block_count"), val("activation_stats.feed_forward_length")
tp, to = val("activation_stats.tokens_predicted"), val("activation_stats.tokens_observed")
names = [t.name for t in r.tensors]
want = [f"blk.{l}.{k}" for l in range(L) for k in ("predicted", "active", "both")]
assert names == want, names[:6]
for t in r.tensors:
    assert t.tensor_type == gguf.GGMLQuantizationType.F64 and t.n_elements == F
    assert (t.data >= 0).all() and (t.data <= max(tp, to)).all()
p = r.tensors[0].data; a = r.tensors[1].data; b = r.tensors[2].data
assert (b <= p).all() and (b <= a).all() and p.sum() > 0 and a.sum() > 0
print(f"profile ok: {L} layers x {F} neurons, {tp} tokens predicted, {to} observed, "
      f"predicted {p.sum() / (tp * F):.3f}, active {a.sum() / (to * F):.3f}, recall {b.sum() / a.sum():.3f}")
PY
[ $? -eq 0 ] && ok "side file reads back with the gguf package" || bad "side file check"
sed 's/^/# /' "$work/profile.txt"

"$bench" -m "$sp" -t 2 -p 8 -n 4 -r 1 --no-bandwidth --sparse-mode sparse,dense,oracle > "$work/bench.txt" 2>&1 \
    && ok "pi-bench with three modes exits 0" || bad "pi-bench modes"
expect bench "$work/bench.txt" "| sparse | tg4"
expect bench "$work/bench.txt" "decode speed-up oracle / sparse"
# the bandwidth probe: threads started once, the median of 7 passes with its range, and
# eta from it (compare.sh and sparse_compare.sh read the figure before "GB/s")
"$bench" -m "$dn" -t 2 -p 4 -n 2 -r 1 > "$work/bench3.txt" 2>&1 && ok "pi-bench with the probe exits 0" || bad "pi-bench probe"
expect bandwidth "$work/bench3.txt" "^read bandwidth (2 threads): [0-9.]* GB/s (median of 7 passes, [0-9.]*-[0-9.]*)"
bw=$(sed -n 's/^read bandwidth ([0-9]* threads): \([0-9.]*\) GB\/s.*/\1/p' "$work/bench3.txt")
python3 -c "import sys; sys.exit(0 if float('$bw' or 0) > 0 else 1)" && ok "probe figure parses: $bw GB/s" || bad "probe figure '$bw'"
# a mixture-of-experts model counts no neurons: its active column is unknown ("-"), not 0 %
"$bench" -m "$root/tests/fixtures/archs/mixtral.f16.gguf" -t 2 -p 4 -n 2 -r 1 --no-bandwidth \
    > "$work/bench_moe.txt" 2>&1 && ok "pi-bench on a MoE file exits 0" || bad "pi-bench MoE"
expect bench_moe "$work/bench_moe.txt" "^| dense  | tg2    |.*|      - | "
"$bench" -m "$dn" -p 4 -n 2 -r 1 --no-bandwidth --sparse-mode sparse > "$work/bench2.txt" 2>&1
[ $? -eq 1 ] && ok "pi-bench sparse on a dense file exits 1" || bad "pi-bench sparse on dense"

python3 "$root/tools/bench/make_synthetic_powerinfer.py" --preset tiny --type f16 -o "$work/f" > /dev/null 2>&1 \
    && ok "F16 synthetic model written" || bad "F16 synthetic model"
for spec in "q4_0 q5_0" "q8_0 q8_0"; do
    set -- $spec
    "$quant" -q --predictor-type "$2" "$work/f.powerinfer.gguf" "$work/f.$1.gguf" "$1" > /dev/null 2>&1 \
        && ok "pi-quantize $1 (predictors $2)" || bad "pi-quantize $1 (predictors $2)"
    "$pirun" --info --tensors "$work/f.$1.gguf" > "$work/f.$1.info" 2>&1
    expect "quantized $1" "$work/f.$1.info" "blk.0.fc2.weight .*$(echo "$2" | tr a-z A-Z)"
    for mode in sparse dense oracle; do
        "$pirun" -m "$work/f.$1.gguf" -p "a b c" -n 10 --temp 0 -t 2 --sparse-mode $mode \
            > "$work/f.$1.$mode.txt" 2> "$work/f.$1.$mode.err" || bad "$1 $mode run"
    done
    expect "quantized $1" "$work/f.$1.sparse.err" "sparse (predictor-driven)"
    [ -s "$work/f.$1.sparse.txt" ] && ok "$1 sparse generates" || bad "$1 sparse output empty"
    cmp -s "$work/f.$1.dense.txt" "$work/f.$1.oracle.txt" && ok "$1: oracle text = dense text" \
        || bad "$1: oracle text differs from dense"
done

echo "1..$((pass + fail))"
[ "$fail" -eq 0 ]
