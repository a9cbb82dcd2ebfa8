#!/usr/bin/env bash
# Install the Debian packages k3stack's tests and demo need (idempotent; root on Debian 12).
# Each area may add its own scripts/setup_<area>.sh, which this script runs after its own.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
cd "$(dirname "$0")/.."

need=()
command -v redis-server >/dev/null || need+=(redis-server)
# the orchestrator's report test and the web verifier drive Debian's Chromium via Playwright
command -v chromium >/dev/null || need+=(chromium)
command -v bwrap >/dev/null || need+=(bubblewrap)  # the kernel verifier's sandbox
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "setup_system: missing ${need[*]}; run as root or install them" >&2
    exit 1
  fi
  echo "setup_system: installing ${need[*]}"
  if ! apt-get install -y -q --no-install-recommends "${need[@]}" >/tmp/k3stack-apt.log 2>&1; then
    apt-get update -q >/tmp/k3stack-apt.log 2>&1
    apt-get install -y -q --no-install-recommends "${need[@]}" >>/tmp/k3stack-apt.log 2>&1 \
      || { cat /tmp/k3stack-apt.log >&2; exit 1; }
  fi
fi

# the unprivileged user each microVM's QEMU drops to (K3STACK_SANDBOX__QEMU_USER; jail.py)
if [ "$(id -u)" = 0 ] && ! getent passwd k3stack-vm >/dev/null; then
  useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin \
    --user-group k3stack-vm
fi

for extra in scripts/setup_*.sh; do
  [ "$extra" = "scripts/setup_system.sh" ] && continue
  [ -f "$extra" ] || continue
  bash "$extra"
done
