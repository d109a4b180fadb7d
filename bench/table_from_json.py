#!/usr/bin/python3
"""The markdown table of bench/README.md from compare.py's --json file: one line for the run (command, dates,
machine), then the rows (medians over rounds, ms; ratio torch / liere with its range over rounds; target).

  python3 bench/table_from_json.py bench/results/cpu_vs_torch_2026-11-25.jsonl
"""
import json
import sys


def fmt(v, f):
    return "–" if v is None else f.format(v)


def ms(v):
    if v is None:
        return "–"
    return f"{v:.3g}" if v < 100 else f"{v:.0f}"


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    lines = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
    meta = next((l for l in lines if l.get("type") == "meta"), None)
    if meta:
        m = meta["machine"]
        print(f"Run {meta['started_utc']} – {meta['finished_utc']} ({meta['wall_s'] / 60:.1f} min), {meta['rounds']} "
              f"rounds; {m['cpu']}{' family %s model %s' % (m['cpu_family'], m['cpu_model']) if m.get('cpu_family') else ''} "
              f"({m['nproc']} CPUs, AVX-512 {'yes' if m.get('avx512f') else 'no'}), "
              f"{m['threads_per_side']} thread(s) per side, pinned to CPUs {m.get('pinned_cpus')}; liere "
              f"{m.get('liere_commit')} with {m.get('liere_gemm')}; PyTorch {m.get('torch')} with {m.get('torch_blas')}; "
              f"load average {m['loadavg_start'][0]:.1f} at the start, {m['loadavg_end'][0]:.1f} at the end.")
        print(f"Command: `{' '.join(meta['command'])}`" + (f" with {meta['env']}" if meta.get("env") else ""))
        print()
    print("| workload | config | phase | liere | torch | torch / liere (range) | target |")
    print("|---|---|---|---:|---:|---:|---|")
    last = None
    for r in lines:
        if r.get("type") != "row":
            continue
        name = {"rotation": "rotation tables, ViT-B layer", "vit step": "ViT-Tiny training step, B 128",
                "attention": "attention layer, B 128, T 65"}.get(r["workload"], r["workload"])
        shown = name if name != last else ""
        last = name
        phase = r["phase"].replace(" CPU", ", CPU time").replace("train step", "step")
        if r.get("kind") == "relative":
            rng = f" ({r['ratio_min']:.2f}–{r['ratio_max']:.2f})" if r.get("ratio_min") is not None else ""
            target = f"≤ {r['target']:.2f}: " + ("met" if r["met"] else "**missed**") if r["met"] is not None else "–"
            print(f"| {shown} | {r['config']} | {phase} | {ms(r['liere_ms'])} / {ms(r['base_ms'])} | | "
                  f"{fmt(r['ratio'], '{:.2f}')}{rng} | {target} |")
            continue
        rng = f" ({r['ratio_min']:.1f}–{r['ratio_max']:.1f})" if r.get("rounds", 0) > 1 else ""
        target = "–" if r["target"] is None else f"≥ {r['target']:g}×: " + ("met" if r["met"] else "**missed**")
        print(f"| {shown} | {r['config'] if isinstance(r['config'], str) else r['config']} | {phase} | "
              f"{ms(r['liere_ms'])} | {ms(r['torch_ms'])} | {fmt(r['ratio'], '{:.1f}×')}{rng} | {target} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
