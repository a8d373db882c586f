#!/usr/bin/env bash
# Where the CPU of a PostgreSQL cache miss goes, and how much a PostgreSQL client may cost
# for the misses to reach half of SQLite's rate on this machine (issue 50; docs/benchmarks.md,
# "Reads (issue 50)", ninth round).
#
#   core/server/benches/miss-cpu.sh BENCH_BIN
#   core/server/benches/miss-cpu.sh --again PERF_DATA BENCH_LOG   # a kept run, read again
#
# BENCH_BIN is a bench executable as `cargo bench -p woodlark --bench load --no-run` builds it.
# It runs the `reads` scenario's miss row once (a SQLite turn, a PostgreSQL turn, then
# `pgbench` running the page's statement), under `perf record -a` (every process, both
# cores), and prints each turn's CPU per answer split by process: the bench (its load client
# and the server being measured), PostgreSQL's backends, `pgbench`, idle, the rest. Then the
# allowance: the CPU a miss may take in all for PostgreSQL to serve half of SQLite's rate,
# less what the backends take per miss and what Woodlark does for any miss besides reading
# the store (a SQLite miss less SQLite's own engine), is what the server's PostgreSQL client
# may cost per miss. `pgbench`'s own CPU per answer (libpq, doing nothing with the rows) is
# printed beside it.
#
# Environment: WOODLARK_READS_PG_SOCKET=1 (the Unix socket; TLS otherwise) and
# WOODLARK_READS_SECS (default 4) pass through; PERF_DATA (default a temporary file) keeps
# the profile. Needs `perf` (Debian: linux-perf) and root or kernel.perf_event_paranoid <= 0.
set -euo pipefail

usage() {
    sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
}
command -v perf >/dev/null || { echo "miss-cpu.sh: needs perf (apt-get install linux-perf)" >&2; exit 2; }
hz=999
if [ "${1:-}" = "--again" ]; then
    [ $# -eq 3 ] || usage
    data="$2"
    log="$3"
else
    [ $# -eq 1 ] || usage
    bin="$1"
    [ -x "$bin" ] || { echo "miss-cpu.sh: $bin is not an executable" >&2; exit 2; }
    data="${PERF_DATA:-$(mktemp -t miss-cpu.XXXXXX.data)}"
    log="$(mktemp -t miss-cpu.XXXXXX.log)"
    export WOODLARK_READS_ONLY="new query" WOODLARK_READS_ROUNDS=1
    export WOODLARK_READS_SECS="${WOODLARK_READS_SECS:-4}"
    perf record -a -F "$hz" -o "$data" -- "$bin" reads --bench >"$log" 2>&1
fi

# The rates the bench measured: SQLite's and PostgreSQL's misses, pgbench's transactions.
rates=$(awk -F'|' '/a new query each time/ { gsub(/ /, "", $3); gsub(/ /, "", $4); s = $3; p = $4 }
    /the list.s SELECT/ { gsub(/ /, "", $3); b = $3 }
    END { print s, p, b }' "$log")
read -r sqlite_rate pg_rate pgbench_rate <<<"$rates"
if [ -z "$pgbench_rate" ]; then
    echo "miss-cpu.sh: the bench printed no miss row; its output is in $log" >&2
    exit 1
fi
echo "miss-cpu.sh: misses/s SQLite $sqlite_rate, PostgreSQL $pg_rate; pgbench $pgbench_rate tx/s"

perf script -i "$data" -F comm,pid,time,ip,sym 2>/dev/null | awk \
    -v hz="$hz" -v cpus="$(nproc)" -v rs="$sqlite_rate" -v rp="$pg_rate" -v rb="$pgbench_rate" '
# Each sample: comm pid time: ip sym. Samples are put in quarter-second buckets, each bucket
# classed by what ran in it (pgbench; PostgreSQL without pgbench; the bench alone at full
# load); a turn is the longest run of its class, found in the order the bench runs them
# (SQLite, PostgreSQL, pgbench), less the buckets at its edges.
{
    t = $3; sub(":", "", t); b = int(t * 4)
    who = "other"
    if ($2 == 0) who = "idle"
    else if ($1 == "postgres") who = "postgres"
    else if ($1 == "pgbench") who = "pgbench"
    else if ($1 == "tokio-rt-worker") { who = "bench"; bench_pid = $2 }
    pid[NR] = $2; bucket[NR] = b; whom[NR] = who; sym[NR] = $5
    n[b, who]++
    if (first == "" || b < first) first = b
    if (b > last) last = b
}
function run_of(class, from,   b, best, bestlen, start, len) {
    bestlen = 0; len = 0
    for (b = from; b <= last + 1; b++) {
        if (b <= last && cls[b] == class) { if (len == 0) start = b; len++ }
        else { if (len > bestlen) { bestlen = len; best = start }; len = 0 }
    }
    if (bestlen < 4) return ""
    lo[class] = best + 1; hi[class] = best + bestlen - 2
    return best + bestlen
}
END {
    cap = hz * cpus / 4
    for (i = 1; i <= NR; i++) if (whom[i] == "other" && pid[i] == bench_pid) { n[bucket[i], "other"]--; n[bucket[i], "bench"]++; whom[i] = "bench" }
    for (b = first; b <= last; b++) {
        if (n[b, "pgbench"] > 0.05 * cap) cls[b] = "pgbench"
        else if (n[b, "postgres"] > 0.05 * cap) cls[b] = "postgres"
        else if (n[b, "bench"] > 0.8 * cap) cls[b] = "sqlite"
        else cls[b] = "-"
    }
    after = run_of("sqlite", first)
    if (after == "" || (after = run_of("postgres", after)) == "" || run_of("pgbench", after) == "") {
        print "miss-cpu.sh: could not find the three turns in the profile" > "/dev/stderr"; exit 1
    }
    split("sqlite postgres pgbench", turns, " ")
    rate["sqlite"] = rs; rate["postgres"] = rp; rate["pgbench"] = rb
    split("bench postgres pgbench idle other", whos, " ")
    for (i = 1; i <= NR; i++)
        for (k = 1; k <= 3; k++) {
            c = turns[k]
            if (bucket[i] >= lo[c] && bucket[i] <= hi[c]) {
                s[c, whom[i]]++
                if (c == "sqlite" && whom[i] == "bench" && sym[i] ~ /^(sqlite3|pcache1|rusqlite)/) engine++
            }
        }
    printf "\nCPU per answer, µs (all %d cores; one turn each, its edges left out)\n", cpus
    printf "%-10s %14s %16s %14s\n", "process", "SQLite miss", "PostgreSQL miss", "pgbench tx"
    for (w = 1; w <= 5; w++) {
        printf "%-10s", whos[w]
        for (k = 1; k <= 3; k++) {
            c = turns[k]; secs = (hi[c] - lo[c] + 1) / 4
            us[c, whos[w]] = s[c, whos[w]] / hz / secs / rate[c] * 1e6
            printf " %14.1f", us[c, whos[w]]
        }
        printf "\n"
    }
    secs = (hi["sqlite"] - lo["sqlite"] + 1) / 4
    eng = engine / hz / secs / rs * 1e6
    common = us["sqlite", "bench"] - eng
    client = us["postgres", "bench"] - common
    budget = cpus / (rs / 2) * 1e6
    allow = budget - us["postgres", "postgres"] - common
    printf "\nSQLite engine (sqlite3*, pcache1*, rusqlite* samples) in a SQLite miss: %.1f µs\n", eng
    printf "Woodlark besides the store (a SQLite miss less its engine):       %.1f µs\n", common
    printf "the PostgreSQL client of Woodlark (a PostgreSQL miss less that):  %.1f µs\n", client
    printf "pgbench per transaction (libpq, rows thrown away):                %.1f µs\n", us["pgbench", "pgbench"]
    printf "CPU a miss may take for 0.5x of SQLite (%d cores / %.0f per s):    %.1f µs\n", cpus, rs / 2, budget
    printf "  less the backends (%.1f) and Woodlark besides the store (%.1f): the client may cost %.1f µs\n", \
        us["postgres", "postgres"], common, allow
}'
echo "miss-cpu.sh: the profile is $data, the bench's output $log"
