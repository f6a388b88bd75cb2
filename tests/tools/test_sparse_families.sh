#!/bin/sh
# The Falcon (both layouts) and OPT PowerInfer fixtures (tests/fixtures/make_sparse_models.py
# --families) quantized by pi-quantize from their F16 files to Q4_0 and Q8_0 (predictors
# too): each against the torch reference of the same file made by the converter, whose
# Q4_0/Q8_0 rounding is gguf.quants' -- float activations within 3e-3 of max |logit|
# with every predicted set exact, 8-bit activations within 5e-2 (the llama fixtures'
# tolerances) for Falcon; OPT's 8-bit runs move its logits more (measured: Q8_0 3.6e-2
# in the dense mode, 1.1e-1 in the predictor mode, where 8-bit rounding of the residual
# flips a few near-threshold predictions; Q4_0 3.0e-2 / 6.1e-2: on these 32-wide rows
# one Q8 block scales a whole row), so its bound is 1.5e-1.
# And tools/convert_hf_to_powerinfer.py on the committed OPT and Falcon-40B-layout HF and
# predictor directories: the PWRI files equal the committed F16 files byte for byte, the
# --dense OPT GGUF gives the reference's dense logits (within 3e-3), and what it refuses
# exits 1 with a message.
# Args: PI_QUANTIZE TEST_SPARSE_REF FIXTURE_DIR WORK_DIR
set -u
quant=$1
sref=$2
fix=$3
work=$4
rm -rf "$work"
mkdir -p "$work"
pass=0
fail=0
ok() { pass=$((pass + 1)); echo "ok - $1"; }
bad() { fail=$((fail + 1)); echo "not ok - $1"; }
for v in relu-falcon-7b relu-falcon-40b opt; do
    for ty in q4_0 q8_0; do
        out=$work/$v.$ty.gguf
        if "$quant" -q "$fix/$v.f16.gguf" "$out" "$ty" > "$work/$v.$ty.qlog" 2>&1; then
            ok "pi-quantize $v $ty"
        else
            bad "pi-quantize $v $ty"; sed 's/^/#   /' "$work/$v.$ty.qlog"; continue
        fi
        fast=5e-2
        [ "$v" = opt ] && fast=1.5e-1
        if "$sref" "$out" "$fix/$v.$ty.sref.bin" 3e-3 --fast "$out" "$fix/$v.$ty.sref.bin" $fast \
            > "$work/$v.$ty.log" 2>&1; then
            ok "$v $ty: reference, fast mode"
        else
            bad "$v $ty: reference, fast mode"; sed 's/^/#   /' "$work/$v.$ty.log"
        fi
        grep '^# ' "$work/$v.$ty.log" | sed "s|$work/||"
    done
done
conv=$(dirname "$0")/../../tools/convert_hf_to_powerinfer.py
if python3 "$conv" -q "$fix/opt-hf" "$fix/opt-predictor" --outfile "$work/opt.f16.gguf" \
        --outtype f16 --name opt --no-tokenizer > "$work/conv.log" 2>&1 \
    && cmp -s "$work/opt.f16.gguf" "$fix/opt.f16.gguf"; then
    ok "converter: OPT PWRI = committed opt.f16.gguf"
else
    bad "converter: OPT PWRI differs from opt.f16.gguf"; sed 's/^/#   /' "$work/conv.log"
fi
if python3 "$conv" -q --dense "$fix/opt-hf" --outfile "$work/opt.dense.gguf" --outtype f16 \
        --name opt --no-tokenizer > "$work/dense.log" 2>&1 \
    && "$sref" --dense-file "$work/opt.dense.gguf" "$fix/opt.f16.sref.bin" 3e-3 > "$work/dense.run" 2>&1; then
    ok "converter: dense OPT GGUF = dense reference"
else
    bad "converter: dense OPT GGUF"; sed 's/^/#   /' "$work/dense.log" "$work/dense.run"
fi
grep '^# ' "$work/dense.run" 2>/dev/null | sed "s|$work/||"
# Falcon's 40B layout (QKV rows regrouped per KV group): the converter's PWRI file is the
# committed one; a dense GGUF of a ReLU Falcon, and a PWRI file of a GELU one, are refused
if python3 "$conv" -q "$fix/relu-falcon-40b-hf" "$fix/relu-falcon-40b-predictor" \
        --outfile "$work/f40.gguf" --outtype f16 --name relu-falcon-40b --no-tokenizer \
        > "$work/f40.log" 2>&1 && cmp -s "$work/f40.gguf" "$fix/relu-falcon-40b.f16.gguf"; then
    ok "converter: Falcon-40B-layout PWRI = committed relu-falcon-40b.f16.gguf"
else
    bad "converter: Falcon-40B-layout PWRI differs"; sed 's/^/#   /' "$work/f40.log"
fi
python3 "$conv" -q --dense "$fix/relu-falcon-40b-hf" --outfile "$work/f40d.gguf" > "$work/f40d.log" 2>&1
[ $? -eq 1 ] && grep -q "runs GELU" "$work/f40d.log" && ok "converter refuses a dense ReLU Falcon" \
    || { bad "dense ReLU Falcon"; sed 's/^/#   /' "$work/f40d.log"; }
rm -rf "$work/gelu-hf"
cp -r "$fix/relu-falcon-40b-hf" "$work/gelu-hf"
python3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c['activation']='gelu'; json.dump(c, open(p, 'w'))" \
    "$work/gelu-hf/config.json"
python3 "$conv" -q "$work/gelu-hf" "$fix/relu-falcon-40b-predictor" --outfile "$work/g.gguf" > "$work/g.log" 2>&1
[ $? -eq 1 ] && grep -q "ReLU Falcon" "$work/g.log" && ok "converter refuses a GELU Falcon PWRI" \
    || { bad "GELU Falcon PWRI"; sed 's/^/#   /' "$work/g.log"; }
# what the converter refuses, with a message: OPT-350m's post-LN blocks and projections
for spec in "do_layer_norm_before false post-LN" "word_embed_proj_dim 16 project_in" \
            "activation_function \"gelu\" activation_function"; do
    set -- $spec
    rm -rf "$work/bad-hf"
    cp -r "$fix/opt-hf" "$work/bad-hf"
    python3 -c "import json,sys; p=sys.argv[1]; c=json.load(open(p)); c[sys.argv[2]]=json.loads(sys.argv[3]); json.dump(c, open(p, 'w'))" \
        "$work/bad-hf/config.json" "$1" "$2"
    python3 "$conv" -q "$work/bad-hf" "$fix/opt-predictor" --outfile "$work/bad.gguf" > "$work/bad.log" 2>&1
    rc=$?
    if [ $rc -eq 1 ] && grep -q -- "$3" "$work/bad.log" && [ ! -e "$work/bad.gguf" ]; then
        ok "converter refuses OPT with $1 = $2"
    else
        bad "converter with $1 = $2: exit $rc"; sed 's/^/#   /' "$work/bad.log"
    fi
done
echo "1..$((pass + fail))"
[ "$fail" -eq 0 ]
