#!/usr/bin/env bash
# Runs the plugin crates' unit tests natively (the host's tests run them as components).
# The SDK is built once per world it serves (exactly one of its features at a time), so each
# crate is tested on its own: built together, cargo would unify the SDK's features.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"
export CARGO_TARGET_DIR="${PLUGINS_NATIVE_TARGET_DIR:-$here/target/native}"
for world in forge secrets registry; do
  cargo test --locked -q -p woodlark-plugin-sdk --features "$world"
done
crates=$(cargo metadata --locked --no-deps --format-version 1 |
  python3 -c 'import json,sys; print(" ".join(p["name"] for p in json.load(sys.stdin)["packages"] if p["name"] != "woodlark-plugin-sdk"))')
for c in $crates; do
  cargo test --locked -q -p "$c"
done
