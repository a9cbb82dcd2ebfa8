#!/usr/bin/env bash
# Host setup for the sandbox service's microvm runtime (idempotent; safe to re-run).
#
#  * system packages: qemu-system-x86 qemu-utils busybox-static cpio bubblewrap gcc libc6-dev
#    (apt-get update only when a package is missing and the install fails without it);
#  * the guest kernel: Debian's real linux-image-<ver>-cloud-amd64 package behind the
#    linux-image-cloud-amd64 metapackage, fetched with `apt-get download` and unpacked with
#    `dpkg -x` into $K3STACK_SANDBOX__CACHE_DIR/kernel (vmlinuz + virtio modules), where the
#    runtime finds it (services/sandbox/images/cache.py: kernel_dir()).
#
# Cache dir: $K3STACK_SANDBOX__CACHE_DIR, else /var/cache/k3stack as root, else ~/.cache/k3stack.
#  * the Debian image (python3, bash, coreutils, git, curl, nodejs, npm): debootstrap, then apt
#    for nodejs + npm, into a read-only qcow2 base under $CACHE/images/debian-* (~590 MB), built
#    once per machine and again when its package lists change (a few minutes) by the service's
#    image builder: python -m services.sandbox.images build debian (needs the project's venv,
#    made first with `make venv` when missing). SKIP_DEBIAN_IMAGE=1 skips it.
# The busybox initramfs is built on demand by the image builder (about a second).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

if [[ -n "${K3STACK_SANDBOX__CACHE_DIR:-}" ]]; then CACHE="$K3STACK_SANDBOX__CACHE_DIR"
elif [[ $(id -u) -eq 0 ]]; then CACHE=/var/cache/k3stack
else CACHE="$HOME/.cache/k3stack"; fi
SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"

PKGS=(qemu-system-x86 qemu-utils busybox-static cpio bubblewrap gcc libc6-dev xz-utils debootstrap e2fsprogs)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup_sandbox: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get install -y --no-install-recommends "${missing[@]}" \
    || { $SUDO apt-get update && $SUDO apt-get install -y --no-install-recommends "${missing[@]}"; }
else
  echo "setup_sandbox: packages present (${PKGS[*]})"
fi

build_debian() {
  if [[ "${SKIP_DEBIAN_IMAGE:-}" == 1 ]]; then echo "setup_sandbox: Debian image skipped"; return; fi
  if [[ ! -x "$ROOT/.venv/bin/python" ]]; then
    echo "setup_sandbox: creating the venv first (the image builder runs in it)"
    make -C "$ROOT" --no-print-directory venv
  fi
  (cd "$ROOT" && $SUDO env K3STACK_SANDBOX__CACHE_DIR="$CACHE" .venv/bin/python -m services.sandbox.images build debian)
}

KDIR="$CACHE/kernel"
if [[ -f "$KDIR/vmlinuz" && -d "$KDIR/modules" ]]; then
  echo "setup_sandbox: kernel present: $(cat "$KDIR/version" 2>/dev/null) in $KDIR"
  build_debian
  exit 0
fi
mkdir -p "$CACHE"
# The metapackage only depends on the real, versioned image package.
real=$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
if [[ -z "$real" ]]; then
  $SUDO apt-get update
  real=$(apt-cache depends linux-image-cloud-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
fi
[[ -n "$real" ]] || { echo "setup_sandbox: cannot resolve linux-image-cloud-amd64" >&2; exit 1; }
tmp=$(mktemp -d "$CACHE/.kernel.XXXXXX"); chmod 755 "$tmp"  # _apt must be able to write there
trap 'rm -rf "$tmp"' EXIT
echo "setup_sandbox: fetching $real"
(cd "$tmp" && apt-get download "$real" >/dev/null)
dpkg -x "$tmp"/*.deb "$tmp/root"
ver=$(ls "$tmp/root/lib/modules" | head -1)
mkdir -p "$tmp/out/modules"
cp "$tmp/root/boot/vmlinuz-$ver" "$tmp/out/vmlinuz"
# Only what the images load: virtio transport, console, block, net, balloon, ext4 deps.
for m in virtio virtio_ring virtio_mmio virtio_console virtio_blk virtio_net net_failover failover \
         virtio_balloon crc16 mbcache jbd2 ext4 crc32c_generic libcrc32c; do
  f=$(find "$tmp/root/lib/modules/$ver" -name "$m.ko*" | head -1)
  [[ -n "$f" ]] || continue
  case "$f" in
    *.xz) xz -dc "$f" > "$tmp/out/modules/$m.ko" ;;
    *.zst) zstd -qdc "$f" > "$tmp/out/modules/$m.ko" ;;
    *) cp "$f" "$tmp/out/modules/$m.ko" ;;
  esac
done
cp "$tmp/root/lib/modules/$ver/modules.builtin" "$tmp/out/" 2>/dev/null || true
echo "$ver" > "$tmp/out/version"
rm -rf "$KDIR"
mv "$tmp/out" "$KDIR"
echo "setup_sandbox: kernel $ver in $KDIR"
build_debian
