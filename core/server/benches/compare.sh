#!/usr/bin/env bash
# Before/after of load-bench scenarios in the same run: runs two builds of the bench
# alternately, base then new, ROUNDS times per scenario, and prints each run's report lines
# with a label (see docs/benchmarks.md, "Comparing two builds").
#
#   core/server/benches/compare.sh BASE_BIN NEW_BIN SCENARIO...
#
# BASE_BIN and NEW_BIN are bench executables as `cargo bench -p woodlark --bench load --no-run`
# builds them (target/release/deps/load-<hash>; the release build, each from its own tree).
# SCENARIO is any of the bench's scenarios (http, hooks, …). Scenarios run one after the other;
# within one, the builds alternate (base, new, base, new, …) so that both see the machine's
# quiet and busy stretches alike.
#
# Environment: ROUNDS (default 2) rounds of base + new per scenario; OUT (default a new
# temporary directory) where each run's full output is kept, as <scenario>-<round>-<base|new>.log;
# the scenarios' own variables (WOODLARK_HOOKS_SECS, …) pass through; WRAP, a command each run
# is started through (own-cores.sh: PostgreSQL on cores of its own).
#
# Every line a run prints goes to stdout as `<scenario> <round> <base|new> | <line>`; a run that
# fails is reported and the others still run (exit status 1 at the end).
set -uo pipefail

if [ $# -lt 3 ]; then
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
base="$1"
new="$2"
shift 2
for bin in "$base" "$new"; do
    [ -x "$bin" ] || { echo "compare.sh: $bin is not an executable" >&2; exit 2; }
done
rounds="${ROUNDS:-2}"
out="${OUT:-$(mktemp -d -t bench-compare.XXXXXX)}"
mkdir -p "$out"
echo "compare.sh: base $base"
echo "compare.sh: new  $new"
echo "compare.sh: $rounds rounds of base + new per scenario; full logs in $out"

failed=0
for scenario in "$@"; do
    for round in $(seq 1 "$rounds"); do
        for side in base new; do
            if [ "$side" = base ]; then bin="$base"; else bin="$new"; fi
            log="$out/$scenario-$round-$side.log"
            # `--bench` as `cargo bench` passes it (the bench ignores flags).
            ${WRAP:+"$WRAP"} "$bin" "$scenario" --bench >"$log" 2>&1
            status=$?
            sed "s/^/$scenario $round $side | /" "$log"
            if [ "$status" -ne 0 ]; then
                echo "$scenario $round $side | compare.sh: exit status $status (log: $log)"
                failed=1
            fi
        done
    done
done
exit "$failed"
