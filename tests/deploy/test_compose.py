"""docker-compose.yml: valid Compose, complete, and consistent with the code it deploys.

No Docker engine is needed: the file is read with PyYAML (anchors and merge keys resolved),
interpolated the way Compose does it, validated against the Compose Specification's JSON schema
(the copy `check-jsonschema` ships as `vendor.compose-spec`, pinned in the test extra), and its
environment is fed through the real settings loader.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from check_jsonschema.builtin_schemas import get_builtin_schema

from shared.queue import service_queues, worker_argv
from shared.settings import (
    SERVICE_NAMES,
    Settings,
    SettingsError,
    check_deployed,
    load_settings,
    settings_table,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
COMPOSE_SCHEMA = "vendor.compose-spec"
DEFAULT_PORTS = {name: Settings.model_fields[name].default_factory().port for name in SERVICE_NAMES}
WORKER_SERVICES = [s for s in SERVICE_NAMES if s != "sandbox"]  # the sandbox has no worker
STORES = ("postgres", "redis", "minio", "minio-init")

# What Compose defines itself: the project's name (the file's `name:`, or `-p`).
BUILTIN = {"COMPOSE_PROJECT_NAME": "k3stack"}
# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}, ${VAR?err}, ${VAR:+alt}, $VAR; $$ is a $.
_INTERP = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>(?:\$\{[^}]*\}|[^}])*))?\}"
    r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))"
)


def interpolate(value: Any, env: dict[str, str], seen: set[str] | None = None) -> Any:
    """Compose's variable interpolation over a loaded document; names used go into ``seen``."""
    if isinstance(value, dict):
        return {k: interpolate(v, env, seen) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env, seen) for v in value]
    if not isinstance(value, str):
        return value

    def sub(m: re.Match[str]) -> str:
        if m.group("escaped"):
            return "$"
        name = m.group("braced") or m.group("bare")
        if seen is not None:
            seen.add(name)
        op, arg = m.group("op"), m.group("arg") or ""
        current = env.get(name, BUILTIN.get(name))
        arg = interpolate(arg, env, seen)  # a default may itself be ${OTHER}
        unset_or_empty = current is None or (op is not None and op.startswith(":") and not current)
        if op in (":-", "-"):
            return arg if unset_or_empty else current
        if op in (":?", "?"):
            if unset_or_empty:
                raise KeyError(f"{name}: {arg}")
            return current
        if op in (":+", "+"):
            return "" if unset_or_empty else arg
        return current or ""

    return _INTERP.sub(sub, value)


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE_FILE.read_text())


@pytest.fixture(scope="module")
def compose(raw: dict[str, Any]) -> dict[str, Any]:
    """The file as Compose sees it with an empty shell environment (all defaults)."""
    return interpolate(raw, {})


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = get_builtin_schema(COMPOSE_SCHEMA)
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def _k3stack_services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        name: svc
        for name, svc in compose["services"].items()
        if name in SERVICE_NAMES or name.removesuffix("-worker") in SERVICE_NAMES
    }


def _errors(validator: jsonschema.protocols.Validator, doc: dict[str, Any]) -> list[str]:
    return [f"{e.json_path}: {e.message}" for e in validator.iter_errors(doc)]


# ---- schema --------------------------------------------------------------------------------------


def test_schema_file_is_the_compose_spec(validator: jsonschema.protocols.Validator) -> None:
    assert validator.schema["$id"] == "compose_spec.json"
    assert "services" in validator.schema["properties"]
    assert validator.schema["title"] == "Compose Specification"
    assert validator.schema["$schema"].startswith("https://json-schema.org/")


def test_compose_file_validates_against_compose_spec(
    raw: dict[str, Any], compose: dict[str, Any], validator: jsonschema.protocols.Validator
) -> None:
    assert _errors(validator, raw) == []
    assert _errors(validator, compose) == []


def _bad_ports(doc: dict[str, Any]) -> None:
    doc["services"]["model"]["ports"] = {"8000": 8000}


def _bad_service_key(doc: dict[str, Any]) -> None:
    doc["services"]["tools"]["restartt"] = "always"


def _bad_condition(doc: dict[str, Any]) -> None:
    doc["services"]["verifier"]["depends_on"]["postgres"]["condition"] = "service_ready"


def _bad_secret_source(doc: dict[str, Any]) -> None:
    doc["secrets"]["tools_api_key"] = {"environment": ["K3STACK_TOOLS__API_KEY"]}


def _bad_healthcheck(doc: dict[str, Any]) -> None:
    doc["services"]["redis"]["healthcheck"]["retries"] = ["3"]


def _bad_devices(doc: dict[str, Any]) -> None:
    doc["services"]["sandbox"]["devices"] = "/dev/kvm:/dev/kvm"


def _bad_top_level(doc: dict[str, Any]) -> None:
    doc["service"] = doc["services"]


@pytest.mark.parametrize(
    "mutate",
    [
        _bad_ports,
        _bad_service_key,
        _bad_condition,
        _bad_healthcheck,
        _bad_devices,
        _bad_top_level,
        _bad_secret_source,
    ],
    ids=lambda f: f.__name__.removeprefix("_"),
)
def test_schema_rejects_mutated_compose(
    compose: dict[str, Any], validator: jsonschema.protocols.Validator, mutate: Any
) -> None:
    doc = copy.deepcopy(compose)
    mutate(doc)
    assert _errors(validator, doc), f"{mutate.__name__} should break the schema"


# ---- structure -----------------------------------------------------------------------------------


def test_every_k3stack_service_and_worker_is_there(compose: dict[str, Any]) -> None:
    names = set(compose["services"])
    for svc in SERVICE_NAMES:
        assert svc in names
    for svc in WORKER_SERVICES:
        assert f"{svc}-worker" in names
    assert "sandbox-worker" not in names  # no placeholder worker with /dev/kvm
    assert set(STORES) <= names
    assert compose["services"]["postgres"]["image"].startswith("postgres:16")
    assert compose["services"]["redis"]["image"].startswith("redis:7")


def test_build_contexts_and_dockerfiles_exist(compose: dict[str, Any]) -> None:
    built = 0
    for name, svc in compose["services"].items():
        build = svc.get("build")
        if build is None:
            continue
        built += 1
        if isinstance(build, str):
            build = {"context": build}
        context = (COMPOSE_FILE.parent / build["context"]).resolve()
        assert context.is_dir(), f"{name}: build context {context} missing"
        dockerfile = context / build.get("dockerfile", "Dockerfile")
        assert dockerfile.is_file(), f"{name}: {dockerfile} missing"
        assert f"FROM base AS {build['target']}\n" in dockerfile.read_text(), name
    assert built == len(SERVICE_NAMES) + len(WORKER_SERVICES)


def test_worker_uses_its_service_image_and_build(compose: dict[str, Any]) -> None:
    for svc in WORKER_SERVICES:
        service, worker = compose["services"][svc], compose["services"][f"{svc}-worker"]
        assert worker["image"] == service["image"]
        assert worker["build"] == service["build"]
        assert worker["build"]["target"] == svc
        assert "dockerfile" not in worker["build"]  # the root Dockerfile
        assert worker["environment"] == service["environment"]
        assert worker["secrets"] == service["secrets"]


def test_workers_run_the_worker_command_of_shared_queue(compose: dict[str, Any]) -> None:
    for svc in WORKER_SERVICES:
        # Every queue the service's jobs are sent to: the orchestrator's worker also drains the
        # rollout-batch queue, the verifier's each verification kind's (<queue>.<kind>).
        expected = ["python", *worker_argv(svc, queues=service_queues(svc, Settings()))]
        assert compose["services"][f"{svc}-worker"]["command"] == expected
        assert "command" not in compose["services"][svc]  # the image's CMD serves the API


def test_depends_on_names_existing_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, svc in services.items():
        deps = svc.get("depends_on", {})
        if isinstance(deps, list):
            deps = {d: {"condition": "service_started"} for d in deps}
        for dep, spec in deps.items():
            assert dep in services, f"{name} depends on unknown service {dep}"
            assert dep != name
            if spec["condition"] == "service_completed_successfully":
                assert services[dep].get("restart", "no") == "no", f"{dep} is one-shot"
            if spec["condition"] == "service_healthy":
                assert not services[dep]["healthcheck"].get("disable"), f"{dep} has no health"


def test_k3stack_containers_wait_for_storage_and_bucket(compose: dict[str, Any]) -> None:
    for name, svc in _k3stack_services(compose).items():
        if name == "sandbox":
            assert not set(svc.get("depends_on", {})) & set(STORES)  # it never talks to them
            continue
        deps = svc["depends_on"]
        assert deps["postgres"]["condition"] == "service_healthy", name
        assert deps["redis"]["condition"] == "service_healthy", name
        assert deps["minio-init"]["condition"] == "service_completed_successfully", name
    init = compose["services"]["minio-init"]
    assert init["image"].split("/")[-1].startswith("mc:")
    assert init["depends_on"]["minio"]["condition"] == "service_healthy"
    assert "mc mb --ignore-existing" in " ".join(init["command"])


def test_every_service_has_a_healthcheck(compose: dict[str, Any]) -> None:
    services = compose["services"]
    awaited_one_shots = {
        dep
        for svc in services.values()
        for dep, spec in svc.get("depends_on", {}).items()
        if spec["condition"] == "service_completed_successfully"
    }
    for name, svc in services.items():
        check = svc.get("healthcheck")
        assert check, f"{name} has no healthcheck"
        if check.get("disable"):
            assert name in awaited_one_shots, f"{name} disables its healthcheck"
            continue
        assert check["test"][0] in ("CMD", "CMD-SHELL"), name


def test_api_healthchecks_hit_their_own_health_endpoint(compose: dict[str, Any]) -> None:
    for svc in SERVICE_NAMES:
        test = " ".join(compose["services"][svc]["healthcheck"]["test"])
        # Readiness: depends_on service_healthy waits until the service's dependencies answer.
        assert f"/dev/tcp/127.0.0.1/{DEFAULT_PORTS[svc]}" in test
        assert "GET /health/ready HTTP/1.0" in test and "grep -q ' 200 '" in test
    for svc in WORKER_SERVICES:
        worker_test = " ".join(compose["services"][f"{svc}-worker"]["healthcheck"]["test"])
        # a ping to its own node over the broker, without importing the service's tasks
        assert f"make_celery('{svc}').control.ping(['{svc}@' + socket.gethostname()]" in worker_test
        assert "services." not in worker_test


def _kill_budget(test: list[str]) -> float | None:
    """Seconds after which the probe's ``timeout -s KILL N`` kills it, if it is so wrapped."""
    words = " ".join(test[1:]).split()
    for i, word in enumerate(words[:-3]):
        if word == "timeout" and words[i + 1 : i + 3] == ["-s", "KILL"]:
            return float(words[i + 3])
    return None


def _seconds(duration: str) -> float:
    return float(duration.removesuffix("s"))


@pytest.mark.parametrize(
    "name",
    sorted(set(SERVICE_NAMES) | {f"{s}-worker" for s in WORKER_SERVICES} | {"postgres", "redis"}),
)
def test_every_probe_is_killed_before_docker_gives_up_on_it(
    compose: dict[str, Any], name: str
) -> None:
    """Docker 20.10 does not kill a timed-out probe, so one that hangs under load stays while the
    next starts (8-20 per container were seen). Each probe kills itself first."""
    check = compose["services"][name]["healthcheck"]
    budget = _kill_budget(check["test"])
    assert budget is not None, f"{name}: probe not under `timeout -s KILL`: {check['test']}"
    assert budget < _seconds(check["timeout"]), (name, budget, check["timeout"])
    assert _seconds(check["timeout"]) <= _seconds(check["interval"]) * 6, name
    # failures during start-up do not count: a loaded host's slow import is not 'unhealthy'
    if name in SERVICE_NAMES or name.endswith("-worker"):
        assert _seconds(check["start_period"]) >= 600, name


def test_api_probes_start_no_interpreter(compose: dict[str, Any]) -> None:
    for svc in SERVICE_NAMES:
        assert "python" not in compose["services"][svc]["healthcheck"]["test"], svc


def test_every_container_has_an_init(compose: dict[str, Any]) -> None:
    """PID 1 reaps and forwards signals: without it the S3 stand-in could not be stopped."""
    for name, svc in compose["services"].items():
        assert svc.get("init") is True, name


def test_ports_images_and_base_image_are_variables(raw: dict[str, Any]) -> None:
    env = {
        "MODEL_PORT": "18000", "SANDBOX_PORT": "", "POSTGRES_IMAGE": "pg:x",
        "REDIS_IMAGE": "rd:y", "BASE_IMAGE": "local/base:1",
    }  # fmt: skip
    doc = interpolate(raw, env)["services"]
    assert doc["model"]["ports"] == ["127.0.0.1:18000:8000"]
    assert doc["sandbox"]["ports"] == ["127.0.0.1::8001"]  # empty: an ephemeral port (scalable)
    assert doc["tools"]["ports"] == ["127.0.0.1:8002:8002"]
    assert doc["postgres"]["image"] == "pg:x" and doc["redis"]["image"] == "rd:y"
    for name in SERVICE_NAMES:
        assert doc[name]["build"]["args"]["BASE_IMAGE"] == "local/base:1", name


def test_ports_are_published_on_loopback_by_default(compose: dict[str, Any]) -> None:
    published = {}
    for name, svc in compose["services"].items():
        for port in svc.get("ports", []):
            host_ip, host_port, container_port = str(port).split(":")
            assert host_ip == "127.0.0.1", f"{name} publishes {port}"
            published[name] = int(container_port)
            assert host_port == container_port
    assert {svc: published[svc] for svc in SERVICE_NAMES} == DEFAULT_PORTS
    assert "postgres" not in published and "redis" not in published


def test_publish_address_is_overridable(raw: dict[str, Any]) -> None:
    doc = interpolate(raw, {"PUBLISH_ADDRESS": "0.0.0.0", "IMAGE_TAG": "1.2.3"})
    assert doc["services"]["model"]["ports"] == ["0.0.0.0:8000:8000"]
    assert doc["services"]["tools-worker"]["image"] == "k3stack/tools:1.2.3"


def test_image_names_follow_the_project_name(raw: dict[str, Any]) -> None:
    """Two projects on one engine build and run their own images (``-p other`` -> ``other/*``),
    unless IMAGE_PREFIX names them; the default project keeps ``k3stack/*``."""
    default = interpolate(raw, {})["services"]
    other = interpolate(raw, {"COMPOSE_PROJECT_NAME": "other"})["services"]
    chosen = interpolate(raw, {"COMPOSE_PROJECT_NAME": "other", "IMAGE_PREFIX": "reg/x"})
    for name in SERVICE_NAMES:
        assert default[name]["image"] == f"k3stack/{name}:latest"
        assert other[name]["image"] == f"other/{name}:latest"
        assert chosen["services"][name]["image"] == f"reg/x/{name}:latest"


def test_compose_itself_names_images_after_the_project() -> None:
    """The same through Docker Compose's own interpolation (``config`` needs no engine)."""
    import shutil
    import subprocess

    docker = shutil.which("docker")
    assert docker, "docker CLI missing: scripts/setup_docker.sh installs it"
    env = {k: v for k, v in os.environ.items() if k not in ("IMAGE_PREFIX", "COMPOSE_PROJECT_NAME")}
    out = subprocess.run(
        [docker, "compose", "-f", str(COMPOSE_FILE), "-p", "other", "config", "--images"],
        capture_output=True, text=True, env=env, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    assert {f"other/{name}:latest" for name in SERVICE_NAMES} <= set(out), out
    assert not any(image.startswith("k3stack/") for image in out), out


def test_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    used = set()
    for svc in compose["services"].values():
        for vol in svc.get("volumes", []):
            source = vol.split(":")[0] if isinstance(vol, str) else vol["source"]
            if not source.startswith((".", "/")):
                used.add(source)
    assert used == declared
    assert {"postgres-data", "minio-data", "sandbox-data", "sandbox-cache"} <= declared


# ---- environment and secrets ---------------------------------------------------------------------

# What a user's .env holds (strong values; the tests below also try weak ones).
DOTENV = {
    **{f"K3STACK_{svc.upper()}__API_KEY": f"k3s-{svc}-0123456789abcdef" for svc in SERVICE_NAMES},
    "POSTGRES_PASSWORD": "pg0123456789abcdef",
    "REDIS_PASSWORD": "rd0123456789abcdef",
    "MINIO_ROOT_PASSWORD": "root0123456789abcdef",
    "K3STACK_OBJECT_STORE_SECRET_KEY": "app0123456789abcdef",
    "K3STACK_DATABASE_URL": "postgresql+psycopg://k3stack:pg0123456789abcdef@postgres:5432/k3stack",
    "K3STACK_BROKER_URL": "redis://:rd0123456789abcdef@redis:6379/0",
    "K3STACK_RESULT_BACKEND": "redis://:rd0123456789abcdef@redis:6379/1",
}


def mount_secrets(compose: dict[str, Any], service: str, env: dict[str, str], at: Path) -> Path:
    """The files Compose would mount under /run/secrets for ``service``, from ``env``."""
    at.mkdir(parents=True, exist_ok=True)
    for ref in compose["services"][service].get("secrets", []):
        ref = {"source": ref, "target": ref} if isinstance(ref, str) else ref
        source = compose["secrets"][ref["source"]]["environment"]
        (at / ref.get("target", ref["source"])).write_text(env.get(source, ""))
    return at


def load_service(compose: dict[str, Any], service: str, env: dict[str, str], tmp: Path) -> Settings:
    secrets = mount_secrets(compose, service, env, tmp / service)
    with pytest.MonkeyPatch.context() as mp:
        for key, value in compose["services"][service]["environment"].items():
            mp.setenv(key, str(value))
        mp.setenv("K3STACK_SECRETS_DIR", str(secrets))
        return load_settings()


def test_k3stack_variables_are_real_settings(raw: dict[str, Any], compose: dict[str, Any]) -> None:
    valid = {var for var, _default, _desc in settings_table()}
    seen: set[str] = set()
    doc = interpolate(raw, {}, seen)
    env_keys = {key for svc in doc["services"].values() for key in svc.get("environment", {})}
    targets = {
        ref["target"]
        for svc in compose["services"].values()
        for ref in svc.get("secrets", [])
        if isinstance(ref, dict)
    }
    k3stack_names = {n for n in env_keys | seen | targets if n.startswith("K3STACK_")}
    assert len(k3stack_names) > 15
    assert k3stack_names - valid == set()
    assert "K3STACK_SANDBOX__API_KEY" in targets


def test_no_credential_in_any_environment(raw: dict[str, Any]) -> None:
    """Keys and passwords reach containers as secrets only; none has a default in the file."""
    text = COMPOSE_FILE.read_text()
    assert "change-me" not in text
    for name, svc in raw["services"].items():
        for key, value in (svc.get("environment") or {}).items():
            if re.search(r"API_KEY|SECRET_KEY|PASSWORD", key):
                assert key.endswith("_FILE") and str(value).startswith("/run/secrets/"), key
            if key.endswith(("_URL", "_BACKEND")):
                assert "@" not in str(value), (name, key)  # no credentials inside a URL
    sources = {d["environment"] for d in raw["secrets"].values()}
    assert sources == set(DOTENV)


def test_service_environment_loads_as_deployed_settings(
    compose: dict[str, Any], clean_k3stack_env: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in _k3stack_services(compose):
        s = load_service(compose, name, DOTENV, tmp_path)
        svc = name.removesuffix("-worker")
        check_deployed(s, svc)  # the start-up refusals accept it
        assert s.mode == "deployed" and s.auth_enabled, name
        if svc == "sandbox":
            assert s.database_url == "sqlite:////var/lib/k3stack/sandbox.db"
            assert s.object_store_url == "file:///var/lib/k3stack/objects"
            assert s.object_store_secret_key is None
        else:
            assert s.database_url == DOTENV["K3STACK_DATABASE_URL"]
            assert s.broker_url == DOTENV["K3STACK_BROKER_URL"]
            assert s.result_backend == DOTENV["K3STACK_RESULT_BACKEND"]
            assert s.object_store_url == "http://minio:9000"
            assert s.object_store_access_key == "k3stack-app"
            assert s.object_store_secret_key == DOTENV["K3STACK_OBJECT_STORE_SECRET_KEY"]
        assert s.service(svc).api_key == DOTENV[f"K3STACK_{svc.upper()}__API_KEY"]
        for other in SERVICE_NAMES:
            section = s.service(other)
            assert section.host == "0.0.0.0"
            assert section.base_url == f"http://{other}:{DEFAULT_PORTS[other]}"


@pytest.mark.parametrize(
    ("var", "value", "message"),
    [
        ("K3STACK_TOOLS__API_KEY", "", "K3STACK_TOOLS__API_KEY is empty"),
        ("K3STACK_TOOLS__API_KEY", "change-me-tools", "K3STACK_TOOLS__API_KEY is a default"),
        ("K3STACK_MODEL__API_KEY", "short", "K3STACK_MODEL__API_KEY is shorter"),
        ("K3STACK_OBJECT_STORE_SECRET_KEY", "minioadmin", "K3STACK_OBJECT_STORE_SECRET_KEY is a"),
    ],
)
def test_compose_refuses_weak_credentials(
    compose: dict[str, Any],
    clean_k3stack_env: pytest.MonkeyPatch,
    tmp_path: Path,
    var: str,
    value: str,
    message: str,
) -> None:
    s = load_service(compose, "tools", {**DOTENV, var: value}, tmp_path)
    with pytest.raises(SettingsError, match=message):
        check_deployed(s, "tools")


def test_each_container_gets_only_its_secrets(compose: dict[str, Any]) -> None:
    def sources(name: str) -> set[str]:
        return {
            r if isinstance(r, str) else r["source"] for r in compose["services"][name]["secrets"]
        }

    assert sources("sandbox") == {"sandbox_api_key"}
    assert sources("orchestrator") >= {f"{s}_api_key" for s in SERVICE_NAMES}
    assert sources("tools") == {
        "tools_api_key",
        "model_api_key",
        "database_url",
        "broker_url",
        "result_backend",
        "object_store_secret_key",
    }
    assert sources("postgres") == {"postgres_password"}
    assert sources("minio") == {"minio_root_password"}
    for name in _k3stack_services(compose):
        assert not sources(name) & {"minio_root_password", "postgres_password", "redis_password"}


def test_services_use_a_bucket_scoped_minio_user_not_root(compose: dict[str, Any]) -> None:
    env = compose["services"]["tools"]["environment"]
    minio = compose["services"]["minio"]["environment"]
    assert env["K3STACK_OBJECT_STORE_ACCESS_KEY"] == "k3stack-app" != minio["MINIO_ROOT_USER"]
    init = compose["services"]["minio-init"]
    assert init["environment"]["APP_ACCESS_KEY"] == env["K3STACK_OBJECT_STORE_ACCESS_KEY"]
    assert init["environment"]["BUCKET"] == env["K3STACK_OBJECT_STORE_BUCKET"]
    script = init["command"][0]
    assert 'mc admin user add k3stack "$APP_ACCESS_KEY"' in script
    template = re.search(r"printf '([^']+)' \"\$BUCKET\" \"\$BUCKET\"", script)[1]
    policy = json.loads(template.replace("%s", init["environment"]["BUCKET"]))
    resources = {r for st in policy["Statement"] for r in st["Resource"]}
    assert resources == {"arn:aws:s3:::k3stack", "arn:aws:s3:::k3stack/*"}


# ---- sandbox and hardening -----------------------------------------------------------------------


def test_sandbox_gets_kvm_without_privileges_and_no_route_to_the_stores(
    compose: dict[str, Any],
) -> None:
    sandbox = compose["services"]["sandbox"]
    assert "/dev/kvm:/dev/kvm" in sandbox["devices"]
    assert not sandbox.get("privileged") and "cap_add" not in sandbox
    assert sandbox["cap_drop"] == ["ALL"]
    assert "sandbox-data:/var/lib/k3stack" in sandbox["volumes"]
    assert any(v.startswith("sandbox-cache:/var/cache/k3stack") for v in sandbox["volumes"])
    assert sandbox["shm_size"]
    others = [n for n in compose["services"] if n != "sandbox"]
    assert all("devices" not in compose["services"][n] for n in others)
    # Networks: the stores live on an internal network the sandbox is not on.
    assert compose["networks"]["stores"]["internal"] is True
    assert sandbox["networks"] == ["api"]
    for store in STORES:
        assert compose["services"][store]["networks"] == ["stores"], store
    for name in _k3stack_services(compose):
        if name != "sandbox":
            assert set(compose["services"][name]["networks"]) == {"api", "stores"}, name


def test_every_k3stack_container_drops_capabilities(compose: dict[str, Any]) -> None:
    for name, svc in _k3stack_services(compose).items():
        assert "no-new-privileges:true" in svc["security_opt"], name
        assert svc["cap_drop"] == ["ALL"], name
