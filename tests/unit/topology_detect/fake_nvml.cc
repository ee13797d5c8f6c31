// A stand-in for libnvidia-ml.so.1, loaded by the NVML detector through DetectOptions::nvmlLibrary
// so its code runs on machines without a GPU. It describes four GPUs:
//
//   GPU 0 (0000:07:00.0) and GPU 1 (0000:0f:00.0): 4 NVLinks to each other; GPU 0's link 4
//     exists but is down.
//   GPU 2 (0000:47:00.0) and GPU 3 (0000:4e:00.0): 6 NVLinks each to one NVSwitch
//     (0000:c1:00.0) that is not on the host's PCI bus.
//
// Every GPU has compute capability 8.0. Only the entry points the detector calls exist, with the
// C ABI that NVML's documentation gives them.
#include <cstdint>
#include <cstdio>
#include <cstring>

namespace {

struct PciInfo {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
using Device = struct DeviceOpaque*;

constexpr int kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kUninitialized = 1;
constexpr int kLinkGpu = 0, kLinkSwitch = 2;

struct FakeLink {
  int remote;  // GPU index, or -1 for the NVSwitch
  bool active;
};

constexpr unsigned kGpus = 4;
const unsigned kBus[kGpus] = {0x07, 0x0f, 0x47, 0x4e};
constexpr unsigned kSwitchBus = 0xc1;
bool initialized = false;

// The links of GPU `g`, `n` of them.
const FakeLink* linksOf(unsigned g, unsigned* n) {
  static const FakeLink gpu0[] = {{1, true}, {1, true}, {1, true}, {1, true}, {1, false}};
  static const FakeLink gpu1[] = {{0, true}, {0, true}, {0, true}, {0, true}};
  static const FakeLink toSwitch[] = {{-1, true}, {-1, true}, {-1, true},
                                      {-1, true}, {-1, true}, {-1, true}};
  switch (g) {
    case 0: *n = 5; return gpu0;
    case 1: *n = 4; return gpu1;
    default: *n = 6; return toSwitch;
  }
}

unsigned indexOf(Device d) { return static_cast<unsigned>(reinterpret_cast<uintptr_t>(d) - 1); }

void fill(PciInfo* info, unsigned bus) {
  std::memset(info, 0, sizeof(*info));
  info->bus = bus;
  // NVML writes an 8-digit domain in upper case.
  std::snprintf(info->busId, sizeof(info->busId), "00000000:%02X:00.0", bus);
  std::snprintf(info->busIdLegacy, sizeof(info->busIdLegacy), "0000:%02X:00.0", bus);
}

const FakeLink* link(Device d, unsigned l, int* rc) {
  unsigned g = indexOf(d), n = 0;
  if (!initialized) {
    *rc = kUninitialized;
    return nullptr;
  }
  if (g >= kGpus) {
    *rc = kInvalidArgument;
    return nullptr;
  }
  const FakeLink* links = linksOf(g, &n);
  if (l >= n) {
    *rc = kNotSupported;
    return nullptr;
  }
  *rc = kSuccess;
  return &links[l];
}

}  // namespace

extern "C" {

int nvmlInit_v2() {
  initialized = true;
  return kSuccess;
}
int nvmlShutdown() {
  initialized = false;
  return kSuccess;
}
const char* nvmlErrorString(int rc) { return rc == kSuccess ? "Success" : "Fake NVML error"; }

int nvmlDeviceGetCount_v2(unsigned* count) {
  if (!initialized) return kUninitialized;
  *count = kGpus;
  return kSuccess;
}

int nvmlDeviceGetHandleByIndex_v2(unsigned index, Device* device) {
  if (!initialized) return kUninitialized;
  if (index >= kGpus) return kInvalidArgument;
  *device = reinterpret_cast<Device>(static_cast<uintptr_t>(index) + 1);
  return kSuccess;
}

int nvmlDeviceGetPciInfo_v3(Device device, PciInfo* info) {
  if (!initialized) return kUninitialized;
  if (indexOf(device) >= kGpus) return kInvalidArgument;
  fill(info, kBus[indexOf(device)]);
  return kSuccess;
}

int nvmlDeviceGetCudaComputeCapability(Device device, int* major, int* minor) {
  if (!initialized) return kUninitialized;
  if (indexOf(device) >= kGpus) return kInvalidArgument;
  *major = 8;
  *minor = 0;
  return kSuccess;
}

int nvmlDeviceGetNvLinkState(Device device, unsigned l, int* active) {
  int rc = kSuccess;
  const FakeLink* f = link(device, l, &rc);
  if (f) *active = f->active ? 1 : 0;
  return rc;
}

int nvmlDeviceGetNvLinkRemotePciInfo_v2(Device device, unsigned l, PciInfo* info) {
  int rc = kSuccess;
  const FakeLink* f = link(device, l, &rc);
  if (f) fill(info, f->remote < 0 ? kSwitchBus : kBus[f->remote]);
  return rc;
}

int nvmlDeviceGetNvLinkRemoteDeviceType(Device device, unsigned l, int* type) {
  int rc = kSuccess;
  const FakeLink* f = link(device, l, &rc);
  if (f) *type = f->remote < 0 ? kLinkSwitch : kLinkGpu;
  return rc;
}

}  // extern "C"
