#!/usr/bin/env bash
# Debian's chromium (the browser tests drive it through playwright-core, never a
# downloaded browser) and the pinned node packages of tests/ui.
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  echo "installing Debian's chromium for the browser tests..."
  $SUDO apt-get install -y -q chromium >/dev/null 2>&1 || {
    $SUDO apt-get update -q >/dev/null
    $SUDO apt-get install -y -q chromium >/dev/null
  }
fi
if ! command -v npm >/dev/null 2>&1; then
  echo "error: npm (Node.js) is required for the browser tests" >&2
  exit 1
fi
if [ ! -d tests/ui/node_modules/playwright-core ]; then
  (cd tests/ui && npm ci --no-audit --no-fund --loglevel=error)
fi
