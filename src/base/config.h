// The registry of every CHORUS_* environment variable.
//
// Each variable is declared once, in config.cc, with its default and a doc string; reading an
// undeclared name is a bug (it aborts in debug builds and is refused otherwise). chorus-info
// prints the whole table. Values are read from the environment at each call, so tests may
// setenv() between communicators.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "src/base/status.h"

namespace chorus::config {

struct EnvVar {
  const char* name;
  const char* defaultValue;
  const char* doc;
};

// The table, for chorus-info. Returns nullptr past the end.
const EnvVar* envVarAt(int index);
const EnvVar* findEnvVar(std::string_view name);

// The value set in the environment, or the declared default ("" when none).
std::string getString(std::string_view name);
// True when the variable is set (non-empty) in the environment.
bool isSet(std::string_view name);
// Parsed values; a malformed value is an InvalidArgument that names the variable and the value.
StatusOr<int64_t> getInt(std::string_view name);
StatusOr<double> getDouble(std::string_view name);
// Sizes accept K/M/G suffixes (binary).
StatusOr<uint64_t> getBytes(std::string_view name);

}  // namespace chorus::config
