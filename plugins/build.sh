#!/usr/bin/env bash
# Builds every plugin crate under plugins/ into a WebAssembly component in plugins/dist/.
#
#   bash plugins/build.sh                      # all plugins of this workspace
#   bash plugins/build.sh forge-github forge-gitlab   # only these crates
#   bash plugins/build.sh --path examples/forge-example   # a standalone plugin crate
#
# Environment: PLUGINS_DIST (output dir, default plugins/dist), PLUGINS_TARGET_DIR.
#
# Route A (most machines): rustup with the wasm32-unknown-unknown target, linked by the
#   toolchain's own wasm-component-ld (so the output is already a component).
# Route B (Debian 12 without rustup downloads): Debian's rustc-web toolchain with build-std,
#   per ../shared/DESIGN.md; installs the apt packages if they are missing.
# RUSTC_BOOTSTRAP=1 (needed by build-std) is confined to route B's cargo invocation.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dist="${PLUGINS_DIST:-$here/dist}"
src="$here"
if [ "${1:-}" = "--path" ]; then
    [ -n "${2:-}" ] || { echo "plugins/build.sh: --path needs a directory" >&2; exit 2; }
    src="$(cd "$2" && pwd)"
    shift 2
fi
target_dir="${PLUGINS_TARGET_DIR:-$here/target}"
host_triple="$(rustc -vV 2>/dev/null | sed -n 's/^host: //p')"
host_triple="${host_triple:-x86_64-unknown-linux-gnu}"
debian_sysroot="/usr/lib/rustlib/$host_triple"

log() { printf 'plugins/build.sh: %s\n' "$*" >&2; }

# Plugin crates: every workspace member that builds a cdylib (the sdk and helper libs don't).
crates=("$@")
if [ ${#crates[@]} -eq 0 ]; then
    while IFS= read -r toml; do
        if grep -q '^crate-type *= *\[ *"cdylib"' "$toml"; then
            crates+=("$(sed -n 's/^name *= *"\(.*\)"/\1/p' "$toml" | head -n1)")
        fi
    done < <(find "$src" -name Cargo.toml -not -path "*/target/*" | sort)
fi

route=""
if command -v rustup >/dev/null 2>&1 && rustup target list --installed 2>/dev/null | grep -qx wasm32-unknown-unknown; then
    sysroot="$(rustc --print sysroot)"
    component_ld="$sysroot/lib/rustlib/$host_triple/bin/wasm-component-ld"
    if [ -x "$component_ld" ]; then
        route="rustup"
    else
        log "rustup has wasm32-unknown-unknown but no wasm-component-ld in $sysroot; trying the Debian route"
    fi
fi

debian_ready() {
    [ -x "$debian_sysroot/bin/wasm-component-ld" ] && [ -d /usr/lib/rustlib/src/rust/library ] \
        && command -v /usr/bin/rustc >/dev/null 2>&1 && /usr/bin/cargo --version >/dev/null 2>&1 \
        && command -v rust-lld >/dev/null 2>&1   # provided by lld-22 (without it: "linker `rust-lld` not found")
}

if [ -z "$route" ]; then
    if ! debian_ready; then
        if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
            log "installing Debian's rustc-web toolchain (rustc-web cargo-web rust-web-src rust-web-llvm lld-22)"
            if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends rustc-web cargo-web rust-web-src rust-web-llvm lld-22; } >&2; then
                log "apt-get install failed"
            fi
        fi
    fi
    if debian_ready && command -v rustup >/dev/null 2>&1; then
        rustup toolchain list | grep -q '^debian-web' || rustup toolchain link debian-web /usr >&2
        route="debian"
    elif debian_ready; then
        route="debian-norustup"
    fi
fi

if [ -z "$route" ]; then
    cat >&2 <<'MSG'
plugins/build.sh: cannot build WebAssembly plugins on this machine.
  Either:  rustup target add wasm32-unknown-unknown       (any OS with rustup)
  or, on Debian 12 as root:
           apt-get install -y --no-install-recommends rustc-web cargo-web rust-web-src rust-web-llvm lld-22
MSG
    exit 1
fi

case "$route" in
rustup) log "route: rustup target wasm32-unknown-unknown ($(rustc --version))" ;;
*) log "route: Debian rustc-web with build-std ($(/usr/bin/rustc --version))" ;;
esac
start=$(date +%s)
cd "$src"
# One cargo invocation per crate: plugins of different worlds enable different (mutually
# exclusive) features of the sdk, and cargo unifies features within one invocation.
for c in "${crates[@]}"; do
    case "$route" in
    rustup)
        CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER="$component_ld" \
            cargo build --release --target wasm32-unknown-unknown --target-dir "$target_dir" -p "$c" >&2
        ;;
    debian | debian-norustup)
        cargo_cmd=(cargo +debian-web)
        [ "$route" = debian-norustup ] && cargo_cmd=(/usr/bin/cargo)
        env -u RUSTUP_TOOLCHAIN RUSTC_BOOTSTRAP=1 \
            CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_LINKER="$debian_sysroot/bin/wasm-component-ld" \
            "${cargo_cmd[@]}" build --release --target wasm32-unknown-unknown --target-dir "$target_dir" \
            -Z build-std=std,panic_abort -p "$c" >&2
        ;;
    esac
done

for c in "${crates[@]}"; do
    artifact="$target_dir/wasm32-unknown-unknown/release/${c//-/_}.wasm"
    if [ ! -f "$artifact" ]; then
        log "expected $artifact after the build"
        exit 1
    fi
    # Test-only components go to dist/testing/, which the (non-recursive) watcher ignores.
    out="$dist"
    if [ "$src" = "$here" ] && [ -f "$here/testing/$c/Cargo.toml" ]; then out="$dist/testing"; fi
    mkdir -p "$out"
    # Copy then rename, so a server watching dist/ never sees a half-written file.
    cp "$artifact" "$out/.$c.wasm.tmp"
    mv -f "$out/.$c.wasm.tmp" "$out/$c.wasm"
done
log "built ${#crates[@]} component(s) into $dist in $(( $(date +%s) - start ))s: ${crates[*]}"
