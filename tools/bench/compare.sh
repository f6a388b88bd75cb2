#!/bin/sh
# compare.sh -- libpowerinfer (build/tools/pi-bench) against llama.cpp (llamacpp_bench.py,
# through llama-cpp-python) on the same GGUF files, thread counts and -p/-n/-r.
#
# usage: tools/bench/compare.sh [-t "1 2 ..."] [-p 128] [-n 64] [-r 5] MODEL.gguf...
#        tools/bench/compare.sh --anchors ../shared/anchors/run [--rounds 3] [...] MODEL.gguf...
#   -t   space-separated thread counts (default: all processors)
#   --anchors RUN  instead: pi-bench against the prebuilt anchors (ik_llama.cpp plain and
#        with -rtr 1), round robin over --rounds rounds, medians with min-max
#        (tools/bench/roundrobin.py; RUN is ../shared/anchors/run)
#   env  PI_BENCH (default build/tools/pi-bench), PYTHON (default python3),
#        KEEP_LOGS=DIR keeps each run's full output there.
#
# The two programs run back to back for each (model, threads), each under /usr/bin/time -v
# for its peak RSS ("Maximum resident set size").  llama.cpp's RSS includes the Python
# interpreter + numpy + llama_cpp import, printed separately as "python baseline";
# pi-bench's has its 1 GiB bandwidth-probe buffer subtracted.
# pi-bench's measured read bandwidth is passed to llamacpp_bench.py so that both get an
# eta (decode efficiency) against the same bandwidth.  Run on an otherwise idle machine:
# with few cores, any other busy process makes the numbers meaningless.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
PI_BENCH=${PI_BENCH:-$root/build/tools/pi-bench}
PYTHON=${PYTHON:-python3}
threads=$(nproc 2>/dev/null || echo 1)
p=128 n=64 r=5 anchors="" rounds=3

while [ $# -gt 0 ]; do
    case $1 in
        -t) threads=$2; shift 2 ;;
        -p) p=$2; shift 2 ;;
        -n) n=$2; shift 2 ;;
        -r) r=$2; shift 2 ;;
        --anchors) anchors=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        -h|--help) sed -n 2,19p "$0"; exit 0 ;;
        -*) echo "compare.sh: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || { sed -n 4,12p "$0" >&2; exit 2; }
[ -x "$PI_BENCH" ] || { echo "compare.sh: $PI_BENCH not built (meson compile -C build)" >&2; exit 1; }
if [ -n "$anchors" ]; then
    st=0
    for t in $threads; do
        "$PYTHON" "$here/roundrobin.py" --anchors "$anchors" --rounds "$rounds" --pi-bench "$PI_BENCH" \
            -t "$t" -p "$p" -n "$n" -r "$r" ${KEEP_LOGS:+--logs "$KEEP_LOGS"} "$@" || st=$?
    done
    exit $st
fi
if [ ! -x /usr/bin/time ]; then
    echo "compare.sh: installing GNU time" >&2
    (apt-get update -qq && apt-get install -y -qq time) >/dev/null 2>&1 ||
        { echo "compare.sh: need /usr/bin/time (apt-get install time)" >&2; exit 1; }
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
load=$(cut -d' ' -f1 /proc/loadavg 2>/dev/null || echo 0)
# share of the CPUs busy over one second before we start (0..1)
busy=$(awk 'NR==1 { print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8 }' /proc/stat; sleep 1;
       awk 'NR==1 { print $2+$3+$4+$7+$8, $2+$3+$4+$5+$6+$7+$8 }' /proc/stat)
busy=$(echo "$busy" | awk 'NR==1 { b=$1; t=$2 } NR==2 { d=$2-t; printf "%.2f", (d > 0 ? ($1-b)/d : 0) }')
if awk -v b="$busy" 'BEGIN { exit !(b > 0.15) }'; then
    echo "compare.sh: WARNING: the CPUs were $(awk -v b="$busy" 'BEGIN { printf "%d", b*100 }')% busy before the run;" \
         "numbers with as many threads as CPUs will be unreliable" >&2
fi

# t/s median of a table row whose test column starts with $2 (pp or tg): pi-bench's table
# has a mode column before the test, llamacpp_bench.py's has not
median() { awk -F'|' -v t="$2" '$3 ~ "^ *"t { gsub(/ /, "", $4); print $4; exit }' "$1"; }
median_ll() { awk -F'|' -v t="$2" '$2 ~ "^ *"t { gsub(/ /, "", $4); print $4; exit }' "$1"; }
rss_mib() { awk -F: '/Maximum resident set size/ { printf "%.1f", $2 / 1024; exit }' "$1"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a != "" && b != "" && b > 0) printf "%.3f", a / b; else print "-" }'; }

/usr/bin/time -v "$PYTHON" -c 'import llama_cpp, gguf' 2>"$tmp/base.time" >/dev/null
base_rss=$(rss_mib "$tmp/base.time")

rows="$tmp/rows"; notes="$tmp/notes"
: >"$rows"; : >"$notes"
for model in "$@"; do
    name=$(basename "$model")
    for t in $threads; do
        tag="$name.t$t"
        echo "compare.sh: $name, $t threads: pi-bench ..." >&2
        pi_ok=1
        /usr/bin/time -v "$PI_BENCH" -m "$model" -t "$t" -p "$p" -n "$n" -r "$r" \
            >"$tmp/pi.out" 2>"$tmp/pi.err" || pi_ok=0
        bw=$(sed -n 's/^read bandwidth ([0-9]* threads): \([0-9.]*\) GB\/s.*/\1/p' "$tmp/pi.out")
        echo "compare.sh: $name, $t threads: llama.cpp ..." >&2
        ll_ok=1
        /usr/bin/time -v "$PYTHON" "$here/llamacpp_bench.py" -m "$model" -t "$t" -p "$p" -n "$n" \
            -r "$r" ${bw:+--bandwidth "$bw"} >"$tmp/ll.out" 2>"$tmp/ll.err" || ll_ok=0
        if [ -n "${KEEP_LOGS:-}" ]; then
            mkdir -p "$KEEP_LOGS"
            cat "$tmp/pi.out" "$tmp/pi.err" >"$KEEP_LOGS/$tag.pi-bench.log"
            cat "$tmp/ll.out" "$tmp/ll.err" >"$KEEP_LOGS/$tag.llamacpp.log"
        fi
        [ $pi_ok = 1 ] || { echo "compare.sh: pi-bench failed on $name:" >&2; sed '/Command being timed/,$d' "$tmp/pi.err" | tail -5 >&2; }
        [ $ll_ok = 1 ] || { echo "compare.sh: llamacpp_bench failed on $name:" >&2; sed '/Command being timed/,$d' "$tmp/ll.err" | tail -5 >&2; }
        for test in pp tg; do
            a=$(median "$tmp/pi.out" $test); b=$(median_ll "$tmp/ll.out" $test)
            printf '| %s | %s | %s%s | %s | %s | %s |\n' "$name" "$t" "$test" \
                "$([ $test = pp ] && echo "$p" || echo "$n")" "${a:--}" "${b:--}" "$(ratio "$a" "$b")" >>"$rows"
        done
        a=$(rss_mib "$tmp/pi.err"); b=$(rss_mib "$tmp/ll.err")
        # pi-bench's bandwidth probe mallocs and fills a 1 GiB buffer while the model is
        # loaded; take it out so the RSS is the model's + context's
        [ -n "$bw" ] && [ -n "$a" ] && a=$(awk -v a="$a" 'BEGIN { printf "%.1f", a - 1024 }')
        printf '| %s | %s | peak RSS MiB | %s | %s | %s |\n' "$name" "$t" "${a:--}" "${b:--}" "$(ratio "$a" "$b")" >>"$rows"
        {
            pe=$(grep '^read bandwidth' "$tmp/pi.out" || true)
            le=$(grep '^read bandwidth' "$tmp/ll.out" | sed 's/.*-> //' || true)
            wr=$(awk -F'|' '$3 ~ /^ *tg/ { gsub(/ /, "", $7); print $7 " MiB"; exit }' "$tmp/pi.out")
            echo "- $name, $t threads: pi-bench ${pe:-(no eta line)}; llama.cpp at the same bandwidth: ${le:-(n/a)}; weights/token ${wr:-?}"
        } >>"$notes"
    done
done

echo "## pi-bench vs llama.cpp (llama-cpp-python $("$PYTHON" -c 'import llama_cpp; print(llama_cpp.__version__)')): -p $p -n $n -r $r, $(nproc) CPUs, load avg at start $load, CPUs busy before start $busy"
echo
echo "| model | threads | test | pi t/s | llama.cpp t/s | ratio pi/llama.cpp |"
echo "|-------|--------:|------|-------:|--------------:|-------------------:|"
cat "$rows"
echo
cat "$notes"
echo "- t/s are medians over $r repetitions. Peak RSS: pi-bench's excludes its 1024 MiB bandwidth-probe buffer;"
echo "  llama.cpp's includes a python baseline of $base_rss MiB (python3 -c 'import llama_cpp, gguf') and, by default, the mmapped file plus any repacked copy."
