// PCI bus ids as every topology source writes them, in one canonical form.
//
// sysfs names functions "0000:3b:00.0", NVML "00000000:3B:00.0", lspci and some NCCL files
// "3b:00.0"; VMD domains are wider than four digits ("10000:00:00.0"). Each System node keeps
// the canonical form, so ids from different sources compare equal. Internal to src/topology/.
#pragma once

#include <string>
#include <string_view>

namespace chorus::topo {

// "[domain:]bus:device.function" in hex, white space around it ignored -> lower case, the
// domain at least four digits ("0000:3b:00.0"); "" when it is not a bus id. The domain takes up
// to 8 digits, the bus and device up to 2 (the device at most 0x1f), the function 1 (at most 7).
std::string normalizeBusId(std::string_view busId);

}  // namespace chorus::topo
