#!/usr/bin/env bash
# Installs the Debian packages nsanalyze needs when they are missing.
# Arguments: PACKAGE:PROBE pairs; PROBE is a command on the PATH or a shared library name.
set -euo pipefail
missing=()
for pair in "$@"; do
  pkg=${pair%%:*}; probe=${pair#*:}
  if [[ $probe == *.so* ]]; then
    ldconfig -p 2>/dev/null | grep -q "$probe" || missing+=("$pkg")
  else
    command -v "$probe" >/dev/null 2>&1 || missing+=("$pkg")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0
echo "installing system packages: ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
