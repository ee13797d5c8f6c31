#!/usr/bin/env bash
# Installs chorus into a scratch prefix, then builds and runs programs outside the tree that use
# it through find_package(chorus), through pkg-config, and through chorus::mpi under mpirun.
# Usage: consumer_test.sh <build-dir> <source-dir>
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
cmake --install "$build" --prefix "$prefix" >/dev/null
run=$prefix/bin/chorus-run
export CHORUS_SOCKET_IFNAME=lo
export LD_LIBRARY_PATH=$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

echo "== find_package(chorus)"
cmake -S "$src/tests/install/consumer" -B "$work/cm" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$work/cm" >/dev/null
"$run" -n 4 "$work/cm/consumer"

echo "== pkg-config chorus"
export PKG_CONFIG_PATH=$prefix/lib/pkgconfig
cc -o "$work/pc_consumer" "$src/tests/install/consumer/consumer.c" $(pkg-config --cflags --libs chorus)
"$run" -n 4 "$work/pc_consumer"

if [ -x "$work/cm/consumer_mpi" ]; then
  echo "== chorus::mpi under mpirun -np 4"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  mpirun -np 4 --oversubscribe --mca btl tcp,self --mca btl_tcp_if_include lo \
    --mca oob_tcp_if_include lo -x CHORUS_SOCKET_IFNAME -x LD_LIBRARY_PATH "$work/cm/consumer_mpi"
else
  echo "== chorus::mpi not built (no MPI found): skipped"
fi
echo "consumer test: OK"
