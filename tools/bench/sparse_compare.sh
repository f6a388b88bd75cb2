#!/bin/sh
# sparse_compare.sh -- the sparse-inference benchmark: one PowerInfer file and its dense
# twin (tools/bench/make_synthetic_powerinfer.py writes both), in one run:
#   1. pi-bench on the PWRI file, modes sparse and dense (same weights), with telemetry;
#   2. pi-bench on the dense twin (our dense path on an ordinary GGUF);
#   3. llama.cpp (llamacpp_bench.py, llama-cpp-python) on the dense twin.
# Each under /usr/bin/time -v for its peak RSS. Prints one table of decode/prompt t/s and
# the ratios sparse / each dense, then pi-bench's telemetry and eta lines.
#
# usage: tools/bench/sparse_compare.sh [-t 2] [-p 64] [-n 64] [-r 3] MODEL.powerinfer.gguf MODEL.dense.gguf
#        tools/bench/sparse_compare.sh --anchors ../shared/anchors/run [--rounds 3] [...] PWRI DENSE
#   --anchors RUN: instead, ours (sparse on the PowerInfer file, dense on the twin) against
#   PowerInfer (-ngl 0) on the PowerInfer file and ik_llama.cpp (plain, -rtr 1) on the twin,
#   round robin over --rounds rounds, medians with min-max (tools/bench/roundrobin.py).
#   PowerInfer reads sparse files correctly only as F16 or Q4_0.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PI_BENCH=${PI_BENCH:-$root/build/tools/pi-bench}
PYTHON=${PYTHON:-python3}
t=$(nproc 2>/dev/null || echo 1) p=64 n=64 r=3 anchors="" rounds=3
while [ $# -gt 0 ]; do
    case $1 in
        -t) t=$2; shift 2 ;;
        -p) p=$2; shift 2 ;;
        -n) n=$2; shift 2 ;;
        -r) r=$2; shift 2 ;;
        --anchors) anchors=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        -h|--help) sed -n 2,16p "$0"; exit 0 ;;
        -*) echo "sparse_compare.sh: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
[ $# -eq 2 ] || { sed -n 11,12p "$0" >&2; exit 2; }
sp=$1 dn=$2
if [ -n "$anchors" ]; then
    exec "$PYTHON" "$here/roundrobin.py" --anchors "$anchors" --rounds "$rounds" --pi-bench "$PI_BENCH" \
        -t "$t" -p "$p" -n "$n" -r "$r" --sparse "$sp" "$dn"
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rss_mib() { awk -F: '/Maximum resident set size/ { printf "%.1f", $2 / 1024; exit }' "$1"; }
row() { awk -F'|' -v m="$2" -v t="$3" '$2 ~ "^ *"m" *$" && $3 ~ "^ *"t { gsub(/ /, "", $4); print $4; exit }' "$1"; }
row_ll() { awk -F'|' -v t="$2" '$2 ~ "^ *"t { gsub(/ /, "", $4); print $4; exit }' "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "" && b > 0) printf "%.2f", a / b; else print "-" }'; }

echo "sparse_compare.sh: pi-bench sparse,dense on $(basename "$sp") ..." >&2
/usr/bin/time -v "$PI_BENCH" -m "$sp" -t "$t" -p "$p" -n "$n" -r "$r" --sparse-mode sparse,dense \
    --telemetry > "$tmp/sp.out" 2> "$tmp/sp.err"
bw=$(sed -n 's/^read bandwidth ([0-9]* threads): \([0-9.]*\) GB\/s.*/\1/p' "$tmp/sp.out")
echo "sparse_compare.sh: pi-bench on $(basename "$dn") ..." >&2
/usr/bin/time -v "$PI_BENCH" -m "$dn" -t "$t" -p "$p" -n "$n" -r "$r" --no-bandwidth \
    > "$tmp/dn.out" 2> "$tmp/dn.err"
echo "sparse_compare.sh: llama.cpp on $(basename "$dn") ..." >&2
/usr/bin/time -v "$PYTHON" "$here/llamacpp_bench.py" -m "$dn" -t "$t" -p "$p" -n "$n" -r "$r" \
    ${bw:+--bandwidth "$bw"} > "$tmp/ll.out" 2> "$tmp/ll.err"
/usr/bin/time -v "$PYTHON" -c 'import llama_cpp' 2> "$tmp/base.err" > /dev/null

s_tg=$(row "$tmp/sp.out" sparse tg) s_pp=$(row "$tmp/sp.out" sparse pp)
d_tg=$(row "$tmp/sp.out" dense tg) d_pp=$(row "$tmp/sp.out" dense pp)
t_tg=$(row "$tmp/dn.out" dense tg) t_pp=$(row "$tmp/dn.out" dense pp)
l_tg=$(row_ll "$tmp/ll.out" tg) l_pp=$(row_ll "$tmp/ll.out" pp)
sp_rss=$(rss_mib "$tmp/sp.err")
[ -n "$bw" ] && sp_rss=$(awk -v a="$sp_rss" 'BEGIN { printf "%.1f", a - 1024 }')

echo "## sparse vs dense: $(basename "$sp"), $t threads, -p $p -n $n -r $r, $(nproc) CPUs"
echo
echo "| engine, file, mode | pp$p t/s | tg$n t/s | sparse tg / this tg | peak RSS MiB |"
echo "|---|---:|---:|---:|---:|"
echo "| ours, PWRI, sparse | $s_pp | $s_tg | 1.00 | $sp_rss (both modes) |"
echo "| ours, PWRI, dense mode | $d_pp | $d_tg | $(ratio "$s_tg" "$d_tg") | |"
echo "| ours, dense twin | $t_pp | $t_tg | $(ratio "$s_tg" "$t_tg") | $(rss_mib "$tmp/dn.err") |"
echo "| llama.cpp, dense twin | $l_pp | $l_tg | $(ratio "$s_tg" "$l_tg") | $(rss_mib "$tmp/ll.err") (python alone: $(rss_mib "$tmp/base.err")) |"
echo
grep -E '^(read bandwidth|MiB/token|sparse decode|dense decode)' "$tmp/sp.out" | sed 's/^/- /'
grep -E '^\| (sparse|dense) +\| tg' "$tmp/sp.out" | sed 's/^/  /'
grep -E '^read bandwidth' "$tmp/ll.out" | sed 's/^/- llama.cpp: /' || true
echo
sed -n '/^telemetry, sparse mode/,/^time per token/p' "$tmp/sp.out"
