#!/usr/bin/env python3
"""Markdown tables from bench_gemm's JSON lines.

    python3 bench/gemm_report.py build-gemm/gemm.jsonl [more.jsonl ...] [--cpu] [--out report.md]

Every cell is "median GFLOP/s (median per-round ratio to eigen)". Where a (group, shape, variant, threads)
appears in several runs, the latest run wins. --cpu adds tables of flops per CPU-second of the process
divided by the thread count (robust against time slicing by other processes; 1 thread: the rate while it ran).
"""
import argparse
import json
import sys
from collections import OrderedDict, defaultdict

GROUP_TITLES = {
    "vit-tiny": "ViT-Tiny, batch 128, CIFAR (8320 rows, dim 192, MLP 768) + patch embedding",
    "attn": "Attention per (batch, head): B 128 x H 3 products of T 65, head dim 64",
    "vit-b": "ViT-B, 224 px, batch 64 (12608 rows, dim 768, MLP 3072)",
}
VARIANT_ORDER = ["eigen", "eigen-mt", "openblas-hsw", "openblas-hsw/slab", "openblas-cpx", "openblas-cpx/slab",
                 "openblas-skx", "openblas-skx/slab", "blis", "blis/slab", "dnnl-sgemm", "dnnl-sgemm/slab",
                 "dnnl-matmul", "dnnl-matmul-batch", "libxsmm", "libxsmm-batch"]


def load(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            for line in f:
                line = line.strip()
                if line:
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError:
                        print(f"skipping a bad line in {p}", file=sys.stderr)
    return rows


def order_key(v):
    return (VARIANT_ORDER.index(v) if v in VARIANT_ORDER else len(VARIANT_ORDER), v)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("files", nargs="+")
    ap.add_argument("--cpu", action="store_true", help="also tables of flops per CPU-second per thread")
    ap.add_argument("--out", help="write here instead of stdout")
    a = ap.parse_args()
    rows = load(a.files)
    out = []
    w = out.append

    machines = [r for r in rows if r.get("kind") == "machine"]
    if machines:
        w("## Machine\n")
        w("| run | CPU | cores | clock GHz (add / imul chain) | FMA peak GFLOP/s (cores x GHz x 64) | zmm FMA loop 1 / 2 threads | load avg |")
        w("|---|---|---:|---:|---:|---:|---:|")
        for m in machines:
            w(f"| {m['run']} | {m['cpu']} | {m['cores']} | {m['ghz_add']:.2f} / {m['ghz_imul']:.2f} | "
              f"{m['peak_gflops']:.0f} | {m['fma_loop_gflops_1t']:.0f} / {m['fma_loop_gflops_2t']:.0f} | {m['loadavg']:.2f} |")
        w("")
    libs = [r for r in rows if r.get("kind") == "libs"]
    if libs:
        l = libs[-1]
        w("Libraries: " + "; ".join(f"{k} {l[k]}" for k in ("openblas", "openblas2", "blis", "dnnl", "libxsmm") if l.get(k)))
        w("")

    lat = OrderedDict()
    for r in rows:
        if r.get("kind") == "latency":
            lat[r["lib"]] = r
    if lat:
        w("## First-call latency\n")
        w("Small: S = Q·Kᵀ of one head (65x65x64, NT, ld 576), 1 thread. Big: ViT-Tiny fc1 forward (8320x768x192, NT).\n")
        w("| library | 1st small µs | 2nd small µs | steady small µs | 1st big ms | steady big ms | note |")
        w("|---|---:|---:|---:|---:|---:|---|")
        for k, r in lat.items():
            w(f"| {k} | {r['first_small_us']:.1f} | {r['second_small_us']:.1f} | {r['steady_small_us']:.2f} | "
              f"{r['first_big_ms']:.2f} | {r['steady_big_ms']:.2f} | {r.get('note', '')} |")
        w("")

    checks = OrderedDict()
    for r in rows:
        if r.get("kind") == "check":
            checks[(r["threads"], r["variant"], r["what"])] = r
    if checks:
        w("## Correctness (max error in units of u·(|α|Σ|a||b| + |β||c₀|), u = 2⁻²⁴; bound K + 2)\n")
        w("| threads | variant | what | cases | elements | max units | max rel | result | note |")
        w("|---:|---|---|---:|---:|---:|---:|---|---|")
        for (t, v, what), r in checks.items():
            res = "pass" if r["pass"] else ("FAIL (known limitation, see note)" if r.get("known") else "FAIL")
            w(f"| {t} | {v} | {what} | {r['cases']:.0f} | {r['elements']:.0f} | {r['max_units']:.3g} | "
              f"{r['max_rel']:.3g} | {res} | {r.get('note', '').strip()} |")
        w("")

    res = OrderedDict()
    for r in rows:
        if r.get("kind") == "result":
            res[(r["group"], r["shape"], r["variant"], r["threads"])] = r
    groups = OrderedDict()
    for (g, s, v, t), r in res.items():
        groups.setdefault((g, t), OrderedDict()).setdefault(s, {})[v] = r

    def table(metric, title):
        for (g, t), shapes in sorted(groups.items(), key=lambda x: (["vit-tiny", "attn", "vit-b"].index(x[0][0])
                                                                     if x[0][0] in GROUP_TITLES else 9, x[0][1])):
            variants = sorted({v for s in shapes.values() for v in s}, key=order_key)
            any_r = next(iter(next(iter(shapes.values())).values()))
            w(f"### {GROUP_TITLES.get(g, g)} — {t} thread{'s' if t > 1 else ''}, {title} "
              f"(median of {any_r['rounds']:.0f} rounds)\n")
            w("| shape | MxNxK op | " + " | ".join(variants) + " |")
            w("|---|---|" + "---:|" * len(variants))
            for s, vs in shapes.items():
                r0 = next(iter(vs.values()))
                cells = []
                for v in variants:
                    r = vs.get(v)
                    if not r:
                        cells.append("–")
                        continue
                    val = r[metric]
                    if metric == "gflops_median":
                        cells.append(f"{val:.1f} ({r['ratio_eigen_median']:.2f})")
                    else:
                        e = vs.get("eigen")
                        ratio = val / e[metric] if e and e[metric] else 0
                        cells.append(f"{val:.1f} ({ratio:.2f})")
                w(f"| {s} | {r0['M']}x{r0['N']}x{r0['K']} {r0['trans']} | " + " | ".join(cells) + " |")
            w("")

    if groups:
        w("## GFLOP/s (wall clock), ratio to eigen measured in the same round\n")
        table("gflops_median", "wall-clock GFLOP/s (ratio to eigen)")
        if a.cpu:
            w("## GFLOP per CPU-second per thread (robust against time slicing), ratio to eigen\n")
            table("gflops_cpu_median", "GFLOP/s per CPU-second x threads (ratio to eigen)")

    # Totals, recomputed from the results: every shape of a group once, summed time (flop-weighted), per variant.
    # Probe shapes (not products liere runs) are left out.
    PROBES = {"S=Q(K^T)"}
    if groups:
        w("## Totals: every shape of a group once, summed time (probe shapes excluded)\n")
        by = defaultdict(dict)
        for (g, t), shapes in groups.items():
            acc = defaultdict(lambda: [0.0, 0.0, 0.0])  # flops, wall s, cpu s
            for s, vs in shapes.items():
                if s in PROBES:
                    continue
                for v, r in vs.items():
                    f = 2.0 * r["M"] * r["N"] * r["K"] * (384 if g == "attn" else 1)
                    acc[v][0] += f
                    acc[v][1] += f / (r["gflops_median"] * 1e9)
                    acc[v][2] += f / (r["gflops_cpu_median"] * 1e9)
            for v, (f, ws, cs) in acc.items():
                by[(g, t)][v] = (f / ws * 1e-9, f / cs * 1e-9)
        variants = sorted({v for d in by.values() for v in d}, key=order_key)
        w("Cell: wall-clock GFLOP/s (ratio to eigen) / GFLOP per CPU-second per thread (ratio to eigen).\n")
        w("| group | threads | " + " | ".join(variants) + " |")
        w("|---|---:|" + "---:|" * len(variants))
        for (g, t), d in sorted(by.items()):
            e = d.get("eigen")
            cells = []
            for v in variants:
                x = d.get(v)
                if not x:
                    cells.append("–")
                elif e:
                    cells.append(f"{x[0]:.1f} ({x[0] / e[0]:.2f}) / {x[1]:.0f} ({x[1] / e[1]:.2f})")
                else:
                    cells.append(f"{x[0]:.1f} / {x[1]:.0f}")
            w(f"| {g} | {t} | " + " | ".join(cells) + " |")
        w("")

    text = "\n".join(out) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    main()
