"""docker-compose.yml: valid Compose, complete, and consistent with the code it deploys.

No Docker engine is needed: the file is read with PyYAML (anchors and merge keys resolved),
interpolated the way Compose does it, validated against the Compose Specification's JSON schema
(the copy `check-jsonschema` ships as `vendor.compose-spec`, pinned in the test extra), and its
environment is fed through the real settings loader.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from check_jsonschema.builtin_schemas import get_builtin_schema

from shared.queue import worker_argv
from shared.settings import (
    SERVICE_NAMES,
    OrchestratorSettings,
    Settings,
    load_settings,
    settings_table,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO_ROOT / "docker-compose.yml"
COMPOSE_SCHEMA = "vendor.compose-spec"
DEFAULT_PORTS = {name: Settings.model_fields[name].default_factory().port for name in SERVICE_NAMES}

# ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?err}, ${VAR?err}, ${VAR:+alt}, $VAR; $$ is a $.
_INTERP = re.compile(
    r"\$(?:(?P<escaped>\$)"
    r"|\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?+])(?P<arg>[^}]*))?\}"
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
        current = env.get(name)
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


def _bad_healthcheck(doc: dict[str, Any]) -> None:
    doc["services"]["redis"]["healthcheck"]["retries"] = ["3"]


def _bad_devices(doc: dict[str, Any]) -> None:
    doc["services"]["sandbox"]["devices"] = "/dev/kvm:/dev/kvm"


def _bad_top_level(doc: dict[str, Any]) -> None:
    doc["service"] = doc["services"]


@pytest.mark.parametrize(
    "mutate",
    [_bad_ports, _bad_service_key, _bad_condition, _bad_healthcheck, _bad_devices, _bad_top_level],
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
        assert f"{svc}-worker" in names
    assert {"postgres", "redis", "minio", "minio-init"} <= names
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
    assert built == 2 * len(SERVICE_NAMES)


def test_worker_uses_its_service_image_and_build(compose: dict[str, Any]) -> None:
    for svc in SERVICE_NAMES:
        service, worker = compose["services"][svc], compose["services"][f"{svc}-worker"]
        assert worker["image"] == service["image"]
        assert worker["build"] == service["build"]
        assert worker["build"]["target"] == svc
        assert "dockerfile" not in worker["build"]  # the root Dockerfile
        assert worker["environment"] == service["environment"]


def test_workers_run_the_worker_command_of_shared_queue(compose: dict[str, Any]) -> None:
    for svc in SERVICE_NAMES:
        expected = ["python", *worker_argv(svc)]
        if svc == "orchestrator":
            # The orchestrator's worker also drains the rollout-batch queue.
            rollouts = OrchestratorSettings.model_fields["rollout_queue"].default
            expected[expected.index("-Q") + 1] = f"orchestrator,{rollouts}"
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
        assert f"http://127.0.0.1:{DEFAULT_PORTS[svc]}/health" in test
        worker_test = " ".join(compose["services"][f"{svc}-worker"]["healthcheck"]["test"])
        assert f"-A services.{svc}.tasks inspect ping -d {svc}@$HOSTNAME" in worker_test


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


def test_named_volumes_are_declared(compose: dict[str, Any]) -> None:
    declared = set(compose["volumes"])
    used = set()
    for svc in compose["services"].values():
        for vol in svc.get("volumes", []):
            source = vol.split(":")[0] if isinstance(vol, str) else vol["source"]
            if not source.startswith((".", "/")):
                used.add(source)
    assert used == declared
    assert {"postgres-data", "minio-data", "sandbox-data"} <= declared


# ---- environment ---------------------------------------------------------------------------------


def test_k3stack_variables_are_real_settings(raw: dict[str, Any]) -> None:
    valid = {var for var, _default, _desc in settings_table()}
    seen: set[str] = set()
    doc = interpolate(raw, {}, seen)
    env_keys = {key for svc in doc["services"].values() for key in svc.get("environment", {})}
    k3stack_names = {n for n in env_keys | seen if n.startswith("K3STACK_")}
    assert k3stack_names, "no K3STACK_ variables found"
    assert k3stack_names - valid == set()
    # Interpolated secrets reuse the setting's own name, so one .env serves both.
    assert "K3STACK_SANDBOX__API_KEY" in seen


def test_service_environment_loads_as_deployed_settings(
    compose: dict[str, Any], clean_k3stack_env: pytest.MonkeyPatch
) -> None:
    for name, svc in _k3stack_services(compose).items():
        with pytest.MonkeyPatch.context() as mp:
            for key, value in svc["environment"].items():
                mp.setenv(key, str(value))
            s = load_settings()
        assert s.mode == "deployed" and s.auth_enabled, name
        assert s.database_url == "postgresql+psycopg://k3stack:k3stack@postgres:5432/k3stack"
        assert s.broker_url == "redis://redis:6379/0"
        assert s.result_backend == "redis://redis:6379/1"
        assert s.object_store_url == "http://minio:9000"
        assert s.object_store_access_key and s.object_store_secret_key
        for other in SERVICE_NAMES:
            section = s.service(other)
            assert section.host == "0.0.0.0"
            assert section.base_url == f"http://{other}:{DEFAULT_PORTS[other]}"
            assert section.api_key == f"change-me-{other}"


def test_api_keys_come_from_the_shell(raw: dict[str, Any]) -> None:
    doc = interpolate(raw, {"K3STACK_TOOLS__API_KEY": "s3cret", "POSTGRES_PASSWORD": "pw"})
    env = doc["services"]["orchestrator"]["environment"]
    assert env["K3STACK_TOOLS__API_KEY"] == "s3cret"
    assert env["K3STACK_DATABASE_URL"] == "postgresql+psycopg://k3stack:pw@postgres:5432/k3stack"
    assert doc["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"] == "pw"


def test_minio_credentials_match_the_object_store_settings(compose: dict[str, Any]) -> None:
    env = compose["services"]["tools"]["environment"]
    for svc in ("minio", "minio-init"):
        minio = compose["services"][svc]["environment"]
        assert minio["MINIO_ROOT_USER"] == env["K3STACK_OBJECT_STORE_ACCESS_KEY"]
        assert minio["MINIO_ROOT_PASSWORD"] == env["K3STACK_OBJECT_STORE_SECRET_KEY"]
    assert len(env["K3STACK_OBJECT_STORE_SECRET_KEY"]) >= 8  # MinIO refuses shorter
    assert (
        compose["services"]["minio-init"]["environment"]["BUCKET"]
        == (env["K3STACK_OBJECT_STORE_BUCKET"])
    )


# ---- sandbox and hardening -----------------------------------------------------------------------


def test_sandbox_gets_kvm_without_privileged(compose: dict[str, Any]) -> None:
    for name in ("sandbox", "sandbox-worker"):
        svc = compose["services"][name]
        assert "/dev/kvm:/dev/kvm" in svc["devices"], name
        assert not svc.get("privileged"), name
        assert "cap_add" not in svc, name  # KVM needs the device node only
        assert "sandbox-data:/var/lib/k3stack" in svc["volumes"]
        assert svc["shm_size"]
    assert (
        compose["services"]["sandbox"]["volumes"]
        == compose["services"]["sandbox-worker"]["volumes"]
    )
    others = [n for n in compose["services"] if not n.startswith("sandbox")]
    assert all("devices" not in compose["services"][n] for n in others)


def test_unprivileged_services_drop_capabilities(compose: dict[str, Any]) -> None:
    for name, svc in _k3stack_services(compose).items():
        assert "no-new-privileges:true" in svc["security_opt"], name
        if not name.startswith("sandbox"):
            assert svc["cap_drop"] == ["ALL"], name
