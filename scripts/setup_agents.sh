#!/usr/bin/env bash
# Install the real agent CLIs the `installed` harness kind runs (idempotent; quick when present).
#
# Each pinned npm package goes into its own prefix, $CACHE/agents/<name>-<version>, with
# `npm install --prefix`; a finished install leaves a .installed stamp, so a re-run is a stat.
# The list below must match services/orchestrator/installed/catalog.py (a test checks it).
# Cache dir: $K3STACK_ORCHESTRATOR__AGENTS_DIR, else /var/cache/k3stack/agents as root, else
# ~/.cache/k3stack/agents. SKIP_AGENTS=1 skips it (machines that never run installed agents).
set -euo pipefail
[[ "${SKIP_AGENTS:-0}" == 1 ]] && { echo "setup_agents: skipped (SKIP_AGENTS=1)"; exit 0; }

if [[ -n "${K3STACK_ORCHESTRATOR__AGENTS_DIR:-}" ]]; then DIR="$K3STACK_ORCHESTRATOR__AGENTS_DIR"
elif [[ $(id -u) -eq 0 ]]; then DIR=/var/cache/k3stack/agents
else DIR="$HOME/.cache/k3stack/agents"; fi

AGENTS=(
  "claude-code @anthropic-ai/claude-code 2.1.332"
  "codex @openai/codex 0.171.0"
)

if ! command -v npm >/dev/null; then
  if [[ $(id -u) -ne 0 ]]; then echo "setup_agents: npm missing; install nodejs + npm" >&2; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends nodejs npm \
    || { apt-get update -q && apt-get install -y -q --no-install-recommends nodejs npm; }
fi

mkdir -p "$DIR"
for entry in "${AGENTS[@]}"; do
  read -r name pkg version <<<"$entry"
  prefix="$DIR/$name-$version"
  if [[ -f "$prefix/.installed" ]]; then
    echo "setup_agents: $pkg@$version present ($prefix)"
    continue
  fi
  echo "setup_agents: installing $pkg@$version into $prefix"
  tmp="$prefix.partial.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error "$pkg@$version" >&2
  echo "$pkg@$version" >"$tmp/.installed"
  rm -rf "$prefix"
  mv "$tmp" "$prefix"
done
