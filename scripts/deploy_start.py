"""Starts what a rendered chart would run, on 127.0.0.1 (used by scripts/lint_deploy.py).

For one rendering of the chart: every volume the server's pod mounts becomes a folder of a
scratch space holding what the pod would see there, no more and no less (the ConfigMap's
configuration, generated Secrets: a TLS server certificate of a CA made here, the client CA, an
RSA key of the JWT issuer, tenants' credential files, the approval key ring, the URL of a fresh
PostgreSQL database); paths in the configuration are rebased into it, and only the listen
addresses (127.0.0.1, free ports), the Host names allowed for them and the registry URL (a mock
registry here) are changed. Then, as the cluster would: the migration Job's command with its own
environment and mounts, each CronJob's command once (its ConfigMap mount holding the server's
configuration), each init container's command with its environment and the pod's mounts,
and the server. Checked: the init containers succeed, the server listens with TLS (its
certificate verified against the CA), refuses an MCP request without credentials (401), serves
one with a token of the configured issuer and one with a client certificate of a configured
identity, and is ready. The mock registry signs its packages as StackQL does, with a key
made here whose certificate the configuration is given in `registry.trusted_certificates`.

Needs openssl and, for configurations with a database, QUERYGATE_TEST_DATABASE_URL (an admin URL,
as scripts/pg-test-cluster.sh gives) and QUERYGATE_TEST_PG_BIN (for psql).
"""

from __future__ import annotations

import base64
import http.client
import http.server
import io
import json
import os
import re
import secrets
import socket
import ssl
import subprocess
import tarfile
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import yaml

ROOT = Path(__file__).resolve().parent.parent
FIXTURE_PROVIDER = ROOT / "tests" / "fixtures" / "registry" / "src" / "testapi" / "v1"

Report = Callable[[str], None]

# Package folders of StackQL's layout that differ from the provider's name (as
# crates/engine/src/remote/index.rs has them).
FOLDER_ALIASES = {"google": "googleapis.com"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def openssl(*args: str, cwd: Path, stdin: bytes | None = None) -> bytes:
    result = subprocess.run(["openssl", *args], cwd=cwd, input=stdin, capture_output=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)}: {result.stderr.decode(errors='replace')}")
    return result.stdout


class Material:
    """Keys and certificates made for one start: a CA for the server, a client CA with one
    client certificate per SPIFFE id, and the JWT issuer's RSA key."""

    def __init__(self, work: Path, client_ids: list[str]) -> None:
        self.work = work
        work.mkdir(parents=True, exist_ok=True)
        self.ca_key, self.ca_cert = self._ca("server-ca", "querygate test server CA")
        self.server_key = work / "server.key"
        self.server_cert = work / "server.crt"
        self._leaf(self.server_key, self.server_cert, "server-ca", "querygate",
                   "subjectAltName=IP:127.0.0.1,DNS:localhost")
        self.client_ca_key, self.client_ca_cert = self._ca("client-ca", "querygate test client CA")
        self.clients: dict[str, tuple[Path, Path]] = {}
        for n, uri in enumerate(client_ids):
            key, cert = work / f"client-{n}.key", work / f"client-{n}.crt"
            self._leaf(key, cert, "client-ca", f"agent-{n}", f"subjectAltName=URI:{uri}")
            self.clients[uri] = (key, cert)
        # The mock registry's signing key and certificate (Ed25519, as StackQL signs).
        self.signing_key = work / "signing.key"
        self.signing_cert = work / "signing.crt"
        openssl("genpkey", "-algorithm", "ed25519", "-out", str(self.signing_key), cwd=work)
        openssl("req", "-x509", "-key", str(self.signing_key), "-out", str(self.signing_cert), "-days", "2",
                "-subj", "/CN=querygate chart check registry", "-addext", "keyUsage=critical,digitalSignature",
                cwd=work)
        self.jwt_key = work / "jwt.key"
        openssl("genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", str(self.jwt_key), cwd=work)
        self.jwt_public = openssl("pkey", "-in", str(self.jwt_key), "-pubout", cwd=work)

    def _ca(self, name: str, subject: str) -> tuple[Path, Path]:
        key, cert = self.work / f"{name}.key", self.work / f"{name}.crt"
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={subject}",
                "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign",
                cwd=self.work)
        return key, cert

    def _leaf(self, key: Path, cert: Path, ca: str, cn: str, san: str) -> None:
        csr = self.work / f"{key.stem}.csr"
        openssl("req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={cn}", cwd=self.work)
        ext = self.work / f"{key.stem}.ext"
        ext.write_text(f"{san}\nbasicConstraints=CA:FALSE\n")
        openssl("x509", "-req", "-in", str(csr), "-CA", str(self.work / f"{ca}.crt"),
                "-CAkey", str(self.work / f"{ca}.key"), "-CAcreateserial", "-out", str(cert),
                "-days", "1", "-extfile", str(ext), cwd=self.work)

    def sign(self, document: bytes) -> bytes:
        """The `.sig` file of `document` as StackQL's signer writes it: base64 of the signing
        time (Go's binary time: version 1, seconds since year 1, nanoseconds, UTC) and the
        Ed25519 signature of the document followed by that time."""
        now = time.time()
        seconds, nanos = int(now), int((now % 1) * 1e9)
        at = bytes([1]) + (seconds + 62135596800).to_bytes(8, "big", signed=True) + \
            nanos.to_bytes(4, "big", signed=True) + (-1).to_bytes(2, "big", signed=True)
        message = self.work / "message"
        message.write_bytes(document + at)
        signature = openssl("pkeyutl", "-sign", "-inkey", str(self.signing_key), "-rawin", "-in", str(message),
                            cwd=self.work)
        return base64.b64encode(at + signature)

    def token(self, issuer: str, audience: str, subject: str, tenant: str) -> str:
        now = int(time.time())
        header = b64url(json.dumps({"alg": "RS256", "typ": "JWT"}).encode())
        claims = b64url(json.dumps({"iss": issuer, "aud": audience, "sub": subject, "tenant": tenant,
                                    "iat": now, "exp": now + 600}).encode())
        signed = f"{header}.{claims}".encode()
        signature = openssl("dgst", "-sha256", "-sign", str(self.jwt_key), cwd=self.work, stdin=signed)
        return f"{header}.{claims}.{b64url(signature)}"


class MockRegistry:
    """A registry in StackQL's layout on 127.0.0.1 publishing each (name, version) asked for, a
    package made of the fixture provider under that name."""

    def __init__(self, packages: list[tuple[str, str]], sign: Callable[[bytes], bytes]) -> None:
        self.files: dict[str, bytes] = {}
        index: dict[str, Any] = {"providers": {}}
        for name, version in packages:
            index["providers"].setdefault(name, {"versions": []})["versions"].append(version)
            folder = FOLDER_ALIASES.get(name, name)
            self.files[f"/providers/dist/{folder}/{version}.tgz"] = package(name, version, sign)
        self.files["/providers/dist/providers.yaml"] = yaml.safe_dump(index).encode()
        self.requests: list[str] = []
        files, seen = self.files, self.requests

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
                seen.append(self.path)
                body = files.get(self.path)
                self.send_response(200 if body is not None else 404)
                self.send_header("content-length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def log_message(self, *_: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/providers"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def package(name: str, version: str, sign: Callable[[bytes], bytes]) -> bytes:
    """A provider package (`<version>/provider.yaml`, `<version>/services/*.yaml`) of the fixture
    provider, renamed, each document with its `.sig` made by `sign`."""
    provider = yaml.safe_load((FIXTURE_PROVIDER / "provider.yaml").read_text())
    provider["id"] = provider["name"] = name
    provider["version"] = version
    services = {}
    for key, entry in list(provider["providerServices"].items()):
        ref = entry["service"]["$ref"].rsplit("/", 1)[-1]
        if not (FIXTURE_PROVIDER / "services" / ref).exists():
            del provider["providerServices"][key]
            continue
        entry["service"]["$ref"] = f"{name}/{version}/services/{ref}"
        services[ref] = (FIXTURE_PROVIDER / "services" / ref).read_bytes()
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        def add(path: str, data: bytes | None) -> None:
            info = tarfile.TarInfo(path)
            if data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
        add(f"{version}/", None)
        provider_yaml = yaml.safe_dump(provider, sort_keys=False).encode()
        add(f"{version}/provider.yaml", provider_yaml)
        add(f"{version}/provider.yaml.sig", sign(provider_yaml))
        add(f"{version}/services/", None)
        for ref, data in services.items():
            add(f"{version}/services/{ref}", data)
            add(f"{version}/services/{ref}.sig", sign(data))
    return out.getvalue()


def fresh_database(admin_url: str, pg_bin: str) -> tuple[str, Callable[[], None]]:
    name = f"qg_chart_{secrets.token_hex(6)}"
    psql = str(Path(pg_bin) / "psql")
    subprocess.run([psql, admin_url, "-qc", f"CREATE DATABASE {name}"], check=True, capture_output=True, timeout=60)
    base, _, _ = admin_url.rpartition("/")
    url = f"{base}/{name}"

    def drop() -> None:
        subprocess.run([psql, admin_url, "-qc", f"DROP DATABASE IF EXISTS {name} WITH (FORCE)"],
                       capture_output=True, timeout=60)

    return url, drop


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [o for o in objects if o.get("kind") == kind]


def rebase(text: str, mounts: dict[str, Path]) -> str:
    """`text` with each absolute path under a mount point moved into that mount's folder, in
    one pass (a scratch folder may itself lie under a mount point such as /tmp)."""
    if not mounts:
        return text
    pattern = "|".join(re.escape(m) for m in sorted(mounts, key=len, reverse=True))
    return re.sub(rf"(?<![\w.-])({pattern})(?=/|$|[^\w.-])", lambda m: str(mounts[m.group(1)]), text, flags=re.M)


def process_env(container: dict[str, Any], mounts: dict[str, Path], scratch: Path) -> dict[str, str]:
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(scratch), "XDG_DATA_HOME": str(scratch / "xdg")}
    for e in container.get("env", []):
        if "value" in e:
            env[e["name"]] = rebase(str(e["value"]), mounts)
    return env


class Start:
    """One start of a rendering; `problems` lists what failed."""

    def __init__(self, case: str, objects: list[dict[str, Any]], querygate: Path, ok: Report) -> None:
        self.case, self.objects, self.querygate, self.ok = case, objects, querygate, ok
        self.problems: list[str] = []
        self.cleanups: list[Callable[[], None]] = []
        # The providers.lock the init containers' pulls left in the registry folder.
        self.lock_text: str | None = None
        # Whether the init containers are expected to be refused (a lock they must not pass).
        self.expect_refused_pull: str | None = None

    def fail(self, message: str) -> None:
        self.problems.append(f"{self.case}: {message}")

    def run(self) -> list[str]:
        try:
            with tempfile.TemporaryDirectory(prefix="querygate-start-") as scratch:
                self._run(Path(scratch))
        except Exception as err:  # a broken step fails the check, with what broke
            self.fail(f"the start check broke: {err}")
        finally:
            for cleanup in reversed(self.cleanups):
                cleanup()
        return self.problems

    def _run(self, scratch: Path) -> None:
        deployment = by_kind(self.objects, "Deployment")[0]
        pod = deployment["spec"]["template"]["spec"]
        main = pod["containers"][0]
        config = yaml.safe_load(next(cm["data"]["config.yaml"] for cm in by_kind(self.objects, "ConfigMap")
                                     if "config.yaml" in cm.get("data", {})))
        auth = config.get("auth") or {}
        identities = list(((auth.get("mtls") or {}).get("identities") or {}).keys())
        spiffe = [i[len("uri:"):] for i in identities if i.startswith("uri:")]
        material = Material(scratch / "material", spiffe)
        database_url = None
        if "database" in config:
            admin, pg_bin = os.environ.get("QUERYGATE_TEST_DATABASE_URL"), os.environ.get("QUERYGATE_TEST_PG_BIN")
            if not (admin and pg_bin):
                if os.environ.get("CI") == "true":
                    self.fail("QUERYGATE_TEST_DATABASE_URL and QUERYGATE_TEST_PG_BIN are needed under CI=true")
                else:
                    print(f"note {self.case}: no PostgreSQL (QUERYGATE_TEST_DATABASE_URL): start check skipped")
                return
            database_url, drop = fresh_database(admin, pg_bin)
            self.cleanups.append(drop)
        providers = [(c["args"][2], c["args"][3]) for c in pod.get("initContainers", [])
                     if c.get("args", [])[:2] == ["registry", "pull"]]
        registry = MockRegistry(providers, material.sign)
        self.cleanups.append(registry.close)

        # The pod's volumes, as folders holding what the pod would see.
        pod_root = scratch / "pod"
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounts: dict[str, Path] = {}
        for m in main.get("volumeMounts", []):
            target = pod_root / m["mountPath"].lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            mounts[m["mountPath"]] = target
            self._fill(volumes[m["name"]], m["mountPath"], target, config, material, database_url)
        port, admin_port = free_port(), free_port()
        server = config.setdefault("server", {})
        server["listen"] = f"127.0.0.1:{port}"
        if "admin_listen" in server:
            server["admin_listen"] = f"127.0.0.1:{admin_port}"
        server.setdefault("allowed_hosts", []).append(f"127.0.0.1:{port}")
        config.setdefault("registry", {})["url"] = registry.url
        config_mount = next(m["mountPath"] for m in main["volumeMounts"] if m["name"] == "config")
        config_map = next(cm for cm in by_kind(self.objects, "ConfigMap") if "config.yaml" in cm.get("data", {}))
        for key, text in config_map["data"].items():
            (mounts[config_mount] / key).write_text(text)
        rebased = yaml.safe_load(rebase(yaml.safe_dump(config, sort_keys=False), mounts))
        # The certificate the mock registry signs its packages with (a private registry's, as
        # registry.trusted_certificates names one): outside the pod's mounts, added after the
        # rebase.
        rebased["registry"]["trusted_certificates"] = [str(material.signing_cert)]
        (mounts[config_mount] / "config.yaml").write_text(yaml.safe_dump(rebased, sort_keys=False))

        for job in by_kind(self.objects, "Job"):
            if not self._job(job, scratch, database_url):
                return
        config_text = (mounts[config_mount] / "config.yaml").read_text()
        for cron in by_kind(self.objects, "CronJob"):
            if not self._cron(cron, scratch, database_url, config_text):
                return
        for init in pod.get("initContainers", []):
            if sorted(map(json.dumps, init.get("volumeMounts", []))) != sorted(map(json.dumps, main.get("volumeMounts", []))):
                self.fail(f"init container {init['name']} mounts other volumes than the server")
            result = subprocess.run([str(self.querygate), *init["args"]], env=process_env(init, mounts, scratch),
                                    cwd=scratch, capture_output=True, text=True, timeout=120)
            if self.expect_refused_pull is not None:
                said = result.stdout + result.stderr
                if result.returncode != 0 and self.expect_refused_pull in said:
                    self.ok(f"{self.case}: init container {init['name']} refuses a package that differs from the lock")
                else:
                    self.fail(f"init container {init['name']} was not refused as expected (exit {result.returncode}): {said.strip()[-1500:]}")
                return
            if result.returncode != 0:
                self.fail(f"init container {init['name']} fails (exit {result.returncode}): {(result.stdout + result.stderr).strip()[-2000:]}")
                return
            self.ok(f"{self.case}: init container {init['name']} pulls from the mock registry")
        registry_mount = config.get("registry", {}).get("root")
        for mount, folder in mounts.items():
            if registry_mount and rebase(registry_mount, mounts) == str(folder):
                lock = folder / "providers.lock"
                self.lock_text = lock.read_text() if lock.exists() else None
        self._serve(main, mounts, scratch, config, material, port, admin_port)

    def _fill(self, volume: dict[str, Any], mount: str, target: Path, config: dict[str, Any],
              material: Material, database_url: str | None) -> None:
        """Writes what the Secret or ConfigMap of `volume` holds; emptyDirs stay empty."""
        name = volume["name"]
        items = [i["path"] for i in volume.get("secret", {}).get("items", [])]
        if "secret" not in volume:
            return
        if name == "tls":
            (target / "tls.crt").write_bytes(material.server_cert.read_bytes())
            (target / "tls.key").write_bytes(material.server_key.read_bytes())
        elif name == "client-ca":
            for item in items:
                (target / item).write_bytes(material.client_ca_cert.read_bytes())
        elif name == "jwt":
            issuers = ((config.get("auth") or {}).get("jwt") or {}).get("issuers") or []
            for issuer in issuers:
                for file in issuer.get("public_keys") or []:
                    if file.startswith(mount + "/"):
                        (target / file[len(mount) + 1:]).write_bytes(material.jwt_public)
        elif name == "database-url":
            for item in items:
                (target / item).write_text(database_url or "")
        elif name == "approval-keys":
            for item in items:
                (target / item).write_text(base64.b64encode(secrets.token_bytes(48)).decode())
        elif name.startswith("credentials-"):
            for item in items:
                (target / item).write_text("EXAMPLE_TOKEN=chart-start-check\n")
        else:
            self.fail(f"the start check has no content for Secret volume {name}")

    def _job(self, job: dict[str, Any], scratch: Path, database_url: str | None) -> bool:
        spec = job["spec"]["template"]["spec"]
        container = spec["containers"][0]
        root = scratch / f"job-{job['metadata']['name']}"
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        mounts: dict[str, Path] = {}
        for m in container.get("volumeMounts", []):
            target = root / m["mountPath"].lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            mounts[m["mountPath"]] = target
            for item in volumes[m["name"]].get("secret", {}).get("items", []):
                (target / item["path"]).write_text(database_url or "")
        result = subprocess.run([str(self.querygate), *container["args"]], env=process_env(container, mounts, root),
                                cwd=root, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            self.fail(f"Job {job['metadata']['name']} fails (exit {result.returncode}): {result.stderr.strip()}")
            return False
        self.ok(f"{self.case}: Job {job['metadata']['name']} runs")
        return True

    def _cron(self, cron: dict[str, Any], scratch: Path, database_url: str | None, config_text: str) -> bool:
        """Runs a CronJob's command once, as its Job would: its ConfigMap mount holds the
        configuration the server runs, its Secret mounts the database URL."""
        name = cron["metadata"]["name"]
        spec = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        container = spec["containers"][0]
        root = scratch / f"cronjob-{name}"
        volumes = {v["name"]: v for v in spec.get("volumes", [])}
        mounts: dict[str, Path] = {}
        for m in container.get("volumeMounts", []):
            target = root / m["mountPath"].lstrip("/")
            target.mkdir(parents=True, exist_ok=True)
            mounts[m["mountPath"]] = target
            volume = volumes[m["name"]]
            if "configMap" in volume:
                (target / "config.yaml").write_text(config_text)
            for item in volume.get("secret", {}).get("items", []):
                (target / item["path"]).write_text(database_url or "")
        result = subprocess.run([str(self.querygate), *container["args"]], env=process_env(container, mounts, root),
                                cwd=root, capture_output=True, text=True, timeout=120)
        last = (result.stdout.strip().splitlines() or [""])[-1]
        if result.returncode != 0 or not last.startswith("ok:"):
            self.fail(f"CronJob {name} fails (exit {result.returncode}): {(result.stdout + result.stderr).strip()[-2000:]}")
            return False
        self.ok(f"{self.case}: CronJob {name} runs: {last}")
        return True

    def _serve(self, main: dict[str, Any], mounts: dict[str, Path], scratch: Path, config: dict[str, Any],
               material: Material, port: int, admin_port: int) -> None:
        log = scratch / "serve.log"
        with log.open("w") as out:
            child = subprocess.Popen([str(self.querygate), *main.get("args", [])], env=process_env(main, mounts, scratch),
                                     cwd=scratch, stdout=out, stderr=subprocess.STDOUT)
        self.cleanups.append(lambda: (child.kill(), child.wait()))
        deadline = time.monotonic() + 60
        while "serving MCP at" not in log.read_text():
            if child.poll() is not None or time.monotonic() > deadline:
                self.fail(f"the server does not start: {log.read_text()[-2000:]}")
                return
            time.sleep(0.1)
        tls = config["server"].get("tls")
        if not tls:
            self.fail("the server does not serve HTTPS")
            return
        context = ssl.create_default_context(cafile=str(material.ca_cert))

        def post(context: ssl.SSLContext, headers: dict[str, str]) -> int:
            conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
            body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
                "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "chart-check", "version": "1"}}})
            conn.request("POST", "/mcp", body=body, headers={
                "content-type": "application/json", "accept": "application/json, text/event-stream", **headers})
            status = conn.getresponse().status
            conn.close()
            return status

        status = post(context, {})
        if status != 401:
            self.fail(f"an MCP request without credentials gets {status}, not 401")
        else:
            self.ok(f"{self.case}: HTTPS with the Secret's certificate; no credentials: 401")
        auth = config.get("auth") or {}
        for issuer in ((auth.get("jwt") or {}).get("issuers") or []):
            tenant = sorted(issuer.get("tenants") or ["default"])[0]
            audience = issuer.get("audience") or auth.get("resource")
            token = material.token(issuer["issuer"], audience, "chart-check", tenant)
            status = post(context, {"authorization": f"Bearer {token}"})
            if status != 200:
                self.fail(f"an MCP request with a token of {issuer['issuer']} gets {status}")
            else:
                self.ok(f"{self.case}: a token of {issuer['issuer']} (tenant {tenant}) is served")
        for uri, (key, cert) in material.clients.items():
            with_cert = ssl.create_default_context(cafile=str(material.ca_cert))
            with_cert.load_cert_chain(str(cert), str(key))
            status = post(with_cert, {})
            if status != 200:
                self.fail(f"an MCP request with the client certificate {uri} gets {status}")
            else:
                self.ok(f"{self.case}: the client certificate {uri} is served")
        if config["server"].get("admin_listen"):
            conn = http.client.HTTPConnection("127.0.0.1", admin_port, timeout=30)
            conn.request("GET", "/readyz")
            status = conn.getresponse().status
            if status != 200:
                self.fail(f"/readyz on the admin port gets {status}")
            else:
                self.ok(f"{self.case}: ready")


def start_check(case: str, objects: list[dict[str, Any]], querygate: Path, ok: Report,
                expect_refused_pull: str | None = None) -> tuple[list[str], str | None]:
    """Starts the rendering `objects` as described above: the problems found, and the
    providers.lock the init containers' pulls wrote (None without one). With
    `expect_refused_pull`, the first init container must fail saying that text, and nothing
    more is started."""
    start = Start(case, objects, querygate.resolve(), ok)
    start.expect_refused_pull = expect_refused_pull
    problems = start.run()
    return problems, start.lock_text
