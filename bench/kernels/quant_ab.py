#!/usr/bin/env python3
"""Two kernels_bench binaries' quantization kernels in one interleaved run (before / after).

    bench/kernels/quant_ab.py run ROUNDS OUT.json before=OLD_BINARY after=NEW_BINARY [FILTER]
    bench/kernels/quant_ab.py table OUT.json

`run` alternates the binaries ROUNDS times; each call is one `nice -n 19 kernels_bench
--benchmark_filter=FILTER` (default '^quant', which includes the quant_memcpy yardsticks) with
random interleaving and --benchmark_min_time=0.2, so both binaries see the same stretch of a
shared machine's load. `table` prints, per size, each kernel's median GB/s of the two binaries
and its ratio to memcpy: the median of its quant_memcpy yardstick over every call of both binaries
(memcpy is the same glibc code in both, so its samples are pooled: twice as many).
"""
import json
import statistics
import subprocess
import sys
import tempfile

KERNELS = ["quantize", "dequantize", "dequantize_accumulate", "dequantize_reduce",
           "dequantize_reduce_quantize"]
CONFIGS = ["int8-sym-rtn", "int8-asym-rtn", "int8-sym-sr", "int4-sym-rtn", "int4-asym-rtn",
           "int4-sym-sr"]
TYPES = ["float32", "bfloat16", "float16"]


def run(rounds, out, variants, pattern):
    samples, touched = {}, {}
    for _ in range(rounds):
        for label, binary in variants:
            with tempfile.NamedTemporaryFile(suffix=".json") as f:
                subprocess.run(["nice", "-n", "19", binary, "--benchmark_filter=" + pattern,
                                "--benchmark_min_time=0.2",
                                "--benchmark_enable_random_interleaving=true",
                                "--benchmark_out=" + f.name, "--benchmark_out_format=json"],
                               check=True, stdout=subprocess.DEVNULL)
                for b in json.load(open(f.name))["benchmarks"]:
                    samples.setdefault(b["name"], {}).setdefault(label, []).append(
                        b["bytes_per_second"] / 1e9)
                    if "touched_bytes" in b:
                        touched[b["name"]] = int(b["touched_bytes"])
    with open(out, "w") as f:
        json.dump({"labels": [v[0] for v in variants], "samples": samples, "touched": touched},
                  f)


def table(path):
    with open(path) as f:
        d = json.load(f)
    labels, samples, touched = d["labels"], d["samples"], d["touched"]
    rows = {}
    for name, per in samples.items():
        if not name.startswith("quant/"):
            continue
        _, kernel, dtype, config, size = name.split("/")
        copy = samples["quant_memcpy/%d" % (touched[name] // 2)]
        pooled = statistics.median([x for l in labels for x in copy[l]])
        key = (CONFIGS.index(config) // 3, KERNELS.index(kernel), CONFIGS.index(config),
               TYPES.index(dtype))
        rows.setdefault(size, []).append((key, kernel, dtype, config, per, pooled))
    for size in sorted(rows, key=lambda s: s.endswith("M")):
        print("\n%s\n" % size)
        print("| kernel | type | config | " + " | ".join("%s GB/s" % l for l in labels) +
              " | memcpy GB/s | " + " | ".join("%s ratio" % l for l in labels) + " |")
        print("| --- | --- | --- |" + " ---: |" * (2 * len(labels) + 1))
        for _, kernel, dtype, config, per, pooled in sorted(rows[size]):
            gbs = [statistics.median(per[l]) for l in labels]
            print("| %s | %s | %s | %s | %.1f | %s |" % (
                kernel, dtype, config, " | ".join("%.1f" % g for g in gbs), pooled,
                " | ".join("%.2f" % (g / pooled) for g in gbs)))


def main():
    if len(sys.argv) >= 6 and sys.argv[1] == "run":
        variants = [v.split("=", 1) for v in sys.argv[4:6]]
        run(int(sys.argv[2]), sys.argv[3], variants, sys.argv[6] if len(sys.argv) > 6 else "^quant")
        return 0
    if len(sys.argv) == 3 and sys.argv[1] == "table":
        table(sys.argv[2])
        return 0
    print(__doc__.strip(), file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
