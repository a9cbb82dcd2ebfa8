"""helm/k3stack: renders offline (helm-python-sdk, Helm's own Go engine, i.e. `helm template`:
no cluster, `lookup` empty) for the default values and every file in values-variants/, every
manifest validates against the Kubernetes 1.33 API schemas (strict: unknown fields fail; the
KEDA and Prometheus Operator objects, whose CRDs those schemas lack, are checked field by field),
and the rendered objects say what the platform needs. Security properties (secrets, fences) are
in test_helm_security.py.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import ssl
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from helm_python import Chart, HelmError, lint

from shared.queue import service_queues, worker_argv
from shared.settings import (
    SERVICE_NAMES,
    Settings,
    check_deployed,
    load_settings,
    settings_table,
)

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART_DIR = REPO_ROOT / "helm" / "k3stack"
VARIANTS_DIR = CHART_DIR / "values-variants"
KUBE_VERSION = "1.33"
RELEASE = "k3s"
NAMESPACE = "agents"
FULLNAME = f"{RELEASE}-k3stack"
DEFAULT_PORTS = {name: Settings.model_fields[name].default_factory().port for name in SERVICE_NAMES}
VARIANTS = ["default", *sorted(p.stem for p in VARIANTS_DIR.glob("*.yaml"))]
WORKER_SERVICES = [s for s in SERVICE_NAMES if s != "sandbox"]  # the sandbox has no worker
CRD_KINDS = {"ServiceMonitor", "ScaledObject", "TriggerAuthentication"}


@functools.cache
def _chart() -> Chart:
    return Chart.load(CHART_DIR)


def variant_values(variant: str) -> dict[str, Any]:
    if variant == "default":
        return {}
    return yaml.safe_load((VARIANTS_DIR / f"{variant}.yaml").read_text()) or {}


def render(values: dict[str, Any] | None = None, **opts: Any) -> list[dict[str, Any]]:
    """Every manifest of a render, as dicts (NOTES.txt and empty documents left out)."""
    files = _chart().render(values=values or {}, name=RELEASE, namespace=NAMESPACE, **opts)
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


def workloads(docs: Any) -> list[dict[str, Any]]:
    return [d for d in docs if d["kind"] in ("Deployment", "StatefulSet", "Job")]


def containers(workload: dict[str, Any]) -> list[dict[str, Any]]:
    pod = workload["spec"]["template"]["spec"]
    return pod.get("initContainers", []) + pod["containers"]


def fake_secret_value(key: str) -> str:
    """What a generated Secret would hold for ``key`` (URL-safe, long, not a placeholder)."""
    return f"gen{abs(hash(key)) % 10**12:012d}abcdef{key.lower()[:6]}"


def pod_env(docs: Any, deployment: dict[str, Any]) -> dict[str, str]:
    """The environment a Deployment's first container gets: its ConfigMap, then its env entries
    with each secretKeyRef filled with a generated-looking value and $(VAR) expanded, as the
    kubelet does."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        env.update(one(docs, "ConfigMap", source["configMapRef"]["name"])["data"])
    generated = find(docs, "Job", f"{FULLNAME}-secretgen")
    spec = secretgen_spec(docs)["secrets"] if generated else {}
    explicit = explicit_credentials(docs) if generated else {}
    for entry in container.get("env", []):
        if "valueFrom" in entry:
            ref = entry["valueFrom"]["secretKeyRef"]
            value_id = spec.get(ref["name"], {}).get(ref["key"])
            env[entry["name"]] = explicit.get(value_id) or fake_secret_value(ref["key"])
        else:
            env[entry["name"]] = re.sub(
                r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)", lambda m: env.get(m[1], m[0]), entry["value"]
            )
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
        if doc["kind"] in CRD_KINDS:
            continue  # no CRD schemas in kubernetes-validate: test_crd_objects_are_well_formed
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
        one(docs, "Service", f"{FULLNAME}-{svc}")
        one(docs, "ConfigMap", f"{FULLNAME}-{svc}")
        api_c = api["spec"]["template"]["spec"]["containers"][0]
        assert api_c["image"] == f"k3stack/{svc}:0.1.0"
        assert api_c["args"] == ["python", "-m", f"services.{svc}"]
    for svc in WORKER_SERVICES:
        worker = one(docs, "Deployment", f"{FULLNAME}-{svc}-worker")
        assert worker["spec"]["template"]["spec"]["containers"][0]["image"] == (
            f"k3stack/{svc}:0.1.0"
        )
    # No placeholder sandbox worker (it had a ping task only, privileged with /dev/kvm).
    assert find(docs, "Deployment", f"{FULLNAME}-sandbox-worker") == []
    assert len(find(docs, "Deployment")) == len(SERVICE_NAMES) + len(WORKER_SERVICES)


def test_workers_run_the_worker_command_of_shared_queue(docs: tuple[dict[str, Any], ...]) -> None:
    for svc in WORKER_SERVICES:
        worker = one(docs, "Deployment", f"{FULLNAME}-{svc}-worker")
        args = worker["spec"]["template"]["spec"]["containers"][0]["args"]
        # every queue its jobs go to: rollouts for the orchestrator, each kind's for the verifier
        expected = ["python", *worker_argv(svc, queues=service_queues(svc, Settings()))]
        assert args == expected
        probe = worker["spec"]["template"]["spec"]["containers"][0].get("livenessProbe")
        if probe is None:  # a variant turns the worker probe off
            continue
        probe = probe["exec"]
        ping = f"make_celery('{svc}').control.ping(['{svc}@' + socket.gethostname()]"
        assert probe["command"][:2] == ["python", "-c"] and ping in probe["command"][2]
        assert "services." not in probe["command"][2]  # never imports the service's tasks


def test_probes_hit_health_on_the_service_port(docs: tuple[dict[str, Any], ...]) -> None:
    for svc in SERVICE_NAMES:
        container = one(docs, "Deployment", f"{FULLNAME}-{svc}")["spec"]["template"]["spec"][
            "containers"
        ][0]
        assert container["ports"] == [
            {"name": "http", "containerPort": DEFAULT_PORTS[svc], "protocol": "TCP"}
        ]
        for probe in ("startupProbe", "livenessProbe"):
            assert container[probe]["httpGet"] == {"path": "/health/live", "port": "http"}, probe
        # Readiness follows the dependencies (503 while the database is down).
        assert container["readinessProbe"]["httpGet"] == {"path": "/health/ready", "port": "http"}
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
    existing = variant_values(variant).get("secrets", {}).get("existingSecret")
    generated = {} if existing else secretgen_spec(docs)["secrets"]
    configmaps = {d["metadata"]["name"] for d in find(docs, "ConfigMap")}
    claims = {d["metadata"]["name"] for d in find(docs, "PersistentVolumeClaim")}
    rendered_secrets = {d["metadata"]["name"] for d in find(docs, "Secret")}
    for workload in workloads(docs):
        pod = workload["spec"]["template"]["spec"]
        templates = {
            t["metadata"]["name"] for t in workload["spec"].get("volumeClaimTemplates", [])
        }
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        for container in containers(workload):
            for mount in container.get("volumeMounts", []):
                assert mount["name"] in volumes or mount["name"] in templates
            for source in container.get("envFrom", []):
                assert set(source) == {"configMapRef"}  # never a whole Secret
                assert source["configMapRef"]["name"] in configmaps
            for env in container.get("env", []):
                ref = env.get("valueFrom", {}).get("secretKeyRef")
                if not ref:
                    continue
                if existing:
                    assert ref["name"] == existing
                else:  # a Secret the secretgen hook makes, holding that key
                    assert ref["key"] in generated[ref["name"]], (ref, workload["metadata"])
        for volume in volumes.values():
            if "persistentVolumeClaim" in volume:
                assert volume["persistentVolumeClaim"]["claimName"] in claims
            if "secret" in volume:
                assert volume["secret"]["secretName"] in rendered_secrets


def test_api_and_worker_pods_are_locked_down_except_the_sandbox(
    docs: tuple[dict[str, Any], ...],
) -> None:
    for svc in WORKER_SERVICES:
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


def _sandbox_pod(docs: Any) -> dict[str, Any]:
    return one(docs, "Deployment", f"{FULLNAME}-sandbox")["spec"]["template"]["spec"]


def test_sandbox_gets_kvm_from_the_device_plugin_unprivileged_by_default() -> None:
    pod = _sandbox_pod(_render_variant("default"))
    assert pod["nodeSelector"] == {"k3stack.io/kvm": "true"}
    assert all(v["name"] != "kvm" for v in pod["volumes"])  # no hostPath device
    container = pod["containers"][0]
    assert container["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    for part in ("requests", "limits"):
        assert container["resources"][part]["devices.kubevirt.io/kvm"] == "1"
    assert pod["securityContext"]["runAsUser"] == 0  # QEMU; no capability though
    shm = [v for v in pod["volumes"] if v["name"] == "dshm"]
    assert shm and shm[0]["emptyDir"]["medium"] == "Memory"


def test_privileged_hostpath_is_only_the_documented_fallback() -> None:
    pod = _sandbox_pod(_render_variant("kvm-privileged-hostpath"))
    kvm = [v for v in pod["volumes"] if v["name"] == "kvm"]
    assert kvm == [{"name": "kvm", "hostPath": {"path": "/dev/kvm", "type": "CharDevice"}}]
    container = pod["containers"][0]
    assert {"name": "kvm", "mountPath": "/dev/kvm"} in container["volumeMounts"]
    # A hostPath device node is outside the device cgroup unless the container is privileged.
    assert container["securityContext"] == {"privileged": True}
    assert "devices.kubevirt.io/kvm" not in container["resources"]["limits"]
    assert "privileged" in (VARIANTS_DIR / "kvm-privileged-hostpath.yaml").read_text()


def test_sandbox_cache_is_a_volume_seeded_from_the_image() -> None:
    docs = _render_variant("default")
    pod = _sandbox_pod(docs)
    cache = next(v for v in pod["volumes"] if v["name"] == "cache")
    assert cache["persistentVolumeClaim"]["claimName"] == f"{FULLNAME}-sandbox-cache"
    one(docs, "PersistentVolumeClaim", f"{FULLNAME}-sandbox-cache")
    assert {"name": "cache", "mountPath": "/var/cache/k3stack"} in (
        pod["containers"][0]["volumeMounts"]
    )
    (seed,) = pod["initContainers"]
    assert seed["image"] == pod["containers"][0]["image"]
    assert seed["volumeMounts"] == [{"name": "cache", "mountPath": "/seed"}]
    assert "cp -a /var/cache/k3stack/kernel /seed/" in seed["command"][-1]
    config = one(docs, "ConfigMap", f"{FULLNAME}-sandbox")["data"]
    assert config["K3STACK_SANDBOX__CACHE_DIR"] == "/var/cache/k3stack"
    minimal = _sandbox_pod(_render_variant("minimal"))
    assert next(v for v in minimal["volumes"] if v["name"] == "cache") == {
        "name": "cache",
        "emptyDir": {},
    }


def test_kvm_label_is_merged_with_user_node_selector() -> None:
    docs = render({"services": {"sandbox": {"nodeSelector": {"pool": "vm"}}}})
    assert _sandbox_pod(docs)["nodeSelector"] == {"pool": "vm", "k3stack.io/kvm": "true"}
    # Other services do not land on KVM nodes because of it.
    model = one(docs, "Deployment", f"{FULLNAME}-model")["spec"]["template"]["spec"]
    assert "nodeSelector" not in model


def test_minimal_variant_runs_sandboxes_without_kvm() -> None:
    pod = _sandbox_pod(_render_variant("minimal"))
    assert "nodeSelector" not in pod
    assert all(v["name"] != "kvm" for v in pod["volumes"])
    container = pod["containers"][0]
    assert not container["securityContext"].get("privileged")
    assert "devices.kubevirt.io/kvm" not in container["resources"]["limits"]
    assert find(_render_variant("minimal"), "StatefulSet")  # infra still in-chart
    for sts in find(_render_variant("minimal"), "StatefulSet"):
        assert "volumeClaimTemplates" not in sts["spec"]


# ---- settings and credentials --------------------------------------------------------------------


def secretgen_spec(docs: Any) -> dict[str, Any]:
    """The spec the secretgen hook Job is started with (which Secret holds which keys)."""
    job = one(docs, "Job", f"{FULLNAME}-secretgen")
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    return json.loads(args[args.index("--spec") + 1])


def explicit_credentials(docs: Any) -> dict[str, str]:
    """The values-set credentials the hook Job reads (its input Secret)."""
    secret = one(docs, "Secret", f"{FULLNAME}-secretgen-input")
    return json.loads(base64.b64decode(secret["data"]["values.json"]))


def test_k3stack_variables_are_real_settings(docs: tuple[dict[str, Any], ...]) -> None:
    valid = {var for var, _d, _m in settings_table()}
    names = {k for cm in find(docs, "ConfigMap") for k in cm["data"]}
    for workload in workloads(docs):
        names |= {e["name"] for c in containers(workload) for e in c.get("env", [])}
    k3stack_names = {n for n in names if n.startswith("K3STACK_")}
    assert len(k3stack_names) > 15
    assert k3stack_names - valid == set()


def test_pod_environment_passes_the_deployed_mode_checks(
    variant: str, docs: tuple[dict[str, Any], ...], clean_k3stack_env: pytest.MonkeyPatch
) -> None:
    """Every API and worker pod's environment (ConfigMap + its Secret's keys, as generated)
    loads as deployed settings that the start-up refusals accept."""
    deployments = [one(docs, "Deployment", f"{FULLNAME}-{svc}") for svc in SERVICE_NAMES]
    deployments += [one(docs, "Deployment", f"{FULLNAME}-{svc}-worker") for svc in WORKER_SERVICES]
    for deployment in deployments:
        svc = deployment["metadata"]["labels"]["app.kubernetes.io/component"].removesuffix(
            "-worker"
        )
        with pytest.MonkeyPatch.context() as mp:
            for key, value in pod_env(docs, deployment).items():
                mp.setenv(key, value)
            s = load_settings()
        check_deployed(s, svc)  # raises naming the variable if anything is missing or weak
        assert s.mode == "deployed" and s.auth_enabled
        section = s.service(svc)
        assert (section.host, section.port) == ("0.0.0.0", DEFAULT_PORTS[svc])
        for other in SERVICE_NAMES:
            assert s.service(other).base_url == (
                f"http://{FULLNAME}-{other}:{DEFAULT_PORTS[other]}"
            )
        if svc == "sandbox":  # fenced off the stores: its own files on its data volume
            assert s.database_url == "sqlite:////var/lib/k3stack/sandbox.db"
            assert s.object_store_url == "file:///var/lib/k3stack/objects"
            assert s.object_store_secret_key is None
        else:
            assert s.database_url.startswith("postgresql+psycopg://")
            assert s.broker_url.startswith(("redis://", "rediss://"))
            assert s.object_store_access_key and s.object_store_secret_key


def test_each_pod_gets_only_its_own_keys() -> None:
    docs = _render_variant("default")
    keys = {
        name.removeprefix(f"{FULLNAME}-"): set(k)
        for name, k in secretgen_spec(docs)["secrets"].items()
    }
    api = {svc: f"K3STACK_{svc.upper()}__API_KEY" for svc in SERVICE_NAMES}
    assert keys["sandbox"] == {api["sandbox"]}  # no store credentials, no other key
    assert keys["orchestrator"] >= set(api.values())
    assert keys["tools"] == {
        api["tools"],
        api["model"],
        "POSTGRES_PASSWORD",
        "REDIS_PASSWORD",
        "K3STACK_OBJECT_STORE_SECRET_KEY",
    }
    assert keys["postgresql"] == {"POSTGRES_PASSWORD"} and keys["redis"] == {"REDIS_PASSWORD"}
    assert keys["minio"] == {"MINIO_ROOT_PASSWORD"}
    assert keys["minio-bucket"] == {"MINIO_ROOT_PASSWORD", "K3STACK_OBJECT_STORE_SECRET_KEY"}
    # A value shared by two Secrets is one value (same id), e.g. the sandbox's key.
    spec = secretgen_spec(docs)["secrets"]
    assert (
        spec[f"{FULLNAME}-sandbox"][api["sandbox"]]
        == spec[f"{FULLNAME}-orchestrator"][api["sandbox"]]
    )
    # And the pods reference exactly those keys.
    sandbox = one(docs, "Deployment", f"{FULLNAME}-sandbox")["spec"]["template"]["spec"]
    refs = [e["valueFrom"]["secretKeyRef"] for e in sandbox["containers"][0]["env"]]
    assert refs == [{"name": f"{FULLNAME}-sandbox", "key": api["sandbox"]}]


def test_in_chart_storage_is_wired_by_default() -> None:
    docs = _render_variant("default")
    tools = one(docs, "Deployment", f"{FULLNAME}-tools")["spec"]["template"]["spec"]
    env = {e["name"]: e for e in tools["containers"][0]["env"]}
    assert env["K3STACK_DATABASE_URL"]["value"] == (
        f"postgresql+psycopg://k3stack:$(POSTGRES_PASSWORD)@{FULLNAME}-postgresql:5432/k3stack"
    )
    assert env["K3STACK_BROKER_URL"]["value"] == (
        f"redis://:$(REDIS_PASSWORD)@{FULLNAME}-redis:6379/0"
    )
    names = list(env)
    assert names.index("POSTGRES_PASSWORD") < names.index("K3STACK_DATABASE_URL")  # $(VAR) order
    for name in ("postgresql", "redis", "minio"):
        one(docs, "StatefulSet", f"{FULLNAME}-{name}")
        one(docs, "Service", f"{FULLNAME}-{name}")
    config = one(docs, "ConfigMap", f"{FULLNAME}-tools")["data"]
    assert config["K3STACK_OBJECT_STORE_URL"] == f"http://{FULLNAME}-minio:9000"
    job = one(docs, "Job", f"{FULLNAME}-minio-bucket")
    assert "post-install" in job["metadata"]["annotations"]["helm.sh/hook"]
    script = " ".join(job["spec"]["template"]["spec"]["containers"][0]["args"])
    assert 'mc mb --ignore-existing "k3stack/$BUCKET"' in script


def test_services_use_a_bucket_scoped_minio_user_not_root() -> None:
    docs = _render_variant("default")
    minio = one(docs, "StatefulSet", f"{FULLNAME}-minio")["spec"]["template"]["spec"]
    minio_env = {e["name"]: e for e in minio["containers"][0]["env"]}
    root_user = minio_env["MINIO_ROOT_USER"]["value"]
    config = one(docs, "ConfigMap", f"{FULLNAME}-tools")["data"]
    assert config["K3STACK_OBJECT_STORE_ACCESS_KEY"] == "k3stack-app" != root_user
    spec = secretgen_spec(docs)["secrets"]
    # The services' secret key is the app user's, a different value from MinIO's root password.
    assert (
        spec[f"{FULLNAME}-tools"]["K3STACK_OBJECT_STORE_SECRET_KEY"]
        != (spec[f"{FULLNAME}-minio"]["MINIO_ROOT_PASSWORD"])
    )
    for svc in SERVICE_NAMES:
        assert "MINIO_ROOT_PASSWORD" not in spec[f"{FULLNAME}-{svc}"]
    job = one(docs, "Job", f"{FULLNAME}-minio-bucket")["spec"]["template"]["spec"]
    container = job["containers"][0]
    script = container["args"][0]
    job_env = {e["name"]: e.get("value") for e in container["env"]}
    assert 'mc admin user add k3stack "$APP_ACCESS_KEY" "$K3STACK_OBJECT_STORE_SECRET_KEY"' in (
        script
    )
    assert 'mc admin policy attach k3stack "$POLICY" --user "$APP_ACCESS_KEY"' in script
    assert job_env["APP_ACCESS_KEY"] == "k3stack-app"
    # The policy document the Job writes, filled as its printf fills it: this bucket only.
    template = re.search(r"printf '([^']+)' \"\$BUCKET\" \"\$BUCKET\"", script)[1]
    policy = json.loads(template.replace("%s", job_env["BUCKET"]))
    resources = {r for st in policy["Statement"] for r in st["Resource"]}
    assert resources == {"arn:aws:s3:::k3stack", "arn:aws:s3:::k3stack/*"}
    actions = {a for st in policy["Statement"] for a in st["Action"]}
    assert not any(a in ("s3:*", "admin:*") or a.startswith("admin:") for a in actions)


def test_external_services_replace_the_in_chart_ones() -> None:
    values = variant_values("external-services")
    docs = _render_variant("external-services")
    assert find(docs, "StatefulSet") == []
    assert [j["metadata"]["name"] for j in find(docs, "Job")] == [f"{FULLNAME}-secretgen"]
    for name in ("postgresql", "redis", "minio"):
        assert find(docs, "Service", f"{FULLNAME}-{name}") == []
    explicit = explicit_credentials(docs)
    assert explicit["database-url"] == values["externalDatabase"]["url"]
    assert explicit["broker-url"] == values["externalRedis"]["brokerUrl"]
    assert explicit["result-backend"] == values["externalRedis"]["resultBackend"]
    assert explicit["object-store-secret-key"] == values["objectStore"]["secretKey"]
    keys = secretgen_spec(docs)["secrets"][f"{FULLNAME}-orchestrator"]
    assert keys["K3STACK_DATABASE_URL"] == "database-url"
    assert "POSTGRES_PASSWORD" not in keys and "REDIS_PASSWORD" not in keys
    config = one(docs, "ConfigMap", f"{FULLNAME}-orchestrator")["data"]
    assert config["K3STACK_OBJECT_STORE_URL"] == values["externalObjectStore"]["url"]
    assert config["K3STACK_OBJECT_STORE_BUCKET"] == "k3stack-prod"
    assert config["K3STACK_OBJECT_STORE_ACCESS_KEY"] == values["objectStore"]["accessKey"]


def test_external_redis_urls_are_accepted_by_celery_and_redis_py() -> None:
    """rediss:// without ssl_cert_reqs makes Celery raise at start; these must not."""
    import redis
    from celery import Celery
    from celery.backends.redis import RedisBackend

    values = variant_values("external-services")["externalRedis"]
    broker, backend = values["brokerUrl"], values["resultBackend"]
    assert broker.startswith("rediss://") and backend.startswith("rediss://")
    app = Celery("k3stack-test", broker=broker, backend=backend)
    result_backend = app.backend  # parses the URL; raises ValueError without ssl_cert_reqs
    assert isinstance(result_backend, RedisBackend)
    assert result_backend.connparams["ssl_cert_reqs"] == ssl.CERT_REQUIRED
    with app.connection_for_write() as conn:
        assert conn.transport_cls == "rediss" and conn.ssl
    for url in (broker, backend):
        pool = redis.Redis.from_url(url).connection_pool
        assert pool.connection_kwargs["ssl_cert_reqs"] == "required"
        assert pool.connection_class is redis.SSLConnection
    # And the check bites: the same URL without the parameter is refused by Celery.
    bare = broker.split("?", 1)[0]
    with pytest.raises(ValueError, match="ssl_cert_reqs"):
        _ = Celery("k3stack-test", backend=bare).backend


def test_disabling_postgresql_alone_points_at_the_external_url() -> None:
    url = "postgresql+psycopg://app:pw@pg.example:5432/app"
    docs = render({"postgresql": {"enabled": False}, "externalDatabase": {"url": url}})
    assert find(docs, "StatefulSet", f"{FULLNAME}-postgresql") == []
    assert find(docs, "StatefulSet", f"{FULLNAME}-redis")  # the others stay
    assert explicit_credentials(docs)["database-url"] == url


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"postgresql": {"enabled": False}}, "externalDatabase.url is required"),
        ({"redis": {"enabled": False}}, "externalRedis.brokerUrl is required"),
        ({"minio": {"enabled": False}}, "externalObjectStore.url is required"),
        (
            {"minio": {"enabled": False}, "externalObjectStore": {"url": "https://s3.example"}},
            "objectStore.secretKey is required",
        ),
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
    ids=["postgresql", "redis", "minio", "object-store-key", "ingress-service"],
)
def test_missing_external_settings_fail_the_render(values: dict[str, Any], message: str) -> None:
    with pytest.raises(HelmError, match=message):
        render(values)


def test_explicit_api_keys_reach_the_hook_and_unset_ones_are_left_to_it() -> None:
    keys = {svc: f"key-of-{svc}-0123456789" for svc in SERVICE_NAMES}
    explicit = explicit_credentials(render({"secrets": {"apiKeys": keys}}))
    for svc in SERVICE_NAMES:
        assert explicit[f"api-key-{svc}"] == keys[svc]
    # Nothing set: nothing rendered (the hook generates inside the cluster).
    assert explicit_credentials(_render_variant("default")) == {}


def test_existing_secret_replaces_the_generated_ones() -> None:
    docs = _render_variant("existing-secret")
    assert find(docs, "Secret") == []
    assert find(docs, "Job", f"{FULLNAME}-secretgen") == []
    for deployment in find(docs, "Deployment"):
        container = deployment["spec"]["template"]["spec"]["containers"][0]
        refs = {
            e["valueFrom"]["secretKeyRef"]["name"] for e in container["env"] if "valueFrom" in e
        }
        assert refs == {"k3stack-credentials"}
        assert (
            "checksum/credentials" not in deployment["spec"]["template"]["metadata"]["annotations"]
        )


def test_config_changes_roll_the_pods() -> None:
    def checksum(docs: Any, which: str) -> str:
        d = one(docs, "Deployment", f"{FULLNAME}-tools-worker")
        return d["spec"]["template"]["metadata"]["annotations"][f"checksum/{which}"]

    default = _render_variant("default")
    assert checksum(default, "config") != checksum(
        render({"config": {"logLevel": "DEBUG"}}), "config"
    )
    changed = render({"secrets": {"apiKeys": {"tools": "a-new-tools-key-0123456789"}}})
    assert checksum(default, "credentials") != checksum(changed, "credentials")


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
