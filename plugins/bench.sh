#!/usr/bin/env bash
# parse-hook latency: the GitHub adapter as a component through PluginHost, against the same
# parser compiled natively. A benchmark, not a test: compare the two lines of one run.
#
#   bash plugins/bench.sh [ITERATIONS]
#
# PROFILE=dev skips the (slow) release build of wasmtime for a rough number.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/.." && pwd)"
n="${1:-5000}"
fixture="$root/core/plugin-host/src/tests/fixtures/github-push.json"
profile_flag="--release"
[ "${PROFILE:-release}" = dev ] && profile_flag=""

bash "$here/build.sh" forge-github
(cd "$here" && cargo run -q $profile_flag -p bench-native -- "$fixture" "$((n * 4))")
(cd "$root" && cargo run -q $profile_flag -p woodlark-plugin-host --example bench_parse_hook -- "$here/dist" "$fixture" "$n")
