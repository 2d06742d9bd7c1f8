#!/usr/bin/env python3
"""Checks the Helm chart, its dashboard and the Docker build context (run by scripts/lint-deploy.sh).

Every check below fails the run; nothing here needs a cluster or the network:
  1. helm lint --strict (Helm's own linter, through helm-python-sdk) with trial values
     (allowUnauthenticated) and with every values file under helm/querygate/ci/;
  2. values.schema.json accepts both and refuses a set of values that must be refused;
  3. the chart renders trial values, every values file under helm/querygate/ci/ and variants (each
     registry source, autoscaling, hard affinity, open egress), and every manifest validates
     strictly (unknown fields are errors) against the Kubernetes schemas of the oldest
     (1.30) and newest version kubernetes-validate ships; the ServiceMonitor against the
     subset of the prometheus-operator schema in scripts/deploy-lint/;
  4. invariants of the rendered objects: non-root, read-only root filesystem, all capabilities
     dropped, probes, preStop within the grace period, Secrets mounted whole (no subPath, so
     rotation reaches the pod), every credentials env_file inside its tenant's Secret mount,
     selectors of Service, PodDisruptionBudget and NetworkPolicy matching the pods; named ports
     agreeing (probes, Services, NetworkPolicy ingress, the ServiceMonitor scraping a port of a
     Service it selects) and, with adminPort, /metrics scraped on the admin port's own Service;
  5. the rendered querygate configuration is accepted by the querygate binary given with
     --querygate (paths rebased into a scratch folder); for every values file under
     helm/querygate/ci/ the rendering is started with generated Secrets in the pod's mounts
     (scripts/deploy_start.py): the migration Job and the init containers' pulls (from a mock
     registry) succeed, the server serves HTTPS, refuses a request without credentials and
     serves one with a token and one with a client certificate, and is ready; the chart
     refuses to render without authentication and with mounted TLS, client CA or JWT Secrets
     the configuration never reads;
  6. the image's defaults (Dockerfile ENV, VOLUME, CMD) against docs/deployment.md: the registry
     and audit folders where the docs put them, the audit folder a VOLUME, every `docker run`
     example read-only with each writable path a volume or mount, and able to serve the image's
     non-loopback listen (`auth` in its configuration or server.allow_unauthenticated); the
     rendered chart's audit folder in a mounted volume (with 4);
  7. the Grafana dashboard uses only metrics and labels of the contract in docs/deployment.md;
  8. with --context-out DIR: the Docker build context that .dockerignore selects is copied to
     DIR (the caller builds the release binary there).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import deploy_start
import helm_python as helm
import jsonschema
import kubernetes_validate
import yaml

ROOT = Path(__file__).resolve().parent.parent
CHART = ROOT / "helm" / "querygate"
PRODUCTION = CHART / "ci" / "production-values.yaml"
# Values for a trial on a trusted network: the chart refuses to render without authentication
# unless asked by name.
TRIAL: dict[str, Any] = {"allowUnauthenticated": True}
DEPLOYMENT_DOC = ROOT / "docs" / "deployment.md"
SERVICEMONITOR_SCHEMA = ROOT / "scripts" / "deploy-lint" / "servicemonitor.schema.json"
KUBE_VERSIONS = ["1.30.0", "1.37.0"]
RELEASE = "qg"
NAMESPACE = "querygate"

failures: list[str] = []


def fail(message: str) -> None:
    failures.append(message)
    print(f"FAIL {message}")


def ok(message: str) -> None:
    print(f"ok   {message}")


def deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


# --- 1. helm lint -------------------------------------------------------------------------


def lint(name: str, values: dict[str, Any] | None) -> None:
    report = helm.lint(str(CHART), values, strict=True, namespace=NAMESPACE)
    problems = [m for m in report.get("messages", []) if m.get("severity", 0) >= 2]
    problems += [{"path": "", "error": e} for e in report.get("errors") or []]
    for m in report.get("messages", []):
        if m.get("severity", 0) < 2:
            print(f"     lint info ({name}): {m.get('path')}: {m.get('error')}")
    if problems:
        for p in problems:
            fail(f"helm lint ({name}): {p.get('path')}: {p.get('error')}")
    else:
        ok(f"helm lint --strict ({name})")


# --- 2. values schema ---------------------------------------------------------------------

# Values the schema must refuse, each with the reason.
MUST_REFUSE: list[tuple[str, dict[str, Any]]] = [
    ("an unknown top-level key", {"replicas": 3}),
    ("a writable root filesystem", {"securityContext": {"readOnlyRootFilesystem": False}}),
    ("privilege escalation", {"securityContext": {"allowPrivilegeEscalation": True}}),
    ("running as root allowed", {"podSecurityContext": {"runAsNonRoot": False}}),
    ("capabilities not dropped", {"securityContext": {"capabilities": {"drop": ["NET_RAW"]}}}),
    ("a registry claim without a name", {"registry": {"source": "claim", "existingClaim": ""}}),
    ("an unknown registry source", {"registry": {"source": "git"}}),
    ("a provider without a version", {"registry": {"providers": [{"name": "github"}]}}),
    ("a credentials entry without a Secret", {"credentials": {"tenants": [{"tenant": "a", "key": "k"}]}}),
    ("a relative probe path", {"probes": {"readiness": {"path": "readyz"}}}),
    ("a malformed image digest", {"image": {"digest": "sha256:abc"}}),
    ("zero replicas", {"replicaCount": 0}),
    ("a drain without a timeout", {"drain": {"delaySeconds": 5, "timeoutSeconds": 0}}),
    ("an admin port out of range", {"adminPort": 70000}),
    ("metrics on the admin port without one", {"metrics": {"port": "admin"}}),
    ("probes on the admin port without one", {"probes": {"port": "admin"}}),
    ("metrics on a port the chart does not name", {"metrics": {"port": "metrics"}}),
]


def schema_checks(chart: helm.Chart, production: dict[str, Any]) -> None:
    for name, values in [("default values", None), ("production values", production)]:
        try:
            chart.validate_schema(chart.merge_values(values))
            ok(f"values.schema.json accepts the {name}")
        except helm.HelmError as err:
            fail(f"values.schema.json refuses the {name}: {err}")
    for reason, values in MUST_REFUSE:
        try:
            chart.validate_schema(chart.merge_values(values))
            fail(f"values.schema.json accepts {reason}: {json.dumps(values)}")
        except helm.HelmValuesError:
            ok(f"values.schema.json refuses {reason}")


# --- 3. render and validate ---------------------------------------------------------------


def render(chart: helm.Chart, values: dict[str, Any] | None) -> tuple[list[dict[str, Any]], str]:
    rendered = chart.render(values=values, name=RELEASE, namespace=NAMESPACE, is_install=True)
    objects: list[dict[str, Any]] = []
    notes = ""
    for path in sorted(rendered):
        if path.endswith("NOTES.txt"):
            notes = rendered[path]
            continue
        for doc in yaml.safe_load_all(rendered[path]):
            if doc:
                doc["__template"] = path
                objects.append(doc)
    return objects, notes


def validation_canary() -> None:
    """Strict validation with the shipped schemas must refuse an unknown field."""
    bad = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}, "data": {}, "dta": {}}
    for version in KUBE_VERSIONS:
        try:
            kubernetes_validate.validate(bad, version, strict=True)
            fail(f"kubernetes-validate {version} accepts an unknown field: validation would prove nothing")
        except kubernetes_validate.ValidationError:
            pass


def validate_objects(case: str, objects: list[dict[str, Any]]) -> None:
    before = len(failures)
    monitor_schema = json.loads(SERVICEMONITOR_SCHEMA.read_text())
    for obj in objects:
        manifest = {k: v for k, v in obj.items() if k != "__template"}
        label = f"{case}: {obj['kind']}/{obj['metadata']['name']}"
        if obj["apiVersion"] == "monitoring.coreos.com/v1":
            try:
                jsonschema.Draft7Validator(monitor_schema).validate(manifest)
            except jsonschema.ValidationError as err:
                fail(f"{label}: {'.'.join(map(str, err.path))}: {err.message}")
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(manifest, version, strict=True)
            except kubernetes_validate.ValidationError as err:
                fail(f"{label} (Kubernetes {version}): {'.'.join(map(str, err.path))}: {err.message}")
            except kubernetes_validate.SchemaNotFoundError as err:
                fail(f"{label}: no Kubernetes {version} schema: {err.message}")
    if len(failures) == before:
        ok(f"{case}: {len(objects)} manifests valid (strict) against Kubernetes {', '.join(KUBE_VERSIONS)}")


# --- 4. invariants --------------------------------------------------------------------------


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind]


def pod_problems(prefix: str, spec: dict[str, Any]) -> list[str]:
    """Security settings, requests, /tmp and Secret mounts of one pod's containers."""
    problems: list[str] = []
    psc = spec.get("securityContext", {})
    if psc.get("runAsNonRoot") is not True:
        problems.append(f"{prefix}pod securityContext.runAsNonRoot is not true")
    if spec.get("automountServiceAccountToken") is not False:
        problems.append(f"{prefix}the service account token is mounted")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    containers = spec["containers"] + spec.get("initContainers", [])
    for c in containers:
        sc = c.get("securityContext", {})
        if sc.get("readOnlyRootFilesystem") is not True:
            problems.append(f"{prefix}container {c['name']}: root filesystem is writable")
        if sc.get("allowPrivilegeEscalation") is not False:
            problems.append(f"{prefix}container {c['name']}: privilege escalation allowed")
        if "ALL" not in sc.get("capabilities", {}).get("drop", []):
            problems.append(f"{prefix}container {c['name']}: capabilities not all dropped")
        if not c.get("resources", {}).get("requests"):
            problems.append(f"{prefix}container {c['name']}: no resource requests")
        for m in c.get("volumeMounts", []):
            vol = volumes.get(m["name"])
            if vol is None:
                problems.append(f"{prefix}container {c['name']}: mount of undeclared volume {m['name']}")
            elif "secret" in vol and "subPath" in m:
                problems.append(f"{prefix}container {c['name']}: Secret {m['name']} mounted with subPath (rotation would not reach the pod)")
        if "/tmp" not in {m["mountPath"] for m in c.get("volumeMounts", [])}:
            problems.append(f"{prefix}container {c['name']}: no writable /tmp volume")
    return problems


def check_invariants(case: str, objects: list[dict[str, Any]], values: dict[str, Any]) -> None:
    deployments = by_kind(objects, "Deployment")
    if len(deployments) != 1:
        fail(f"{case}: expected one Deployment, got {len(deployments)}")
        return
    dep = deployments[0]
    pod = dep["spec"]["template"]
    spec = pod["spec"]
    pod_labels = pod["metadata"]["labels"]
    problems: list[str] = []

    def matches(selector: dict[str, str]) -> bool:
        return bool(selector) and all(pod_labels.get(k) == v for k, v in selector.items())

    problems += pod_problems("", spec)
    for job in by_kind(objects, "Job"):
        problems += pod_problems(f"Job {job['metadata']['name']}: ", job["spec"]["template"]["spec"])
    for cron in by_kind(objects, "CronJob"):
        problems += pod_problems(f"CronJob {cron['metadata']['name']}: ",
                                 cron["spec"]["jobTemplate"]["spec"]["template"]["spec"])
        if cron["spec"].get("concurrencyPolicy") != "Forbid":
            problems.append(f"CronJob {cron['metadata']['name']}: runs may overlap (concurrencyPolicy is not Forbid)")
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    main = spec["containers"][0]
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        if "httpGet" not in main.get(probe, {}):
            problems.append(f"no HTTP {probe}")
    expected_ready = values.get("probes", {}).get("readiness", {}).get("path", "/readyz")
    if main.get("readinessProbe", {}).get("httpGet", {}).get("path") != expected_ready:
        problems.append(f"readiness probe path is not {expected_ready}")
    sleep = main.get("lifecycle", {}).get("preStop", {}).get("sleep", {}).get("seconds")
    if sleep is None:
        problems.append("no preStop sleep")
    elif sleep >= spec.get("terminationGracePeriodSeconds", 30):
        problems.append("preStop sleep is not shorter than terminationGracePeriodSeconds")
    if "checksum/config" not in pod["metadata"].get("annotations", {}):
        problems.append("no config checksum annotation (a changed config would not roll the pods)")
    autoscaling = values.get("autoscaling", {}).get("enabled", False)
    if autoscaling and "replicas" in dep["spec"]:
        problems.append("Deployment sets replicas while an HPA scales it")
    if bool(by_kind(objects, "HorizontalPodAutoscaler")) != autoscaling:
        problems.append("HorizontalPodAutoscaler present/absent against autoscaling.enabled")
    for svc in by_kind(objects, "Service"):
        if not matches(svc["spec"]["selector"]):
            problems.append(f"Service {svc['metadata']['name']} selects no pod")
    for kind in ("PodDisruptionBudget",):
        for o in by_kind(objects, kind):
            if not matches(o["spec"]["selector"]["matchLabels"]):
                problems.append(f"{kind} selects no pod")
    for o in by_kind(objects, "NetworkPolicy"):
        if not matches(o["spec"]["podSelector"]["matchLabels"]):
            problems.append("NetworkPolicy selects no pod")
    problems += port_problems(objects, main, values)

    config = rendered_config(objects)
    # The grace period covers the preStop sleep and querygate's drain (delay + timeout).
    drain = config.get("server", {}).get("drain", {})
    delay, timeout = seconds(drain.get("delay", "5s")), seconds(drain.get("timeout", "30s"))
    if delay is None or timeout is None:
        problems.append(f"server.drain has durations this check cannot read: {drain}")
    elif (sleep or 0) + delay + timeout > spec.get("terminationGracePeriodSeconds", 30):
        problems.append("terminationGracePeriodSeconds does not cover the preStop sleep and server.drain")
    admin = config.get("server", {}).get("admin_listen")
    if admin:
        ports = {p["name"]: p["containerPort"] for p in main.get("ports", [])}
        if ports.get("admin") != int(admin.rsplit(":", 1)[1]):
            problems.append(f"server.admin_listen {admin} is not the container port named admin")
    # Every credentials env_file is a key of the Secret mounted at its folder.
    mounts = {m["mountPath"]: volumes[m["name"]] for m in main.get("volumeMounts", []) if m["name"] in volumes}
    env_files = [t.get("credentials", {}).get("env_file") for t in config.get("tenants", [])]
    env_files.append(config.get("credentials", {}).get("env_file"))
    for env_file in filter(None, env_files):
        vol = mounts.get(os.path.dirname(env_file))
        if vol is None or "secret" not in vol:
            problems.append(f"credentials env_file {env_file} is not in a mounted Secret")
    # Every file the configuration names inside a mounted Secret is one of its projected keys.
    for path in strings(config):
        folder, name = os.path.split(path)
        vol = mounts.get(folder)
        items = (vol or {}).get("secret", {}).get("items")
        if items is not None and name not in [i["path"] for i in items]:
            problems.append(f"the configuration names {path}, which the Secret mounted there does not hold")
    registry_root = config.get("registry", {}).get("root")
    source = values.get("registry", {}).get("source", "pull")
    if source != "image" and registry_root not in mounts:
        problems.append(f"registry.root {registry_root} is not a mounted volume")
    # The file audit sink writes into the audit volume (the root filesystem is read-only).
    audit = config.get("audit", {})
    if audit.get("enabled", True) and audit.get("sink", "file") != "postgres":
        file = audit.get("file", {})
        folder = file.get("dir") or os.path.dirname(file.get("path", ""))
        if not folder:
            problems.append("the file audit sink has no audit.file.dir or path: it would write under HOME")
        elif not any(folder == m or folder.startswith(m.rstrip("/") + "/") for m in mounts):
            problems.append(f"the audit folder {folder} is not in a mounted volume")

    for p in problems:
        fail(f"{case}: {p}")
    if not problems:
        ok(f"{case}: invariants hold ({len(objects)} objects)")


def port_problems(objects: list[dict[str, Any]], main: dict[str, Any], values: dict[str, Any]) -> list[str]:
    """Named ports: probes, Services, the ServiceMonitor and the NetworkPolicy agree with the
    container's ports, and with adminPort the admin listener is scraped and reachable."""
    problems: list[str] = []
    container_ports = {p["name"] for p in main.get("ports", [])}
    for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
        port = main.get(probe, {}).get("httpGet", {}).get("port")
        if port not in container_ports:
            problems.append(f"{probe} port {port} is not a named container port")
    services = by_kind(objects, "Service")
    for svc in services:
        for p in svc["spec"]["ports"]:
            if p["targetPort"] not in container_ports:
                problems.append(f"Service {svc['metadata']['name']} port {p['name']} targets no container port")
    service_ports = {p["name"]: (svc, p) for svc in services for p in svc["spec"]["ports"]}
    admin_port = int(values.get("adminPort", 0))
    if admin_port:
        svc, port = service_ports.get("admin", (None, None))
        if svc is None:
            problems.append("adminPort is set but no Service has a port named admin")
        elif svc["spec"].get("type", "ClusterIP") != "ClusterIP":
            problems.append(f"the admin port is on Service {svc['metadata']['name']} of type {svc['spec']['type']}")
        elif port["port"] != admin_port or port["targetPort"] != "admin":
            problems.append(f"Service port admin is {port['port']} -> {port['targetPort']}, not {admin_port} -> admin")
    elif "admin" in service_ports:
        problems.append("a Service has a port named admin without adminPort")
    # Every Service port is admitted by some NetworkPolicy ingress rule; the admin port by
    # networkPolicy.adminIngressFrom (ingressFrom when empty).
    policy_values = values.get("networkPolicy", {})
    for policy in by_kind(objects, "NetworkPolicy"):
        rules = policy["spec"].get("ingress", [])
        admitted = {p.get("port") for rule in rules for p in rule.get("ports", [])}
        for name, (_, port) in service_ports.items():
            if port["targetPort"] not in admitted:
                problems.append(f"NetworkPolicy admits nobody to the {name} port")
        peers = policy_values.get("adminIngressFrom") or policy_values.get("ingressFrom") or []
        for rule in rules:
            if any(p.get("port") == "admin" for p in rule.get("ports", [])) and rule.get("from", []) != peers:
                problems.append(f"NetworkPolicy admits {rule.get('from', 'anyone')} to the admin port, not {peers}")
    # The ServiceMonitor scrapes a port of a Service it selects: the admin port when adminPort
    # is set and metrics.port is left empty (it needs no client certificate), plain HTTP there.
    metrics = values.get("metrics", {})
    for monitor in by_kind(objects, "ServiceMonitor"):
        selector = monitor["spec"]["selector"]["matchLabels"]
        selected = [svc for svc in services
                    if all(svc["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())]
        if not selected:
            problems.append("ServiceMonitor selects no Service")
        for endpoint in monitor["spec"]["endpoints"]:
            if not any(endpoint["port"] == p["name"] for svc in selected for p in svc["spec"]["ports"]):
                problems.append(f"ServiceMonitor scrapes port {endpoint['port']}, which no Service it selects has")
            wanted = metrics.get("port") or ("admin" if admin_port else "http")
            if endpoint["port"] != wanted:
                problems.append(f"ServiceMonitor scrapes port {endpoint['port']}, not {wanted}")
            if endpoint["port"] == "admin" and endpoint.get("scheme") != "http":
                problems.append(f"ServiceMonitor scrapes the plain-HTTP admin port with {endpoint.get('scheme')}")
    return problems


def seconds(duration: str) -> float | None:
    """A duration such as `5s`, `2m` or `500ms` in seconds; None when not of that form."""
    match = re.fullmatch(r"(\d+)(ms|s|m|h)", str(duration).strip())
    if not match:
        return None
    return int(match[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[match[2]]


def strings(node: Any) -> list[str]:
    if isinstance(node, str):
        return [node]
    if isinstance(node, dict):
        return [s for v in node.values() for s in strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in strings(v)]
    return []


def rendered_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    for cm in by_kind(objects, "ConfigMap"):
        if "config.yaml" in cm.get("data", {}):
            return yaml.safe_load(cm["data"]["config.yaml"]) or {}
    return {}


# --- 5. the configuration, checked by querygate itself --------------------------------------


def check_config_with_binary(case: str, objects: list[dict[str, Any]], querygate: Path) -> None:
    dep = by_kind(objects, "Deployment")[0]
    main = dep["spec"]["template"]["spec"]["containers"][0]
    volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"].get("volumes", [])}
    config_text = next(cm["data"]["config.yaml"] for cm in by_kind(objects, "ConfigMap") if "config.yaml" in cm.get("data", {}))
    with tempfile.TemporaryDirectory(prefix="querygate-chart-") as scratch:
        scratch_path = Path(scratch)
        # Mount points become folders in the scratch space; mounted Secret keys become files.
        rebased: dict[str, str] = {}
        for m in main.get("volumeMounts", []):
            target = scratch_path / m["mountPath"].lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            rebased[m["mountPath"]] = str(target)
            for item in volumes.get(m["name"], {}).get("secret", {}).get("items", []):
                (target / item["path"]).write_text("# placeholder written by scripts/lint_deploy.py\n")
        text = config_text
        for mount in sorted(rebased, key=len, reverse=True):
            text = text.replace(mount, rebased[mount])
        config_file = scratch_path / "config.yaml"
        config_file.write_text(text)
        env = {k: v for k, v in os.environ.items() if not k.startswith("QUERYGATE_")}
        env["HOME"] = str(scratch_path)
        env["XDG_DATA_HOME"] = str(scratch_path / "xdg")
        for e in main.get("env", []):
            if "value" in e and e["name"] != "QUERYGATE_CONFIG":
                env[e["name"]] = str(e["value"])
        env["QUERYGATE_CONFIG"] = str(config_file)
        result = subprocess.run([str(querygate), "providers"], env=env, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            fail(f"{case}: querygate refuses the rendered configuration (exit {result.returncode}): {result.stderr.strip()}")
        else:
            ok(f"{case}: querygate accepts the rendered configuration")
    # Jobs are configured by environment alone.
    for job in by_kind(objects, "Job"):
        for c in job["spec"]["template"]["spec"]["containers"]:
            with tempfile.TemporaryDirectory(prefix="querygate-job-") as scratch:
                env = {k: v for k, v in os.environ.items() if not k.startswith("QUERYGATE_")}
                env["HOME"] = scratch
                env["XDG_DATA_HOME"] = scratch
                for e in c.get("env", []):
                    if "value" in e:
                        env[e["name"]] = str(e["value"])
                result = subprocess.run([str(querygate), "providers"], env=env, capture_output=True, text=True, timeout=120)
                if result.returncode != 0:
                    fail(f"{case}: Job {job['metadata']['name']}: querygate refuses its environment (exit {result.returncode}): {result.stderr.strip()}")
                else:
                    ok(f"{case}: Job {job['metadata']['name']}: querygate accepts its environment")


# --- 6. the image's defaults and the documented `docker run` ----------------------------------


def dockerfile_run_stage() -> list[tuple[str, str]]:
    """(instruction, arguments) of the Dockerfile's last stage, continuations joined."""
    lines: list[str] = []
    current = ""
    for raw in (ROOT / "Dockerfile").read_text().splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        lines.append(current + line)
        current = ""
    stage: list[tuple[str, str]] = []
    for line in lines:
        instruction, _, rest = line.partition(" ")
        if instruction == "FROM":
            stage = []
        else:
            stage.append((instruction, rest.strip()))
    return stage


def default_audit_dir(env: dict[str, str]) -> str:
    """querygate's default audit folder for `env` (src/audit/location.rs, default_dir)."""
    if env.get("XDG_STATE_HOME"):
        return f"{env['XDG_STATE_HOME'].rstrip('/')}/querygate/audit"
    if env.get("HOME"):
        return f"{env['HOME'].rstrip('/')}/.local/state/querygate/audit"
    return "querygate-audit"


def image_problems(stage: list[tuple[str, str]], doc: str) -> list[str]:
    """The image's defaults against docs/deployment.md: the registry and audit folders where
    the path table puts them, every writable path a declared volume or mounted by each
    `docker run` example, and each example able to serve the image's command (a non-loopback
    listen): with `auth` in its configuration or the explicit opt-out."""
    problems: list[str] = []
    env: dict[str, str] = {}
    volumes: list[str] = []
    cmd: list[str] = []
    for instruction, rest in stage:
        if instruction == "ENV":
            for pair in rest.split():
                key, _, value = pair.partition("=")
                env[key] = value.strip('"')
        elif instruction == "VOLUME":
            volumes += json.loads(rest) if rest.startswith("[") else rest.split()
        elif instruction == "CMD":
            cmd = json.loads(rest)
    documented = re.findall(r"^\| `(/var/lib/querygate/[a-z]+)` \|", doc, re.M)
    audit_doc = next((p for p in documented if p.endswith("/audit")), None)
    registry_doc = next((p for p in documented if p.endswith("/registry")), None)
    if audit_doc is None or registry_doc is None:
        return ["docs/deployment.md: the path table names no /var/lib/querygate/audit or /registry"]
    audit = default_audit_dir(env)
    if audit != audit_doc:
        problems.append(f"the image's default audit folder is {audit}, the docs say {audit_doc}")
    registry = f"{env.get('XDG_DATA_HOME', env.get('HOME', '') + '/.local/share').rstrip('/')}/querygate/registry"
    if registry != registry_doc:
        problems.append(f"the image's default registry is {registry}, the docs say {registry_doc}")
    if audit_doc not in volumes:
        problems.append(f"{audit_doc} is not a VOLUME of the image: a read-only run cannot write audit records")
    listen = cmd[cmd.index("--listen") + 1] if "--listen" in cmd else ""
    loopback = listen.startswith("127.") or listen.startswith("localhost:") or listen.startswith("[::1]")
    blocks = re.findall(r"```sh\n(.*?)```", doc, re.S)
    runs = [(b, b.replace("\\\n", " ")) for b in blocks if "docker run" in b]
    if not runs:
        problems.append("docs/deployment.md has no docker run example")
    for block, run in runs:
        words = run.split()
        label = "docker run " + " ".join(w for w in words if w.startswith("-e") or "QUERYGATE" in w)
        if "--read-only" not in words or "--tmpfs" not in words:
            problems.append(f"{label}: not the documented read-only run (--read-only --tmpfs /tmp)")
        mounted = [w.strip('"').split(":")[1] for i, w in enumerate(words) if i and words[i - 1] == "-v"]
        for path in documented:
            if path not in volumes and path not in mounted:
                problems.append(f"{label}: {path} is neither a VOLUME nor mounted")
        if loopback:
            continue
        opted_out = "QUERYGATE_SERVER__ALLOW_UNAUTHENTICATED=true" in words
        config = "QUERYGATE_CONFIG=" in run
        after = doc.split(block, 1)[1]
        following = re.search(r"```yaml\n(.*?)```", after, re.S)
        with_auth = config and following is not None and re.search(r"^auth:", following.group(1), re.M)
        if not (opted_out or with_auth):
            problems.append(f"{label}: the image listens on {listen}, and the example has neither auth "
                            "nor server.allow_unauthenticated: it exits 2")
    return problems


def check_image() -> None:
    stage = dockerfile_run_stage()
    doc = DEPLOYMENT_DOC.read_text()
    problems = image_problems(stage, doc)
    # The checker must catch the defaults this check exists for before it is trusted.
    old = [(i, r.replace("XDG_STATE_HOME=/var/lib", "")) if i == "ENV" else (i, r)
           for i, r in stage if i != "VOLUME"]
    canary = image_problems(old, doc.replace("QUERYGATE_SERVER__ALLOW_UNAUTHENTICATED=true", ""))
    if not any("default audit folder" in p for p in canary) or not any("VOLUME" in p for p in canary) \
            or not any("exits 2" in p for p in canary):
        fail(f"image: the checker misses problems of a canary Dockerfile: {canary}")
    for p in problems:
        fail(f"image: {p}")
    if not problems:
        ok("image: registry and audit defaults as documented, audit on a VOLUME, "
           "every docker run example read-only and able to serve the image's command")


# --- 7. dashboard against the metric contract -------------------------------------------------


def metric_contract() -> dict[str, tuple[str, set[str]]]:
    """`| `name` | type | `l1`, `l2` | … |` rows of docs/deployment.md's metric table."""
    contract: dict[str, tuple[str, set[str]]] = {}
    row = re.compile(r"^\|\s*`(querygate_[a-z0-9_]+)`\s*\|\s*(counter|gauge|histogram)\s*\|([^|]*)\|")
    for line in DEPLOYMENT_DOC.read_text().splitlines():
        m = row.match(line)
        if m:
            contract[m.group(1)] = (m.group(2), set(re.findall(r"`([a-z_]+)`", m.group(3))))
    return contract


def check_dashboard() -> None:
    contract = metric_contract()
    if not contract:
        fail("docs/deployment.md has no metric table")
        return
    # The checker must catch a wrong metric, label and grouping before it is trusted.
    canary = 'sum by (provider) (rate(querygate_tool_calls_total{verb="x"}[5m])) + querygate_nope'
    if len(expr_problems([canary], contract, set())) != 3:
        fail("dashboard: the checker misses problems in a canary query")
    dashboard = json.loads((CHART / "dashboards" / "querygate.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    used: set[str] = set()
    problems = expr_problems(exprs, contract, used)
    for p in problems:
        fail(f"dashboard: {p}")
    unused = sorted(set(contract) - used)
    if not problems:
        ok(f"dashboard: {len(exprs)} queries use only the {len(contract)} contract metrics"
           + (f" (not charted: {', '.join(unused)})" if unused else ""))


def expr_problems(exprs: list[str], contract: dict[str, tuple[str, set[str]]], used: set[str]) -> list[str]:
    """Metrics, label matchers and grouping labels in PromQL `exprs` outside the contract."""
    problems: list[str] = []
    for expr in exprs:
        allowed: set[str] = set()
        for name, selector in re.findall(r"(querygate_[a-z0-9_]+)(\{[^}]*\})?", expr):
            base = name
            for suffix in ("_bucket", "_sum", "_count"):
                if name.endswith(suffix) and name[: -len(suffix)] in contract:
                    base = name[: -len(suffix)]
            if base not in contract:
                problems.append(f"unknown metric {name} in {expr}")
                continue
            used.add(base)
            kind, labels = contract[base]
            if base != name and kind != "histogram":
                problems.append(f"{name}: {base} is a {kind}, not a histogram")
            own = labels | ({"le"} if name.endswith("_bucket") else set())
            allowed |= own
            for label in re.findall(r"([a-z_]+)\s*(?:=~|!~|!=|=)", selector or ""):
                if label not in own:
                    problems.append(f"label {label} is not a label of {base}")
        for group in re.findall(r"by \(([^)]*)\)", expr):
            for label in (g.strip() for g in group.split(",")):
                if label and label not in allowed:
                    problems.append(f"grouping label {label} is not a label of the metrics in {expr}")
    return problems


# --- 8. the Docker build context --------------------------------------------------------------


def dockerignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    patterns = []
    for raw in (ROOT / ".dockerignore").read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        line = line[1:] if negate else line
        line = os.path.normpath(line.strip("/"))
        regex = ""
        i = 0
        while i < len(line):
            if line.startswith("**", i):
                regex += ".*"
                i += 2
            elif line[i] == "*":
                regex += "[^/]*"
                i += 1
            elif line[i] == "?":
                regex += "[^/]"
                i += 1
            else:
                regex += re.escape(line[i])
                i += 1
        patterns.append((negate, re.compile(f"^{regex}$")))
    return patterns


def excluded(rel: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parents decides."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for negate, pattern in patterns:
        if any(pattern.match(p) for p in prefixes):
            result = not negate
    return result


def copy_context(destination: Path) -> None:
    patterns = dockerignore_patterns()
    if destination.exists():
        shutil.rmtree(destination)
    destination.mkdir(parents=True)
    count = 0
    for dirpath, dirnames, filenames in os.walk(ROOT):
        rel_dir = os.path.relpath(dirpath, ROOT)
        rel_dir = "" if rel_dir == "." else rel_dir
        # Never descend into build output or git metadata (both excluded by .dockerignore).
        dirnames[:] = [d for d in dirnames if not (rel_dir == "" and d in ("target", ".git"))]
        for name in filenames:
            rel = f"{rel_dir}/{name}" if rel_dir else name
            if not excluded(rel, patterns):
                target = destination / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, target)
                count += 1
    # What cargo and build.rs read (migrations/ once the repository has it), the engine's
    # workspace crate included.
    for must in ("Cargo.toml", "Cargo.lock", "build.rs", "src/main.rs", "content", "migrations",
                 "crates/engine/Cargo.toml", "crates/engine/src/lib.rs"):
        if (ROOT / must).exists() and not (destination / must).exists():
            fail(f"docker context: {must} is excluded by .dockerignore")
    for never in ("target", ".git", "helm", "docs"):
        if (destination / never).exists():
            fail(f"docker context: {never} is not excluded by .dockerignore")
    ok(f"docker context: {count} files copied to {destination}")


# --- main --------------------------------------------------------------------------------------

VARIANTS: list[tuple[str, dict[str, Any]]] = [
    ("registry from a claim", {"registry": {"source": "claim", "existingClaim": "querygate-providers"}}),
    ("registry baked into the image, audit in PostgreSQL",
     {"registry": {"source": "image"}, "audit": {"volume": {"enabled": False}},
      "config": {"audit": {"sink": "postgres"}}, "database": {"urlSecret": {"secretName": "qg-db"}}}),
    ("autoscaling, hard anti-affinity, open egress, no PDB",
     {"autoscaling": {"enabled": True}, "affinity": {"podAntiAffinity": "hard"},
      "networkPolicy": {"allowAllEgress": True}, "podDisruptionBudget": {"enabled": False}}),
    ("readiness on /healthz, default tenant credentials",
     {"probes": {"readiness": {"path": "/healthz"}},
      "credentials": {"tenants": [{"tenant": "default", "secretName": "qg-default", "key": "credentials.env"}]}}),
    ("probes and metrics on the admin port, a LoadBalancer Service",
     {"adminPort": 9090, "probes": {"port": "admin", "scheme": "HTTP"},
      "metrics": {"scheme": "", "serviceMonitor": {"enabled": True}},
      "service": {"type": "LoadBalancer"},
      "networkPolicy": {"ingressFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "ai-agents"}}}],
                        "adminIngressFrom": [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]}}),
    ("metrics on the main port beside an admin port",
     {"adminPort": 9090, "metrics": {"port": "http", "serviceMonitor": {"enabled": True}}}),
]

# Values the schema admits but the chart must refuse to render, and what its message says.
REFUSED_RENDERS: list[tuple[str, dict[str, Any], str]] = [
    ("a grace period shorter than the drain", {**TRIAL, "terminationGracePeriodSeconds": 100},
     "must cover lifecycle.preStopSleepSeconds + drain.delaySeconds + drain.timeoutSeconds"),
    ("a preStop sleep shorter than the drain delay", {**TRIAL, "lifecycle": {"preStopSleepSeconds": 2}},
     "must be at least drain.delaySeconds"),
    ("the admin port on the main port", {**TRIAL, "adminPort": 8765}, "adminPort must differ from containerPort"),
    ("approval keys without the postgres approval store",
     {**TRIAL, "approvalKeys": {"secretName": "qg-approval", "keys": ["k1"]}},
     "need config.approval.store: postgres"),
    ("the default values: 0.0.0.0 without authentication", {},
     "would serve 0.0.0.0 without authentication"),
    ("allowUnauthenticated false with no auth", {"allowUnauthenticated": False, "tls": {"secretName": "qg-tls"}},
     "would serve 0.0.0.0 without authentication"),
    ("a JWT Secret no issuer reads", {"allowUnauthenticated": True, "jwt": {"secretName": "qg-jwt"}},
     "no config.auth.jwt.issuers[].public_keys names a file in it"),
    ("a TLS Secret beside other certificate files",
     {"allowUnauthenticated": True, "tls": {"secretName": "qg-tls"},
      "config": {"server": {"tls": {"cert_file": "/elsewhere/tls.crt", "key_file": "/elsewhere/tls.key"}}}},
     "config.server.tls names other files"),
    ("a client CA Secret without TLS",
     {"allowUnauthenticated": True, "tls": {"clientCA": {"secretName": "qg-ca"}}}, "tls.clientCA.secretName needs TLS"),
    ("a client CA Secret beside another CA file",
     {"allowUnauthenticated": True, "tls": {"secretName": "qg-tls", "clientCA": {"secretName": "qg-ca"}},
      "config": {"server": {"tls": {"client_ca_file": "/elsewhere/ca.crt"}}}},
     "config.server.tls.client_ca_file is /elsewhere/ca.crt"),
]


def start_with_lock(chart: helm.Chart, name: str, values: dict[str, Any], objects: list[dict[str, Any]],
                    querygate: Path) -> None:
    """Starts the example (scripts/deploy_start.py); then again with the providers.lock its
    pulls wrote mounted as registry.lock (every replica of a fleet checks its documents
    against it), and with that lock's first digest changed, which the init containers must
    refuse."""
    problems, lock_text = deploy_start.start_check(name, objects, querygate, ok)
    for problem in problems:
        fail(problem)
    if problems or not lock_text or values.get("registry", {}).get("lock"):
        return
    locked = deep_merge(values, {"registry": {"lock": lock_text}})
    problems, _ = deploy_start.start_check(f"{name} with registry.lock", render(chart, locked)[0], querygate, ok)
    for problem in problems:
        fail(problem)
    lock = json.loads(lock_text)
    first = sorted(lock["providers"])[0]
    document = sorted(lock["providers"][first]["documents"])[0]
    lock["providers"][first]["documents"][document] = "sha256:" + "0" * 64
    tampered = deep_merge(values, {"registry": {"lock": json.dumps(lock, indent=2)}})
    problems, _ = deploy_start.start_check(f"{name} with a lock its packages differ from", render(chart, tampered)[0],
                                           querygate, ok, expect_refused_pull=f"{document} has another digest")
    for problem in problems:
        fail(problem)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--querygate", type=Path, help="querygate binary that checks the rendered configuration")
    parser.add_argument("--context-out", type=Path, help="copy the Docker build context here")
    parser.add_argument("--render-out", type=Path, help="write the rendered manifests here")
    parser.add_argument("--only-context", action="store_true", help="only copy the Docker build context")
    parser.add_argument("--only-image", action="store_true", help="only check the image's defaults against the docs")
    args = parser.parse_args()
    if args.only_image:
        check_image()
        return 1 if failures else 0
    if args.only_context:
        if not args.context_out:
            parser.error("--only-context needs --context-out")
        copy_context(args.context_out)
        return 1 if failures else 0

    helm.disable_logging()
    print(f"helm-python-sdk {helm.__version__} (Helm {helm.helm_sdk_version()}), "
          f"kubernetes-validate {kubernetes_validate.__version__}, Kubernetes schemas {', '.join(KUBE_VERSIONS)}")
    production = yaml.safe_load(PRODUCTION.read_text())
    validation_canary()
    examples = [(f"ci/{f.name}", yaml.safe_load(f.read_text())) for f in sorted((CHART / "ci").glob("*.yaml"))]
    lint("trial values", TRIAL)
    for name, values in examples:
        lint(name, values)
    with helm.Chart.load(str(CHART)) as chart:
        schema_checks(chart, production)
        cases = [("trial values", TRIAL)] + examples
        cases += [(name, deep_merge(TRIAL, v)) for name, v in VARIANTS]
        for name, values in cases:
            try:
                objects, notes = render(chart, values or None)
            except helm.HelmError as err:
                fail(f"{name}: render failed: {err}")
                continue
            if not notes.strip():
                fail(f"{name}: NOTES.txt renders empty")
            validate_objects(name, objects)
            merged = deep_merge(chart.values, values)
            check_invariants(name, objects, merged)
            if args.querygate:
                check_config_with_binary(name, objects, args.querygate)
                if name.startswith("ci/"):
                    start_with_lock(chart, name, values, objects, args.querygate)
            if args.render_out:
                out = args.render_out / re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
                out.mkdir(parents=True, exist_ok=True)
                clean = [{k: v for k, v in o.items() if k != "__template"} for o in objects]
                (out / "manifests.yaml").write_text(yaml.safe_dump_all(clean, sort_keys=False))
        for name, values, message in REFUSED_RENDERS:
            try:
                render(chart, values)
                fail(f"the chart renders {name}")
            except helm.HelmError as err:
                if message in str(err):
                    ok(f"the chart refuses {name}")
                else:
                    fail(f"{name}: refused for another reason: {err}")
        kinds = sorted({o["kind"] for o in render(chart, production)[0]})
        ok(f"production example renders {', '.join(kinds)}")
    check_dashboard()
    check_image()
    if failures:
        print(f"\n{len(failures)} deployment check(s) failed", file=sys.stderr)
        return 1
    print("\nall deployment checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
