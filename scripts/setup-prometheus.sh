#!/usr/bin/env bash
# Make sure Debian's Prometheus and node-exporter are installed, pinned to bookworm's versions:
# the real sender the remote-write tests use at its default settings (test_prometheus.py).
#
# Usage: scripts/setup-prometheus.sh
# Installs the packages when missing or at another version (needs root, or passwordless sudo).
# Prints two lines: the prometheus binary, then the node-exporter binary. Only the binaries are
# used: the tests start them themselves, with configurations of their own.
set -euo pipefail

PROMETHEUS_VERSION="2.42.0+ds-5+deb12u1"
NODE_EXPORTER_VERSION="1.5.0-1+b6"
PROMETHEUS=/usr/bin/prometheus
NODE_EXPORTER=/usr/bin/prometheus-node-exporter

installed() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null || true; }

if [[ "$(installed prometheus)" == "$PROMETHEUS_VERSION" \
      && "$(installed prometheus-node-exporter)" == "$NODE_EXPORTER_VERSION" \
      && -x "$PROMETHEUS" && -x "$NODE_EXPORTER" ]]; then
  printf '%s\n%s\n' "$PROMETHEUS" "$NODE_EXPORTER"
  exit 0
fi

SUDO=()
if [[ "$(id -u)" -ne 0 ]]; then
  command -v sudo >/dev/null 2>&1 || { echo "setup-prometheus.sh: Prometheus is missing and I am not root (no sudo either)" >&2; exit 1; }
  SUDO=(sudo -n)
fi

LOG="$(mktemp -t floe-setup-prometheus.XXXXXX.log)"
export DEBIAN_FRONTEND=noninteractive
# The packages' scripts start their services where systemd runs; a build machine has none,
# and the tests want none: policy-rc.d tells invoke-rc.d to start nothing.
POLICY=/usr/sbin/policy-rc.d
ADDED_POLICY=0
if [[ ! -e "$POLICY" ]]; then
  printf '#!/bin/sh\nexit 101\n' | "${SUDO[@]}" tee "$POLICY" >/dev/null
  "${SUDO[@]}" chmod +x "$POLICY"
  ADDED_POLICY=1
fi
status=0
{ "${SUDO[@]}" apt-get update -q && \
  "${SUDO[@]}" apt-get install -y -q --no-install-recommends \
    "prometheus=$PROMETHEUS_VERSION" "prometheus-node-exporter=$NODE_EXPORTER_VERSION"; } \
  >"$LOG" 2>&1 || status=$?
if [[ "$ADDED_POLICY" == 1 ]]; then "${SUDO[@]}" rm -f "$POLICY"; fi
if [[ "$status" -ne 0 ]]; then
  echo "setup-prometheus.sh: apt-get install prometheus failed (log: $LOG)" >&2
  tail -n 30 "$LOG" >&2
  exit 1
fi
"$PROMETHEUS" --version >/dev/null 2>&1 || { echo "setup-prometheus.sh: $PROMETHEUS does not run (log: $LOG)" >&2; exit 1; }
printf '%s\n%s\n' "$PROMETHEUS" "$NODE_EXPORTER"
