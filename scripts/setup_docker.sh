#!/usr/bin/env bash
# A Docker Engine with Compose v2 on this host (idempotent; root on Debian 12). Used by `make e2e`
# (the whole platform under `docker compose`) and by the sandbox's docker runtime.
#
#  * the engine: Debian's docker.io (dockerd 20.10, containerd, runc), when `dockerd` is missing;
#  * Compose v2 and buildx: Debian 12 ships only Compose v1 (1.29), so the static docker CLI
#    plugins come from the next Debian release's archive (trixie: docker-compose 2.26,
#    docker-buildx 0.13), fetched by package name with `apt-get download` from a private,
#    temporary apt list (the system's sources and preferences stay untouched; the archive key of
#    Debian 12 signs trixie's Release) and unpacked into /usr/libexec/docker/cli-plugins;
#  * dockerd started in the background when it does not answer (no systemd in containers/CI;
#    systemctl when it is the init), then waited for (up to 60 s).
# SKIP_DOCKER_SETUP=1 skips everything (e.g. a host whose engine is managed elsewhere).
set -euo pipefail
[[ "${SKIP_DOCKER_SETUP:-}" == 1 ]] && { echo "setup_docker: skipped"; exit 0; }
export DEBIAN_FRONTEND=noninteractive
SUDO=""; [[ $(id -u) -eq 0 ]] || SUDO="sudo"
PLUGINS=/usr/libexec/docker/cli-plugins
TRIXIE_PKGS=(docker-compose docker-buildx)

if ! command -v dockerd >/dev/null; then
  echo "setup_docker: installing docker.io"
  $SUDO apt-get install -y -q --no-install-recommends docker.io \
    || { $SUDO apt-get update -q && $SUDO apt-get install -y -q --no-install-recommends docker.io; }
fi

# The plugin names a package installs: docker-compose -> docker-compose, docker-buildx -> ...
missing=()
for p in "${TRIXIE_PKGS[@]}"; do
  [[ -x "$PLUGINS/$p" ]] || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup_docker: fetching ${missing[*]} from Debian trixie"
  tmp=$(mktemp -d); chmod 755 "$tmp"  # _apt downloads into it
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial"
  echo "deb http://deb.debian.org/debian trixie main" >"$tmp/sources.list"
  apt_opts=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache"
    -o "Dir::Etc::Preferences=/dev/null" -o "Dir::Etc::PreferencesParts=/dev/null"
    -o "Debug::NoLocking=1" -q)
  $SUDO apt-get "${apt_opts[@]}" update >"$tmp/apt.log" 2>&1 || { cat "$tmp/apt.log" >&2; exit 1; }
  (cd "$tmp" && $SUDO apt-get "${apt_opts[@]}" download "${missing[@]}" >>"$tmp/apt.log" 2>&1) \
    || { cat "$tmp/apt.log" >&2; exit 1; }
  $SUDO mkdir -p "$PLUGINS"
  for p in "${missing[@]}"; do
    $SUDO dpkg -x "$tmp"/"${p}"_*.deb "$tmp/root"
    $SUDO install -m 0755 "$tmp/root$PLUGINS/$p" "$PLUGINS/$p"
  done
fi
# A docker CLI that looks elsewhere for plugins (a static one in /usr/local/bin) finds them here.
for dir in "$HOME/.docker/cli-plugins"; do
  mkdir -p "$dir"
  for p in "${TRIXIE_PKGS[@]}"; do [[ -e "$dir/$p" ]] || ln -s "$PLUGINS/$p" "$dir/$p"; done
done

if ! docker info >/dev/null 2>&1; then
  if [[ -d /run/systemd/system ]]; then
    $SUDO systemctl start docker
  elif ! pgrep -x dockerd >/dev/null; then
    echo "setup_docker: starting dockerd (log: /var/log/dockerd.log)"
    $SUDO sh -c 'nohup dockerd >>/var/log/dockerd.log 2>&1 &'
  fi
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { echo "setup_docker: dockerd did not answer" >&2; \
    tail -20 /var/log/dockerd.log >&2 || true; exit 1; }
fi
echo "setup_docker: $(docker version -f 'engine {{.Server.Version}}'), $(docker compose version)"
