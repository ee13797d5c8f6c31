// libFuzzer target: the consistency header (src/exec/consistency.h), the 112 bytes each rank
// receives from each message peer before a collective's data, checked by
// checkConsistencyHeader against the rank's own header.
//
// Input: 16 bytes describe this rank's call (collective, type, op, root, count, algorithm,
// quantization) and its traffic to the peer, from which makeConsistencyHeader builds "mine";
// the next 112 bytes (zero-padded) are the peer's header, raw. Properties:
//   - the check passes exactly when the peer's header is well formed, describes the same call
//     and mirrors our traffic; otherwise it is kInvalidUsage and names the peer's rank;
//   - any bytes (unknown collective, type or op values, an algorithm name without a NUL,
//     nonsense quantization words) are described without a crash;
//   - our own header, mirrored, always passes.
// Run with fuzz/run.sh; the corpus is replayed in ctest (fuzz_replay.consistency).
#include <cstring>
#include <string>

#include "algorithms/kernels/quantize.h"
#include "fuzz/fuzz_target.h"
#include "src/exec/consistency.h"

namespace chorus::fuzz {
namespace {

constexpr int kRank = 3;
constexpr int kPeer = 5;
constexpr const char* kAlgos[] = {"ring", "tree", "direct", "recursive-doubling",
                                  "an-algorithm-name-of-exactly-31c", ""};

[[noreturn]] void consistencyFail(const char* what, const std::string& detail = "") {
  fail("consistency_fuzz", what, detail);
}

exec::WireHeader mirrored(const exec::WireHeader& h) {
  exec::WireHeader m = h;
  std::swap(m.bytesToPeer, m.bytesFromPeer);
  std::swap(m.msgsToPeer, m.msgsFromPeer);
  return m;
}

}  // namespace

int consistencyOne(const uint8_t* data, size_t size) {
  uint8_t in[16 + sizeof(exec::WireHeader)] = {};
  std::memcpy(in, data, std::min(size, sizeof in));

  exec::OpIdentity id;
  id.coll = static_cast<sched::Coll>(in[0] % 11);
  id.dtype = static_cast<DataType>(in[1] % 12);
  id.userOp = static_cast<int>(in[2] % 8) - 1;
  id.root = static_cast<int>(in[3] % 9) - 1;
  id.count = uint64_t{in[4]} << (in[5] % 57);
  id.seq = 1 + in[6];
  kernels::QuantConfig quant;
  if (in[7] & 1) {
    quant.bits = (in[7] & 2) ? 8 : 4;
    quant.groupSize = 2 * (1 + in[8]);
    quant.asymmetric = in[7] & 4;
    quant.stochastic = in[7] & 8;
    quant.seed = in[9];
    id.quant = &quant;
  }
  const char* algo = kAlgos[in[10] % (sizeof kAlgos / sizeof kAlgos[0])];
  const uint64_t bytesTo = uint64_t{in[11]} << 10, bytesFrom = uint64_t{in[12]} << 10;
  const uint32_t msgsTo = in[13], msgsFrom = in[14];
  const exec::WireHeader mine =
      exec::makeConsistencyHeader(id, algo, bytesTo, bytesFrom, msgsTo, msgsFrom);

  exec::WireHeader theirs;
  std::memcpy(&theirs, in + 16, sizeof theirs);
  Status st = exec::checkConsistencyHeader(mine, theirs, kRank, kPeer, id, algo);
  const exec::WireHeader expected = mirrored(mine);
  // The check compares fields, not padding, and the algorithm name up to its NUL.
  const bool same = theirs.magic == expected.magic && theirs.version == expected.version &&
                    theirs.coll == expected.coll && theirs.dtype == expected.dtype &&
                    theirs.op == expected.op && theirs.root == expected.root &&
                    theirs.seq == expected.seq && theirs.count == expected.count &&
                    theirs.bytesToPeer == expected.bytesToPeer &&
                    theirs.bytesFromPeer == expected.bytesFromPeer &&
                    theirs.msgsToPeer == expected.msgsToPeer &&
                    theirs.msgsFromPeer == expected.msgsFromPeer &&
                    theirs.quantShape == expected.quantShape &&
                    theirs.quantSeed == expected.quantSeed &&
                    std::strncmp(theirs.algo, expected.algo, sizeof theirs.algo) == 0;
  if (st.ok() != same)
    consistencyFail(st.ok() ? "a different header passed the check"
                            : "a matching header failed the check",
                    st.toString());
  if (!st.ok()) {
    if (st.code() != Code::kInvalidUsage) consistencyFail("not an InvalidUsage", st.toString());
    if (st.message().find("rank " + std::to_string(kPeer)) == std::string::npos)
      consistencyFail("the error does not name the peer", st.toString());
  }
  Status self = exec::checkConsistencyHeader(mine, expected, kRank, kPeer, id, algo);
  if (!self.ok()) consistencyFail("our own mirrored header fails the check", self.toString());
  return 0;
}

}  // namespace chorus::fuzz

CHORUS_FUZZ_TARGET(consistencyOne)
