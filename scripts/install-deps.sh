#!/usr/bin/env bash
# Installs (with apt-get) the Debian packages chorus builds and tests with, only those missing.
set -euo pipefail
packages=(
  build-essential cmake ninja-build pkg-config git clang
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev nlohmann-json3-dev
  libopenmpi-dev openmpi-bin libhwloc-dev libibverbs-dev libucx-dev ucx-utils libpugixml-dev iproute2 nftables procps libgloo-dev gnuplot-nox python3
  python3-torch libtorch-dev pybind11-dev fortunes
)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all packages present"
  exit 0
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "install-deps: installing ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
