#!/usr/bin/env bash
# Schema conformance: schemathesis (pinned, from PyPI, in a virtualenv under target/) against
# the upstream API descriptions, on the real server binary with a fresh data dir and seeded data:
#   1. the participation interface against algod's OpenAPI spec (every check; algod.toml lists
#      the deliberate deviations, each one algod's own behaviour);
#   2. the events feed against Clever's spec (every check; clever.toml);
#   3. the CI API against Woodpecker's swagger (no 5xx, responses match their schemas;
#      woodpecker.toml lists where the swagger is wrong about upstream).
# Exits non-zero on any other failure.
#
# Usage: tests/conformance/run.sh [path/to/woodlark]   (default: target/debug/woodlark)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
target="${CARGO_TARGET_DIR:-$root/target}"
bin="${1:-$target/debug/woodlark}"
version="4.32.5"
venv="$target/conformance-venv"

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

# The vendored descriptions must match the references when those are beside the repository.
reference="$root/../shared/reference"
stale() { # VENDORED COMMAND...
  local vendored="$1"
  shift
  "$@" | cmp -s - "$here/$vendored" ||
    { echo "conformance: $vendored does not match $reference; regenerate it" >&2; exit 1; }
}
if [ -d "$reference" ]; then
  stale algod-participation.oas2.json \
    "$venv/bin/python" "$here/extract_spec.py" "$reference/algod.oas2.json" /v2/participation /debug/settings/
  stale clever-v3-events.json \
    "$venv/bin/python" "$here/extract_spec.py" "$reference/clever-v3.yml" /events
  stale woodpecker-swagger.json cat "$reference/woodpecker-swagger.json"
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
admin="$("$bin" user add root --admin --config "$work/config.toml")"
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
algod_token="$(cat "$work/data/algod.admin.token")"

# Seed data, so operations reach their logic instead of answering 404.
seed() { # METHOD PATH [JSON]
  curl -sS --fail-with-body -o /dev/null -X "$1" -H "Authorization: Bearer $admin" \
    ${3:+-H "Content-Type: application/json" --data "$3"} "$url/api$2" ||
    { echo "conformance: seeding $1 $2 failed" >&2; exit 1; }
}
mkdir -p "$work/forge/root" "$work/app"
git init -q --bare -b main "$work/forge/root/app.git"
printf 'steps:\n  - name: hello\n    image: sh\n    commands: [echo hello]\n' > "$work/app/.woodpecker.yaml"
git -C "$work/app" init -q -b main
git -C "$work/app" add .woodpecker.yaml
git -C "$work/app" -c user.name=seed -c user.email=seed@example.com commit -q -m seed
git -C "$work/app" push -q "$work/forge/root/app.git" main
seed POST /forges "{\"type\":\"git\",\"url\":\"file://$work/forge\"}"
seed POST "/repos?forge_remote_id=root/app&forge_id=1"
seed POST /repos/1/pipelines '{"branch":"main"}'
for scope in /repos/1 /orgs/1 ""; do
  seed POST "$scope/secrets" '{"name":"s1","value":"v","events":["push"]}'
  seed POST "$scope/registries" '{"address":"docker.io","username":"u","password":"p"}'
done
seed POST /repos/1/cron '{"name":"nightly","schedule":"@daily","branch":"main"}'
seed POST /users '{"login":"bob"}'
seed POST /agents '{"name":"agent-1"}'
address="AEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEAQCAIBAEA5RCDXMI"
curl -sS --fail-with-body -o /dev/null -X POST -H "X-Algo-API-Token: $algod_token" \
  "$url/v2/participation/generate/$address?first=1&last=100000"
for _ in $(seq 1 100); do
  [ "$(curl -sf -H "X-Algo-API-Token: $algod_token" "$url/v2/participation")" != "null" ] && break
  sleep 0.1
done

# schemathesis keeps a cache in the working directory: run it in the scratch dir.
cd "$work"
st() { # CONFIG SPEC URL ARGS...
  local config="$1" spec="$2" base="$3"
  shift 3
  SCHEMATHESIS_HOOKS=hooks PYTHONPATH="$here" PYTHONDONTWRITEBYTECODE=1 \
    "$venv/bin/schemathesis" --config-file "$here/$config" run "$here/$spec" \
    --url "$base" --seed 1 --no-color "$@"
}

echo "conformance: participation interface vs algod's spec" >&2
st algod.toml algod-participation.oas2.json "$url" -H "X-Algo-API-Token: $algod_token"

echo "conformance: events feed vs Clever's spec" >&2
st clever.toml clever-v3-events.json "$url" -H "Authorization: Bearer $admin"

# Not run: the SSE streams (they never end), upstream's Go runtime /debug/pprof pages (not
# served), token rotation (it would revoke the run's own credential), and DELETE (it would
# remove the seeded data the other operations need; the integration tests cover deletes).
echo "conformance: CI API vs Woodpecker's swagger" >&2
WOODLARK_TOKEN="$admin" st woodpecker.toml woodpecker-swagger.json "$url/api" \
  --exclude-path-regex '^/(stream/|debug/pprof|user/token)' --exclude-method DELETE

echo "conformance: all three interfaces match their upstream descriptions (deviations: *.toml)"
