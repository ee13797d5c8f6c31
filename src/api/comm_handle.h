// The Communicator behind a chorusComm_t, for tests and tools linked with the internal archive
// (chorus_internal) that need to look inside a live communicator, e.g. at its plan cache.
// Not part of the ABI: libchorus.so exports the C API only (cmake/chorus.map).
#pragma once

#include "chorus/chorus.h"

namespace chorus {
class Communicator;
}

namespace chorus::api {

/// nullptr when `comm` is not a live communicator (null, destroyed, or never created).
Communicator* communicatorOf(chorusComm_t comm);

}  // namespace chorus::api
