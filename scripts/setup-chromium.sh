#!/usr/bin/env bash
# Make sure headless Chromium and its WebDriver are installed, for the console tests.
#
# Usage: scripts/setup-chromium.sh
# Installs Debian's chromium and chromium-driver when missing (needs root, or passwordless
# sudo). Prints two lines: the chromium binary and the chromedriver binary.
#
# Pinned to Debian 12's security update 156.0.8078.114-1~deb12u1. Debian's security archive
# keeps only its newest build, so when that version is gone the newest one is installed
# instead and a warning says so (Selenium, pinned in setup-python.sh, speaks to any
# chromedriver of the same build as the browser, which Debian always ships together).
set -euo pipefail

CHROMIUM_VERSION="156.0.8078.114-1~deb12u1"

found() {
  local browser driver
  browser="$(command -v chromium || true)"
  driver="$(command -v chromedriver || true)"
  if [[ -n "$browser" && -n "$driver" ]]; then
    echo "$browser"
    echo "$driver"
    return 0
  fi
  return 1
}

if found; then exit 0; fi

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { echo "setup-chromium.sh: Chromium is missing and I am not root (no sudo either)" >&2; exit 1; }
  SUDO=(sudo -n)
fi

LOG="$(mktemp -t floe-setup-chromium.XXXXXX.log)"
export DEBIAN_FRONTEND=noninteractive
"${SUDO[@]}" apt-get update -q >"$LOG" 2>&1 || true
if ! "${SUDO[@]}" apt-get install -y -q --no-install-recommends \
    "chromium=$CHROMIUM_VERSION" "chromium-common=$CHROMIUM_VERSION" "chromium-driver=$CHROMIUM_VERSION" >>"$LOG" 2>&1; then
  echo "setup-chromium.sh: Chromium $CHROMIUM_VERSION is no longer offered; installing Debian's current build" >&2
  if ! "${SUDO[@]}" apt-get install -y -q --no-install-recommends chromium chromium-driver >>"$LOG" 2>&1; then
    echo "setup-chromium.sh: apt-get install chromium chromium-driver failed (log: $LOG)" >&2
    tail -n 30 "$LOG" >&2
    exit 1
  fi
fi

if ! found; then
  echo "setup-chromium.sh: installed chromium but found no chromium/chromedriver on PATH (log: $LOG)" >&2
  exit 1
fi
rm -f "$LOG"
