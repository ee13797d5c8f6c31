// The Python module chorus_torch._C: the process group class, unique ids, the quantized
// collectives and local quantization. chorus_torch/__init__.py registers the backend.
#include <torch/csrc/utils/pybind.h>
#include <torch/extension.h>

#include <pybind11/chrono.h>

#include "process_group.h"

namespace py = pybind11;
using chorus_torch::ProcessGroupChorus;
using chorus_torch::QuantOptions;

namespace {

ProcessGroupChorus& chorusGroup(const c10::intrusive_ptr<c10d::ProcessGroup>& pg,
                                const char* fn) {
  auto* g = dynamic_cast<ProcessGroupChorus*>(pg.get());
  TORCH_CHECK(g, "chorus_torch.", fn, ": the group is a '", pg->getBackendName(),
              "' process group, not a chorus one");
  return *g;
}

QuantOptions quantOptions(int bits, const std::string& mode, const std::string& rounding,
                          int64_t groupSize, uint64_t seed) {
  QuantOptions q;
  q.bits = bits;
  q.mode = mode;
  q.rounding = rounding;
  q.groupSize = groupSize;
  q.seed = seed;
  return q;
}

chorusDataType_t quantType(const at::Tensor& t, const char* fn) {
  switch (t.scalar_type()) {
    case at::kFloat: return chorusFloat32;
    case at::kHalf: return chorusFloat16;
    case at::kBFloat16: return chorusBfloat16;
    default:
      TORCH_CHECK(false, "chorus_torch.", fn, ": dtype ", c10::toString(t.scalar_type()),
                  " cannot be quantized (float32, float16 and bfloat16 can)");
  }
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "chorus collectives as a torch.distributed backend (see chorus_torch)";
  // The c10d classes we derive from and return are registered by torch's own module.
  py::module_::import("torch.distributed");

  py::class_<ProcessGroupChorus, c10d::ProcessGroup, c10::intrusive_ptr<ProcessGroupChorus>>(
      m, "ProcessGroupChorus")
      .def(py::init([](py::bytes uniqueId, int rank, int size, double timeoutSeconds) {
             const auto ms = std::chrono::milliseconds(
                 static_cast<int64_t>(timeoutSeconds * 1000.0));
             std::string id = uniqueId;
             py::gil_scoped_release release;  // joining waits for the other ranks
             return c10::make_intrusive<ProcessGroupChorus>(id, rank, size, ms);
           }),
           py::arg("unique_id"), py::arg("rank"), py::arg("size"), py::arg("timeout_seconds"))
      .def("stats", &ProcessGroupChorus::stats, py::call_guard<py::gil_scoped_release>(),
           "Traffic per transport and collectives per algorithm (chorusCommGetStats).");

  m.def("unique_id", [] { return py::bytes(ProcessGroupChorus::makeUniqueId()); },
        "A fresh chorus unique id; its rendezvous store is served by this process.");

  m.def(
      "_all_reduce_quantized",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg, at::Tensor tensor,
         const std::string& op, int bits, const std::string& mode, const std::string& rounding,
         int64_t groupSize, uint64_t seed) {
        return chorusGroup(pg, "all_reduce_quantized")
            .allreduceQuantized(tensor, op, quantOptions(bits, mode, rounding, groupSize, seed));
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_reduce_scatter_quantized",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg, at::Tensor output, at::Tensor input,
         const std::string& op, int bits, const std::string& mode, const std::string& rounding,
         int64_t groupSize, uint64_t seed) {
        return chorusGroup(pg, "reduce_scatter_quantized")
            .reduceScatterQuantized(output, input, op,
                                    quantOptions(bits, mode, rounding, groupSize, seed));
      },
      py::call_guard<py::gil_scoped_release>());
  m.def(
      "_all_gather_quantized",
      [](const c10::intrusive_ptr<c10d::ProcessGroup>& pg, at::Tensor output, at::Tensor input,
         int bits, const std::string& mode, const std::string& rounding, int64_t groupSize,
         uint64_t seed) {
        return chorusGroup(pg, "all_gather_quantized")
            .allgatherQuantized(output, input, quantOptions(bits, mode, rounding, groupSize, seed));
      },
      py::call_guard<py::gil_scoped_release>());

  m.def("_quantized_size", [](int64_t count, int bits, const std::string& mode,
                              const std::string& rounding, int64_t groupSize, uint64_t seed) {
    TORCH_CHECK(count >= 0, "chorus_torch.quantized_size: negative count ", count);
    const chorusQuantConfig_t cfg =
        quantOptions(bits, mode, rounding, groupSize, seed).config();
    size_t bytes = 0;
    chorusResult_t r = chorusQuantizedSize(static_cast<size_t>(count), &cfg, &bytes);
    TORCH_CHECK(r == chorusSuccess, "chorus_torch.quantized_size: ", chorusGetErrorString(r), ": ",
                chorusGetLastError(nullptr));
    return static_cast<int64_t>(bytes);
  });
  m.def("_quantize", [](at::Tensor input, at::Tensor out, int bits, const std::string& mode,
                        const std::string& rounding, int64_t groupSize, uint64_t seed) {
    TORCH_CHECK(input.device().is_cpu() && out.device().is_cpu(),
                "chorus_torch.quantize: CPU tensors only");
    TORCH_CHECK(out.scalar_type() == at::kByte && out.is_contiguous(),
                "chorus_torch.quantize: the output must be a contiguous uint8 tensor");
    const chorusDataType_t dt = quantType(input, "quantize");
    at::Tensor in = input.contiguous();
    const chorusQuantConfig_t cfg = quantOptions(bits, mode, rounding, groupSize, seed).config();
    size_t bytes = 0;
    chorusResult_t r = chorusQuantizedSize(in.numel(), &cfg, &bytes);
    TORCH_CHECK(r == chorusSuccess && static_cast<size_t>(out.numel()) == bytes,
                "chorus_torch.quantize: the output has ", out.numel(), " bytes, expected ", bytes);
    {
      py::gil_scoped_release release;
      r = chorusQuantize(in.data_ptr(), out.data_ptr(), in.numel(), dt, &cfg, nullptr);
    }
    TORCH_CHECK(r == chorusSuccess, "chorus_torch.quantize: ", chorusGetErrorString(r), ": ",
                chorusGetLastError(nullptr));
  });
  m.def("_dequantize", [](at::Tensor quantized, at::Tensor out, int bits, const std::string& mode,
                          const std::string& rounding, int64_t groupSize, uint64_t seed) {
    TORCH_CHECK(quantized.device().is_cpu() && out.device().is_cpu(),
                "chorus_torch.dequantize: CPU tensors only");
    TORCH_CHECK(quantized.scalar_type() == at::kByte && quantized.is_contiguous(),
                "chorus_torch.dequantize: the quantized data must be a contiguous uint8 tensor");
    TORCH_CHECK(out.is_contiguous(), "chorus_torch.dequantize: the output must be contiguous");
    const chorusDataType_t dt = quantType(out, "dequantize");
    const chorusQuantConfig_t cfg = quantOptions(bits, mode, rounding, groupSize, seed).config();
    size_t bytes = 0;
    chorusResult_t r = chorusQuantizedSize(out.numel(), &cfg, &bytes);
    TORCH_CHECK(r == chorusSuccess && static_cast<size_t>(quantized.numel()) == bytes,
                "chorus_torch.dequantize: ", out.numel(), " elements take ", bytes,
                " quantized bytes, got ", quantized.numel());
    {
      py::gil_scoped_release release;
      r = chorusDequantize(quantized.data_ptr(), out.data_ptr(), out.numel(), dt, &cfg, nullptr);
    }
    TORCH_CHECK(r == chorusSuccess, "chorus_torch.dequantize: ", chorusGetErrorString(r), ": ",
                chorusGetLastError(nullptr));
  });
}
