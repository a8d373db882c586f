#!/usr/bin/env bash
# Builds the images the docker-backend tests and benchmark use, from this machine's static
# busybox (Debian's busybox-static), with `docker import`: nothing is pulled from a registry.
#   woodlark-test/busybox:latest  every busybox applet in /bin, /etc/passwd, /tmp
#   woodlark-test/plugin:latest   the same, with an entrypoint that prints $PLUGIN_GREETING
# Idempotent: existing images are kept.
set -euo pipefail
have() { docker image inspect "$1" >/dev/null 2>&1; }
have woodlark-test/busybox:latest && have woodlark-test/plugin:latest && exit 0
busybox=/bin/busybox
if ! [ -x "$busybox" ] || ldd "$busybox" >/dev/null 2>&1; then
  echo "images.sh: a static /bin/busybox is needed (apt-get install busybox-static)" >&2
  exit 1
fi
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/root"
chmod 1777 "$root/tmp"
cp "$busybox" "$root/bin/busybox"
for applet in $("$busybox" --list); do
  [ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
done
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/tmp:/bin/sh\n' >"$root/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
tar -C "$root" -c . | docker import --change 'ENV PATH=/bin' - woodlark-test/busybox:latest >/dev/null
tar -C "$root" -c . | docker import --change 'ENV PATH=/bin' \
  --change 'ENTRYPOINT ["/bin/sh", "-c", "echo plugin sees $PLUGIN_GREETING in $(pwd); test -n \"$PLUGIN_GREETING\""]' \
  - woodlark-test/plugin:latest >/dev/null
echo "images.sh: built woodlark-test/busybox and woodlark-test/plugin" >&2
