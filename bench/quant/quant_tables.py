#!/usr/bin/env python3
"""Markdown tables from the quantized-collective benchmarks (bench/quant/*.sh).

    quant_tables.py errors error.csv trials.csv     (error_table.sh)

The CSV rows of quant_probe start with kind,layout,W,coll,quant,asked,ran,count; layout is
"flat" or the pretend hosts' sizes joined with "+". Exit status 1 when a check fails: a row
whose ranks disagree on the algorithm.
"""
import argparse
import csv
import math
import sys



def layout_name(layout, w):
    if layout == "flat":
        return f"flat {w}"
    sizes = layout.split("+")
    if len(set(sizes)) == 1:
        return f"{len(sizes)}x{sizes[0]}"
    return "hosts " + ",".join(sizes)


def pct(x):
    x *= 100
    return f"{x:.3g}%" if x < 10 else f"{x:.1f}%"


def short(algo):
    return {"quant_direct": "1-hop", "quant_two_hop": "2-hop", "quant_ring": "ring",
            "quant_hier": "rail"}.get(algo, algo)


def table(head, rows, align=None):
    align = align or ["---"] + ["---:"] * (len(head) - 1)
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join(align) + " |"]
    lines += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def read(path, fields):
    with open(path) as f:
        return [dict(zip(fields, r)) for r in csv.reader(f) if r]


COMMON = ["kind", "layout", "W", "coll", "quant", "asked", "ran", "count"]

# ---- errors ------------------------------------------------------------------------------


def errors(args):
    rows = read(args.error_csv, COMMON + ["rel", "signed", "elements"])
    bad = [r for r in rows if r["ran"] in ("MIXED", "?")]
    for r in rows:
        r["rel"] = float(r["rel"])
        r["W"] = int(r["W"])
    order = []
    for r in rows:
        key = (r["layout"], r["W"])
        if key not in order:
            order.append(key)
    algos = ["quant_direct", "quant_two_hop", "quant_ring"]

    def get(layout, w, coll, quant, asked):
        for r in rows:
            if (r["layout"], r["W"], r["coll"], r["quant"], r["asked"]) == (layout, w, coll, quant, asked):
                return r
        return None

    def cell(r):
        if r is None:
            return "—"
        return pct(r["rel"])

    out = [f"Relative L2 error against the exact (fp64) result, N(0,1) inputs, sum; "
           f"reduce-scatter recvcount {rows[0]['count']} (input W x recvcount float32 per rank). "
           "\"ran\" is the algorithm the statistics name: the 2-hop builds its 1-hop form "
           "on one host, on hosts of one rank and on unequal hosts."]
    groups = ["32", "128", "256", "1024", "4096"]
    for bits in ("8", "4"):
        out.append(f"\n### Reduce-scatter, int{bits} symmetric, round to nearest, by group size\n")
        body = []
        for layout, w in order:
            for a in algos:
                rs = [get(layout, w, "reducescatter", f"int{bits}:{g}", a) for g in groups]
                ran = {r["ran"] for r in rs if r}
                body.append([layout_name(layout, w), w, short(a), ", ".join(short(x) for x in sorted(ran))]
                            + [cell(r) for r in rs])
        out.append(table(["layout", "W", "asked", "ran"] + [f"g={g}" for g in groups], body,
                         ["---", "---:", "---", "---"] + ["---:"] * len(groups)))

    out.append("\n### Reduce-scatter at group 256 by W (symmetric, nearest)\n")
    body = []
    for layout, w in order:
        line = [layout_name(layout, w), w]
        for bits in ("8", "4"):
            for a in algos:
                r = get(layout, w, "reducescatter", f"int{bits}:256", a)
                line.append("—" if r is None else f"{pct(r['rel'])} ({short(r['ran'])})")
        body.append(line)
    out.append(table(["layout", "W"] + [f"int{b} {short(a)}" for b in ("8", "4") for a in algos], body))

    out.append("\n### Reduce-scatter at group 256: rounding and mode\n")
    body = []
    for layout, w in order:
        for a in algos:
            line = [layout_name(layout, w), w, short(a)]
            ran = None
            for bits in ("8", "4"):
                for suffix in ("", ":stochastic=1", ":asym"):
                    r = get(layout, w, "reducescatter", f"int{bits}:256{suffix}", a)
                    ran = r["ran"] if r else ran
                    line.append(cell(r))
            line.insert(3, short(ran))
            body.append(line)
    out.append(table(["layout", "W", "asked", "ran"] + [f"int{b} {m}" for b in ("8", "4")
                                                        for m in ("nearest", "stochastic", "asym")],
                     body, ["---", "---:", "---", "---"] + ["---:"] * 6))

    out.append("\n### All-gather (qwZ) and all-reduce at group 256 (symmetric, nearest)\n")
    body = []
    for layout, w in order:
        for a in ("quant_direct", "quant_two_hop"):
            ag = [r for r in rows if (r["layout"], r["W"], r["coll"]) == (layout, w, "allgather")
                  and r["asked"] in (a if a == "quant_direct" else "quant_hier",)]
            ar = [r for r in rows if (r["layout"], r["W"], r["coll"], r["asked"]) == (layout, w, "allreduce", a)]
            if not ag and not ar:
                continue
            pick = lambda rs, q: next((r for r in rs if r["quant"] == q), None)  # noqa: E731
            g8, g4, a8, a4 = pick(ag, "int8:256"), pick(ag, "int4:256"), pick(ar, "int8:256"), pick(ar, "int4:256")
            body.append([layout_name(layout, w), w, "1-hop set" if a == "quant_direct" else "host-aware set",
                         short(g8["ran"]) if g8 else "—", cell(g8), cell(g4),
                         short(a8["ran"]) if a8 else "—", cell(a8), cell(a4)])
    out.append("CHORUS_ALGO: the 1-hop set asks allgather:quant_direct and allreduce:quant_direct, "
               "the host-aware set allgather:quant_hier and allreduce:quant_two_hop; \"ran\" is what "
               "the statistics name. The all-reduce quantizes every value twice on its way (1-hop: "
               "the input, then the owner's sum for the all-gather) or three times (2-hop: also the "
               "host's sum).\n")
    out.append(table(["layout", "W", "asked", "all-gather ran", "AG int8", "AG int4", "all-reduce ran",
                      "AR int8", "AR int4"], body,
                     ["---", "---:", "---", "---", "---:", "---:", "---", "---:", "---:"]))

    # Targets: group 256, symmetric nearest, the 2-hop on >= 2 hosts.
    out.append("\n### Targets (group 256, symmetric, nearest)\n")
    two = [r for r in rows if r["coll"] == "reducescatter" and r["ran"] == "quant_two_hop"
           and r["quant"] in ("int8:256", "int4:256")]
    lines = []
    for bits, bound in (("8", 0.011), ("4", 0.19)):
        rs = [r for r in two if r["quant"] == f"int{bits}:256"]
        if rs:
            hi = max(rs, key=lambda r: r["rel"])
            lo = min(rs, key=lambda r: r["rel"])
            ok = all(r["rel"] <= bound for r in rs)
            lines.append(f"- 2-hop int{bits} on {len(rs)} layouts of 2+ hosts (W "
                         f"{', '.join(str(r['W']) for r in rs)}): {pct(lo['rel'])} – {pct(hi['rel'])}, "
                         f"target <= {pct(bound)}: {'met' if ok else 'MISSED'}")
        ring = sorted(((r["W"], r["rel"]) for r in rows if r["coll"] == "reducescatter"
                       and r["ran"] == "quant_ring" and r["quant"] == f"int{bits}:256"
                       and r["layout"] == "flat"))
        if ring:
            lines.append(f"- ring int{bits}, flat, by W: " +
                         ", ".join(f"W={w} {pct(e)}" for w, e in ring))
    out.append("\n".join(lines))

    if args.trials_csv:
        out.append(trials(args.trials_csv))
    if bad:
        out.append("\nRows whose algorithm is unknown or differs between ranks: " +
                   "; ".join(f"{r['layout']} {r['coll']} {r['quant']} {r['asked']}" for r in bad))
    print("\n".join(out))
    return 1 if bad else 0


def trials(path):
    raw = list(csv.reader(open(path)))
    tr = [dict(zip(COMMON + ["data", "k", "mean_rel", "single_rel"], r)) for r in raw if r and r[0] == "trial"]
    bias = [dict(zip(COMMON + ["data", "trials", "mean", "se", "z", "mean_exact", "samples"], r))
            for r in raw if r and r[0] == "bias"]
    ks = sorted({int(r["k"]) for r in tr})
    out = ["\n### Unbiasedness: stochastic against nearest rounding\n",
           f"Fixed inputs, {bias[0]['trials'] if bias else '?'} calls (stochastic: seeds 1, 2, ...). "
           "\"error of the mean of k\": relative L2 error of the average of the first k results — "
           "for an unbiased rounding it falls as 1/sqrt(k) (\"1/sqrt(k) model\": the single-call "
           "error / sqrt(k)), for a biased one it stays. \"mean signed error\": over all elements "
           "and calls, with its standard error from the sample variance (z = mean / s.e.; nearest "
           "rounding repeats its errors in every call, so there only the elements count as samples). "
           "Outlier data: each group one 8, the rest 0.02 + 0.01 N(0,1), below half a code step.\n"]
    body = []
    for b in bias:
        key = (b["layout"], b["asked"], b["quant"], b["data"])
        rs = {int(r["k"]): r for r in tr if (r["layout"], r["asked"], r["quant"], r["data"]) == key}
        single = float(rs[max(rs)]["single_rel"])
        cells = []
        for k in ks:
            model = single / math.sqrt(k)
            cells.append(f"{pct(float(rs[k]['mean_rel']))} ({pct(model)})" if k in rs else "—")
        mean, se, mx = float(b["mean"]), float(b["se"]), float(b["mean_exact"])
        rel = f"{mean / mx * 100:+.2g}%" if b["data"] == "outlier" else "—"
        body.append([layout_name(b["layout"], int(b["W"])), short(b["ran"]), b["data"], b["quant"]] + cells +
                     [f"{mean:.2g}", f"{se:.2g}", f"{float(b['z']):.1f}", f"{mx:.3g}", rel])
    out.append(table(["layout", "ran", "data", "config"] + [f"error of mean of {k} (1/sqrt(k) model)" for k in ks]
                     + ["mean signed error", "s.e.", "z", "mean exact", "bias / mean exact"], body,
                     ["---"] * 4 + ["---:"] * (len(ks) + 5)))
    return "\n".join(out)

def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    e = sub.add_parser("errors")
    e.add_argument("error_csv")
    e.add_argument("trials_csv", nargs="?")
    args = p.parse_args()
    return {"errors": errors}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
