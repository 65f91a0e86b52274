#!/usr/bin/env bash
# Installs the Debian packages hearth builds and tests with (skips what is
# already there). Needs root or sudo. Usage: deploy/install-deps.sh
set -euo pipefail
pkgs=(build-essential cmake pkg-config libzmq3-dev libsodium-dev libnuma-dev libhwloc-dev
      hwloc libglpk-dev libpcre2-dev libjansson-dev libmicrohttpd-dev clang
      libclang-rt-14-dev clang-format curl iproute2 jq chromium)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
