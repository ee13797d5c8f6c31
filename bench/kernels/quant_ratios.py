#!/usr/bin/env python3
"""The quantization kernels against memcpy of the same bytes, from a kernels_bench JSON file.

    kernels_bench --benchmark_filter='^quant' --benchmark_repetitions=5 \\
        --benchmark_enable_random_interleaving=true --benchmark_report_aggregates_only=true \\
        --benchmark_out=q.json --benchmark_out_format=json
    bench/kernels/quant_ratios.py q.json

Each quant/<kernel>/<type>/<config>/<size> benchmark reports bytes_per_second on the bytes it
touches and the counter touched_bytes; its yardstick is quant_memcpy/<touched_bytes / 2>, which
touches as many. Prints one Markdown table per size with the medians (GB/s, 1e9 bytes) and the
ratio kernel / memcpy, and exits 1 when a benchmark has no yardstick.
"""
import json
import sys

# Row order: kernel, then width and config, then type (the benchmark's registration order is
# lost when repetitions are interleaved).
KERNELS = ["quantize", "dequantize", "dequantize_accumulate", "dequantize_reduce",
           "dequantize_reduce_quantize"]
CONFIGS = ["int8-sym-rtn", "int8-asym-rtn", "int8-sym-sr", "int4-sym-rtn", "int4-asym-rtn",
           "int4-sym-sr"]
TYPES = ["float32", "bfloat16", "float16"]


def order(row):
    kernel, dtype, config = row[:3]
    return (CONFIGS.index(config) // 3, KERNELS.index(kernel), CONFIGS.index(config),
            TYPES.index(dtype))


def medians(path):
    with open(path) as f:
        runs = json.load(f)["benchmarks"]
    out = {}
    for r in runs:
        if r.get("run_type") == "aggregate" and r.get("aggregate_name") != "median":
            continue
        out[r.get("run_name", r["name"])] = r
    return out


def main():
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    runs = medians(sys.argv[1])
    rows = {}
    missing = 0
    for name, r in runs.items():
        if not name.startswith("quant/"):
            continue
        _, kernel, dtype, config, size = name.split("/")
        copy = runs.get("quant_memcpy/%d" % (int(r["touched_bytes"]) // 2))
        if copy is None:
            print("no quant_memcpy for %s" % name, file=sys.stderr)
            missing += 1
            continue
        rows.setdefault(size, []).append(
            (kernel, dtype, config, r["bytes_per_second"] / 1e9,
             copy["bytes_per_second"] / 1e9))
    for size, table in sorted(rows.items(), key=lambda kv: kv[0].endswith("M")):
        table.sort(key=order)
        print("\n%s (the kernel's unquantized data)\n" % size)
        print("| kernel | type | config | GB/s | memcpy GB/s | ratio |")
        print("| --- | --- | --- | ---: | ---: | ---: |")
        for kernel, dtype, config, gbs, copy in table:
            print("| %s | %s | %s | %.1f | %.1f | %.2f |" % (kernel, dtype, config, gbs, copy,
                                                            gbs / copy))
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
