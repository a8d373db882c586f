#!/usr/bin/env bash
# parse-hook latency: the GitHub adapter as a component through PluginHost, against the same
# parser compiled natively. A benchmark, not a test.
#
#   bash plugins/bench.sh [ITERATIONS] [ROUNDS]
#
# Each round runs the native parser (4 × ITERATIONS calls) and then the component
# (ITERATIONS calls), each in a process of its own, and prints both medians and the load
# average before it. The component's process also times its trivial `recognize` export
# (ITERATIONS calls): the floor, what a call on a fresh instance costs before the guest
# does any work. The summary compares the best round of each side and the median round
# of each side. Compare like with like: this machine switches between two speeds (about 2×
# apart) from one process to the next, for native code and wasm alike, so one native run
# beside one component run can pair a slow process with a fast one and show half or twice
# the real ratio; the best rounds of both sides ran at the same (fast) speed.
#
# PROFILE=dev skips the (slow) release build of wasmtime for a rough number.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
n="${1:-5000}"
rounds="${2:-5}"
fixture="$root/core/plugin-host/src/tests/fixtures/github-push.json"
profile_flag="--release"
profile_dir="release"
if [ "${PROFILE:-release}" = dev ]; then
    profile_flag=""
    profile_dir="debug"
fi

bash "$here/build.sh" forge-github
(cd "$here" && cargo build -q $profile_flag -p bench-native)
(cd "$root" && cargo build -q $profile_flag -p woodlark-plugin-host --example bench_parse_hook)
native="${CARGO_TARGET_DIR:-$here/target}/$profile_dir/bench-native"
wasm="${CARGO_TARGET_DIR:-$root/target}/$profile_dir/examples/bench_parse_hook"

median_of() { sed -n 's/.*median \([0-9.]*\) µs.*/\1/p'; }
natives=()
wasms=()
floors=()
for round in $(seq 1 "$rounds"); do
    native_line="$("$native" "$fixture" "$((n * 4))")"
    wasm_lines="$("$wasm" "$here/dist" "$fixture" "$n")"
    echo "round $round (load average before it: $(cut -d' ' -f1-3 /proc/loadavg))"
    echo "  $native_line"
    sed 's/^/  /' <<<"$wasm_lines"
    natives+=("$(median_of <<<"$native_line")")
    wasms+=("$(grep '^wasm' <<<"$wasm_lines" | median_of)")
    floors+=("$(grep '^floor' <<<"$wasm_lines" | median_of)")
done
# Prints "best median" of the numbers on stdin.
best_and_median() { sort -n | awk '{ v[NR] = $1 } END { print v[1], v[int((NR + 1) / 2)] }'; }
read -r native_best native_median < <(printf '%s\n' "${natives[@]}" | best_and_median)
read -r wasm_best wasm_median < <(printf '%s\n' "${wasms[@]}" | best_and_median)
read -r floor_best floor_median < <(printf '%s\n' "${floors[@]}" | best_and_median)
# The floor is what a call on a fresh instance costs before the guest works: against the
# native parse it shows how much of the ratio no guest code can win back.
awk -v r="$rounds" -v nb="$native_best" -v wb="$wasm_best" -v fb="$floor_best" \
    -v nm="$native_median" -v wm="$wasm_median" -v fm="$floor_median" 'BEGIN {
    printf "best round of %d:   native %.1f µs, wasm %.1f µs, ratio %.1f×; floor %.1f µs (%.1f× native)\n", r, nb, wb, wb / nb, fb, fb / nb
    printf "median round of %d: native %.1f µs, wasm %.1f µs, ratio %.1f×; floor %.1f µs (%.1f× native)\n", r, nm, wm, wm / nm, fm, fm / nm
}'
