# Every k3stack image, one target per service (build context = repository root; /.dockerignore):
#   docker build --target model -t k3stack/model .          (likewise sandbox, tools, verifier,
#                                                              orchestrator)
# Each image serves its API by default (`python -m services.<name>`); the same image runs the
# service's Celery worker with another command (shared.queue.worker_argv).
#
# Layers: the dependency wheels of a service's extra are built from pyproject.toml alone, so a
# code change rebuilds only the small k3stack wheel; torch is the CPU build by default
# (TORCH_INDEX_URL=https://download.pytorch.org/whl/cu128, or any CUDA index, for GPUs).
# Wheels in the context's wheelhouse/ folder are preferred to any index (pip --find-links): the
# way to build where PyPI or the torch index is out of reach (`make e2e` fills it from the local
# pip cache, torch's CPU wheel included, and builds with TORCH_INDEX_URL empty).
# No `# syntax=` line: the builder's own Dockerfile frontend (BuildKit in Docker 20.10+) handles
# every instruction here, and a pinned frontend image would need a registry.

# The image every stage starts from: a Debian 12 with Python 3.11 whose `python` and `pip` are on
# PATH. The public Python image by default; `make e2e` passes one built locally by debootstrap.
ARG BASE_IMAGE=python:3.11-slim-bookworm

# ---- deps-*: wheels of one extra's dependencies, from pyproject.toml only ----------------------
FROM ${BASE_IMAGE} AS deps
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
# PIP_NO_INDEX=1: wheelhouse/ only, no index at all (an offline build; unset by default).
ARG PIP_NO_INDEX
WORKDIR /src
COPY pyproject.toml ./
# requirements-<extra>.txt: the core dependencies plus the extra's, read from pyproject.toml.
RUN python -c "import tomllib; p = tomllib.load(open('pyproject.toml', 'rb'))['project']; \
[open(f'requirements-{x}.txt', 'w').write('\\n'.join(p['dependencies'] + d) + '\\n') \
 for x, d in p['optional-dependencies'].items() if x not in ('all', 'test')]"

FROM deps AS deps-model
# Where torch comes from: the CPU build by default (the default device is cpu); a CUDA index
# (e.g. https://download.pytorch.org/whl/cu128) for GPU images; empty = PyPI (CUDA on x86-64).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip wheel --wheel-dir /wheels --find-links /wheelhouse \
    ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} -r requirements-model.txt

FROM deps AS deps-sandbox
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip wheel --wheel-dir /wheels --find-links /wheelhouse -r requirements-sandbox.txt

FROM deps AS deps-tools
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip wheel --wheel-dir /wheels --find-links /wheelhouse -r requirements-tools.txt

FROM deps AS deps-verifier
# torch for the kernel tasks: the same CPU default as the model image.
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip wheel --wheel-dir /wheels --find-links /wheelhouse \
    ${TORCH_INDEX_URL:+--extra-index-url "$TORCH_INDEX_URL"} -r requirements-verifier.txt

FROM deps AS deps-orchestrator
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip wheel --wheel-dir /wheels --find-links /wheelhouse -r requirements-orchestrator.txt

# ---- code: the k3stack wheel alone (runtime files included: see pyproject package-data) --------
FROM ${BASE_IMAGE} AS code
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
ARG PIP_NO_INDEX
WORKDIR /src
# README.md is optional (the glob matches nothing when it is absent).
COPY pyproject.toml README.m[d] ./
COPY shared ./shared
COPY services ./services
# The build backend (setuptools, wheel) from wheelhouse/ too when it is there.
RUN --mount=type=bind,source=wheelhouse,target=/wheelhouse \
    pip wheel --no-deps --find-links /wheelhouse --wheel-dir /code .

# ---- base: what every service image shares -----------------------------------------------------
FROM ${BASE_IMAGE} AS base
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    K3STACK_MODE=deployed \
    K3STACK_DATA_DIR=/var/lib/k3stack \
    XDG_CACHE_HOME=/var/lib/k3stack/cache
# An unprivileged user owns the data directory (named volumes inherit its ownership).
RUN groupadd --system --gid 10001 k3stack \
    && useradd --system --uid 10001 --gid k3stack --home-dir /var/lib/k3stack \
        --no-create-home --shell /usr/sbin/nologin k3stack \
    && install -d -o k3stack -g k3stack -m 0750 /var/lib/k3stack
WORKDIR /var/lib/k3stack
# One probe for every service image (inherited by each target): /health/live answers without an
# API key. It is bash's own /dev/tcp (no interpreter starts: a Python probe took seconds of CPU on
# a loaded host) asking the port the service's own setting names (K3STACK_IMAGE_SERVICE is set by
# each target, K3STACK_<SERVICE>__PORT beside it), under `timeout -s KILL` below Docker's timeout
# (Docker 20.10 does not kill a timed-out probe), with compose's and the chart's timings.
HEALTHCHECK --interval=10s --timeout=15s --start-period=900s --retries=6 \
    CMD ["timeout", "-s", "KILL", "10", "bash", "-c", "s=${K3STACK_IMAGE_SERVICE^^}; p=K3STACK_${s}__PORT; exec 3<>/dev/tcp/127.0.0.1/${!p} && printf 'GET /health/live HTTP/1.0\\r\\n\\r\\n' >&3 && head -n1 <&3 | grep -q ' 200 '"]

# ---- model :8000 -------------------------------------------------------------------------------
FROM base AS model
ENV K3STACK_IMAGE_SERVICE=model \
    K3STACK_MODEL__HOST=0.0.0.0 \
    K3STACK_MODEL__PORT=8000
RUN --mount=type=bind,from=deps-model,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels /wheels/*.whl
RUN --mount=type=bind,from=code,source=/code,target=/code \
    pip install --no-index --no-deps /code/*.whl
USER 10001:10001
EXPOSE 8000
CMD ["python", "-m", "services.model"]

# ---- sandbox :8001 -----------------------------------------------------------------------------
FROM base AS sandbox
ENV K3STACK_IMAGE_SERVICE=sandbox \
    K3STACK_SANDBOX__HOST=0.0.0.0 \
    K3STACK_SANDBOX__PORT=8001 \
    K3STACK_SANDBOX__CACHE_DIR=/var/cache/k3stack
# Everything the microvm runtime needs on its host (QEMU, static busybox, cpio, gcc for the static
# guest agent and the page hasher) plus Debian's cloud kernel unpacked into the sandbox cache,
# by the same script a developer machine runs. The cache is a volume in Compose and Helm (images
# built at run time survive restarts); Docker seeds a fresh volume with this kernel, Helm's
# init container copies it.
RUN --mount=type=bind,source=scripts/setup_sandbox.sh,target=/tmp/setup_sandbox.sh \
    apt-get update \
    && SKIP_DEBIAN_IMAGE=1 bash /tmp/setup_sandbox.sh \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=deps-sandbox,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels /wheels/*.whl
RUN --mount=type=bind,from=code,source=/code,target=/code \
    pip install --no-index --no-deps /code/*.whl
# Root: QEMU opens /dev/kvm (root:kvm 0660 on the host) and manages guest memory files. The
# container needs the device only: no --privileged, every capability dropped (docs/deploy.md),
# so root must own what it writes (without CAP_DAC_OVERRIDE it cannot write uid 10001's dirs).
RUN chown root:root /var/lib/k3stack
EXPOSE 8001
CMD ["python", "-m", "services.sandbox"]

# ---- tools :8002 -------------------------------------------------------------------------------
FROM base AS tools
ENV K3STACK_IMAGE_SERVICE=tools \
    K3STACK_TOOLS__HOST=0.0.0.0 \
    K3STACK_TOOLS__PORT=8002
RUN --mount=type=bind,from=deps-tools,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels /wheels/*.whl
RUN --mount=type=bind,from=code,source=/code,target=/code \
    pip install --no-index --no-deps /code/*.whl
USER 10001:10001
EXPOSE 8002
CMD ["python", "-m", "services.tools"]

# ---- verifier :8003 ----------------------------------------------------------------------------
FROM base AS verifier
ENV K3STACK_IMAGE_SERVICE=verifier \
    K3STACK_VERIFIER__HOST=0.0.0.0 \
    K3STACK_VERIFIER__PORT=8003
# Debian's Chromium for the web verifier (K3STACK_VERIFIER__CHROMIUM_PATH=/usr/bin/chromium) and
# bubblewrap, the kernel verifier's sandbox (services/verifier/kernel/runner.py).
ARG BROWSER_PACKAGES="chromium fonts-liberation"
RUN apt-get update \
    && apt-get install -y --no-install-recommends ${BROWSER_PACKAGES} bubblewrap \
    && rm -rf /var/lib/apt/lists/*
RUN --mount=type=bind,from=deps-verifier,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels /wheels/*.whl
RUN --mount=type=bind,from=code,source=/code,target=/code \
    pip install --no-index --no-deps /code/*.whl
USER 10001:10001
EXPOSE 8003
CMD ["python", "-m", "services.verifier"]

# ---- orchestrator :8004 ------------------------------------------------------------------------
FROM base AS orchestrator
ENV K3STACK_IMAGE_SERVICE=orchestrator \
    K3STACK_ORCHESTRATOR__HOST=0.0.0.0 \
    K3STACK_ORCHESTRATOR__PORT=8004
RUN --mount=type=bind,from=deps-orchestrator,source=/wheels,target=/wheels \
    pip install --no-index --find-links /wheels /wheels/*.whl
RUN --mount=type=bind,from=code,source=/code,target=/code \
    pip install --no-index --no-deps /code/*.whl
USER 10001:10001
EXPOSE 8004
CMD ["python", "-m", "services.orchestrator"]
