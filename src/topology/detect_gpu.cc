// The GPU detectors, both through dlopen so that libchorus runs on machines without a driver:
// NVML (libnvidia-ml.so.1) gives the GPUs, their bus ids, compute capabilities and active
// NVLinks with what is at the far end; the CUDA runtime (libcudart) gives the CUDA device index
// of each bus id, which is not PCI order. NVML is shut down and closed after use; the CUDA
// runtime stays loaded (see detectCuda).
#include <dlfcn.h>

#include <algorithm>

#include "src/topology/bus_id.h"
#include "src/topology/detect_internal.h"

namespace chorus::topo::detail {
namespace {

// ---- NVML (dlopen) -------------------------------------------------------------------------

// The part of NVML's C ABI used here, as its public documentation describes it.
using NvmlReturn = int;
using NvmlDevice = struct NvmlDeviceOpaque*;
struct NvmlPciInfo {
  char busIdLegacy[16];
  unsigned domain, bus, device, pciDeviceId, pciSubSystemId;
  char busId[32];
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr int kNvmlFeatureEnabled = 1;
constexpr unsigned kNvmlMaxLinks = 18;
constexpr int kNvmlLinkGpu = 0, kNvmlLinkIbmNpu = 1, kNvmlLinkSwitch = 2;

}  // namespace

DetectorReport detectNvml(const DetectOptions& o, Inventory& inv) {
  DetectorReport r{"nvml", DetectorState::kUnavailable, ""};
  void* lib = ::dlopen(o.nvmlLibrary.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    r.detail = "dlopen(" + o.nvmlLibrary + "): " + dlerrorText() + "; no GPUs from NVML";
    return r;
  }
  struct Close {
    void* lib;
    ~Close() { ::dlclose(lib); }
  } close{lib};
  auto init = symbol<NvmlReturn (*)()>(lib, "nvmlInit_v2");
  auto shutdown = symbol<NvmlReturn (*)()>(lib, "nvmlShutdown");
  auto errorString = symbol<const char* (*)(NvmlReturn)>(lib, "nvmlErrorString");
  auto getCount = symbol<NvmlReturn (*)(unsigned*)>(lib, "nvmlDeviceGetCount_v2");
  auto getHandle = symbol<NvmlReturn (*)(unsigned, NvmlDevice*)>(lib, "nvmlDeviceGetHandleByIndex_v2");
  auto getPci = symbol<NvmlReturn (*)(NvmlDevice, NvmlPciInfo*)>(lib, "nvmlDeviceGetPciInfo_v3");
  auto getCc = symbol<NvmlReturn (*)(NvmlDevice, int*, int*)>(lib, "nvmlDeviceGetCudaComputeCapability");
  auto linkState = symbol<NvmlReturn (*)(NvmlDevice, unsigned, int*)>(lib, "nvmlDeviceGetNvLinkState");
  auto linkRemote = symbol<NvmlReturn (*)(NvmlDevice, unsigned, NvmlPciInfo*)>(
      lib, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
  auto linkType = symbol<NvmlReturn (*)(NvmlDevice, unsigned, int*)>(
      lib, "nvmlDeviceGetNvLinkRemoteDeviceType");  // newer drivers only
  if (!init || !shutdown || !getCount || !getHandle || !getPci) {
    r.detail = o.nvmlLibrary + " lacks nvmlInit_v2/nvmlDeviceGetPciInfo_v3 (driver too old); no GPUs from NVML";
    return r;
  }
  auto why = [&](const char* call, NvmlReturn rc) {
    return std::string(call) + ": " + (errorString ? errorString(rc) : "error") + " (" +
           std::to_string(rc) + ")";
  };
  if (NvmlReturn rc = init(); rc != kNvmlSuccess) {
    r.detail = why("nvmlInit_v2", rc) + "; no GPUs from NVML";
    return r;
  }
  unsigned count = 0;
  if (NvmlReturn rc = getCount(&count); rc != kNvmlSuccess) {
    r.detail = why("nvmlDeviceGetCount_v2", rc) + "; no GPUs from NVML";
    shutdown();
    return r;
  }
  std::vector<std::string> problems;
  size_t links = 0;
  for (unsigned i = 0; i < count; ++i) {
    NvmlDevice dev = nullptr;
    NvmlPciInfo pci{};
    if (NvmlReturn rc = getHandle(i, &dev); rc != kNvmlSuccess) {
      problems.push_back("GPU " + std::to_string(i) + ": " + why("nvmlDeviceGetHandleByIndex_v2", rc));
      continue;
    }
    if (NvmlReturn rc = getPci(dev, &pci); rc != kNvmlSuccess) {
      problems.push_back("GPU " + std::to_string(i) + ": " + why("nvmlDeviceGetPciInfo_v3", rc));
      continue;
    }
    GpuRecord gpu;
    gpu.busId = normalizeBusId(pci.busId);
    if (gpu.busId.empty()) {
      problems.push_back("GPU " + std::to_string(i) + ": unreadable bus id");
      continue;
    }
    int major = 0, minor = 0;
    if (getCc && getCc(dev, &major, &minor) == kNvmlSuccess) gpu.computeCapability = major * 10 + minor;
    for (unsigned link = 0; linkState && linkRemote && link < kNvmlMaxLinks; ++link) {
      int active = 0;
      // Links the GPU does not have answer NOT_SUPPORTED or INVALID_ARGUMENT: skipped.
      if (linkState(dev, link, &active) != kNvmlSuccess || active != kNvmlFeatureEnabled) continue;
      NvmlPciInfo remote{};
      if (linkRemote(dev, link, &remote) != kNvmlSuccess) continue;
      NvLinkRecord nl;
      nl.link = static_cast<int>(link);
      nl.remoteBusId = normalizeBusId(remote.busId);
      int type = -1;
      if (linkType && linkType(dev, link, &type) == kNvmlSuccess) {
        nl.remote = type == kNvmlLinkGpu      ? RemoteKind::kGpu
                    : type == kNvmlLinkSwitch ? RemoteKind::kSwitch
                    : type == kNvmlLinkIbmNpu ? RemoteKind::kCpu
                                              : RemoteKind::kUnknown;
      }
      gpu.nvlinks.push_back(std::move(nl));
      ++links;
    }
    inv.gpus.push_back(std::move(gpu));
  }
  shutdown();
  r.state = DetectorState::kUsed;
  r.detail = countOf(inv.gpus.size(), "GPU") + ", " + countOf(links, "active NVLink");
  for (const std::string& p : problems) r.detail += "; " + p;
  return r;
}

// ---- CUDA runtime (dlopen) -----------------------------------------------------------------

DetectorReport detectCuda(const DetectOptions& o, Inventory& inv) {
  DetectorReport r{"cuda", DetectorState::kUnavailable, ""};
  std::vector<std::string> names;
  if (!o.cudaLibrary.empty())
    names.push_back(o.cudaLibrary);
  else
    names = {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"};
  void* lib = nullptr;
  std::string tried, error;
  for (const std::string& n : names) {
    tried += (tried.empty() ? "" : ", ") + n;
    lib = ::dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib) break;
    error = dlerrorText();
  }
  if (!lib) {
    r.detail = "dlopen(" + tried + ") failed: " + error + "; no CUDA device map";
    return r;
  }
  // The runtime stays loaded: it registers exit handlers, and unloading it under them crashes.
  auto getCount = symbol<int (*)(int*)>(lib, "cudaGetDeviceCount");
  auto getBusId = symbol<int (*)(char*, int, int)>(lib, "cudaDeviceGetPCIBusId");
  auto getAttr = symbol<int (*)(int*, int, int)>(lib, "cudaDeviceGetAttribute");
  auto errorString = symbol<const char* (*)(int)>(lib, "cudaGetErrorString");
  if (!getCount || !getBusId) {
    r.detail = "the CUDA runtime lacks cudaGetDeviceCount/cudaDeviceGetPCIBusId";
    return r;
  }
  int count = 0;
  if (int rc = getCount(&count); rc != 0) {
    r.detail = std::string("cudaGetDeviceCount: ") + (errorString ? errorString(rc) : "error") +
               " (" + std::to_string(rc) + "); no CUDA devices";
    return r;
  }
  constexpr int kAttrCcMajor = 75, kAttrCcMinor = 76;  // cudaDevAttrComputeCapabilityMajor/Minor
  int mapped = 0;
  for (int i = 0; i < count; ++i) {
    char buf[64] = {};
    if (getBusId(buf, sizeof(buf), i) != 0) continue;
    std::string busId = normalizeBusId(buf);
    if (busId.empty()) continue;
    auto it = std::find_if(inv.gpus.begin(), inv.gpus.end(),
                           [&](const GpuRecord& g) { return g.busId == busId; });
    if (it == inv.gpus.end()) {
      inv.gpus.push_back(GpuRecord{busId, -1, 0, {}});
      it = inv.gpus.end() - 1;
    }
    it->cudaDevice = i;
    int major = 0, minor = 0;
    if (it->computeCapability == 0 && getAttr && getAttr(&major, kAttrCcMajor, i) == 0 &&
        getAttr(&minor, kAttrCcMinor, i) == 0)
      it->computeCapability = major * 10 + minor;
    ++mapped;
  }
  r.state = DetectorState::kUsed;
  r.detail = countOf(static_cast<size_t>(count), "CUDA device") + ", " +
             std::to_string(mapped) + " mapped to a bus id";
  return r;
}

}  // namespace chorus::topo::detail
