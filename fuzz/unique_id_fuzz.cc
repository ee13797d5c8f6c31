// libFuzzer target: the unique-id decoder (src/bootstrap/unique_id.h), which every rank runs on
// the 128 bytes the application hands it, and the job-secret parser for CHORUS_JOB_SECRET.
//
// The first 128 bytes of the input (zero-padded) are an id; for inputs of odd length the target
// first writes the right checksum into it, as a producer other than chorusGetUniqueId could, so
// the fuzzer also explores what lies behind the checksum. Properties:
//   - decodeUniqueId refuses with kInvalidUsage and a message, or gives a job whose encoding
//     (encodeUniqueId) is exactly the input: an id has one spelling, so bytes the format
//     reserves cannot carry anything unchecked;
//   - a decoded root has family IPv4 or IPv6 and a port other than 0.
// The rest of the input is a secret in hex: secretFromHex refuses with kInvalidArgument, or
// gives a secret whose hex (secretToHex) is the input in lower case.
// Run with fuzz/run.sh; the corpus is replayed in ctest (fuzz_replay.unique_id).
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <string>
#include <string_view>

#include "fuzz/fuzz_target.h"
#include "src/base/host_id.h"
#include "src/bootstrap/unique_id.h"
#include "src/bootstrap/wire.h"

namespace chorus::fuzz {
namespace {

[[noreturn]] void idFail(const char* what, const std::string& detail = "") {
  fail("unique_id_fuzz", what, detail);
}

std::string hexOf(const uint8_t* p, size_t n) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) {
    s.push_back(kDigits[p[i] >> 4]);
    s.push_back(kDigits[p[i] & 15]);
  }
  return s;
}

}  // namespace

int uniqueIdOne(const uint8_t* data, size_t size) {
  chorusUniqueId id;
  std::memset(&id, 0, sizeof id);
  const size_t idBytes = std::min<size_t>(size, sizeof id.internal);
  std::memcpy(id.internal, data, idBytes);
  if (size % 2 == 1) {
    // The layout's checksum: hash64 of bytes [0,48) at [48,56) (unique_id.h).
    auto* b = reinterpret_cast<uint8_t*>(id.internal);
    bootstrap::wire::storeLe(b + 48, hash64(b, 48), 8);
  }

  auto job = bootstrap::decodeUniqueId(id);
  if (!job.ok()) {
    if (job.status().code() != Code::kInvalidUsage || job.status().message().empty())
      idFail("a refused id is not an InvalidUsage with a message", job.status().toString());
  } else {
    const int family = job->root.family();
    if (family != AF_INET && family != AF_INET6) idFail("a decoded id has no IP family");
    if (job->root.port() == 0) idFail("a decoded id has port 0");
    chorusUniqueId again;
    bootstrap::encodeUniqueId(*job, &again);
    if (std::memcmp(again.internal, id.internal, sizeof id.internal) != 0)
      idFail("an accepted id does not re-encode to its own bytes",
             "in:  " + hexOf(reinterpret_cast<const uint8_t*>(id.internal), 64) +
                 "\nout: " + hexOf(reinterpret_cast<const uint8_t*>(again.internal), 64));
  }

  std::string_view hex(reinterpret_cast<const char*>(data) + idBytes, size - idBytes);
  auto secret = bootstrap::secretFromHex(hex, "CHORUS_JOB_SECRET");
  if (!secret.ok()) {
    if (secret.status().code() != Code::kInvalidArgument ||
        secret.status().message().find("CHORUS_JOB_SECRET") == std::string::npos)
      idFail("a refused secret is not an InvalidArgument naming the variable",
             secret.status().toString());
  } else {
    std::string lower(hex);
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (bootstrap::secretToHex(*secret) != lower) idFail("a secret does not round-trip", lower);
  }
  return 0;
}

}  // namespace chorus::fuzz

CHORUS_FUZZ_TARGET(uniqueIdOne)
