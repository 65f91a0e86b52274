#!/usr/bin/env bash
# Installs the Debian packages hearth builds and tests with (skips what is
# already there), including the aarch64 cross toolchain, the arm64 builds of
# the libraries (multiarch) and qemu-user-static for deploy/test-arm.sh;
# HR_NO_ARM64=1 leaves those out. Needs root or sudo.
# Usage: deploy/install-deps.sh
set -euo pipefail
pkgs=(build-essential cmake pkg-config libzmq3-dev libsodium-dev libnuma-dev libhwloc-dev
      hwloc libglpk-dev libpcre2-dev libjansson-dev libmicrohttpd-dev clang
      libclang-rt-14-dev clang-format curl iproute2 jq chromium
      libvulkan-dev glslc mesa-vulkan-drivers fuse3 libfuse3-dev)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
if [ "${HR_NO_ARM64:-0}" != 1 ] && [ "$(dpkg --print-architecture)" = amd64 ]; then
  pkgs+=(crossbuild-essential-arm64 qemu-user-static libzmq3-dev:arm64 libsodium-dev:arm64
         libnuma-dev:arm64 libhwloc-dev:arm64 libglpk-dev:arm64 libpcre2-dev:arm64
         libjansson-dev:arm64 libmicrohttpd-dev:arm64)
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    echo "install-deps: adding the arm64 architecture (multiarch)"
    $SUDO dpkg --add-architecture arm64
  fi
fi
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
