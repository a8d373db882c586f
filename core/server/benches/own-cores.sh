#!/usr/bin/env bash
# Runs a load-bench scenario with PostgreSQL on cores of its own: the bench (its load client and
# the servers it starts) on CPU 0, every PostgreSQL process the run starts on the other CPUs.
# On a small machine the database otherwise competes with the server it answers for the same
# cores, which production does not do (see docs/benchmarks.md, "Reads (issue 50)").
#
#   core/server/benches/own-cores.sh BENCH_BIN SCENARIO --bench
#   WRAP=core/server/benches/own-cores.sh core/server/benches/compare.sh BASE NEW SCENARIO...
#
# It runs the command it is given on CPU 0; BENCH_BIN is a bench executable as `cargo bench
# -p woodlark --bench load --no-run` builds it, and the scenarios' own variables
# (WOODLARK_READS_ONLY, …) pass through. PostgreSQL processes running before the command
# starts are left alone; those that appear while it runs are moved as they appear (checked
# five times a second: a backend's first queries may still run on CPU 0). The SQLite side
# of a comparison has CPU 0 only, the PostgreSQL side CPU 0 for the server and the rest for
# its database.
set -euo pipefail

if [ $# -lt 1 ]; then
    sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
cpus=$(nproc)
if [ "$cpus" -lt 2 ]; then
    echo "own-cores.sh: needs at least two CPUs, this machine has $cpus" >&2
    exit 2
fi
database_cpus="1-$((cpus - 1))"
before=" $( (pgrep -x postgres || true) | tr '\n' ' ') "

move_new_postgres() {
    while true; do
        for pid in $(pgrep -x postgres || true); do
            case "$before" in
                *" $pid "*) ;;
                *) taskset -p -c "$database_cpus" "$pid" >/dev/null 2>&1 || true ;;
            esac
        done
        sleep 0.2
    done
}
move_new_postgres &
mover=$!
trap 'kill "$mover" 2>/dev/null || true' EXIT

echo "own-cores.sh: bench on CPU 0, PostgreSQL on CPUs $database_cpus"
status=0
taskset -c 0 "$@" || status=$?
exit "$status"
