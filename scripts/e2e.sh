#!/usr/bin/env bash
# `make e2e`: the whole platform under `docker compose` on this host's Docker Engine, tested
# through its published ports only, then removed. Phases (each one's time is printed):
#   setup      the engine and Compose v2 (scripts/setup_docker.sh)
#   base       the local Debian 12 + Python 3.11 base image (debootstrap | docker import), once
#   wheelhouse every dependency wheel into wheelhouse/ from pip's cache (torch's CPU wheel too)
#   build      the store images and the five service images (one Dockerfile; layer cache)
#   imports    each service image imports every module of its service and of shared/ with only
#              its own packages (e2e/imports.py, no network)
#   up         docker compose up -d --wait (every healthcheck green)
#   test       e2e/test_stack.py against the published ports
#   down       docker compose down -v, then checks nothing of the project is left
# The project name, image prefix and volumes are all `k3stack-e2e` (E2E_PROJECT), so a run
# touches nothing else on the engine. KEEP=1 leaves the stack up after the tests.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PROJECT=${E2E_PROJECT:-k3stack-e2e}
export IMAGE_PREFIX=$PROJECT IMAGE_TAG=e2e BASE_IMAGE=$PROJECT/python:3.11-bookworm
PY=${PY:-$ROOT/.venv/bin/python}
COMPOSE=(docker compose -p "$PROJECT" -f docker-compose.yml -f e2e/compose.e2e.yml)
START=$(date +%s)
declare -a TIMES=()
phase() { # phase NAME COMMAND...: run, time, record
  local name=$1 t0 t1; shift
  echo "== e2e: $name"
  t0=$(date +%s)
  "$@"
  t1=$(date +%s)
  TIMES+=("$name $((t1 - t0))")
  echo "== e2e: $name done in $((t1 - t0)) s"
}

base_image() {
  if docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then echo "present: $BASE_IMAGE"; return; fi
  command -v debootstrap >/dev/null || apt-get install -y -q --no-install-recommends debootstrap
  local dir; dir=$(mktemp -d /var/tmp/k3stack-e2e-base.XXXXXX)
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm \
    "$dir" http://deb.debian.org/debian >"$dir.log" 2>&1 || { tail -20 "$dir.log"; exit 1; }
  # `python` and `pip` on PATH, as in the public Python image: a venv over Debian's Python.
  chroot "$dir" python3 -m venv /opt/python
  chroot "$dir" sh -c 'apt-get clean; rm -rf /var/lib/apt/lists/*'
  tar -C "$dir" -c . | docker import \
    --change 'ENV PATH=/opt/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'ENV LANG=C.UTF-8' --change 'CMD ["python"]' - "$BASE_IMAGE"
  rm -rf "$dir" "$dir.log"
}

wheelhouse() {
  # Every requirement of every image (core + the images' extras, those `all` names, + the S3
  # stand-in), as wheels; an extra no image installs (sglang: a CUDA stack) stays out.
  local reqs=wheelhouse/.requirements.txt
  "$PY" - "$reqs" <<'EOF'
import sys, tomllib
p = tomllib.load(open("pyproject.toml", "rb"))["project"]
extras = p["optional-dependencies"]
images = extras["all"][0].split("[", 1)[1].rstrip("]").split(",")  # k3stack[model,sandbox,...]
reqs = p["dependencies"] + [r for x in images for r in extras[x]]
reqs += [r for r in extras["test"] if r.startswith("moto")]
reqs += ["setuptools==84.2.1", "wheel==0.48.0"]  # the k3stack wheel's build backend
reqs += ["async-timeout==5.0.1"]  # redis wants it on Python < 3.11.3 (Debian 12 has 3.11.2)
open(sys.argv[1], "w").write("\n".join(dict.fromkeys(reqs)) + "\n")
EOF
  if [[ -f wheelhouse/.stamp ]] && cmp -s "$reqs" wheelhouse/.stamp; then echo "up to date"; return; fi
  "$PY" -m pip download -q -d wheelhouse --only-binary=:all: -r "$reqs" 2>&1 \
    | grep -v "is ignored: it is neither a file nor a directory" || true
  cp "$reqs" wheelhouse/.stamp
  ls wheelhouse/*.whl | wc -l | xargs echo "wheels:"
}

env_file() { # fresh random credentials for this run (deployed mode refuses weak ones)
  "$PY" - <<'EOF'
import secrets
t = secrets.token_hex
pg, rd = t(24), t(24)
for s in ("MODEL", "SANDBOX", "TOOLS", "VERIFIER", "ORCHESTRATOR"):
    print(f"K3STACK_{s}__API_KEY={t(24)}")
print(f"POSTGRES_PASSWORD={pg}\nREDIS_PASSWORD={rd}\nMINIO_ROOT_PASSWORD={t(24)}")
print(f"K3STACK_DATABASE_URL=postgresql+psycopg://k3stack:{pg}@postgres:5432/k3stack")
print(f"K3STACK_BROKER_URL=redis://:{rd}@redis:6379/0")
print(f"K3STACK_RESULT_BACKEND=redis://:{rd}@redis:6379/1")
print(f"K3STACK_OBJECT_STORE_SECRET_KEY={t(24)}")
EOF
}

image_ids() {
  local s
  for s in model sandbox tools verifier orchestrator; do
    docker image inspect -f '{{.Id}}' "$IMAGE_PREFIX/$s:$IMAGE_TAG"
  done
}

imports() { # once per set of image contents (the IDs last checked are kept in /var/tmp)
  local s rc=0 stamp=/var/tmp/$PROJECT-imports-ok ids
  ids=$(image_ids)
  if [[ -f $stamp ]] && [[ "$(cat "$stamp")" == "$ids" ]]; then
    echo "images unchanged since their last imports check"; return
  fi
  for s in model sandbox tools verifier orchestrator; do
    docker run --rm --network none -v "$ROOT/e2e/imports.py:/tmp/imports.py:ro" \
      --entrypoint python "$IMAGE_PREFIX/$s:$IMAGE_TAG" /tmp/imports.py "$s" || rc=1
  done
  # what the verifier's kernel jobs run besides Python: torch (CPU) and bubblewrap
  docker run --rm --network none --entrypoint sh "$IMAGE_PREFIX/verifier:$IMAGE_TAG" -c \
    'command -v bwrap && python -c "import torch; print(\"torch\", torch.__version__)"' || rc=1
  [[ $rc != 0 ]] || echo "$ids" >"$stamp"
  return $rc
}

build() { # the builder's full output goes to a log; its tail is shown when it fails
  local log=${TMPDIR:-/tmp}/$PROJECT-build.log
  "${COMPOSE[@]}" --env-file "$ENV_FILE" --progress=plain build >"$log" 2>&1 \
    || { tail -60 "$log"; echo "e2e: build failed (whole log: $log)" >&2; return 1; }
  grep -c " CACHED" "$log" | xargs echo "cached steps:"
}

up() { # from nothing: a stack left by an earlier KEEP=1 run has other credentials
  [[ "$(leftovers)" == 0 ]] || down
  "${COMPOSE[@]}" --env-file "$ENV_FILE" up -d --wait --wait-timeout 900 \
    || { "${COMPOSE[@]}" --env-file "$ENV_FILE" ps -a; "${COMPOSE[@]}" --env-file "$ENV_FILE" \
         logs --tail 40; return 1; }
}

leftovers() {
  local label="label=com.docker.compose.project=$PROJECT"
  { docker ps -aq --filter "$label"; docker network ls -q --filter "$label"
    docker volume ls -q --filter "$label"; } | wc -l
}

down() {
  "${COMPOSE[@]}" --env-file "$ENV_FILE" down -v --remove-orphans --timeout 20 >/dev/null 2>&1
  local left; left=$(leftovers)
  [[ "$left" == 0 ]] || { echo "e2e: $left containers/networks/volumes left behind" >&2; return 1; }
  echo "no container, network or volume of $PROJECT is left"
}

ENV_FILE=$(mktemp /tmp/k3stack-e2e-env.XXXXXX)
chmod 600 "$ENV_FILE"
LOGS=${TMPDIR:-/tmp}/$PROJECT-logs.txt
cleanup() { # on a failure, every container's log is kept (the stack itself is removed)
  local rc=$?
  if [[ $rc != 0 && "$(leftovers)" != 0 ]]; then
    "${COMPOSE[@]}" --env-file "$ENV_FILE" logs --no-color --timestamps >"$LOGS" 2>&1 || true
    echo "e2e: failed (rc $rc); the containers' logs: $LOGS" >&2
  fi
  [[ "${KEEP:-}" == 1 ]] || down || true; rm -f "$ENV_FILE"
}
trap cleanup EXIT
env_file >"$ENV_FILE"
set -a; . "$ENV_FILE"; set +a  # the credentials the tests use

phase setup bash scripts/setup_docker.sh
phase base base_image
phase wheelhouse wheelhouse
phase build build
phase imports imports
phase up up
export E2E_PROJECT=$PROJECT E2E_COMPOSE="${COMPOSE[*]} --env-file $ENV_FILE"
phase test "$PY" -m pytest -p no:cacheprovider -q -s -o addopts="" e2e/
if [[ "${KEEP:-}" != 1 ]]; then phase down down; trap 'rm -f "$ENV_FILE"' EXIT; fi
echo "== e2e phase times (s):"
printf '   %s\n' "${TIMES[@]}"
echo "== e2e total: $(($(date +%s) - START)) s"
