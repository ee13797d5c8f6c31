// A stand-in for libcudart.so, loaded by the CUDA detector through DetectOptions::cudaLibrary.
// It knows the four GPUs of fake_nvml.cc, numbered in another order than their bus ids (as CUDA
// does by default, fastest first): CUDA device 0 is 0000:0f:00.0, 1 is 0000:07:00.0, 2 is
// 0000:4e:00.0, 3 is 0000:47:00.0. Every one has compute capability 8.0.
#include <cstdio>

namespace {
constexpr int kSuccess = 0, kInvalidValue = 1, kInvalidDevice = 101;
constexpr int kDevices = 4;
const unsigned kBus[kDevices] = {0x0f, 0x07, 0x4e, 0x47};
constexpr int kAttrCcMajor = 75, kAttrCcMinor = 76;
}  // namespace

extern "C" {

int cudaGetDeviceCount(int* count) {
  *count = kDevices;
  return kSuccess;
}

int cudaDeviceGetPCIBusId(char* buf, int len, int device) {
  if (device < 0 || device >= kDevices) return kInvalidDevice;
  if (len < 13) return kInvalidValue;
  std::snprintf(buf, static_cast<size_t>(len), "0000:%02X:00.0", kBus[device]);
  return kSuccess;
}

int cudaDeviceGetAttribute(int* value, int attr, int device) {
  if (device < 0 || device >= kDevices) return kInvalidDevice;
  if (attr == kAttrCcMajor) *value = 8;
  else if (attr == kAttrCcMinor) *value = 0;
  else return kInvalidValue;
  return kSuccess;
}

const char* cudaGetErrorString(int rc) { return rc == kSuccess ? "no error" : "fake CUDA error"; }

}  // extern "C"
