#include "tests/support/quant_schedules.h"

namespace chorus::sched::examples {

Schedule quantizedReduceScatter(const CollDesc& d, int rank, int nranks) {
  const uint64_t n = static_cast<uint64_t>(nranks), c = d.count, e = d.elemSize;
  const uint64_t block = kernels::quant::packedBytes(*d.quant, c);
  const uint64_t received = n * block;  // slot p: the block from rank p
  Schedule s;
  s.algo = "quantized_direct";
  s.scratchBytes = 2 * n * block;
  for (uint64_t p = 0; p < n; ++p)
    s.quantize(Range{kInput, p * c * e, c * e}, Range{kScratch, p * block, block}, c, p * c);
  for (int p = 0; p < nranks; ++p) {
    if (p != rank) s.send(p, Range{kScratch, static_cast<uint64_t>(p) * block, block});
  }
  for (int p = 0; p < nranks; ++p) {
    const Range slot{kScratch, received + static_cast<uint64_t>(p) * block, block};
    if (p == rank) {
      s.copy(Range{kScratch, static_cast<uint64_t>(rank) * block, block}, slot);
    } else {
      s.recv(p, slot);
    }
  }
  s.dequantize(Range{kScratch, received, n * block}, static_cast<uint32_t>(n),
               Range{kOutput, 0, c * e}, c);
  return s;
}

Schedule twoHopQuantizedReduceScatter(const CollDesc& d, int rank, int nranks, int perHost) {
  const int hosts = nranks / perHost, host = rank / perHost, local = rank % perHost;
  const uint64_t n = static_cast<uint64_t>(nranks), c = d.count, e = d.elemSize;
  const uint64_t block = kernels::quant::packedBytes(*d.quant, c);
  const uint64_t L = static_cast<uint64_t>(perHost), H = static_cast<uint64_t>(hosts);
  // Scratch: this rank's blocks by destination; per destination it serves (one per host, same
  // local rank), the L blocks of its host; those requantized; the H blocks of its own slice.
  const uint64_t gathered = n * block;
  const uint64_t requantized = gathered + H * L * block;
  const uint64_t mine = requantized + H * block;
  auto gatheredSlot = [&](int destHost, int fromLocal) {
    return Range{kScratch, gathered + (static_cast<uint64_t>(destHost) * L + fromLocal) * block,
                 block};
  };
  Schedule s;
  s.algo = "quantized_two_hop";
  s.scratchBytes = mine + H * block;
  for (uint64_t p = 0; p < n; ++p)
    s.quantize(Range{kInput, p * c * e, c * e}, Range{kScratch, p * block, block}, c, p * c);
  // Hop 1, inside the host: destination dest's block to the host rank of dest's local rank.
  for (int dest = 0; dest < nranks; ++dest) {
    const int to = host * perHost + dest % perHost;
    const Range from{kScratch, static_cast<uint64_t>(dest) * block, block};
    if (to == rank) {
      s.copy(from, gatheredSlot(dest / perHost, local));
    } else {
      s.send(to, from);
    }
  }
  for (int destHost = 0; destHost < hosts; ++destHost)
    for (int k = 0; k < perHost; ++k)
      if (k != local) s.recv(host * perHost + k, gatheredSlot(destHost, k));
  // The host's blocks of each destination this rank serves, requantized into one.
  for (int destHost = 0; destHost < hosts; ++destHost) {
    const uint64_t dest = static_cast<uint64_t>(destHost) * L + static_cast<uint64_t>(local);
    s.requantize(Range{kScratch, gatheredSlot(destHost, 0).offset, L * block},
                 static_cast<uint32_t>(L),
                 Range{kScratch, requantized + static_cast<uint64_t>(destHost) * block, block}, c,
                 dest * c);
  }
  // Hop 2, across hosts between ranks of one local rank: each requantized block to its owner.
  for (int destHost = 0; destHost < hosts; ++destHost) {
    const Range from{kScratch, requantized + static_cast<uint64_t>(destHost) * block, block};
    if (destHost == host) {
      s.copy(from, Range{kScratch, mine + static_cast<uint64_t>(host) * block, block});
    } else {
      s.send(destHost * perHost + local, from);
    }
  }
  for (int fromHost = 0; fromHost < hosts; ++fromHost)
    if (fromHost != host)
      s.recv(fromHost * perHost + local,
             Range{kScratch, mine + static_cast<uint64_t>(fromHost) * block, block});
  s.dequantize(Range{kScratch, mine, H * block}, static_cast<uint32_t>(H),
               Range{kOutput, 0, c * e}, c);
  return s;
}

}  // namespace chorus::sched::examples
