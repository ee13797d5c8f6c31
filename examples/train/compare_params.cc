// chorus-train-compare A B [--tol X]: compares two --dump-params files tensor by tensor and
// prints ||a - b|| / ||a|| for each, then the worst. Exits 1 when the worst exceeds the
// tolerance or the files do not describe the same tensors, 2 on a usage or read error.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Tensor {
  std::string name;
  std::vector<float> data;
};

std::vector<Tensor> load(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path + ": " + std::strerror(errno));
  char magic[4];
  uint32_t count = 0;
  in.read(magic, 4);
  in.read(reinterpret_cast<char*>(&count), 4);
  if (!in || std::memcmp(magic, "CTPD", 4) != 0) {
    throw std::runtime_error(path + " is not a chorus-train --dump-params file");
  }
  std::vector<Tensor> out(count);
  for (auto& t : out) {
    uint32_t len = 0;
    int64_t numel = 0;
    in.read(reinterpret_cast<char*>(&len), 4);
    if (!in || len > 4096) throw std::runtime_error(path + ": bad tensor name length");
    t.name.resize(len);
    in.read(t.name.data(), len);
    in.read(reinterpret_cast<char*>(&numel), 8);
    if (!in || numel < 0 || numel > (int64_t(1) << 34)) {
      throw std::runtime_error(path + ": bad element count for " + t.name);
    }
    t.data.resize(size_t(numel));
    in.read(reinterpret_cast<char*>(t.data.data()), std::streamsize(4 * numel));
    if (!in) throw std::runtime_error(path + " is truncated in " + t.name);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files;
  double tol = 1e-5;
  bool verbose = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--tol" && i + 1 < argc) {
      tol = std::atof(argv[++i]);
    } else if (a == "-v" || a == "--verbose") {
      verbose = true;
    } else if (a.rfind("-", 0) == 0) {
      std::fprintf(stderr, "usage: chorus-train-compare REFERENCE OTHER [--tol X] [-v]\n");
      return 2;
    } else {
      files.push_back(a);
    }
  }
  if (files.size() != 2) {
    std::fprintf(stderr, "usage: chorus-train-compare REFERENCE OTHER [--tol X] [-v]\n");
    return 2;
  }
  std::vector<Tensor> a, b;
  try {
    a = load(files[0]);
    b = load(files[1]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "chorus-train-compare: %s\n", e.what());
    return 2;
  }
  if (a.size() != b.size()) {
    std::fprintf(stderr, "chorus-train-compare: %zu tensors in %s, %zu in %s\n", a.size(),
                 files[0].c_str(), b.size(), files[1].c_str());
    return 1;
  }
  double worst = 0;
  std::string worstName;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].name != b[i].name || a[i].data.size() != b[i].data.size()) {
      std::fprintf(stderr, "chorus-train-compare: tensor %zu is %s[%zu] vs %s[%zu]\n", i,
                   a[i].name.c_str(), a[i].data.size(), b[i].name.c_str(), b[i].data.size());
      return 1;
    }
    double diff = 0, norm = 0;
    for (size_t j = 0; j < a[i].data.size(); ++j) {
      double d = double(a[i].data[j]) - double(b[i].data[j]);
      diff += d * d;
      norm += double(a[i].data[j]) * double(a[i].data[j]);
    }
    double ratio = norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
    if (!std::isfinite(ratio)) ratio = INFINITY;
    if (verbose) std::printf("%-16s %12zu  %.3e\n", a[i].name.c_str(), a[i].data.size(), ratio);
    if (!(ratio <= worst)) {
      worst = ratio;
      worstName = a[i].name;
    }
  }
  const bool ok = worst <= tol;
  std::printf("worst ||dp||/||p|| = %.3e (%s) over %zu tensors: %s (tolerance %.1e)\n", worst,
              worstName.empty() ? "-" : worstName.c_str(), a.size(), ok ? "ok" : "FAIL", tol);
  return ok ? 0 : 1;
}
