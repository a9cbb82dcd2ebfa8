"""helm/k3stack, the properties a real deployment depends on, checked on the rendered manifests:
renders are identical (no random value, stable checksums), values.schema.json refuses wrong
values at render time, the NetworkPolicies fence the sandbox (evaluated the way Kubernetes
evaluates them), and the operability objects (PDBs, spread, ServiceMonitor, KEDA, ephemeral
storage limits) are there and well formed.
"""

from __future__ import annotations

import ipaddress
from typing import Any

import pytest
from helm_python import HelmError

from shared.settings import SERVICE_NAMES
from tests.deploy.test_helm import (
    FULLNAME,
    NAMESPACE,
    VARIANTS,
    WORKER_SERVICES,
    _render_variant,
    containers,
    find,
    one,
    render,
    variant_values,
    workloads,
)

# ---- renders are reproducible ------------------------------------------------------------------


def _secrets_and_checksums(docs: list[dict[str, Any]]) -> Any:
    secrets = sorted((d["metadata"]["name"], d.get("data")) for d in find(docs, "Secret"))
    checksums = sorted(
        (d["metadata"]["name"], k, v)
        for d in workloads(docs)
        for k, v in d["spec"]["template"]["metadata"].get("annotations", {}).items()
        if k.startswith("checksum/")
    )
    return secrets, checksums


@pytest.mark.parametrize("variant", VARIANTS)
def test_rendering_twice_gives_identical_secrets_and_checksums(variant: str) -> None:
    values = variant_values(variant)
    install = render(values, is_install=True)
    again = render(values, is_install=True)
    upgrade = render(values, is_upgrade=True, revision=7)
    assert install == again  # everything, not only the Secrets
    assert _secrets_and_checksums(install) == _secrets_and_checksums(upgrade)
    for doc in install:
        assert doc == next(
            d
            for d in upgrade
            if (d["kind"], d["metadata"]["name"]) == (doc["kind"], doc["metadata"]["name"])
        ), (doc["kind"], doc["metadata"]["name"])
    if not values.get("secrets", {}).get("existingSecret"):
        assert _secrets_and_checksums(install)[1], "pods carry a credentials checksum"


def test_no_secret_material_is_rendered_unless_set_in_the_values() -> None:
    docs = _render_variant("default")
    # The only rendered Secret is the hook's input, holding just the values' credentials: none.
    assert [s["metadata"]["name"] for s in find(docs, "Secret")] == [f"{FULLNAME}-secretgen-input"]
    for workload in workloads(docs):
        for container in containers(workload):
            for env in container.get("env", []):
                assert "PASSWORD" not in env["name"] or "valueFrom" in env, env


def test_secretgen_hook_runs_first_and_least_privileged() -> None:
    docs = _render_variant("default")
    job = one(docs, "Job", f"{FULLNAME}-secretgen")
    hook = job["metadata"]["annotations"]
    assert hook["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(hook["helm.sh/hook-weight"]) < 0
    role = one(docs, "Role", f"{FULLNAME}-secretgen")
    assert int(role["metadata"]["annotations"]["helm.sh/hook-weight"]) < int(
        hook["helm.sh/hook-weight"]
    )
    rules = role["rules"]
    assert all(r["resources"] == ["secrets"] for r in rules)
    scoped = next(r for r in rules if "get" in r["verbs"])
    assert set(scoped["verbs"]) == {"get", "patch"}
    assert sorted(scoped["resourceNames"]) == sorted(
        f"{FULLNAME}-{c}" for c in [*SERVICE_NAMES, "postgresql", "redis", "minio", "minio-bucket"]
    )
    pod = job["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == f"{FULLNAME}-secretgen"
    assert pod["containers"][0]["args"][:3] == ["python", "-m", "shared.secretgen"]
    assert pod["securityContext"]["runAsNonRoot"] is True


# ---- values.schema.json ------------------------------------------------------------------------

WRONG_VALUES = [
    ({"services": {"sandbox": {"kvm": {"enabled": "false"}}}}, "/services/sandbox/kvm/enabled"),
    ({"config": {"logLevel": "verbose"}}, "/config/logLevel"),
    ({"config": {"logFormat": "xml"}}, "/config/logFormat"),
    ({"services": {"sandbox": {"replicas": 2}}}, "/services/sandbox/replicas"),
    ({"services": {"model": {"replicas": -1}}}, "/services/model/replicas"),
    ({"services": {"tools": {"port": 70000}}}, "/services/tools/port"),
    ({"services": {"tools": {"port": "8002"}}}, "/services/tools/port"),
    ({"image": {"pullPolicy": "Sometimes"}}, "/image/pullPolicy"),
    ({"services": {"sandbox": {"kvm": {"privileged": True}}}}, "/services/sandbox/kvm"),
    ({"secrets": {"apiKeys": {"model": "short"}}}, "/secrets/apiKeys/model"),
    ({"objectStore": {"secretKey": "too-short"}}, "/objectStore/secretKey"),
    ({"externalRedis": {"brokerUrl": "rediss://r:6380/0"}}, "/externalRedis/brokerUrl"),
    ({"services": {"verifier": {"worker": {"queues": []}}}}, "/services/verifier/worker/queues"),
    ({"services": {"model": {"resources": {"limits": {"memory": "lots"}}}}}, "memory"),
    ({"services": {"billing": {}}}, "billing"),
    ({"services": {"sandbox": {"worker": {"replicas": 1}}}}, "worker"),
    ({"autoscaling": {"keda": {"maxReplicas": 0}}}, "/autoscaling/keda/maxReplicas"),
    ({"networkPolicy": {"clusterCIDRs": ["cluster"]}}, "/networkPolicy/clusterCIDRs/0"),
    ({"postgresql": {"auth": {"password": "p@ss/word"}}}, "/postgresql/auth/password"),
    ({"logLevel": "INFO"}, "logLevel"),  # a typo'd top-level key
    # a ReadWriteOnce data volume is one node's: no second API or worker replica, no KEDA
    (
        {"services": {"model": {"replicas": 3, "persistence": {"enabled": True}}}},
        "/services/model/replicas",
    ),
    (
        {"services": {"tools": {"worker": {"replicas": 2}, "persistence": {"enabled": True}}}},
        "/services/tools/worker/replicas",
    ),
    (
        {
            "services": {
                "verifier": {"persistence": {"enabled": True, "accessMode": "ReadWriteOncePod"}}
            },
            "autoscaling": {"keda": {"enabled": True}},
        },
        "/services/verifier",
    ),
]


@pytest.mark.parametrize(("values", "where"), WRONG_VALUES, ids=[w for _, w in WRONG_VALUES])
def test_schema_rejects_wrong_values_at_render_time(values: dict[str, Any], where: str) -> None:
    with pytest.raises(HelmError, match="schema") as err:
        render(values)
    assert where in str(err.value)


def test_schema_accepts_the_documented_fallbacks() -> None:
    render({"services": {"sandbox": {"kvm": {"mountDevice": True, "privileged": True}}}})
    # shared volumes scale: ReadWriteMany with replicas and KEDA; KEDA beside the sandbox's RWO
    rwx = {"enabled": True, "accessMode": "ReadWriteMany"}
    render({"services": {"model": {"replicas": 3, "persistence": rwx}}})
    render(
        {"autoscaling": {"keda": {"enabled": True}}, "services": {"tools": {"persistence": rwx}}}
    )
    render({"services": {"sandbox": {"replicas": 0}}, "config": {"logLevel": "DEBUG"}})


# ---- NetworkPolicy, evaluated ------------------------------------------------------------------


def _labels_match(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    for key, value in selector.get("matchLabels", {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions", []):
        present = expr["key"] in labels
        value = labels.get(expr["key"])
        op = expr["operator"]
        if op == "In" and value not in expr["values"]:
            return False
        if op == "NotIn" and present and value in expr["values"]:
            return False
        if op == "Exists" and not present:
            return False
        if op == "DoesNotExist" and present:
            return False
    return True


class Peer:
    """A destination: a pod (labels, namespace, IP) or a bare IP outside the cluster."""

    def __init__(self, ip: str, labels: dict[str, str] | None = None, namespace: str = "") -> None:
        self.ip, self.labels, self.namespace = ipaddress.ip_address(ip), labels, namespace


def _peer_matches(rule_peer: dict[str, Any], dst: Peer) -> bool:
    if "ipBlock" in rule_peer:
        block = rule_peer["ipBlock"]
        net = ipaddress.ip_network(block["cidr"])
        if dst.ip.version != net.version or dst.ip not in net:
            return False
        return not any(
            dst.ip.version == ipaddress.ip_network(e).version and dst.ip in ipaddress.ip_network(e)
            for e in block.get("except", [])
        )
    if dst.labels is None:
        return False  # pod/namespace selectors match pods only
    if "namespaceSelector" in rule_peer:
        # a namespace's labels: the one every namespace carries ({} = every namespace)
        ns_labels = {"kubernetes.io/metadata.name": dst.namespace}
        if not _labels_match(rule_peer["namespaceSelector"], ns_labels):
            return False
    elif dst.namespace != NAMESPACE:
        return False
    return _labels_match(rule_peer.get("podSelector", {}), dst.labels)


def egress_allowed(docs: Any, src_labels: dict[str, str], dst: Peer, port: int) -> bool:
    """Kubernetes semantics: isolated for egress if any policy with Egress selects the pod;
    then allowed iff some egress rule of such a policy matches destination and port."""
    policies = [
        p
        for p in find(docs, "NetworkPolicy")
        if "Egress" in p["spec"].get("policyTypes", [])
        and _labels_match(p["spec"]["podSelector"], src_labels)
    ]
    if not policies:
        return True
    for policy in policies:
        for rule in policy["spec"].get("egress", []):
            peers = rule.get("to")
            ports = rule.get("ports")
            if ports and not any(p.get("port") == port for p in ports):
                continue
            if not peers or any(_peer_matches(peer, dst) for peer in peers):
                return True
    return False


def ingress_allowed(docs: Any, dst_labels: dict[str, str], src: Peer, port: int) -> bool:
    policies = [
        p
        for p in find(docs, "NetworkPolicy")
        if "Ingress" in p["spec"].get("policyTypes", [])
        and _labels_match(p["spec"]["podSelector"], dst_labels)
    ]
    if not policies:
        return True
    for policy in policies:
        for rule in policy["spec"].get("ingress", []):
            ports = rule.get("ports")
            if ports and not any(p.get("port") == port for p in ports):
                continue
            if not rule.get("from") or any(_peer_matches(peer, src) for peer in rule["from"]):
                return True
    return False


def pod_labels(docs: Any, kind: str, name: str) -> dict[str, str]:
    return one(docs, kind, name)["spec"]["template"]["metadata"]["labels"]


@pytest.fixture(scope="module")
def default_docs() -> tuple[dict[str, Any], ...]:
    return _render_variant("default")


def _store(docs: Any, name: str, ip: str) -> Peer:
    return Peer(ip, pod_labels(docs, "StatefulSet", f"{FULLNAME}-{name}"), NAMESPACE)


def test_sandbox_egress_cannot_reach_the_stores_the_cluster_or_the_metadata_address(
    default_docs: Any,
) -> None:
    docs = default_docs
    sandbox = pod_labels(docs, "Deployment", f"{FULLNAME}-sandbox")
    for store, port in (("postgresql", 5432), ("redis", 6379), ("minio", 9000)):
        assert not egress_allowed(docs, sandbox, _store(docs, store, "10.42.3.7"), port), store
        # Even at an address outside the listed cluster CIDRs, the pod selector never admits it.
        assert not egress_allowed(docs, sandbox, _store(docs, store, "100.127.0.9"), port)
    for ip, port in (
        ("169.254.169.254", 80),  # cloud metadata
        ("169.254.170.2", 80),  # ECS task metadata
        ("10.43.0.1", 443),  # the Kubernetes API Service
        ("172.20.0.10", 53),
        ("192.168.1.1", 22),
        ("127.0.0.1", 6379),
        ("fd00::1", 443),
        ("fe80::1", 80),
        ("64:ff9b::a9fe:a9fe", 80),  # NAT64 of the metadata address
        ("64:ff9b::a00:1", 443),  # NAT64 of 10.0.0.1
        ("64:ff9b:1::a9fe:a9fe", 80),  # local-use NAT64 prefix
        ("::ffff:169.254.169.254", 80),  # IPv4-mapped
    ):
        assert not egress_allowed(docs, sandbox, Peer(ip), port), ip
    tools = Peer("10.42.1.5", pod_labels(docs, "Deployment", f"{FULLNAME}-tools"), NAMESPACE)
    assert not egress_allowed(docs, sandbox, tools, 8002)
    # What it may reach: public addresses, and DNS.
    assert egress_allowed(docs, sandbox, Peer("93.184.216.34"), 443)
    assert egress_allowed(docs, sandbox, Peer("2606:4700::1111"), 443)
    dns = Peer("10.43.0.10", {"k8s-app": "kube-dns"}, "kube-system")
    assert egress_allowed(docs, sandbox, dns, 53)


def test_services_reach_the_stores_and_the_stores_refuse_the_sandbox(default_docs: Any) -> None:
    docs = default_docs
    for svc in ("tools", "orchestrator"):
        for component in (svc, f"{svc}-worker"):
            labels = pod_labels(docs, "Deployment", f"{FULLNAME}-{component}")
            for store, port in (("postgresql", 5432), ("redis", 6379), ("minio", 9000)):
                assert egress_allowed(docs, labels, _store(docs, store, "10.42.3.7"), port)
                src = Peer("10.42.1.5", labels, NAMESPACE)
                store_labels = pod_labels(docs, "StatefulSet", f"{FULLNAME}-{store}")
                assert ingress_allowed(docs, store_labels, src, port), (component, store)
            assert not egress_allowed(docs, labels, Peer("169.254.169.254"), 80)
    sandbox = Peer("10.42.9.9", pod_labels(docs, "Deployment", f"{FULLNAME}-sandbox"), NAMESPACE)
    for store, port in (("postgresql", 5432), ("redis", 6379), ("minio", 9000)):
        store_labels = pod_labels(docs, "StatefulSet", f"{FULLNAME}-{store}")
        assert not ingress_allowed(docs, store_labels, sandbox, port), store
    # The sandbox port: the release's services yes, other namespaces' pods no.
    sandbox_labels = pod_labels(docs, "Deployment", f"{FULLNAME}-sandbox")
    orchestrator = Peer(
        "10.42.1.6", pod_labels(docs, "Deployment", f"{FULLNAME}-orchestrator"), NAMESPACE
    )
    assert ingress_allowed(docs, sandbox_labels, orchestrator, 8001)
    stranger = Peer("10.42.7.7", {"app": "other"}, "other-namespace")
    assert not ingress_allowed(docs, sandbox_labels, stranger, 8001)
    assert not ingress_allowed(docs, sandbox_labels, Peer("203.0.113.9"), 8001)


def test_every_release_pod_is_default_denied(default_docs: Any) -> None:
    deny = one(default_docs, "NetworkPolicy", f"{FULLNAME}-default-deny")
    assert deny["spec"]["policyTypes"] == ["Ingress", "Egress"]
    assert "ingress" not in deny["spec"] and "egress" not in deny["spec"]
    for workload in workloads(default_docs):
        labels = workload["spec"]["template"]["metadata"]["labels"]
        assert _labels_match(deny["spec"]["podSelector"], labels), workload["metadata"]["name"]


def test_extra_sandbox_denied_cidrs_are_honoured() -> None:
    docs = render({"networkPolicy": {"sandboxDeniedCIDRs": ["203.0.113.0/24"]}})
    sandbox = pod_labels(docs, "Deployment", f"{FULLNAME}-sandbox")
    assert not egress_allowed(docs, sandbox, Peer("203.0.113.50"), 5432)
    assert egress_allowed(docs, sandbox, Peer("198.51.100.1"), 443)


# ---- operability -------------------------------------------------------------------------------


def test_every_container_has_ephemeral_storage_limits(variant: str) -> None:
    for workload in workloads(_render_variant(variant)):
        for container in containers(workload):
            res = container.get("resources", {})
            assert "ephemeral-storage" in res.get("limits", {}), (
                workload["metadata"]["name"],
                container["name"],
            )
            assert "ephemeral-storage" in res.get("requests", {})


@pytest.fixture(params=VARIANTS)
def variant(request: pytest.FixtureRequest) -> str:
    return request.param


def test_pod_disruption_budgets_and_topology_spread(default_docs: Any) -> None:
    pdbs = {p["metadata"]["name"]: p for p in find(default_docs, "PodDisruptionBudget")}
    expected = {f"{FULLNAME}-{c}" for s in WORKER_SERVICES for c in (s, f"{s}-worker")}
    assert set(pdbs) == expected
    for name, pdb in pdbs.items():
        target = one(default_docs, "Deployment", name)
        assert pdb["spec"]["maxUnavailable"] == 1
        assert _labels_match(
            pdb["spec"]["selector"], target["spec"]["template"]["metadata"]["labels"]
        )
    for deployment in find(default_docs, "Deployment"):
        spread = deployment["spec"]["template"]["spec"]["topologySpreadConstraints"]
        assert {c["topologyKey"] for c in spread} == {
            "kubernetes.io/hostname",
            "topology.kubernetes.io/zone",
        }
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        for constraint in spread:
            assert constraint["whenUnsatisfiable"] == "ScheduleAnyway"
            assert _labels_match(constraint["labelSelector"], labels)


def test_crd_objects_are_off_by_default_and_well_formed_when_on() -> None:
    assert not [
        d for d in _render_variant("default") if d["kind"] in ("ServiceMonitor", "ScaledObject")
    ]
    docs = _render_variant("observability")
    services = find(docs, "Service")
    monitors = {m["metadata"]["name"]: m for m in find(docs, "ServiceMonitor")}
    assert set(monitors) == {f"{FULLNAME}-{svc}" for svc in SERVICE_NAMES}
    for svc in SERVICE_NAMES:
        monitor = monitors[f"{FULLNAME}-{svc}"]
        assert monitor["apiVersion"] == "monitoring.coreos.com/v1"
        assert monitor["metadata"]["labels"]["release"] == "prometheus"
        # deployed mode keys /metrics: each monitor scrapes with its service's own key
        (endpoint,) = monitor["spec"]["endpoints"]
        assert endpoint == {
            "port": "http",
            "path": "/metrics",
            "interval": "30s",
            "authorization": {
                "type": "Bearer",
                "credentials": {
                    "name": f"{FULLNAME}-{svc}",
                    "key": f"K3STACK_{svc.upper()}__API_KEY",
                },
            },
        }
        # the very Secret key the service itself reads its API key from
        api = one(docs, "Deployment", f"{FULLNAME}-{svc}")
        refs = [
            e["valueFrom"]["secretKeyRef"]
            for c in api["spec"]["template"]["spec"]["containers"]
            for e in c.get("env", [])
            if "secretKeyRef" in e.get("valueFrom", {})
        ]
        assert endpoint["authorization"]["credentials"] in refs
        selected = [
            s
            for s in services
            if _labels_match(monitor["spec"]["selector"], s["metadata"]["labels"])
        ]
        assert [s["metadata"]["name"] for s in selected] == [f"{FULLNAME}-{svc}"]
    objects = {s["metadata"]["name"]: s for s in find(docs, "ScaledObject")}
    assert set(objects) == {f"{FULLNAME}-{s}-worker" for s in WORKER_SERVICES}
    values = variant_values("observability")["autoscaling"]["keda"]
    for obj in objects.values():
        assert obj["apiVersion"] == "keda.sh/v1alpha1"
        deployment = one(docs, "Deployment", obj["spec"]["scaleTargetRef"]["name"])
        assert "replicas" not in deployment["spec"]  # KEDA owns the replica count
        assert (obj["spec"]["minReplicaCount"], obj["spec"]["maxReplicaCount"]) == (
            values["minReplicas"],
            values["maxReplicas"],
        )
        queues = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        queues = queues[queues.index("-Q") + 1].split(",")
        triggers = obj["spec"]["triggers"]
        assert [t["metadata"]["listName"] for t in triggers] == queues  # one per Celery queue
        for trigger in triggers:
            assert trigger["type"] == "redis"
            # the full name: KEDA's operator resolves it from its own namespace
            assert trigger["metadata"]["address"] == (
                f"{FULLNAME}-redis.{NAMESPACE}.svc.cluster.local:6379"
            )
            assert trigger["metadata"]["listLength"] == str(values["listLength"])
            auth = one(docs, "TriggerAuthentication", trigger["authenticationRef"]["name"])
            (ref,) = auth["spec"]["secretTargetRef"]
            assert ref["parameter"] == "password" and ref["key"] == "REDIS_PASSWORD"
    assert (
        objects[f"{FULLNAME}-orchestrator-worker"]["spec"]["triggers"][1]["metadata"]["listName"]
        == "rollouts"
    )


def test_keda_with_external_redis_needs_its_own_authentication() -> None:
    values = {**variant_values("external-services"), "autoscaling": {"keda": {"enabled": True}}}
    with pytest.raises(HelmError, match="autoscaling.keda.triggerAuthentication"):
        render(values)
    values["autoscaling"]["keda"]["triggerAuthentication"] = "redis-auth"
    docs = render(values)
    trigger = one(docs, "ScaledObject", f"{FULLNAME}-tools-worker")["spec"]["triggers"][0]
    assert trigger["metadata"]["address"] == "redis.example.internal:6380"
    assert trigger["metadata"]["enableTLS"] == "true"
    assert trigger["authenticationRef"] == {"name": "redis-auth"}


# ---- KEDA, the ingress controller, chart-managed settings ---------------------------------------


def test_keda_operator_reaches_the_in_chart_redis_and_only_with_keda_on() -> None:
    docs = _render_variant("observability")
    redis = pod_labels(docs, "StatefulSet", f"{FULLNAME}-redis")
    operator = Peer("10.42.9.9", {"app": "keda-operator"}, "keda")
    assert ingress_allowed(docs, redis, operator, 6379)
    assert not ingress_allowed(docs, redis, Peer("10.42.9.9", {"app": "keda-operator"}, "x"), 6379)
    assert not ingress_allowed(docs, redis, Peer("10.42.9.9", {"app": "other"}, "keda"), 6379)
    assert not ingress_allowed(docs, pod_labels(docs, "StatefulSet", f"{FULLNAME}-postgresql"),
                               operator, 5432)  # fmt: skip
    plain = _render_variant("default")
    assert not ingress_allowed(plain, redis, operator, 6379)


def test_the_ingress_variant_admits_its_controller_only() -> None:
    docs = _render_variant("ingress")
    controller = {
        "app.kubernetes.io/name": "ingress-nginx",
        "app.kubernetes.io/component": "controller",
    }
    for svc, port in (("orchestrator", 8004), ("model", 8000)):
        api = pod_labels(docs, "Deployment", f"{FULLNAME}-{svc}")
        assert ingress_allowed(docs, api, Peer("10.42.7.7", controller, "ingress-nginx"), port)
        assert not ingress_allowed(docs, api, Peer("10.42.7.7", controller, "default"), port)
    backends = {(p["backend"]["service"]["name"], p["backend"]["service"]["port"]["number"])
                for rule in one(docs, "Ingress", FULLNAME)["spec"]["rules"]
                for p in rule["http"]["paths"]}  # fmt: skip
    assert backends == {(f"{FULLNAME}-orchestrator", 8004), (f"{FULLNAME}-model", 8000)}


@pytest.mark.parametrize(
    "values",
    [
        {"config": {"env": {"K3STACK_MODE": "dev"}}},
        {"config": {"env": {"k3stack_mode": "local"}}},  # settings are read case-insensitively
        {"config": {"env": {"K3STACK_DATABASE_URL": "sqlite:///x.db"}}},
        {"services": {"tools": {"env": {"K3STACK_TOOLS__API_KEY": "x" * 32}}}},
        {"services": {"sandbox": {"env": {"K3STACK_OBJECT_STORE_URL": "file:///tmp"}}}},
        {"services": {"model": {"env": {"K3STACK_ORCHESTRATOR__URL": "http://evil:80"}}}},
    ],
)
def test_env_cannot_override_chart_managed_settings(values: dict[str, Any]) -> None:
    with pytest.raises(HelmError, match="schema"):
        render(values)


def test_env_still_takes_other_settings() -> None:
    docs = render({"config": {"env": {"K3STACK_LLM_MODEL": "judge"}},
                   "services": {"sandbox": {"env": {"K3STACK_SANDBOX__RUNTIME": "microvm"}}}})  # fmt: skip
    assert one(docs, "ConfigMap", f"{FULLNAME}-tools")["data"]["K3STACK_LLM_MODEL"] == "judge"
    assert one(docs, "ConfigMap", f"{FULLNAME}-tools")["data"]["K3STACK_MODE"] == "deployed"


# ---- the verifier worker's bubblewrap relaxations ----------------------------------------------


def _verifier_worker_pod(docs: Any) -> dict[str, Any]:
    return one(docs, "Deployment", f"{FULLNAME}-verifier-worker")["spec"]["template"]["spec"]


def test_only_the_verifier_worker_is_relaxed_for_bubblewrap() -> None:
    """bwrap needs a user namespace (seccomp) and a fresh /proc (procMount) in that one
    container; it stays non-root, capability-free and without privilege escalation."""
    docs = _render_variant("default")
    pod = _verifier_worker_pod(docs)
    sc = pod["containers"][0]["securityContext"]
    assert sc["seccompProfile"] == {"type": "Unconfined"}
    assert sc["procMount"] == "Unmasked"
    assert pod["hostUsers"] is False  # Kubernetes admits Unmasked only with a pod user namespace
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
    assert sc["readOnlyRootFilesystem"] is True and not sc.get("privileged")
    assert pod["securityContext"]["runAsNonRoot"] is True
    for workload in workloads(docs):
        if workload["metadata"]["name"] == f"{FULLNAME}-verifier-worker":
            continue
        spec = workload["spec"]["template"]["spec"]
        assert "hostUsers" not in spec, workload["metadata"]["name"]
        for container in containers(workload):
            relaxed = container.get("securityContext", {})
            assert relaxed.get("seccompProfile", {}).get("type") != "Unconfined"
            assert "procMount" not in relaxed, workload["metadata"]["name"]


def test_bubblewrap_relaxations_can_be_turned_off_or_narrowed() -> None:
    off = _verifier_worker_pod(render({"bubblewrap": {"enabled": False}}))
    assert "hostUsers" not in off
    assert not {"seccompProfile", "procMount"} & set(off["containers"][0]["securityContext"])
    profile = {"type": "Localhost", "localhostProfile": "profiles/k3stack-bwrap.json"}
    narrowed = _verifier_worker_pod(render({"bubblewrap": {"seccompProfile": profile}}))
    assert narrowed["containers"][0]["securityContext"]["seccompProfile"] == profile


@pytest.mark.parametrize(
    "values",
    [
        {"bubblewrap": {"procMount": "Anything"}},
        {"bubblewrap": {"seccompProfile": {"type": "Unconfined", "extra": 1}}},
        {"bubblewrap": {"privileged": True}},
    ],
)
def test_schema_refuses_other_bubblewrap_values(values: dict[str, Any]) -> None:
    with pytest.raises(HelmError, match="bubblewrap"):
        render(values)
