#!/usr/bin/env python3
"""Markdown tables from the quantized-collective benchmarks (bench/quant/*.sh).

    quant_tables.py errors error.csv trials.csv [--netns netns.csv]   (error_table.sh)
    quant_tables.py bytes bytes.csv                 (bytes_table.sh)
    quant_tables.py speed speed.csv --size 64M --ag-size 64M   (netns_speed.sh)

The CSV rows of quant_probe start with kind,layout,W,coll,quant,asked,ran,count; layout is
"flat" or the pretend hosts' sizes joined with "+". Exit status 1 when a check fails: a bytes
row that differs from its formula, or a row whose ranks disagree on the algorithm.
"""
import argparse
import csv
import math
import statistics
import sys

HEADER_BYTES = 112  # the consistency header, once per peer of the schedule per call


def layout_name(layout, w):
    if layout == "flat":
        return f"flat {w}"
    sizes = layout.split("+")
    if len(set(sizes)) == 1:
        return f"{len(sizes)}x{sizes[0]}"
    return "hosts " + ",".join(sizes)


def hosts_of(layout, w):
    """Per rank, its host; pretend hosts are contiguous ranks."""
    if layout == "flat":
        return [0] * w
    out = []
    for h, size in enumerate(layout.split("+")):
        out += [h] * int(size)
    return out


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
    rows = read(args.error_csv, COMMON + ["rel", "signed", "elements", "digest"])
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
    mismatched = []
    if args.netns:
        text, mismatched = netns_rows(args.netns, rows)
        out.append(text)
    if bad:
        out.append("\nRows whose algorithm is unknown or differs between ranks: " +
                   "; ".join(f"{r['layout']} {r['coll']} {r['quant']} {r['asked']}" for r in bad))
    print("\n".join(out))
    return 1 if bad or mismatched else 0


def netns_rows(path, pretend):
    """The netns rows (layout "netns-2+2") beside their pretend-host twins: the same results?"""
    rows = read(path, COMMON + ["rel", "signed", "elements", "digest"])
    twins = {(r["layout"], r["W"], r["coll"], r["quant"], r["asked"]): r for r in pretend}
    body, mismatched = [], []
    for r in rows:
        layout = r["layout"].removeprefix("netns-")
        w = int(r["W"])
        t = twins.get((layout, w, r["coll"], r["quant"], r["asked"]))
        same = (t is not None and t.get("digest") == r["digest"] and t["ran"] == r["ran"]
                and t["rel"] == float(r["rel"]))
        if not same:
            mismatched.append(r)
        body.append([layout_name(layout, w), w, r["coll"], r["quant"], short(r["asked"]),
                     short(r["ran"]),
                     pct(float(r["rel"])), pct(t["rel"]) if t else "—",
                     "yes" if same else "**NO**"])
    head = ("\n### Real hosts (network namespaces) against pretend hosts\n\n"
            "The same jobs on the netns test bed (every host its own network namespace and veth "
            "link; TCP between hosts, shared memory inside one). \"identical\": the same algorithm "
            "ran and every rank's output has the same bytes (a digest over all ranks) as on the "
            "pretend hosts.\n\n")
    text = head + table(["layout", "W", "collective", "config", "asked", "ran", "netns error",
                         "pretend-host error", "identical"], body)
    text += (f"\n\n{len(rows) - len(mismatched)} of {len(rows)} netns rows identical to their "
             "pretend-host twins.")
    return text, mismatched


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

# ---- bytes -------------------------------------------------------------------------------


def quant_parts(q):
    parts = q.split(":")
    bits = int(parts[0][3:])
    group = int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 256
    asym = "asym" in parts
    return bits, group, asym


def block(c, bits, group, asym):
    """Bytes of c elements packed: a record per group, scale (and offset) + codes."""
    if c == 0:
        return 0
    groups = -(-c // group)
    return groups * (8 if asym else 4) + (c if bits == 8 else -(-c // 2))


def even_block(count, parts, i):
    base, extra = divmod(count, parts)
    return i * base + min(i, extra), base + (1 if i < extra else 0)


def formula(r, hosts):
    """(payload intra, payload inter, header peers intra, header peers inter, how) of rank r's
    sends in one call, from the algorithm that ran."""
    n = len(hosts)
    rank = int(r["rank"])
    h = hosts[rank]
    count = int(r["count"])
    bits, group, asym = quant_parts(r["quant"])
    ran, coll = r["ran"], r["coll"]
    same = [p for p in range(n) if p != rank and hosts[p] == h]
    other = [p for p in range(n) if hosts[p] != h]
    H = len(set(hosts))
    L = n // H
    hier = ran in ("quant_two_hop", "quant_hier")
    if coll == "allreduce":
        groups = -(-count // group)
        sl = []
        for p in range(n):
            gb, gc = even_block(groups, n, p)
            sl.append(min(count, (gb + gc) * group) - min(count, gb * group))
        B = [block(c, bits, group, asym) for c in sl]
    else:
        B = [block(count, bits, group, asym)] * n
    local = rank - hosts.index(h)

    def at(hh, k):  # contiguous hosts of L ranks
        return hh * L + k

    if ran == "quant_ring":
        nxt, prv = (rank + 1) % n, (rank - 1) % n
        intra = (n - 1) * B[0] if hosts[nxt] == h else 0
        inter = (n - 1) * B[0] if hosts[nxt] != h else 0
        peers = {nxt, prv}
        return (intra, inter, sum(hosts[p] == h for p in peers), sum(hosts[p] != h for p in peers),
                "(n-1) B to the next rank")
    intra = inter = 0
    how = []
    if coll in ("reducescatter", "allreduce"):
        if hier:
            intra += sum(B[at(hh, k)] for hh in range(H) for k in range(L) if k != local)
            inter += sum(B[at(hh, local)] for hh in range(H) if hh != h)
            how.append("RS: (L-1) H B intra, (H-1) B inter")
        else:
            intra += sum(B[p] for p in same)
            inter += sum(B[p] for p in other)
            how.append("RS: B to each other rank")
    if coll in ("allgather", "allreduce"):
        if hier:
            inter += (H - 1) * B[rank]
            intra += (L - 1) * sum(B[at(hh, local)] for hh in range(H))
            how.append("AG: (H-1) B inter, (L-1) H B intra")
        else:
            intra += len(same) * B[rank]
            inter += len(other) * B[rank]
            how.append("AG: own B to each other rank")
    if hier:
        return intra, inter, L - 1, H - 1, "; ".join(how)
    return intra, inter, len(same), len(other), "; ".join(how)


def bytes_tables(args):
    rows = read(args.bytes_csv, COMMON + ["rank", "host", "s_intra", "s_inter", "r_intra", "r_inter"])
    failures = []
    groups = {}
    for r in rows:
        groups.setdefault((r["layout"], r["W"], r["coll"], r["quant"], r["asked"]), []).append(r)
    body = []
    for key, rs in groups.items():
        layout, w, coll, quant, asked = key
        hosts = hosts_of(layout, int(w))
        ran = {r["ran"] for r in rs}
        if len(ran) != 1 or "MIXED" in ran or "?" in ran:
            failures.append(f"{key}: algorithm {ran}")
            continue
        sums = [sum(int(r[f]) for r in rs) for f in ("s_intra", "s_inter", "r_intra", "r_inter")]
        if sums[0] != sums[2] or sums[1] != sums[3]:
            failures.append(f"{key}: sent {sums[:2]} but received {sums[2:]}")
        # Ranks with the same measurement and formula share a line.
        lines = {}
        for r in rs:
            pi, pe, hi, he, how = formula(r, hosts)
            mi, me = int(r["s_intra"]), int(r["s_inter"])
            good = mi == pi + HEADER_BYTES * hi and me == pe + HEADER_BYTES * he
            if not good:
                failures.append(f"{key} rank {r['rank']}: intra {mi} inter {me}, formula "
                                f"{pi} + {hi} x 112, {pe} + {he} x 112")
            k = (mi, me, pi, pe, hi, he, good, how)
            lines.setdefault(k, []).append(r["rank"])
        for (mi, me, pi, pe, hi, he, good, how), ranks in lines.items():
            body.append([layout_name(layout, int(w)), coll, quant, f"{short(asked)} → {short(next(iter(ran)))}",
                         ",".join(ranks), f"{mi - HEADER_BYTES * hi}", f"{pi}", hi,
                         f"{me - HEADER_BYTES * he}", f"{pe}", he, "yes" if good else "**NO**", how])
    # Summary: int8:256, the largest per-rank payload inside and across hosts, per algorithm.
    summary = {}
    for r in rows:
        if r["quant"] != "int8:256":
            continue
        hosts = hosts_of(r["layout"], int(r["W"]))
        pi, pe, hi, he, _ = formula(r, hosts)
        k = (r["layout"], r["W"], r["coll"])
        cell = summary.setdefault(k, {})
        a = r["ran"]
        mi, me = int(r["s_intra"]) - HEADER_BYTES * hi, int(r["s_inter"]) - HEADER_BYTES * he
        old_i, old_e = cell.get(a, (0, 0))
        cell[a] = (max(old_i, mi), max(old_e, me))
    algos = ["quant_direct", "quant_two_hop", "quant_hier", "quant_ring"]
    sbody = []
    for (layout, w, coll), cell in summary.items():
        line = [layout_name(layout, int(w)), coll]
        for a in algos:
            line.append(f"{cell[a][0]} / {cell[a][1]}" if a in cell else "—")
        sbody.append(line)
    print("Per algorithm that ran, int8:256, count 100000: the most any rank sent inside / across "
          "hosts in one call (payload; headers subtracted). Every rank of every row below is "
          "checked against the formula.\n")
    print(table(["layout", "coll"] + [short(a) for a in algos], sbody, ["---", "---"] + ["---:"] * 4))
    print()
    print(f"Bytes each rank sent during one call (chorusCommGetStats before and after), count "
          f"{rows[0]['count']} elements (per rank for reduce-scatter and all-gather; the whole "
          f"vector for all-reduce). \"measured\" is the statistics minus the consistency headers, "
          f"{HEADER_BYTES} B to each peer of the schedule (\"hdr peers\"); \"formula\" is the "
          f"schedule's payload: a block of c elements is ceil(c/g) records of a 4-byte scale "
          f"(8 asymmetric) and c (int8) or ceil(c/2) (int4) code bytes. Rows of ranks with the "
          f"same numbers are merged. Received bytes equal sent bytes in total in every row.\n")
    print(table(["layout", "coll", "config", "asked → ran", "ranks", "intra measured", "intra formula",
                 "hdr peers", "inter measured", "inter formula", "hdr peers", "exact", "formula"], body,
                ["---"] * 5 + ["---:"] * 6 + ["---", "---"]))
    if failures:
        print("\nMISMATCHES:\n" + "\n".join("- " + f for f in failures))
    return 1 if failures else 0

# ---- speed -------------------------------------------------------------------------------


def size_bytes(s):
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def rate_bps(rate):
    if rate in ("none", "shm"):
        return None
    for unit, m in (("gbit", 1e9), ("mbit", 1e6)):
        if rate.endswith(unit):
            return float(rate[: -len(unit)]) * m
    raise ValueError(rate)


def rate_label(rate):
    return {"none": "no limit", "shm": "one host (shm)"}.get(rate, rate)


def speed(args):
    rows = read(args.speed_csv, ["rate", "coll", "config", "rep", "us", "ran", "load"])
    runs, ran, loads = {}, {}, {}
    for r in rows:
        key = (r["rate"], r["coll"], r["config"])
        runs.setdefault(key, []).append(float(r["us"]))
        ran.setdefault(key, set()).add(r["ran"])
        loads.setdefault(key, []).append(float(r["load"] or "nan"))
    med = {k: statistics.median(v) for k, v in runs.items()}
    rates = []
    for r in rows:
        if r["rate"] not in rates:
            rates.append(r["rate"])
    limited = [r for r in rates if rate_bps(r)]
    n, L, H = 4, 2, 2
    recv = size_bytes(args.size) // 4 // n  # reduce-scatter recvcount (float32)
    out = []

    def best(rate, coll, prefix):
        cands = [(med[k], k[2]) for k in med if k[0] == rate and k[1] == coll and k[2].startswith(prefix)]
        return min(cands) if cands else (None, None)

    def ms(us):
        return f"{us / 1000:.1f}" if us >= 1000 else f"{us / 1000:.2f}"

    # Bytes each host sends over its link per call (payload, from the schedules).
    wire = {"fp32 hier": L * (H - 1) * recv * 4,
            "fp32 ring": (n - 1) * recv * 4,  # the host-aware ring: n-1 slices cross each boundary
            "int4": L * (H - 1) * block(recv, 4, 256, False),
            "int8": L * (H - 1) * block(recv, 8, 256, False)}

    out.append(f"### Reduce-scatter, 2 hosts x 2 ranks, {args.size} float32 input per rank\n")
    out.append("Medians in ms per call, the runs in job order; speed-up = the best fp32 median at "
               "that link / this median; load = the machine's 1-minute load average before each "
               "job (median), which tells runs on a busy machine apart.\n")
    body = []
    for rate in rates:
        bf, bname = best(rate, "reducescatter", "fp32")
        for cfg in ("fp32 tuned", "fp32 hier", "fp32 ring", "int4", "int8"):
            k = (rate, "reducescatter", cfg)
            if k not in med:
                continue
            body.append([rate_label(rate), cfg, ",".join(sorted(ran[k])), ms(med[k]),
                         " ".join(ms(x) for x in runs[k]),
                         f"{bf / med[k]:.2f}x" + (" (best fp32)" if cfg == bname else ""),
                         f"{statistics.median(loads[k]):.1f}"])
    out.append(table(["link", "config", "ran", "median ms", "runs ms", "speed-up vs best fp32", "load"],
                     body, ["---", "---", "---", "---:", "---:", "---:", "---:"]))

    out.append("\n### Where the time goes (reduce-scatter)\n")
    out.append("wire = the bytes each host sends over its link per call (payload, from the schedule; "
               "TCP/IP framing adds ~4.5% at a 1500-byte MTU) / the rate. \"no limit\": no tbf, the "
               "wire is TCP over veth on the same two cores as the ranks. \"effective\" = those bytes "
               "/ the no-limit median.\n")
    body = []
    for cfg in ("fp32 hier", "fp32 ring", "int4", "int8"):
        line = [cfg, f"{wire[cfg] / 2**20:.2f} MiB"]
        for rate in limited:
            k = (rate, "reducescatter", cfg)
            w_ms = wire[cfg] / (rate_bps(rate) / 8) * 1e3
            line.append(f"{ms(med[k])} (wire {w_ms:.1f})" if k in med else "—")
        k = ("none", "reducescatter", cfg)
        line.append(f"{ms(med[k])} ({wire[cfg] * 8 / (med[k] * 1e-6) / 1e9:.2f} Gbit/s)" if k in med else "—")
        body.append(line)
    out.append(table(["config", "bytes per host link"] + [f"{r}: ms (wire ms)" for r in limited]
                     + ["no limit: ms (effective)"], body))

    # Where quantization stops paying: fp32's time ~ its time without a network (shm) + its wire
    # bytes / R; the quantized time ~ its no-limit time (mostly work, its wire is small). Equal at
    # R* = fp32 wire bits / (quantized no-limit - fp32 shm).
    f_shm, f_shm_name = best("shm", "reducescatter", "fp32")
    notes = []
    for cfg in ("int4", "int8"):
        q_none = med.get(("none", "reducescatter", cfg))
        q_shm = med.get(("shm", "reducescatter", cfg))
        if q_none and f_shm and q_none <= f_shm:
            notes.append(f"{cfg}: {ms(q_none)} ms without a limit, faster than fp32 with no network at "
                         f"all ({f_shm_name} on one host over shm, {ms(f_shm)} ms): it pays at every link "
                         f"rate on this machine" + (f"; on one host quant_direct takes {ms(q_shm)} ms"
                                                    if q_shm else ""))
        elif q_none and f_shm:
            rstar = wire["fp32 hier"] * 8 / ((q_none - f_shm) * 1e-6)
            notes.append(f"{cfg}: {ms(q_none)} ms without a limit against fp32's {ms(f_shm)} ms on one "
                         f"host (shm) → pays while the link moves less than ~{rstar / 1e9:.1f} Gbit/s per "
                         f"host (fp32 hier's {wire['fp32 hier'] / 2**20:.0f} MiB in the {ms(q_none - f_shm)} ms "
                         f"difference)" + (f"; on one host quant_direct takes {ms(q_shm)} ms, "
                                          f"{q_shm / f_shm:.1f}x fp32's" if q_shm else ""))
    if notes:
        out.append("\nWhere quantization stops paying (fp32 ≈ its one-host time + its wire bytes / rate; "
                   "quantized ≈ its no-limit time):\n")
        out.append("\n".join("- " + x for x in notes))

    ag_rates = [r for r in rates if any(k[0] == r and k[1] == "allgather" for k in med)]
    if ag_rates:
        out.append(f"\n### All-gather (qwZ), 2 hosts x 2 ranks, {args.ag_size} float32 output per rank\n")
        body = []
        for rate in ag_rates:
            f32, _ = best(rate, "allgather", "fp32")
            b16, _ = best(rate, "allgather", "bf16")
            for cfg in ("fp32 tuned", "fp32 hier", "fp32 ring", "bf16 tuned", "bf16 hier", "bf16 ring", "int8"):
                k = (rate, "allgather", cfg)
                if k not in med:
                    continue
                body.append([rate_label(rate), cfg, ",".join(sorted(ran[k])), ms(med[k]),
                             " ".join(ms(x) for x in runs[k]), f"{f32 / med[k]:.2f}x", f"{b16 / med[k]:.2f}x",
                             f"{statistics.median(loads[k]):.1f}"])
        out.append(table(["link", "config", "ran", "median ms", "runs ms", "vs best fp32", "vs best bf16", "load"],
                         body, ["---", "---", "---", "---:", "---:", "---:", "---:", "---:"]))

    out.append("\n### Targets\n")
    t = []
    for rate in limited:
        bf, bname = best(rate, "reducescatter", "fp32")
        for cfg, goal in (("int4", 3.5), ("int8", 2.0)):
            k = (rate, "reducescatter", cfg)
            if k in med and bf:
                sp = bf / med[k]
                t.append(f"- {rate} reduce-scatter {cfg}: {sp:.2f}x vs best fp32 ({bname}), target >= {goal}x: "
                         f"{'met' if sp >= goal else 'MISSED'}")
    for rate in ag_rates:
        k = (rate, "allgather", "int8")
        f32, f32n = best(rate, "allgather", "fp32")
        b16, b16n = best(rate, "allgather", "bf16")
        if k in med:
            for base, name, goal in ((b16, b16n, 1.6), (f32, f32n, 3.0)):
                sp = base / med[k]
                t.append(f"- {rate} all-gather int8: {sp:.2f}x vs {name}, target >= {goal}x: "
                         f"{'met' if sp >= goal else 'MISSED'}")
    out.append("\n".join(t))
    print("\n".join(out))
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    e = sub.add_parser("errors")
    e.add_argument("error_csv")
    e.add_argument("trials_csv", nargs="?")
    e.add_argument("--netns", help="error_table.sh's netns.csv: rows from real hosts")
    b = sub.add_parser("bytes")
    b.add_argument("bytes_csv")
    s = sub.add_parser("speed")
    s.add_argument("speed_csv")
    s.add_argument("--size", default="64M")
    s.add_argument("--ag-size", default="64M")
    args = p.parse_args()
    return {"errors": errors, "bytes": bytes_tables, "speed": speed}[args.what](args)


if __name__ == "__main__":
    sys.exit(main())
