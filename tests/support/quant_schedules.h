// Quantized reduce-scatters written by hand, for the tests of the quantization steps: the
// symbolic checker's (tests/unit/schedules) and the executor's (tests/unit/transport). They are
// not registered algorithms — the quantized collectives come later — only the smallest real
// schedules that quantize, move blocks, and decode or re-encode them.
#pragma once

#include "algorithms/common/schedule.h"

namespace chorus::sched::examples {

// One hop. Every rank quantizes each destination's slice of its input (stream index = the
// slice's first element), sends each block to its owner, and the owner dequantizes the n blocks
// — its own and the received ones, in rank order — into its output. Needs d.quant.
Schedule quantizedReduceScatter(const CollDesc& d, int rank, int nranks);

// Two hops over hosts of `perHost` consecutive ranks (nranks a multiple of it), as ZeRO++'s qgZ
// does: each destination's block goes to the rank of this host with the destination's local
// rank; that rank requantizes the host's blocks into one per destination and sends it across
// to the destination, which dequantizes one block per host into its output.
Schedule twoHopQuantizedReduceScatter(const CollDesc& d, int rank, int nranks, int perHost);

}  // namespace chorus::sched::examples
