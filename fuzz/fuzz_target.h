// The fuzz targets' entry points, as plain functions.
//
// Each target file defines one `int chorus::fuzz::<name>One(const uint8_t*, size_t)` and ends
// with CHORUS_FUZZ_TARGET(<name>One). Built as a libFuzzer binary (fuzz/CMakeLists.txt defines
// CHORUS_LIBFUZZER) the macro makes it the binary's LLVMFuzzerTestOneInput; built with the
// normal compiler it expands to nothing, and the corpus replay test (fuzz/replay_main.cc, in
// ctest) calls the functions through kTargets. A failed check aborts, as libFuzzer expects.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace chorus::fuzz {

int ncclXmlOne(const uint8_t* data, size_t size);
int storeProtocolOne(const uint8_t* data, size_t size);
int uniqueIdOne(const uint8_t* data, size_t size);
int tcpFramesOne(const uint8_t* data, size_t size);
int consistencyOne(const uint8_t* data, size_t size);

struct Target {
  const char* name;  // the folder under fuzz/corpus/
  int (*one)(const uint8_t*, size_t);
};
inline constexpr Target kTargets[] = {
    {"nccl_xml", &ncclXmlOne},
    {"store_protocol", &storeProtocolOne},
    {"unique_id", &uniqueIdOne},
    {"tcp_frames", &tcpFramesOne},
    {"consistency", &consistencyOne},
};

// A property of the code under test does not hold: print it and abort (libFuzzer keeps the
// input as a crash artifact; the replay test fails).
[[noreturn]] inline void fail(const char* target, const char* what, const std::string& detail) {
  std::fprintf(stderr, "%s: %s\n%s\n", target, what, detail.c_str());
  std::abort();
}

}  // namespace chorus::fuzz

#ifdef CHORUS_LIBFUZZER
#define CHORUS_FUZZ_TARGET(fn)                                                   \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {      \
    return chorus::fuzz::fn(data, size);                                         \
  }
#else
#define CHORUS_FUZZ_TARGET(fn)
#endif
