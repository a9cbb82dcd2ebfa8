"""helm/k3stack: renders offline (helm-python-sdk, Helm's own Go engine) for the default values
and every file in values-variants/, every manifest validates against the Kubernetes 1.33 API
schemas (strict: unknown fields fail), and the rendered objects say what the platform needs.
"""

from __future__ import annotations

import base64
import functools
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_python import Chart, HelmError, lint

from shared.queue import worker_argv
from shared.settings import SERVICE_NAMES, Settings, load_settings, settings_table

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "helm" / "k3stack"
VARIANTS_DIR = CHART_DIR / "values-variants"
KUBE_VERSION = "1.33"
RELEASE = "k3s"
NAMESPACE = "agents"
FULLNAME = f"{RELEASE}-k3stack"
DEFAULT_PORTS = {name: Settings.model_fields[name].default_factory().port for name in SERVICE_NAMES}
VARIANTS = ["default", *sorted(p.stem for p in VARIANTS_DIR.glob("*.yaml"))]


@functools.cache
def _chart() -> Chart:
    return Chart.load(CHART_DIR)


def variant_values(variant: str) -> dict[str, Any]:
    if variant == "default":
        return {}
    return yaml.safe_load((VARIANTS_DIR / f"{variant}.yaml").read_text()) or {}


def render(values: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """Every manifest of a render, as dicts (NOTES.txt and empty documents left out)."""
    files = _chart().render(values=values or {}, name=RELEASE, namespace=NAMESPACE)
    docs: list[dict[str, Any]] = []
    for path, text in sorted(files.items()):
        if path.endswith("NOTES.txt"):
            continue
        docs.extend(d for d in yaml.safe_load_all(text) if d)
    return docs


@functools.cache
def _render_variant(variant: str) -> tuple[dict[str, Any], ...]:
    return tuple(render(variant_values(variant)))


def find(docs: Any, kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [
        d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)
    ]


def one(docs: Any, kind: str, name: str) -> dict[str, Any]:
    found = find(docs, kind, name)
    assert len(found) == 1, f"expected one {kind} {name}, found {len(found)}"
    return found[0]


def secret_data(docs: Any) -> dict[str, str]:
    secret = one(docs, "Secret", FULLNAME)
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def pod_env(docs: Any, deployment: dict[str, Any]) -> dict[str, str]:
    """The environment a Deployment's first container gets from its envFrom sources."""
    env: dict[str, str] = {}
    for source in deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"]:
        if "configMapRef" in source:
            env.update(one(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
        else:
            env.update(secret_data(docs) if find(docs, "Secret") else {})
    return env


@pytest.fixture(params=VARIANTS)
def variant(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def docs(variant: str) -> tuple[dict[str, Any], ...]:
    return _render_variant(variant)


# ---- validity ------------------------------------------------------------------------------------


def test_variants_exist() -> None:
    assert {"external-services", "ingress", "minimal"} <= set(VARIANTS)


def test_every_manifest_validates_against_kubernetes(docs: tuple[dict[str, Any], ...]) -> None:
    assert len(docs) > 20
    for doc in docs:
        where = f"{doc.get('kind')}/{doc.get('metadata', {}).get('name')}"
        try:
            kubernetes_validate.validate(doc, KUBE_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            path = ".".join(str(p) for p in exc.path)
            pytest.fail(f"{where} invalid at {path}: {exc.message}")


def test_names_are_unique_per_kind(docs: tuple[dict[str, Any], ...]) -> None:
    keys = [(d["kind"], d["metadata"]["name"]) for d in docs]
    assert len(keys) == len(set(keys))


def test_validation_bites_on_a_broken_manifest() -> None:
    deployment = one(_render_variant("default"), "Deployment", f"{FULLNAME}-model")
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"] = "http"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSION, strict=True)
    broken = yaml.safe_load(yaml.safe_dump(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = {}
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBE_VERSION, strict=True)


def test_helm_lint_is_clean(variant: str) -> None:
    report = lint(CHART_DIR, variant_values(variant), strict=True, namespace=NAMESPACE)
    problems = [m for m in report["messages"] if m["severity"] >= 2]
    assert problems == [] and not report.get("errors"), report


# ---- structure -----------------------------------------------------------------------------------


def test_every_service_and_worker_has_a_deployment(docs: tuple[dict[str, Any], ...]) -> None:
    for svc in SERVICE_NAMES:
        api = one(docs, "Deployment", f"{FULLNAME}-{svc}")
        worker = one(docs, "Deployment", f"{FULLNAME}-{svc}-worker")
        one(docs, "Service", f"{FULLNAME}-{svc}")
        one(docs, "ConfigMap", f"{FULLNAME}-{svc}")
        api_c = api["spec"]["template"]["spec"]["containers"][0]
        worker_c = worker["spec"]["template"]["spec"]["containers"][0]
        assert api_c["image"] == worker_c["image"] == f"k3stack/{svc}:0.1.0"
        assert api_c["args"] == ["python", "-m", f"services.{svc}"]
    assert len(find(docs, "Deployment")) == 2 * len(SERVICE_NAMES)


def test_workers_run_the_worker_command_of_shared_queue(docs: tuple[dict[str, Any], ...]) -> None:
    for svc in SERVICE_NAMES:
        worker = one(docs, "Deployment", f"{FULLNAME}-{svc}-worker")
        args = worker["spec"]["template"]["spec"]["containers"][0]["args"]
        expected = ["python", *worker_argv(svc)]
        if svc == "orchestrator":
            expected[expected.index("-Q") + 1] = "orchestrator,rollouts"
        assert args == expected


def test_probes_hit_health_on_the_service_port(docs: tuple[dict[str, Any], ...]) -> None:
    for svc in SERVICE_NAMES:
        container = one(docs, "Deployment", f"{FULLNAME}-{svc}")["spec"]["template"]["spec"][
            "containers"
        ][0]
        assert container["ports"] == [
            {"name": "http", "containerPort": DEFAULT_PORTS[svc], "protocol": "TCP"}
        ]
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert container[probe]["httpGet"] == {"path": "/health", "port": "http"}, probe
        service = one(docs, "Service", f"{FULLNAME}-{svc}")
        assert service["spec"]["ports"][0]["port"] == DEFAULT_PORTS[svc]
        assert service["spec"]["ports"][0]["targetPort"] == "http"


def test_services_select_their_api_pods_only(docs: tuple[dict[str, Any], ...]) -> None:
    deployments = find(docs, "Deployment") + find(docs, "StatefulSet")
    for service in find(docs, "Service"):
        selector = service["spec"]["selector"].items()
        matching = [
            d["metadata"]["name"]
            for d in deployments
            if selector <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        assert matching == [service["metadata"]["name"]], service["metadata"]["name"]


def test_pods_reference_existing_configs_secrets_and_volumes(
    variant: str, docs: tuple[dict[str, Any], ...]
) -> None:
    secret_name = variant_values(variant).get("secrets", {}).get("existingSecret") or FULLNAME
    configmaps = {d["metadata"]["name"] for d in find(docs, "ConfigMap")}
    claims = {d["metadata"]["name"] for d in find(docs, "PersistentVolumeClaim")}
    for workload in find(docs, "Deployment") + find(docs, "StatefulSet") + find(docs, "Job"):
        pod = workload["spec"]["template"]["spec"]
        templates = {
            t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])
        }
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in pod["containers"]:
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes or mount["name"] in templates
            for source in container.get("envFrom", []):
                if "configMapRef" in source:
                    assert source["configMapRef"]["name"] in configmaps
                else:
                    assert source["secretRef"]["name"] == secret_name
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    assert ref["name"] == secret_name
        for volume in volumes.values():
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims


def test_api_and_worker_pods_are_locked_down_except_the_sandbox(
    docs: tuple[dict[str, Any], ...],
) -> None:
    for svc in SERVICE_NAMES:
        if svc == "sandbox":
            continue
        for name in (f"{FULLNAME}-{svc}", f"{FULLNAME}-{svc}-worker"):
            pod = one(docs, "Deployment", name)["spec"]["template"]["spec"]
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["automountServiceAccountToken"] is False
            sc = pod["containers"][0]["securityContext"]
            assert sc["readOnlyRootFilesystem"] is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"]["drop"] == ["ALL"]
            mounts = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
            assert {"/tmp", "/var/lib/k3stack"} <= mounts  # writable places on a read-only root


# ---- sandbox and KVM -----------------------------------------------------------------------------


def _sandbox_pods(docs: Any) -> list[dict[str, Any]]:
    return [
        one(docs, "Deployment", name)["spec"]["template"]["spec"]
        for name in (f"{FULLNAME}-sandbox", f"{FULLNAME}-sandbox-worker")
    ]


def test_sandbox_pods_get_kvm_by_default() -> None:
    for pod in _sandbox_pods(_render_variant("default")):
        assert pod["nodeSelector"] == {"k3stack.io/kvm": "true"}
        kvm = [v for v in pod["volumes"] if v["name"] == "kvm"]
        assert kvm == [{"name": "kvm", "hostPath": {"path": "/dev/kvm", "type": "CharDevice"}}]
        container = pod["containers"][0]
        assert {"name": "kvm", "mountPath": "/dev/kvm"} in container["volumeMounts"]
        # A hostPath device node is outside the device cgroup unless the container is privileged.
        assert container["securityContext"] == {"privileged": True}
        assert pod["securityContext"]["runAsUser"] == 0
        shm = [v for v in pod["volumes"] if v["name"] == "dshm"]
        assert shm and shm[0]["emptyDir"]["medium"] == "Memory"


def test_kvm_label_is_merged_with_user_node_selector() -> None:
    docs = render({"services": {"sandbox": {"nodeSelector": {"pool": "vm"}}}})
    for pod in _sandbox_pods(docs):
        assert pod["nodeSelector"] == {"pool": "vm", "k3stack.io/kvm": "true"}
    # Other services do not land on KVM nodes because of it.
    model = one(docs, "Deployment", f"{FULLNAME}-model")["spec"]["template"]["spec"]
    assert "nodeSelector" not in model


def test_minimal_variant_runs_sandboxes_without_kvm() -> None:
    for pod in _sandbox_pods(_render_variant("minimal")):
        assert "nodeSelector" not in pod
        assert all(v["name"] != "kvm" for v in pod["volumes"])
        assert pod["containers"][0]["securityContext"] == {"allowPrivilegeEscalation": False}
    assert find(_render_variant("minimal"), "StatefulSet")  # infra still in-chart
    for sts in find(_render_variant("minimal"), "StatefulSet"):
        assert "volumeClaimTemplates" not in sts["spec"]


def test_device_plugin_variant_is_unprivileged_and_requests_the_device() -> None:
    for pod in _sandbox_pods(_render_variant("kvm-device-plugin")):
        container = pod["containers"][0]
        assert not container["securityContext"].get("privileged")
        assert pod["nodeSelector"] == {"k3stack.io/kvm": "true"}
        assert all(v["name"] != "kvm" for v in pod["volumes"])
    api = _sandbox_pods(_render_variant("kvm-device-plugin"))[0]["containers"][0]
    assert api["resources"]["limits"]["devices.kubevirt.io/kvm"] == "1"


# ---- settings and secrets ------------------------------------------------------------------------


def test_k3stack_variables_are_real_settings(docs: tuple[dict[str, Any], ...]) -> None:
    valid = {var for var, _d, _m in settings_table()}
    names = {k for cm in find(docs, "ConfigMap") for k in cm["data"]}
    if find(docs, "Secret"):
        names |= set(secret_data(docs))
    k3stack_names = {n for n in names if n.startswith("K3STACK_")}
    assert len(k3stack_names) > 15
    assert k3stack_names - valid == set()


def test_pod_environment_loads_as_deployed_settings(
    variant: str, docs: tuple[dict[str, Any], ...], clean_k3stack_env: pytest.MonkeyPatch
) -> None:
    if variant == "existing-secret":
        # No Secret is rendered; every pod reads the user's own one instead.
        assert find(docs, "Secret") == []
        for svc in SERVICE_NAMES:
            deployment = one(docs, "Deployment", f"{FULLNAME}-{svc}")
            refs = [
                s["secretRef"]["name"]
                for s in deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"]
                if "secretRef" in s
            ]
            assert refs == ["k3stack-credentials"], (svc, refs)
        return
    for svc in SERVICE_NAMES:
        deployment = one(docs, "Deployment", f"{FULLNAME}-{svc}")
        with pytest.MonkeyPatch.context() as mp:
            for key, value in pod_env(docs, deployment).items():
                mp.setenv(key, value)
            s = load_settings()
        assert s.mode == "deployed" and s.auth_enabled
        section = s.service(svc)
        assert (section.host, section.port) == ("0.0.0.0", DEFAULT_PORTS[svc])
        for other in SERVICE_NAMES:
            assert s.service(other).base_url == (
                f"http://{FULLNAME}-{other}:{DEFAULT_PORTS[other]}"
            )
            assert s.service(other).api_key
        assert s.database_url.startswith("postgresql+psycopg://")
        assert s.broker_url.startswith(("redis://", "rediss://"))
        assert s.object_store_access_key and s.object_store_secret_key


def test_in_chart_storage_is_wired_by_default() -> None:
    docs = _render_variant("default")
    data = secret_data(docs)
    pg_password = data["POSTGRES_PASSWORD"]
    assert data["K3STACK_DATABASE_URL"] == (
        f"postgresql+psycopg://k3stack:{pg_password}@{FULLNAME}-postgresql:5432/k3stack"
    )
    redis_password = data["REDIS_PASSWORD"]
    assert data["K3STACK_BROKER_URL"] == f"redis://:{redis_password}@{FULLNAME}-redis:6379/0"
    assert data["K3STACK_RESULT_BACKEND"] == f"redis://:{redis_password}@{FULLNAME}-redis:6379/1"
    for name in ("postgresql", "redis", "minio"):
        one(docs, "StatefulSet", f"{FULLNAME}-{name}")
        one(docs, "Service", f"{FULLNAME}-{name}")
    config = one(docs, "ConfigMap", f"{FULLNAME}-tools")["data"]
    assert config["K3STACK_OBJECT_STORE_URL"] == f"http://{FULLNAME}-minio:9000"
    job = one(docs, "Job", f"{FULLNAME}-minio-bucket")
    assert "post-install" in job["metadata"]["annotations"]["helm.sh/hook"]
    script = " ".join(job["spec"]["template"]["spec"]["containers"][0]["args"])
    assert 'mc mb --ignore-existing "k3stack/$BUCKET"' in script


def test_external_services_replace_the_in_chart_ones() -> None:
    values = variant_values("external-services")
    docs = _render_variant("external-services")
    assert find(docs, "StatefulSet") == []
    assert find(docs, "Job") == []
    for name in ("postgresql", "redis", "minio"):
        assert find(docs, "Service", f"{FULLNAME}-{name}") == []
    data = secret_data(docs)
    assert data["K3STACK_DATABASE_URL"] == values["externalDatabase"]["url"]
    assert data["K3STACK_BROKER_URL"] == values["externalRedis"]["brokerUrl"]
    assert data["K3STACK_RESULT_BACKEND"] == values["externalRedis"]["resultBackend"]
    assert data["K3STACK_OBJECT_STORE_ACCESS_KEY"] == values["objectStore"]["accessKey"]
    assert data["K3STACK_OBJECT_STORE_SECRET_KEY"] == values["objectStore"]["secretKey"]
    assert "POSTGRES_PASSWORD" not in data and "REDIS_PASSWORD" not in data
    config = one(docs, "ConfigMap", f"{FULLNAME}-orchestrator")["data"]
    assert config["K3STACK_OBJECT_STORE_URL"] == values["externalObjectStore"]["url"]
    assert config["K3STACK_OBJECT_STORE_BUCKET"] == "k3stack-prod"


def test_disabling_postgresql_alone_points_at_the_external_url() -> None:
    url = "postgresql+psycopg://app:pw@pg.example:5432/app"
    docs = render({"postgresql": {"enabled": False}, "externalDatabase": {"url": url}})
    assert find(docs, "StatefulSet", f"{FULLNAME}-postgresql") == []
    assert find(docs, "StatefulSet", f"{FULLNAME}-redis")  # the others stay
    assert secret_data(docs)["K3STACK_DATABASE_URL"] == url


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"postgresql": {"enabled": False}}, "externalDatabase.url is required"),
        ({"redis": {"enabled": False}}, "externalRedis.brokerUrl is required"),
        ({"minio": {"enabled": False}}, "externalObjectStore.url is required"),
        (
            {
                "ingress": {
                    "enabled": True,
                    "hosts": [{"host": "h", "paths": [{"path": "/", "service": "nope"}]}],
                }
            },
            'unknown service "nope"',
        ),
    ],
    ids=["postgresql", "redis", "minio", "ingress-service"],
)
def test_missing_external_settings_fail_the_render(values: dict[str, Any], message: str) -> None:
    with pytest.raises(HelmError, match=message):
        render(values)


def test_secret_carries_the_api_keys() -> None:
    keys = {svc: f"key-of-{svc}" for svc in SERVICE_NAMES}
    data = secret_data(render({"secrets": {"apiKeys": keys}}))
    for svc in SERVICE_NAMES:
        assert data[f"K3STACK_{svc.upper()}__API_KEY"] == keys[svc]
    # Unset keys are generated: present, long, and distinct per service.
    generated = secret_data(_render_variant("default"))
    values = [generated[f"K3STACK_{svc.upper()}__API_KEY"] for svc in SERVICE_NAMES]
    assert all(len(v) == 32 for v in values) and len(set(values)) == len(values)


def test_existing_secret_replaces_the_chart_secret() -> None:
    docs = _render_variant("existing-secret")
    assert find(docs, "Secret") == []
    for deployment in find(docs, "Deployment"):
        sources = deployment["spec"]["template"]["spec"]["containers"][0]["envFrom"]
        assert {"secretRef": {"name": "k3stack-credentials"}} in sources
        assert "checksum/secret" not in deployment["spec"]["template"]["metadata"]["annotations"]


def test_config_changes_roll_the_pods() -> None:
    def checksum(docs: Any) -> str:
        d = one(docs, "Deployment", f"{FULLNAME}-tools-worker")
        return d["spec"]["template"]["metadata"]["annotations"]["checksum/config"]

    assert checksum(_render_variant("default")) != checksum(
        render({"config": {"logLevel": "DEBUG"}})
    )


# ---- images and ingress --------------------------------------------------------------------------


def test_images_are_configurable_per_service() -> None:
    docs = render(
        {
            "image": {"registry": "ghcr.io/acme", "tag": "1.4.0", "pullPolicy": "Always"},
            "services": {"model": {"image": {"tag": "1.4.0-cuda", "pullPolicy": "IfNotPresent"}}},
        }
    )
    model = one(docs, "Deployment", f"{FULLNAME}-model")["spec"]["template"]["spec"]
    tools = one(docs, "Deployment", f"{FULLNAME}-tools-worker")["spec"]["template"]["spec"]
    assert model["containers"][0]["image"] == "ghcr.io/acme/k3stack/model:1.4.0-cuda"
    assert model["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    assert tools["containers"][0]["image"] == "ghcr.io/acme/k3stack/tools:1.4.0"
    assert tools["containers"][0]["imagePullPolicy"] == "Always"


def test_ingress_is_off_by_default_and_routes_to_services_when_on() -> None:
    assert find(_render_variant("default"), "Ingress") == []
    docs = _render_variant("ingress")
    ingress = one(docs, "Ingress", FULLNAME)
    services = {s["metadata"]["name"]: s for s in find(docs, "Service")}
    routes = {}
    for rule in ingress["spec"]["rules"]:
        for path in rule["http"]["paths"]:
            backend = path["backend"]["service"]
            assert backend["name"] in services
            assert (
                backend["port"]["number"] == services[backend["name"]]["spec"]["ports"][0]["port"]
            )
            routes[(rule["host"], path["path"])] = backend["name"]
    assert routes == {
        ("api.k3stack.example.com", "/v1"): f"{FULLNAME}-model",
        ("k3stack.example.com", "/"): f"{FULLNAME}-orchestrator",
    }
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert ingress["spec"]["tls"][0]["secretName"] == "k3stack-tls"


def test_notes_render() -> None:
    files = _chart().render(values={}, name=RELEASE, namespace=NAMESPACE)
    notes = files["k3stack/templates/NOTES.txt"]
    assert f"svc/{FULLNAME}-orchestrator" in notes
    assert "k3stack.io/kvm=true" in notes
