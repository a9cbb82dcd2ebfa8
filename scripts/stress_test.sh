#!/usr/bin/env bash
# Run the whole test suite while a CPU burner keeps every core busy, to find tests whose outcome
# depends on timing or load. Usage: scripts/stress_test.sh [--load N] [--minutes M] [--e2e] [pytest args]
#   --load N     burner workers per core (default 1: every core fully busy besides the suite)
#   --minutes M  hard bound on the burner's life (default 120); it also stops when the suite ends
#   --e2e        make test's whole body (scripts/test.sh: the suite with make e2e beside it)
# Exits with pytest's status. Installs stress-ng from Debian if it is missing (root).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
cd "$(dirname "$0")/.."

load=1
minutes=120
e2e=0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --load) load="$2"; shift 2 ;;
    --minutes) minutes="$2"; shift 2 ;;
    --e2e) e2e=1; shift ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) args+=("$1"); shift ;;
  esac
done

if ! command -v stress-ng >/dev/null; then
  echo "stress_test: installing stress-ng"
  apt-get install -y -q --no-install-recommends stress-ng >/tmp/k3stack-apt.log 2>&1 || {
    apt-get update -q >>/tmp/k3stack-apt.log 2>&1
    apt-get install -y -q --no-install-recommends stress-ng >>/tmp/k3stack-apt.log 2>&1
  } || { cat /tmp/k3stack-apt.log >&2; exit 1; }
fi

make -s setup
workers=$(( $(nproc) * load ))
echo "stress_test: $workers CPU burners for at most ${minutes} min while the suite runs"
stress-ng --cpu "$workers" --cpu-method matrixprod --timeout "${minutes}m" --quiet &
burner=$!
trap 'kill "$burner" 2>/dev/null || true; wait "$burner" 2>/dev/null || true' EXIT
sleep 2
uptime
status=0
if [ "$e2e" = 1 ]; then
  E2E=1 bash scripts/test.sh "${args[@]}" || status=$?
else
  E2E=0 bash scripts/test.sh "${args[@]}" || status=$?
fi
uptime
exit "$status"
