#!/usr/bin/env bash
# The project's test command (README line 2): formatting, lints, then every test, with the
# real StackQL provider documents of ../shared/providers for the compatibility tests.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v cargo >/dev/null; then
  echo "cargo is required (Rust toolchain via rustup)" >&2
  exit 1
fi
for tool in fmt clippy; do
  cargo "$tool" --version >/dev/null 2>&1 || { echo "cargo $tool is required (rustup component add rustfmt clippy)" >&2; exit 1; }
done

compat="${QUERYGATE_COMPAT_REGISTRY:-}"
if [[ -z "$compat" && -d ../shared/providers/src ]]; then
  compat="$(cd ../shared/providers && pwd)"
fi
if [[ -z "$compat" ]]; then
  echo "note: ../shared/providers not found; compatibility tests will report that they are skipped" >&2
fi
export QUERYGATE_COMPAT_REGISTRY="$compat"

cargo fmt --all -- --check
cargo clippy --all-targets -- -D warnings
cargo test
