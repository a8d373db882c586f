#!/usr/bin/env bash
# Schema conformance of the participation interface: schemathesis (pinned, from PyPI, in a
# virtualenv under target/) against algod's OpenAPI spec, on the real server binary with a
# fresh data dir and one installed key. Exits non-zero on any failure that is not one of the
# deliberate, documented deviations configured in schemathesis.toml.
#
# Usage: tests/conformance/run.sh [path/to/woodlark]   (default: target/debug/woodlark)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
bin="${1:-$target/debug/woodlark}"
version="4.32.5"
venv="$target/conformance-venv"

# The extract must match algod's full spec when that is beside the repository.
full="$root/../shared/reference/algod.oas2.json"
if [ -f "$full" ]; then
  python3 "$here/extract_spec.py" "$full" | cmp -s - "$here/algod-participation.oas2.json" || {
    echo "conformance: algod-participation.oas2.json differs from $full; re-run extract_spec.py" >&2
    exit 1
  }
fi

if ! "$venv/bin/schemathesis" --version 2>/dev/null | grep -q "$version"; then
  need=()
  command -v python3 >/dev/null 2>&1 || need+=(python3)
  python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
  if [ ${#need[@]} -gt 0 ]; then
    echo "conformance: installing ${need[*]}" >&2
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO="sudo"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$version"
fi

work="$(mktemp -d)"
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null && wait "$server" 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

cat > "$work/config.toml" <<TOML
[server]
listen = "127.0.0.1:0"
data_dir = "$work/data"
[runner]
enabled = false
[plugins]
dir = "$work/no-plugins"
watch = false
TOML
"$bin" serve --config "$work/config.toml" 2> "$work/server.log" &
server=$!
addr=""
for _ in $(seq 1 200); do
  addr="$(sed -n 's/.*woodlark listening address=\([0-9.:]*\).*/\1/p' "$work/server.log" | head -n1)"
  [ -n "$addr" ] && break
  kill -0 "$server" 2>/dev/null || { cat "$work/server.log" >&2; exit 1; }
  sleep 0.05
done
[ -n "$addr" ] || { echo "conformance: server did not start" >&2; cat "$work/server.log" >&2; exit 1; }
url="http://$addr"
token="$(cat "$work/data/algod.admin.token")"

# One installed key, so the list and the id routes have something real to return.
address="AEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEA5RCDXMI"
curl -sS --fail-with-body -o /dev/null -X POST -H "X-Algo-API-Token: $token" \
  "$url/v2/participation/generate/$address?first=1&last=100000"
for _ in $(seq 1 100); do
  [ "$(curl -sf -H "X-Algo-API-Token: $token" "$url/v2/participation")" != "null" ] && break
  sleep 0.1
done

# schemathesis keeps a cache in the working directory: run it in the scratch dir.
cd "$work"
SCHEMATHESIS_HOOKS=hooks PYTHONPATH="$here" PYTHONDONTWRITEBYTECODE=1 \
  "$venv/bin/schemathesis" --config-file "$here/schemathesis.toml" run \
  "$here/algod-participation.oas2.json" --url "$url" \
  -H "X-Algo-API-Token: $token" --seed 1 --no-color
echo "conformance: participation interface matches algod's spec (deviations: docs/participation.md)"
