#!/bin/sh
# test_archs_quantized.sh -- each architecture fixture (tests/fixtures/archs, F16)
# quantized to Q8_0 (or $PI_QUANT_TYPE, e.g. mxfp4) by pi-quantize, then run by
# test_forward in the default mode (quantized weights, 8-bit activations) against its
# transformers reference: prompt, decode, batches, threads and the CPU device. The
# committed files stay small (F16 only); this gives every family a quantized variant.
#
# usage: test_archs_quantized.sh PI_QUANTIZE TEST_FORWARD FIXTURES_DIR WORK_DIR TOL FAMILY...
# TOL: relative to max |logit|. Tiny random models quantize coarsely: 8-bit rounding of
# weights and activations moves these logits by 1.8e-2..6.8e-2 (measured), so 1e-1; a
# wrong view of a fused quantized tensor (phi3, falcon) or a wrong kernel moves them by
# the whole logit range.
set -eu
quantize=$1 forward=$2 dir=$3 work=$4 tol=$5 qtype=${PI_QUANT_TYPE:-q8_0}
shift 5
rm -rf "$work"
mkdir -p "$work"
args=""
for f in "$@"; do
    "$quantize" -q "$dir/$f.f16.gguf" "$work/$f.$qtype.gguf" "$qtype"
    args="$args $work/$f.$qtype.gguf $dir/$f.ref.bin $tol"
done
# shellcheck disable=SC2086
"$forward" $args
st=$?
rm -rf "$work"
exit $st
