"""deploy/kubernetes: every overlay, as `kubectl kustomize` renders it, holds together.

Schema validity is deploy/kubernetes/check.sh's business (kubernetes-validate --strict against the
pinned Kubernetes version); these tests check what a schema cannot: the selectors match the pod
labels, each Service's target port exists on the pods it selects, the PodDisruptionBudgets,
the HorizontalPodAutoscaler and the NetworkPolicy select what they are meant to, every Secret and
ConfigMap a pod names exists with the key it reads, and every container runs non-root on a
read-only root filesystem with resource requests and limits. Each checker returns its problems as
strings; the mutation tests below show it finds a broken manifest. Each optional component
(deploy/kubernetes/components/) is checked with every overlay, as an overlay listing it under
``components:`` renders it: the same checks, it adds objects and changes none, and its own tests.

Without kubectl the tests skip, unless ``CALIBO_REQUIRE_KUBECTL=1`` (check.sh sets it), where they
fail instead.
"""

from __future__ import annotations

import copy
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
KUBE = ROOT / "deploy" / "kubernetes"
OVERLAYS = ("standalone", "external-db", "gpu-workers")
COMPONENTS = ("optuna-grpc",)

# Secrets the manifests read but do not contain (no credential is committed): the user creates them
# before the first apply (docs/how-to/kubernetes.md), with these keys. Any other Secret a pod names
# must be in the render.
USER_SECRETS: dict[str, dict[str, set[str]]] = {
    "standalone": {"calibo-db": {"CALIBO_DATABASE_URL", "POSTGRES_PASSWORD"},
                   "calibo-api": {"CALIBO_API_TOKENS"}},
    "external-db": {"calibo-db": {"CALIBO_DATABASE_URL"}, "calibo-api": {"CALIBO_API_TOKENS"}},
    "gpu-workers": {"calibo-db": {"CALIBO_DATABASE_URL", "POSTGRES_PASSWORD"},
                    "calibo-api": {"CALIBO_API_TOKENS"}},
}

Doc = dict[str, Any]
WORKLOADS = ("Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job")


# ------------------------------------------------------------------ rendering
def _kubectl() -> str:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        why = "kubectl is not installed (it renders the overlays: `kubectl kustomize`)"
        if os.environ.get("CALIBO_REQUIRE_KUBECTL") == "1":
            pytest.fail(f"CALIBO_REQUIRE_KUBECTL=1 but {why}")
        pytest.skip(why)
    return kubectl


def render(overlay: str) -> list[Doc]:
    out = subprocess.run([_kubectl(), "kustomize", str(KUBE / "overlays" / overlay)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kubectl kustomize overlays/{overlay} failed:\n{out.stderr}"
    docs = [d for d in yaml.safe_load_all(out.stdout) if d]
    assert docs, f"overlays/{overlay} renders nothing"
    return docs


@pytest.fixture(scope="module")
def renders() -> Iterator[dict[str, list[Doc]]]:
    yield {overlay: render(overlay) for overlay in OVERLAYS}


@pytest.fixture(params=OVERLAYS)
def overlay(request: pytest.FixtureRequest, renders: dict[str, list[Doc]]) -> tuple[str, list[Doc]]:
    return request.param, renders[request.param]


def render_with(overlay: str, component: str, tmp: Path) -> list[Doc]:
    """``overlay`` with ``component``, as an overlay that lists it under ``components:`` renders it
    (check.sh renders the same; kustomize takes relative paths only)."""
    rel = [os.path.relpath(KUBE / part, tmp) for part in (f"overlays/{overlay}", f"components/{component}")]
    (tmp / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: calibo\n"
        f"resources:\n  - {rel[0]}\ncomponents:\n  - {rel[1]}\n")
    out = subprocess.run([_kubectl(), "kustomize", str(tmp)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"overlays/{overlay} with components/{component} failed:\n{out.stderr}"
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def component_renders(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], list[Doc]]:
    return {(o, c): render_with(o, c, tmp_path_factory.mktemp(f"{o}-{c}")) for c in COMPONENTS for o in OVERLAYS}


@pytest.fixture(params=[(o, c) for c in COMPONENTS for o in OVERLAYS], ids=lambda p: f"{p[0]}+{p[1]}")
def with_component(request: pytest.FixtureRequest,
                   component_renders: dict[tuple[str, str], list[Doc]]) -> tuple[str, str, list[Doc]]:
    o, c = request.param
    return o, c, component_renders[(o, c)]


# ------------------------------------------------------------------ helpers
def name(doc: Doc) -> str:
    return f"{doc['kind']}/{doc['metadata']['name']}"


def find(docs: list[Doc], kind: str, obj: str) -> Doc:
    hits = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == obj]
    assert len(hits) == 1, f"{kind}/{obj}: {len(hits)} in the render"
    return hits[0]


def pod_template(doc: Doc) -> Doc | None:
    if doc["kind"] in WORKLOADS:
        return doc["spec"]["template"]
    if doc["kind"] == "CronJob":
        return doc["spec"]["jobTemplate"]["spec"]["template"]
    return None


def templates(docs: list[Doc]) -> dict[str, Doc]:
    """``{Kind/name: pod template}`` of every workload."""
    return {name(d): t for d in docs if (t := pod_template(d)) is not None}


def containers(pod_spec: Doc) -> list[Doc]:
    return pod_spec.get("initContainers", []) + pod_spec.get("containers", [])


def matches(selector: Doc | None, labels: dict[str, str]) -> bool:
    """Kubernetes label-selector semantics (matchLabels and matchExpressions; empty selects all)."""
    selector = selector or {}
    if any(labels.get(k) != v for k, v in (selector.get("matchLabels") or {}).items()):
        return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e["key"], e["operator"], e.get("values") or []
        ok = {"In": key in labels and labels[key] in values,
              "NotIn": key not in labels or labels[key] not in values,
              "Exists": key in labels, "DoesNotExist": key not in labels}[op]
        if not ok:
            return False
    return True


def selected(selector: Doc | None, docs: list[Doc]) -> set[str]:
    """The workloads whose pod template ``selector`` selects."""
    return {w for w, t in templates(docs).items() if matches(selector, t["metadata"].get("labels") or {})}


def env_value(container: Doc, var: str) -> str | None:
    for e in container.get("env", []):
        if e["name"] == var:
            return e.get("value")
    return None


def config_value(docs: list[Doc], container: Doc, var: str) -> str | None:
    """``var`` as ``container`` sees it: its own env, else a ConfigMap of its envFrom."""
    own = env_value(container, var)
    if own is not None:
        return own
    for src in container.get("envFrom", []):
        if "configMapRef" in src:
            data = find(docs, "ConfigMap", src["configMapRef"]["name"]).get("data", {})
            if var in data:
                return data[var]
    return None


# ------------------------------------------------------------------ checkers
def selector_problems(docs: list[Doc]) -> list[str]:
    """Workload selectors, Services (and their target ports), PDBs, HPAs and NetworkPolicies."""
    problems: list[str] = []
    tpls = templates(docs)
    for d in docs:
        if d["kind"] in WORKLOADS and d["kind"] != "Job":
            sel = d["spec"].get("selector")
            labels = pod_template(d)["metadata"].get("labels") or {}
            if not sel or not matches(sel, labels):
                problems.append(f"{name(d)}: selector {sel} does not match its pod labels {labels}")
        if d["kind"] == "StatefulSet":
            svc = [s for s in docs if s["kind"] == "Service" and s["metadata"]["name"] == d["spec"]["serviceName"]]
            if not svc:
                problems.append(f"{name(d)}: serviceName {d['spec']['serviceName']} is no Service")
    for d in docs:
        kind, spec = d["kind"], d.get("spec", {})
        if kind == "Service" and "selector" in spec:
            hits = selected({"matchLabels": spec["selector"]}, docs)
            if not hits:
                problems.append(f"{name(d)}: selector {spec['selector']} matches no pod")
            for port in spec.get("ports", []):
                target = port.get("targetPort", port["port"])
                for w in sorted(hits):
                    ports = [p for c in tpls[w]["spec"]["containers"] for p in c.get("ports", [])]
                    if not any(p.get("name") == target or p["containerPort"] == target for p in ports):
                        problems.append(f"{name(d)}: targetPort {target!r} is no container port of {w}")
        elif kind == "PodDisruptionBudget":
            if not selected(spec.get("selector"), docs):
                problems.append(f"{name(d)}: selector {spec.get('selector')} matches no pod")
        elif kind == "HorizontalPodAutoscaler":
            ref = spec["scaleTargetRef"]
            targets = [t for t in docs if t["kind"] == ref["kind"] and t["metadata"]["name"] == ref["name"]
                       and t["apiVersion"] == ref.get("apiVersion", t["apiVersion"])]
            if not targets:
                problems.append(f"{name(d)}: scaleTargetRef {ref} is not in the render")
            elif "replicas" in targets[0]["spec"]:
                problems.append(f"{name(d)}: {name(targets[0])} sets replicas, which every apply resets")
            if spec.get("minReplicas", 1) > spec["maxReplicas"]:
                problems.append(f"{name(d)}: minReplicas > maxReplicas")
        elif kind == "NetworkPolicy":
            for rule in spec.get("ingress", []) + spec.get("egress", []):
                for peer in rule.get("from", []) + rule.get("to", []):
                    if "podSelector" in peer and "namespaceSelector" not in peer \
                            and not selected(peer["podSelector"], docs):
                        problems.append(f"{name(d)}: peer {peer['podSelector']} matches no pod")
    return problems


def reference_problems(docs: list[Doc], user_secrets: dict[str, set[str]]) -> list[str]:
    """Every Secret, ConfigMap and ServiceAccount a pod names exists, with the keys it reads."""
    problems: list[str] = []
    data: dict[tuple[str, str], set[str]] = {
        (d["kind"], d["metadata"]["name"]): set(d.get("data") or {}) | set(d.get("stringData") or {})
        for d in docs if d["kind"] in ("Secret", "ConfigMap")}
    for obj, keys in user_secrets.items():
        if ("Secret", obj) in data:
            problems.append(f"Secret/{obj} is listed as user-supplied but the render holds it")
        data[("Secret", obj)] = keys
    accounts = {d["metadata"]["name"] for d in docs if d["kind"] == "ServiceAccount"} | {"default"}

    def need(where: str, kind: str, obj: str, key: str | None = None, optional: bool = False) -> None:
        if optional:
            return
        if (kind, obj) not in data:
            problems.append(f"{where}: {kind}/{obj} is not in the render (nor user-supplied)")
        elif key is not None and key not in data[(kind, obj)]:
            problems.append(f"{where}: {kind}/{obj} has no key {key!r}")

    for d in docs:
        if (t := pod_template(d)) is None:
            continue
        w, spec = name(d), t["spec"]
        claims = {v["metadata"]["name"] for v in d["spec"].get("volumeClaimTemplates", [])}
        if spec.get("serviceAccountName", "default") not in accounts:
            problems.append(f"{w}: serviceAccount {spec['serviceAccountName']} is not in the render")
        for c in containers(spec):
            where = f"{w} container {c['name']}"
            for e in c.get("env", []):
                ref = e.get("valueFrom", {})
                if "secretKeyRef" in ref:
                    r = ref["secretKeyRef"]
                    need(where, "Secret", r["name"], r["key"], r.get("optional", False))
                if "configMapKeyRef" in ref:
                    r = ref["configMapKeyRef"]
                    need(where, "ConfigMap", r["name"], r["key"], r.get("optional", False))
            for src in c.get("envFrom", []):
                if "secretRef" in src:
                    need(where, "Secret", src["secretRef"]["name"], optional=src["secretRef"].get("optional", False))
                if "configMapRef" in src:
                    r = src["configMapRef"]
                    need(where, "ConfigMap", r["name"], optional=r.get("optional", False))
            declared = {v["name"] for v in spec.get("volumes", [])} | claims
            for m in c.get("volumeMounts", []):
                if m["name"] not in declared:
                    problems.append(f"{where}: mounts undeclared volume {m['name']}")
        for v in spec.get("volumes", []):
            if "secret" in v:
                need(f"{w} volume {v['name']}", "Secret", v["secret"]["secretName"],
                     optional=v["secret"].get("optional", False))
            if "configMap" in v:
                need(f"{w} volume {v['name']}", "ConfigMap", v["configMap"]["name"],
                     optional=v["configMap"].get("optional", False))
    return problems


def security_problems(docs: list[Doc]) -> list[str]:
    """Non-root pods; every container non-root, read-only, unprivileged, with requests and limits."""
    problems: list[str] = []
    for w, t in templates(docs).items():
        spec = t["spec"]
        pod = spec.get("securityContext") or {}
        if pod.get("runAsNonRoot") is not True or pod.get("runAsUser", 1) == 0:
            problems.append(f"{w}: the pod's securityContext does not enforce a non-root user")
        if (pod.get("seccompProfile") or {}).get("type") != "RuntimeDefault":
            problems.append(f"{w}: no RuntimeDefault seccomp profile")
        for host in ("hostNetwork", "hostPID", "hostIPC"):
            if spec.get(host):
                problems.append(f"{w}: {host}")
        for c in containers(spec):
            where = f"{w} container {c['name']}"
            sc = c.get("securityContext") or {}
            if sc.get("runAsNonRoot") is not True or sc.get("runAsUser", 1) == 0:
                problems.append(f"{where}: not runAsNonRoot")
            if sc.get("readOnlyRootFilesystem") is not True:
                problems.append(f"{where}: root filesystem not read-only")
            if sc.get("allowPrivilegeEscalation") is not False or sc.get("privileged"):
                problems.append(f"{where}: privilege escalation not ruled out")
            if "ALL" not in ((sc.get("capabilities") or {}).get("drop") or []):
                problems.append(f"{where}: capabilities not dropped")
            res = c.get("resources") or {}
            for part in ("requests", "limits"):
                missing = {"cpu", "memory"} - set(res.get(part) or {})
                if missing:
                    problems.append(f"{where}: no {part} for {sorted(missing)}")
            if "/tmp" not in {m["mountPath"] for m in c.get("volumeMounts", [])}:
                problems.append(f"{where}: no writable /tmp on its read-only root filesystem")
    return problems


# ------------------------------------------------------------------ the renders
def test_every_overlay_is_tested() -> None:
    on_disk = {p.name for p in (KUBE / "overlays").iterdir() if (p / "kustomization.yaml").exists()}
    assert on_disk == set(OVERLAYS) == set(USER_SECRETS)


def test_selectors_ports_and_targets_match(overlay: tuple[str, list[Doc]]) -> None:
    assert selector_problems(overlay[1]) == []


def test_every_secret_and_configmap_exists_with_its_keys(overlay: tuple[str, list[Doc]]) -> None:
    which, docs = overlay
    assert reference_problems(docs, USER_SECRETS[which]) == []
    # the user-supplied Secrets' keys are all read by something (the list is not stale)
    read = {(r["name"], r["key"]) for t in templates(docs).values() for c in containers(t["spec"])
            for e in c.get("env", []) if (r := e.get("valueFrom", {}).get("secretKeyRef"))}
    assert read == {(s, k) for s, keys in USER_SECRETS[which].items() for k in keys}


def test_every_container_is_non_root_read_only_and_limited(overlay: tuple[str, list[Doc]]) -> None:
    assert security_problems(overlay[1]) == []


def test_the_namespace_enforces_the_restricted_pod_security_standard(overlay: tuple[str, list[Doc]]) -> None:
    docs = overlay[1]
    ns = find(docs, "Namespace", "calibo")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {"calibo"}


def test_the_api_serves_behind_its_service_with_probes_and_migrations_first(overlay: tuple[str, list[Doc]]) -> None:
    docs = overlay[1]
    api = find(docs, "Deployment", "calibo-api")
    spec = api["spec"]["template"]["spec"]
    (serve,) = spec["containers"]
    assert serve["command"][:2] == ["calibo", "serve"] and "0.0.0.0" in serve["command"]
    port = {p["name"]: p["containerPort"] for p in serve["ports"]}["http"]
    assert serve["command"][serve["command"].index("--port") + 1] == str(port)
    assert serve["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert serve["livenessProbe"]["httpGet"] == {"path": "/livez", "port": "http"}
    # migrations run before the API starts (an init container), and not again inside it
    assert [c["command"] for c in spec["initContainers"]] == [["calibo", "migrate"]]
    assert config_value(docs, serve, "CALIBO_MIGRATE") == "false"
    assert config_value(docs, serve, "CALIBO_WORKER_MODE") == "queue"
    svc = find(docs, "Service", "calibo-api")
    assert selected({"matchLabels": svc["spec"]["selector"]}, docs) == {"Deployment/calibo-api"}
    assert svc["spec"]["ports"][0]["port"] == 8000
    assert selected(find(docs, "PodDisruptionBudget", "calibo-api")["spec"]["selector"], docs) == {
        "Deployment/calibo-api"}
    hpa = find(docs, "HorizontalPodAutoscaler", "calibo-api")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "calibo-api"
    assert hpa["spec"]["minReplicas"] >= 2  # replicas behind the Service, and the PDB can be met


def test_the_workers_take_the_queue_and_check_their_alive_file(overlay: tuple[str, list[Doc]]) -> None:
    docs = overlay[1]
    worker = find(docs, "Deployment", "calibo-worker")
    spec = worker["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["command"] == ["calibo", "worker"]
    assert c["livenessProbe"]["exec"]["command"] == ["calibo", "worker", "--check"]
    assert config_value(docs, c, "CALIBO_WORKER_MODE") == "queue"
    alive = config_value(docs, c, "CALIBO_WORKER_ALIVE_FILE") or "/tmp/calibo-worker.alive"
    assert any(alive.startswith(m["mountPath"] + "/") for m in c["volumeMounts"])  # writable
    assert config_value(docs, c, "CALIBO_WORKER_METRICS_PORT") == str(
        {p["name"]: p["containerPort"] for p in c["ports"]}["metrics"])
    assert [i["command"] for i in spec["initContainers"]] == [["calibo", "migrate"]]
    # `calibo worker` finishes its fits for up to 30 s after SIGTERM
    assert spec["terminationGracePeriodSeconds"] > 30
    assert selected(find(docs, "PodDisruptionBudget", "calibo-worker")["spec"]["selector"], docs) == {
        "Deployment/calibo-worker"}


def postgres_admits(docs: list[Doc]) -> tuple[set[str], set[str], set[int]]:
    """(pods the PostgreSQL policy guards, pods it admits, ports it opens)."""
    pol = find(docs, "NetworkPolicy", "calibo-postgres")
    spec = pol["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    admitted: set[str] = set()
    ports: set[int] = set()
    for rule in spec["ingress"]:
        for peer in rule["from"]:
            assert set(peer) == {"podSelector"}, f"a peer beyond this namespace's pods: {peer}"
            admitted |= selected(peer["podSelector"], docs)
        ports |= {p["port"] for p in rule["ports"]}
    return selected(spec["podSelector"], docs), admitted, ports


def test_only_the_api_and_the_workers_reach_postgres(overlay: tuple[str, list[Doc]]) -> None:
    which, docs = overlay
    guarded, admitted, ports = postgres_admits(docs)
    assert admitted == {"Deployment/calibo-api", "Deployment/calibo-worker"}
    assert ports == {5432}
    if which == "external-db":
        assert guarded == set()  # no PostgreSQL in the cluster: the database's own firewall decides
        assert not any(d["kind"] == "StatefulSet" for d in docs)
    else:
        assert guarded == {"StatefulSet/calibo-postgres"}
        # the Service the URL names (calibo-postgres:5432) fronts those very pods
        svc = find(docs, "Service", "calibo-postgres")
        assert selected({"matchLabels": svc["spec"]["selector"]}, docs) == guarded
        assert svc["spec"]["ports"][0]["port"] == 5432


def test_standalone_postgres_keeps_its_data_on_a_volume_claim(renders: dict[str, list[Doc]]) -> None:
    for which in ("standalone", "gpu-workers"):
        sts = find(renders[which], "StatefulSet", "calibo-postgres")
        claims = {c["metadata"]["name"] for c in sts["spec"]["volumeClaimTemplates"]}
        (pg,) = sts["spec"]["template"]["spec"]["containers"]
        data = [m for m in pg["volumeMounts"] if m["name"] in claims]
        assert data and data[0]["mountPath"] == "/var/lib/postgresql/data"
        assert env_value(pg, "PGDATA").startswith("/var/lib/postgresql/data/")  # not the mount's root


def test_gpu_workers_request_gpus_on_gpu_nodes_with_the_cuda_image(renders: dict[str, list[Doc]]) -> None:
    docs = renders["gpu-workers"]
    spec = find(docs, "Deployment", "calibo-worker")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    assert c["image"] == "calibo:gpu"
    assert all(i["image"] == "calibo:gpu" for i in spec["initContainers"])
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert env_value(c, "CALIBO_DEVICE") == "cuda"
    assert any(t["key"] == "nvidia.com/gpu" and t["effect"] == "NoSchedule" for t in spec["tolerations"])
    assert spec["nodeSelector"]
    # the API stays on the CPU image; the other overlays' workers request no GPU
    assert find(docs, "Deployment", "calibo-api")["spec"]["template"]["spec"]["containers"][0]["image"] == \
        "calibo:latest"
    for which in ("standalone", "external-db"):
        other = find(renders[which], "Deployment", "calibo-worker")["spec"]["template"]["spec"]
        assert "nvidia.com/gpu" not in other["containers"][0]["resources"]["limits"]
        assert other["containers"][0]["image"] == "calibo:latest" and "tolerations" not in other


# ------------------------------------------------------------------ the checkers catch breakage
def _pod(docs: list[Doc], kind: str, obj: str) -> Doc:
    return pod_template(find(docs, kind, obj))


def test_a_wrong_workload_selector_is_caught(renders: dict[str, list[Doc]]) -> None:
    docs = copy.deepcopy(renders["standalone"])
    find(docs, "Deployment", "calibo-worker")["spec"]["selector"]["matchLabels"][
        "app.kubernetes.io/component"] = "wroker"
    assert any("Deployment/calibo-worker: selector" in p for p in selector_problems(docs))
    # ... and so is a Service selecting no pod, or a target port the pods lack
    docs = copy.deepcopy(renders["standalone"])
    find(docs, "Service", "calibo-api")["spec"]["selector"]["app.kubernetes.io/component"] = "apl"
    assert any("matches no pod" in p for p in selector_problems(docs))
    docs = copy.deepcopy(renders["standalone"])
    find(docs, "Service", "calibo-api")["spec"]["ports"][0]["targetPort"] = "htp"
    assert any("targetPort 'htp'" in p for p in selector_problems(docs))
    docs = copy.deepcopy(renders["standalone"])
    find(docs, "HorizontalPodAutoscaler", "calibo-api")["spec"]["scaleTargetRef"]["name"] = "calibo"
    assert any("scaleTargetRef" in p for p in selector_problems(docs))
    docs = copy.deepcopy(renders["external-db"])
    find(docs, "PodDisruptionBudget", "calibo-api")["spec"]["selector"]["matchLabels"]["x"] = "y"
    assert any("PodDisruptionBudget/calibo-api" in p for p in selector_problems(docs))


def test_a_policy_admitting_another_pod_is_caught(renders: dict[str, list[Doc]]) -> None:
    docs = copy.deepcopy(renders["standalone"])
    peers = find(docs, "NetworkPolicy", "calibo-postgres")["spec"]["ingress"][0]["from"]
    peers[1]["podSelector"] = {"matchLabels": {"app.kubernetes.io/name": "calibo"}}  # every calibo pod
    _, admitted, _ = postgres_admits(docs)
    assert "StatefulSet/calibo-postgres" in admitted  # the test above would fail on it


def test_a_missing_secret_key_or_configmap_is_caught(renders: dict[str, list[Doc]]) -> None:
    docs = copy.deepcopy(renders["external-db"])
    api = _pod(docs, "Deployment", "calibo-api")["spec"]["containers"][0]
    next(e for e in api["env"] if e["name"] == "CALIBO_API_TOKENS")["valueFrom"]["secretKeyRef"]["key"] = "TOKENS"
    assert reference_problems(docs, USER_SECRETS["external-db"]) == [
        "Deployment/calibo-api container api: Secret/calibo-api has no key 'TOKENS'"]
    # the external database has no POSTGRES_PASSWORD to give
    docs = copy.deepcopy(renders["standalone"])
    assert any("no key 'POSTGRES_PASSWORD'" in p for p in reference_problems(docs, USER_SECRETS["external-db"]))
    docs = copy.deepcopy(renders["standalone"])
    _pod(docs, "Deployment", "calibo-worker")["spec"]["containers"][0]["envFrom"][0]["configMapRef"][
        "name"] = "calibo-config"  # the generator's name without its hash suffix
    assert any("ConfigMap/calibo-config is not in the render" in p
               for p in reference_problems(docs, USER_SECRETS["standalone"]))


def test_a_root_or_unlimited_container_is_caught(renders: dict[str, list[Doc]]) -> None:
    docs = copy.deepcopy(renders["gpu-workers"])
    spec = _pod(docs, "Deployment", "calibo-worker")["spec"]
    del spec["initContainers"][0]["resources"]["limits"]
    spec["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = False
    _pod(docs, "StatefulSet", "calibo-postgres")["spec"]["securityContext"]["runAsUser"] = 0
    assert sorted(security_problems(docs)) == [
        "Deployment/calibo-worker container migrate: no limits for ['cpu', 'memory']",
        "Deployment/calibo-worker container worker: root filesystem not read-only",
        "StatefulSet/calibo-postgres: the pod's securityContext does not enforce a non-root user",
    ]


# ------------------------------------------------------------------ the check and its documentation
def test_ci_runs_the_check_and_the_version_is_pinned_once() -> None:
    check = (KUBE / "check.sh").read_text()
    assert 'KUBE_VERSION="${KUBE_VERSION:-1.' in check and "--strict" in check
    assert "bash deploy/kubernetes/check.sh" in (ROOT / ".ci" / "run").read_text()


def test_the_how_to_names_every_user_supplied_secret_and_key() -> None:
    page = (ROOT / "docs" / "how-to" / "kubernetes.md").read_text()
    for which in OVERLAYS:
        assert f"overlays/{which}" in page
        for secret, keys in USER_SECRETS[which].items():
            assert f"generic {secret}" in page
            assert all(k in page for k in keys)


# `calibo` commands that are clients of the API (calibo's Client inside): they read the client's variables
# (client/_core.py), not the server's settings
CLIENT_COMMANDS = {"optuna-grpc", "katib"}
CLIENT_VARS = {"CALIBO_URL", "CALIBO_TOKEN"}


def settings_problems(docs: list[Doc]) -> list[str]:
    """Each ``CALIBO_*`` variable a calibo container sees (its env and its ConfigMaps) is a server setting
    whose literal value the server accepts: the settings ignore unknown variables, so a misspelt name
    would otherwise be dropped without a word. A client command (CLIENT_COMMANDS) sees only the
    client's variables."""
    from pydantic import ValidationError

    from calibo.server.config import Settings

    known = {f"CALIBO_{f.upper()}" for f in Settings.model_fields}
    out = []
    for where, tpl in templates(docs).items():
        for c in containers(tpl["spec"]):
            command = c.get("command") or ["calibo"]
            if command[0] != "calibo":
                continue
            names = {e["name"] for e in c.get("env", [])}
            for src in c.get("envFrom", []):
                if "configMapRef" in src:
                    names |= set(find(docs, "ConfigMap", src["configMapRef"]["name"]).get("data", {}))
            if command[1:2] and command[1] in CLIENT_COMMANDS:
                out += [f"{where} {c['name']}: calibo {command[1]} does not read {var}"
                        for var in sorted(names) if var.startswith("CALIBO_") and var not in CLIENT_VARS]
                continue
            values = {}
            for var in sorted(n for n in names if n.startswith("CALIBO_")):
                if var not in known:
                    out.append(f"{where} {c['name']}: {var} is no setting")
                elif (value := config_value(docs, c, var)) is not None:
                    values[var[len("CALIBO_"):].lower()] = value
            values.setdefault("database_url", "postgresql://calibo@postgres/calibo")  # from a Secret
            try:
                Settings(**values)
            except ValidationError as e:
                out.append(f"{where} {c['name']}: {e.errors()[0]['loc']} {e.errors()[0]['msg']}")
    return out


def test_every_calibo_variable_is_a_setting_the_server_accepts(overlay: tuple[str, list[Doc]]) -> None:
    assert settings_problems(overlay[1]) == []


def test_a_misspelt_or_invalid_setting_is_caught(renders: dict[str, list[Doc]]) -> None:
    docs = copy.deepcopy(renders["standalone"])
    config = next(d for d in docs if d["kind"] == "ConfigMap")
    config["data"]["CALIBO_WORKER_CONCURENCY"] = "2"
    assert any("CALIBO_WORKER_CONCURENCY is no setting" in p for p in settings_problems(docs))
    del config["data"]["CALIBO_WORKER_CONCURENCY"]
    config["data"]["CALIBO_WORKER_MODE"] = "quue"
    assert any("worker_mode" in p for p in settings_problems(docs))


# ------------------------------------------------------------------ the optional components
def component_objects(component: str) -> set[tuple[str, str]]:
    """(kind, name) of what the component adds."""
    docs = yaml.safe_load_all((KUBE / "components" / component / f"{component}.yaml").read_text())
    return {(d["kind"], d["metadata"]["name"]) for d in docs if d}


def test_every_component_is_tested() -> None:
    on_disk = {p.name for p in (KUBE / "components").iterdir() if (p / "kustomization.yaml").exists()}
    assert on_disk == set(COMPONENTS)
    for c in COMPONENTS:
        assert yaml.safe_load((KUBE / "components" / c / "kustomization.yaml").read_text())["kind"] == "Component"


def test_a_component_adds_its_objects_and_changes_nothing_else(
        with_component: tuple[str, str, list[Doc]], renders: dict[str, list[Doc]]) -> None:
    which, component, docs = with_component
    own = component_objects(component)
    assert own and {(d["kind"], d["metadata"]["name"]) for d in docs} >= own
    assert [d for d in docs if (d["kind"], d["metadata"]["name"]) not in own] == renders[which]
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {"calibo"}
    assert all(d["metadata"]["labels"]["app.kubernetes.io/part-of"] == "calibo" for d in docs
               if (d["kind"], d["metadata"]["name"]) in own)


def test_a_component_holds_together_with_every_overlay(with_component: tuple[str, str, list[Doc]]) -> None:
    which, _, docs = with_component
    assert selector_problems(docs) == []
    assert reference_problems(docs, USER_SECRETS[which]) == []
    assert security_problems(docs) == []
    assert settings_problems(docs) == []
    # the component's pods reach no database: PostgreSQL still admits the API and the workers only
    assert postgres_admits(docs)[1] == {"Deployment/calibo-api", "Deployment/calibo-worker"}


def _optuna_grpc(docs: list[Doc]) -> tuple[Doc, Doc]:
    spec = find(docs, "Deployment", "calibo-optuna-grpc")["spec"]["template"]["spec"]
    (c,) = spec["containers"]
    return spec, c


def test_the_optuna_grpc_proxy_serves_behind_its_service_over_the_api(
        component_renders: dict[tuple[str, str], list[Doc]]) -> None:
    from urllib.parse import urlsplit

    from calibo.server.cli import OPTUNA_GRPC_GRACE

    for which in OVERLAYS:
        docs = component_renders[(which, "optuna-grpc")]
        spec, c = _optuna_grpc(docs)
        assert c["command"][:2] == ["calibo", "optuna-grpc"] and "0.0.0.0" in c["command"]
        port = {p["name"]: p["containerPort"] for p in c["ports"]}["grpc"]
        assert c["command"][c["command"].index("--port") + 1] == str(port) == "13000"
        # gRPC, and Optuna's proxy answers no gRPC health service: the probes open the port
        for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
            assert c[probe]["tcpSocket"] == {"port": "grpc"}, probe
        svc = find(docs, "Service", "calibo-optuna-grpc")
        assert selected({"matchLabels": svc["spec"]["selector"]}, docs) == {"Deployment/calibo-optuna-grpc"}
        assert [(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(13000, "grpc")]
        # CALIBO_URL names the API's Service and port
        url = urlsplit(env_value(c, "CALIBO_URL") or "")
        api = find(docs, "Service", url.hostname or "")
        assert selected({"matchLabels": api["spec"]["selector"]}, docs) == {"Deployment/calibo-api"}
        assert url.port in {p["port"] for p in api["spec"]["ports"]}
        # its token from the optional Secret calibo-optuna (no Secret: an API without tokens)
        token = next(e for e in c["env"] if e["name"] == "CALIBO_TOKEN")["valueFrom"]["secretKeyRef"]
        assert token == {"name": "calibo-optuna", "key": "CALIBO_TOKEN", "optional": True}
        # the calls in flight finish after SIGTERM before the kubelet kills it
        assert spec["terminationGracePeriodSeconds"] > OPTUNA_GRPC_GRACE
        assert find(docs, "Deployment", "calibo-optuna-grpc")["spec"]["replicas"] == 1


def test_the_optuna_grpc_proxy_takes_its_port_only_and_reaches_the_api_and_dns_only(
        component_renders: dict[tuple[str, str], list[Doc]]) -> None:
    for which in OVERLAYS:
        docs = component_renders[(which, "optuna-grpc")]
        pol = find(docs, "NetworkPolicy", "calibo-optuna-grpc")["spec"]
        assert selected(pol["podSelector"], docs) == {"Deployment/calibo-optuna-grpc"}
        assert pol["policyTypes"] == ["Ingress", "Egress"]
        (rule,) = pol["ingress"]
        assert rule["ports"] == [{"protocol": "TCP", "port": 13000}]
        assert rule["from"] == [{"namespaceSelector": {}}]  # pods of the cluster, not the world
        api, dns = pol["egress"]
        assert [set(peer) for peer in api["to"]] == [{"podSelector"}]
        assert selected(api["to"][0]["podSelector"], docs) == {"Deployment/calibo-api"}
        assert api["ports"] == [{"protocol": "TCP", "port": 8000}]
        assert {p["port"] for p in dns["ports"]} == {53}
        assert dns["to"][0]["podSelector"] == {"matchLabels": {"k8s-app": "kube-dns"}}


def test_a_client_command_with_a_server_setting_is_caught(
        component_renders: dict[tuple[str, str], list[Doc]]) -> None:
    docs = copy.deepcopy(component_renders[("standalone", "optuna-grpc")])
    _, c = _optuna_grpc(docs)
    c["env"].append({"name": "CALIBO_WORKERS", "value": "2"})
    assert settings_problems(docs) == [
        "Deployment/calibo-optuna-grpc optuna-grpc: calibo optuna-grpc does not read CALIBO_WORKERS"]
