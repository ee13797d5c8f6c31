#!/usr/bin/env bash
# chorus over TCP vs OpenMPI's MPI_Allreduce over its TCP BTL, same sizes, same machine, same run:
# compare.sh restricted to that pair (CHORUS_TRANSPORT=tcp, mpirun --mca btl tcp,self, loopback,
# allreduce only, no Gloo and no memory bound). Each system runs REPS times, interleaved; the
# table gives per size the median time and busbw of each and the ratio chorus/OpenMPI.
# SIZES overrides the size flags (default -b 8 -e 256M -f 4); the other compare.sh variables
# apply too.
#   bench/compare/tcp_vs_openmpi.sh [build-dir] [reps] [ranks...]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
export CHORUS_TRANSPORT=tcp
export MPI_MCA=${MPI_MCA:---mca btl tcp,self}
export SYSTEMS=${SYSTEMS:-chorus ompi}
export COLLS=${COLLS:-allreduce}
export MEMBW=${MEMBW:-0}
export OUT=${OUT:-$here/results/$(date +%Y%m%d-%H%M%S)-tcp}
exec "$here/compare.sh" "$@"
