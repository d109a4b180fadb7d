#!/usr/bin/python3
"""liere against PyTorch, side by side in one run: the C++ benchmarks and their PyTorch peers, interleaved.

Workloads (see bench/README.md for what each side times):
  rotation   bench_rotation      vs bench/torch_rotation.py   rotation tables of one ViT-B layer, Block 2, 8, 64
             targets: >= 20x faster for Block 8, >= 5x for Block 64 (fwd and fwd+bwd); Block 2: reported only
  attention  bench_attention     vs bench/torch_attention.py  one attention layer + PE, B=128, T=65, dim 192
             targets: >= 2x faster for every encoding (fwd and fwd+bwd); liere8's time within 15% of none's
             (liere64 is also shown against torch's liere64-dense-official, the official code's form)
  vit        train_cifar --bench-steps vs bench/torch_vit_step.py  ViT-Tiny training steps, B=128, CIFAR-100 shape
             targets: liere8 >= 2x torch's liere8 (img/s), abs >= 1.5x; liere8 within 10% of abs in liere; peak RSS
             reported

Noise: the machine is shared. Every configuration (one block, one encoding) runs as its own pair of processes,
liere then torch in even rounds and torch then liere in odd rounds, so that a burst of load hits both sides.
Times are the median over rounds of each run's median; the ratio is torch / liere of those medians, with the
range of the per-round ratios beside it. Both sides also report their process CPU time (rows "... CPU", no
target): with one thread each it is the work itself, a cross-check when other jobs share the cores.
--cpus pins the driver and so both sides to the same CPU(s); --peak-gflops adds "% of the FMA peak".

The driver imports no torch: it runs /usr/bin/python3 bench/torch_*.py (Debian's torch with OpenBLAS) and the
C++ programs from --build-dir, and reads their --json output.

Example:
  cmake -S . -B build-bench -DLIERE_BUILD_BENCH=ON -DCMAKE_BUILD_TYPE=Release
  cmake --build build-bench -j2 --target bench_rotation bench_attention
  /usr/bin/python3 bench/compare.py --build-dir build-bench --rounds 3 --json build-bench/compare.jsonl
  # one thread per side, both pinned to CPU 0, rotation tables and the ViT step only (bench/README.md's table):
  OMP_NUM_THREADS=1 /usr/bin/python3 bench/compare.py --build-dir build-bench --only rotation,vit --blocks 8,64 \
      --vit-enc abs,liere8 --rounds 2 --threads 1 --cpus 0 --peak-gflops 134.1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TORCH_PYTHON = "/usr/bin/python3"

ROTATION_TARGETS = {8: 20.0, 64: 5.0}  # block -> minimum torch/liere ratio
ATTENTION_TARGET = 2.0
VIT_TARGET = {"liere8": 2.0, "abs": 1.5}  # enc -> minimum liere/torch img/s ratio (issue 15)
VIT_LIERE8_VS_ABS = 1.10                 # liere8 step time / abs step time at most
VIT_PE_FLAGS = {"abs": ["--pe", "absolute"], "rope-mixed": ["--pe", "rope-mixed"],
                "liere8": ["--pe", "liere", "--block", "8"], "liere64": ["--pe", "liere", "--block", "64"],
                "none": ["--pe", "none"]}
LIERE8_VS_NONE = 1.15                    # liere8 time / none time at most


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default="build-bench", help="CMake build folder with bench/bench_* [build-bench]")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds per configuration [3]")
    p.add_argument("--only", metavar="LIST",
                   help="run only these workloads, comma-separated, of rotation, attention, vit (e.g. rotation,vit)")
    p.add_argument("--json", metavar="OUT",
                   help="write JSON lines to OUT: first the command, dates and machine (type meta), then every table "
                        "row and the raw runs (bench/results/ holds the files the tables of bench/README.md come from)")
    p.add_argument("--threads", type=int, default=2, help="threads on both sides [2]")
    p.add_argument("--cpus", metavar="LIST",
                   help="pin this driver and so every program it starts (both sides) to these CPUs, e.g. 1 or 0,1 "
                        "(sched_setaffinity, inherited like taskset's); default: no pinning")
    p.add_argument("--peak-gflops", type=float, default=None,
                   help="the FMA peak of the CPUs used (GFLOP/s), to print achieved GFLOP/s as a share of it")
    p.add_argument("--reps", type=int, default=None,
                   help="timed repetitions per run on both sides [rotation 10, attention 7]")
    p.add_argument("--warmup", type=int, default=None, help="warm-up repetitions per run [2]")
    p.add_argument("--blocks", default="2,8,64", help="rotation block sizes [2,8,64]")
    p.add_argument("--enc", default="none,rope-mixed,liere8,liere64", help="attention encodings [none,rope-mixed,liere8,liere64]")
    p.add_argument("--vit-enc", default="abs,rope-mixed,liere8,liere64",
                   help="ViT step encodings [abs,rope-mixed,liere8,liere64]")
    p.add_argument("--vit-steps", type=int, default=6, help="timed ViT training steps per run [6]")
    p.add_argument("--no-dense-official", action="store_true",
                   help="skip torch's liere64-dense-official (slow: about 1-5 s per fwd+bwd)")
    p.add_argument("--gemm", choices=["eigen", "dnnl", "openblas"], default=None,
                   help="liere's GEMM (LIERE_GEMM) for every liere program; default: the library's (oneDNN where it loads)")
    p.add_argument("--quick", action="store_true", help="smoke run: 1 round, 2 reps, 1 warm-up")
    p.add_argument("--verbose", action="store_true", help="show the output of every program")
    a = p.parse_args()
    if a.quick:
        a.rounds, a.reps, a.warmup = 1, 2, 1
    a.workloads = ["rotation", "attention", "vit"]
    if a.only:
        wanted = [w for w in a.only.split(",") if w]
        bad = [w for w in wanted if w not in a.workloads]
        if bad or not wanted:
            p.error(f"--only {a.only}: expected a comma-separated list of rotation, attention, vit")
        a.workloads = wanted
    if a.cpus:
        try:
            a.cpu_set = {int(c) for c in a.cpus.split(",") if c}
        except ValueError:
            p.error(f"--cpus {a.cpus}: expected CPU numbers separated by commas, e.g. 1 or 0,1")
        bad = a.cpu_set - os.sched_getaffinity(0)
        if not a.cpu_set or bad:
            p.error(f"--cpus {a.cpus}: CPU(s) {sorted(bad)} not available to this process "
                    f"(available: {sorted(os.sched_getaffinity(0))})")
    if a.peak_gflops is not None and a.peak_gflops <= 0:
        p.error("--peak-gflops must be positive")
    return a


# --------------------------------------------------------------------------------------------------------------
# Running one side
# --------------------------------------------------------------------------------------------------------------


def run(cmd: list[str], args, env=None) -> list[dict]:
    """Runs cmd with --json TMP appended; returns the JSON records it wrote."""
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=True) as tmp:
        full = cmd + ["--json", tmp.name]
        t0 = time.time()
        res = subprocess.run(full, stdout=None if args.verbose else subprocess.PIPE,
                             stderr=subprocess.STDOUT if not args.verbose else None, text=True, env=env)
        if res.returncode != 0:
            print(f"   FAILED ({res.returncode}): {' '.join(full)}")
            if res.stdout:
                print(res.stdout[-3000:])
            return []
        recs = [json.loads(line) for line in open(tmp.name) if line.strip()]
        for r in recs:
            r["_wall_s"] = round(time.time() - t0, 2)
        return recs


def run_trainer(cmd: list[str], args, env) -> list[dict]:
    """Runs train_cifar --bench-steps; returns one record from the key=value pairs it prints."""
    t0 = time.time()
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    if args.verbose:
        print(res.stdout)
    if res.returncode != 0:
        print(f"   FAILED ({res.returncode}): {' '.join(cmd)}")
        print(res.stdout[-3000:])
        return []
    rec = {"bench": "vit_tiny_step", "impl": "liere", "_wall_s": round(time.time() - t0, 2)}
    for tok in res.stdout.split():
        if "=" in tok:
            k, v = tok.split("=", 1)
            try:
                rec[k] = float(v)
            except ValueError:
                rec[k] = v
    rec["img_per_s"] = rec.get("train_img_per_s")
    rec["fwdbwd_ms"] = rec.get("step_ms")
    return [rec]


def liere_env(args):
    env = dict(os.environ)
    env["OMP_NUM_THREADS"] = str(args.threads)
    if args.gemm:
        env["LIERE_GEMM"] = args.gemm
    return env


def rotation_pair(args, block: int, first_round: bool) -> tuple[list[dict], list[dict]]:
    reps = str(args.reps or 10)
    warm = str(args.warmup if args.warmup is not None else 2)
    exe = os.path.join(args.build_dir, "bench", "bench_rotation")
    c = [exe, "--blocks", str(block), "--reps", reps, "--warmup", warm, "--threads", str(args.threads)]
    t = [TORCH_PYTHON, os.path.join(HERE, "torch_rotation.py"), "--blocks", str(block), "--reps", reps,
         "--warmup", warm, "--threads", str(args.threads)]
    if not first_round:
        c.append("--skip-sgemm")
        t.append("--skip-sgemm")
    return c, t


def attention_pair(args, enc: str, first_round: bool):
    reps = str(args.reps or 7)
    warm = str(args.warmup if args.warmup is not None else 2)
    exe = os.path.join(args.build_dir, "bench", "bench_attention")
    c = [exe, "--enc", enc, "--reps", reps, "--warmup", warm, "--threads", str(args.threads), "--no-isolate"]
    t = [TORCH_PYTHON, os.path.join(HERE, "torch_attention.py"), "--enc", enc, "--reps", reps, "--warmup", warm,
         "--threads", str(args.threads), "--no-isolate"]
    if not first_round:
        c.append("--skip-sgemm")
        t.append("--skip-sgemm")
    return c, t


def vit_pair(args, enc: str, first_round: bool):
    steps = str(args.vit_steps)
    exe = os.path.join(args.build_dir, "examples", "train_cifar")
    c = [exe, "--data", "cifar100", "--model", "tiny", "--patch", "4", "--batch", "128", "--optimizer", "adam",
         "--wd", "0", "--clip", "0", "--threads", str(args.threads), "--bench-steps", steps] + VIT_PE_FLAGS[enc]
    t = [TORCH_PYTHON, os.path.join(HERE, "torch_vit_step.py"), "--enc", enc, "--steps", steps,
         "--threads", str(args.threads), "--no-isolate"]
    if not first_round:
        t.append("--skip-sgemm")
    return c, t


def collect(args, workload: str, configs: list, pair_fn, torch_only: list) -> dict:
    """runs[(config, impl)] = list of records, one per round."""
    runs: dict = {}
    env = liere_env(args)
    for rnd in range(args.rounds):
        for i, cfg in enumerate(configs):
            c_cmd, t_cmd = pair_fn(args, cfg, rnd == 0 and i == 0)
            order = [("liere", c_cmd), ("torch", t_cmd)]
            if rnd % 2 == 1:
                order.reverse()
            for impl, cmd in order:
                if workload == "vit" and impl == "liere":
                    recs = run_trainer(cmd, args, env)
                else:
                    recs = run(cmd, args, env if impl == "liere" else None)
                for r in recs:
                    runs.setdefault((cfg, impl), []).append(r)
                tag = f"{recs[0].get('fwdbwd_ms') or recs[0].get('step_ms') or 0:.1f} ms" if recs else "failed"
                print(f"   round {rnd + 1}/{args.rounds} {workload} {cfg} {impl}: fwd+bwd {tag}", flush=True)
        for cfg, t_cmd in torch_only:  # torch-only peers (no liere twin), once per round
            recs = run(t_cmd(args, rnd == 0), args)
            for r in recs:
                runs.setdefault((cfg, "torch"), []).append(r)
            tag = f"{recs[0].get('fwdbwd_ms') or recs[0].get('step_ms') or 0:.1f} ms" if recs else "failed"
            print(f"   round {rnd + 1}/{args.rounds} {workload} {cfg} torch: fwd+bwd {tag}", flush=True)
    return runs


# --------------------------------------------------------------------------------------------------------------
# Tables
# --------------------------------------------------------------------------------------------------------------


def med(records: list[dict], key: str):
    vals = [r[key] for r in records if r.get(key) is not None]
    return statistics.median(vals) if vals else None


def ratio_row(workload, config, phase, key, lrecs, trecs, target, note=""):
    lm, tm = med(lrecs, key), med(trecs, key)
    per_round = [t[key] / l[key] for l, t in zip(lrecs, trecs) if l.get(key) and t.get(key)]
    ratio = tm / lm if lm and tm else None
    return {
        "workload": workload, "config": config, "phase": phase, "liere_ms": lm, "torch_ms": tm, "ratio": ratio,
        "ratio_min": min(per_round) if per_round else None, "ratio_max": max(per_round) if per_round else None,
        "target": target, "met": (ratio >= target) if (ratio is not None and target is not None) else None,
        "rounds": len(per_round), "note": note,
    }


def relative_row(workload, config, phase, key, recs, base, target):
    """Two liere configurations against each other: ratio = recs / base of the medians, at most `target`."""
    m, mb = med(recs, key), med(base, key)
    per_round = [a[key] / b[key] for a, b in zip(recs, base) if a.get(key) and b.get(key)]
    r = m / mb if m and mb else None
    return {"kind": "relative", "workload": workload, "config": config, "phase": phase, "liere_ms": m, "base_ms": mb,
            "ratio": r, "ratio_min": min(per_round) if per_round else None,
            "ratio_max": max(per_round) if per_round else None, "target": target,
            "met": (r <= target) if r is not None else None}


def fmt(v, f="{:.1f}"):
    return "-" if v is None else f.format(v)


def print_rows(rows: list[dict]) -> None:
    head = ["workload", "config", "phase", "liere ms", "torch ms", "ratio", "per-round", "target", "met"]
    cells = [head]
    for r in rows:
        if r.get("kind") == "relative":
            cells.append([r["workload"], r["config"], r["phase"], fmt(r["liere_ms"]), fmt(r["base_ms"]),
                          fmt(r["ratio"], "{:.2f}"), f"{fmt(r['ratio_min'], '{:.2f}')}-{fmt(r['ratio_max'], '{:.2f}')}",
                          f"<= {r['target']:.2f}", "-" if r["met"] is None else ("yes" if r["met"] else "NO")])
            continue
        pr = f"{fmt(r['ratio_min'], '{:.1f}')}-{fmt(r['ratio_max'], '{:.1f}')}" if r["rounds"] > 1 else ""
        cells.append([r["workload"], r["config"], r["phase"], fmt(r["liere_ms"], "{:.2f}"), fmt(r["torch_ms"], "{:.2f}"),
                      fmt(r["ratio"], "{:.1f}x"), pr, "-" if r["target"] is None else f">= {r['target']:g}x",
                      "-" if r["met"] is None else ("yes" if r["met"] else "NO")])
    widths = [max(len(c[i]) for c in cells) for i in range(len(head))]
    for j, line in enumerate(cells):
        print("  " + "  ".join(c.rjust(w) if i >= 3 else c.ljust(w) for i, (c, w) in enumerate(zip(line, widths))))
        if j == 0:
            print("  " + "  ".join("-" * w for w in widths))


def rotation_rows(runs, blocks):
    rows = []
    for b in blocks:
        lrecs, trecs = runs.get((b, "liere"), []), runs.get((b, "torch"), [])
        for phase, key in (("fwd", "fwd_ms"), ("fwd+bwd", "fwdbwd_ms")):
            rows.append(ratio_row("rotation", f"block {b}", phase, key, lrecs, trecs, ROTATION_TARGETS.get(b)))
        for phase, key in (("fwd CPU", "fwd_cpu_ms"), ("fwd+bwd CPU", "fwdbwd_cpu_ms")):
            if med(lrecs, key) is not None:  # process CPU time: a cross-check on a loaded machine, no target
                rows.append(ratio_row("rotation", f"block {b}", phase, key, lrecs, trecs, None))
    return rows


def attention_rows(runs, encs, dense):
    rows = []
    for e in encs:
        lrecs, trecs = runs.get((e, "liere"), []), runs.get((e, "torch"), [])
        for phase, key in (("fwd", "fwd_ms"), ("fwd+bwd", "fwdbwd_ms")):
            rows.append(ratio_row("attention", e, phase, key, lrecs, trecs, ATTENTION_TARGET))
    if dense and "liere64" in encs:
        lrecs, trecs = runs.get(("liere64", "liere"), []), runs.get(("liere64-dense-official", "torch"), [])
        for phase, key in (("fwd", "fwd_ms"), ("fwd+bwd", "fwdbwd_ms")):
            rows.append(ratio_row("attention", "liere64 vs dense-official", phase, key, lrecs, trecs, ATTENTION_TARGET,
                                  note="torch side: the official code's broadcasting-matmul form"))
    if "liere8" in encs and "none" in encs:
        for phase, key in (("fwd", "fwd_ms"), ("fwd+bwd", "fwdbwd_ms")):
            rows.append(relative_row("attention", "liere liere8 / none", phase, key, runs.get(("liere8", "liere"), []),
                                     runs.get(("none", "liere"), []), LIERE8_VS_NONE))
    return rows


def vit_rows(runs, encs):
    """Rows in step time (ms): ratio = torch / liere, i.e. liere's img/s over torch's."""
    rows = []
    for e in encs:
        lrecs, trecs = runs.get((e, "liere"), []), runs.get((e, "torch"), [])
        rows.append(ratio_row("vit step", e, "train step", "step_ms", lrecs, trecs, VIT_TARGET.get(e)))
        if med(lrecs, "step_cpu_ms") is not None:  # process CPU time: a cross-check on a loaded machine, no target
            rows.append(ratio_row("vit step", e, "step CPU", "step_cpu_ms", lrecs, trecs, None))
    if "liere8" in encs and "abs" in encs:
        rows.append(relative_row("vit step", "liere liere8 / abs", "train step", "step_ms",
                                 runs.get(("liere8", "liere"), []), runs.get(("abs", "liere"), []), VIT_LIERE8_VS_ABS))
    return rows


def print_vit(runs, encs, sg_l, peak=None):
    """img/s, achieved GFLOP/s (liere's flop count, for torch too) and peak RSS of both sides."""
    sg = sg_l.get("sgemm_gflops")
    print(f"\n  vit step: img/s, achieved GFLOP/s (3 x forward flops, liere's count incl. the encoding, for both sides) "
          f"and peak RSS; liere's sgemm ({sg_l.get('gemm') or '?'}) {fmt(sg)} GFLOP/s")
    out = []
    for e in encs:
        lrecs, trecs = runs.get((e, "liere"), []), runs.get((e, "torch"), [])
        li, ti = med(lrecs, "img_per_s"), med(trecs, "img_per_s")
        gl = med(lrecs, "achieved_gflops")
        gt = gl * ti / li if gl and li and ti else None  # the same flops per image over torch's time
        lc, tc = med(lrecs, "step_cpu_ms"), med(trecs, "step_cpu_ms")
        lms, tms = med(lrecs, "step_ms"), med(trecs, "step_ms")
        glc = gl * lms / lc if gl and lms and lc else None  # the same flops over the process CPU time
        gtc = gt * tms / tc if gt and tms and tc else None
        lr, tr = med(lrecs, "peak_rss_mib"), med(trecs, "peak_rss_mib")
        pct = f" ({100 * gl / sg:.0f}% of sgemm{of_peak(gl, peak)})" if gl and sg else ""
        print(f"    {e:>10}: liere {fmt(li)} img/s, {fmt(gl)} GFLOP/s{pct}, by CPU time {fmt(glc)}"
              f"{of_peak(glc, peak)}, RSS {fmt(lr, '{:.0f}')} MiB | torch {fmt(ti)} img/s, {fmt(gt)} GFLOP/s, "
              f"by CPU time {fmt(gtc)}, RSS {fmt(tr, '{:.0f}')} MiB")
        out.append({"workload": "vit step", "config": e, "liere_img_per_s": li, "torch_img_per_s": ti,
                    "liere_gflops": gl, "torch_gflops": gt, "liere_gflops_cpu": glc, "torch_gflops_cpu": gtc, "sgemm_liere": sg, "gemm": sg_l.get("gemm"),
                    "peak_gflops": peak, "liere_peak_rss_mib": lr, "torch_peak_rss_mib": tr})
    return out


def sgemm_of(runs, impl):
    vals, name = {}, None
    for (cfg, i), recs in runs.items():
        if i != impl:
            continue
        for r in recs:
            for k in ("sgemm_gflops", "sgemm_gflops_8320x192x576", "sgemm_gflops_1024"):
                if r.get(k):
                    vals.setdefault(k, []).append(r[k])
            if r.get("gemm"):
                name = r["gemm"]
    out = {k: max(v) for k, v in vals.items()}
    if name:
        out["gemm"] = name
    return out


def of_peak(g, peak) -> str:
    return f", {100 * g / peak:.0f}% of the FMA peak {peak:g}" if g and peak else ""


def print_gflops(workload, runs, configs, sg_l, sg_t, peak=None):
    """Achieved GFLOP/s of liere (its own flop count) and of torch on the same count, next to the sgemm rates."""
    print(f"\n  {workload}: achieved GFLOP/s, fwd+bwd (flops counted by the C++ benchmark; torch: the same count / its time)")
    sg = sg_l.get("sgemm_gflops")
    print(f"    sgemm, best probe: liere ({sg_l.get('gemm', '?')}) {fmt(sg)} GFLOP/s; torch (OpenBLAS) 8320x192x576 "
          f"{fmt(sg_t.get('sgemm_gflops_8320x192x576'))}, 1024^3 {fmt(sg_t.get('sgemm_gflops_1024'))} GFLOP/s")
    out = []
    for cfg in configs:
        lrecs, trecs = runs.get((cfg, "liere"), []), runs.get((cfg, "torch"), [])
        if not lrecs:
            continue
        lt, tt = med(lrecs, "fwdbwd_ms"), med(trecs, "fwdbwd_ms")
        if workload == "rotation":
            g = med(lrecs, "gflops_fwdbwd")
            flops = g * lt * 1e6 if g and lt else None
        else:
            flops = med(lrecs, "flops_fwdbwd")
        gl = flops / (lt * 1e6) if flops and lt else None
        gt = flops / (tt * 1e6) if flops and tt else None
        lc, tc = med(lrecs, "fwdbwd_cpu_ms"), med(trecs, "fwdbwd_cpu_ms")  # the same flops over the CPU time
        glc = flops / (lc * 1e6) if flops and lc else None
        gtc = flops / (tc * 1e6) if flops and tc else None
        pct = (f"{100 * gl / sg:.0f}% of sgemm" if gl and sg else "") + of_peak(gl, peak)
        print(f"    {str(cfg):>12}: liere {fmt(gl)} GFLOP/s {pct}; torch {fmt(gt)} GFLOP/s "
              f"({fmt(flops / 1e9 if flops else None, '{:.3f}')} GFLOP per fwd+bwd)")
        out.append({"workload": workload, "config": cfg, "liere_gflops": gl, "torch_gflops": gt, "liere_gflops_cpu": glc, "torch_gflops_cpu": gtc, "sgemm_liere": sg,
                    "sgemm_torch_8320x192x576": sg_t.get("sgemm_gflops_8320x192x576"),
                    "sgemm_torch_1024": sg_t.get("sgemm_gflops_1024"), "flops_fwdbwd": flops, "peak_gflops": peak,
                    "gemm": sg_l.get("gemm")})
    return out


def machine_info(args) -> dict:
    """What the JSON needs to say where and how it was measured: CPU model, CPUs, threads, the torch and BLAS of the
    peer, liere's GEMM (filled in from the runs), the commit, the load."""
    cpu, flags, ident = "?", "", {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key, val = key.strip(), val.strip()
                if key == "model name" and cpu == "?":
                    cpu = val
                elif key == "flags" and not flags:
                    flags = " " + val
                elif key in ("cpu family", "model", "cpu MHz") and key not in ident:
                    ident[key] = val  # "AMD EPYC" alone does not tell Zen 4 (family 25) from Zen 5 (26)
    except OSError:
        pass
    info = {"cpu": cpu, "cpu_family": ident.get("cpu family"), "cpu_model": ident.get("model"),
            "cpu_mhz": ident.get("cpu MHz"), "avx512f": " avx512f" in flags, "nproc": os.cpu_count(), "threads_per_side": args.threads,
            "pinned_cpus": sorted(args.cpu_set) if args.cpus else None, "loadavg_start": list(os.getloadavg())}
    try:
        v = subprocess.run([TORCH_PYTHON, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                           text=True, timeout=120)
        info["torch"] = v.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        info["torch"] = None
    try:
        g = subprocess.run(["git", "-C", HERE, "describe", "--always", "--dirty", "--abbrev=12"], capture_output=True,
                           text=True, timeout=30)
        info["liere_commit"] = g.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        info["liere_commit"] = None
    return info


def main() -> int:
    args = parse_args()
    started = time.time()
    for workload, prog in (("rotation", "bench/bench_rotation"), ("attention", "bench/bench_attention"),
                           ("vit", "examples/train_cifar")):
        if workload not in args.workloads:
            continue
        path = os.path.join(args.build_dir, prog)
        if not os.access(path, os.X_OK):
            print(f"missing {path}: build it with  cmake --build {args.build_dir} --target {os.path.basename(prog)}")
            return 2
    if args.cpus:
        os.sched_setaffinity(0, args.cpu_set)  # inherited by every program started below, liere's and torch's
    load = os.getloadavg()[0]
    pin = f"pinned to CPU(s) {sorted(os.sched_getaffinity(0))}" if args.cpus else "not pinned"
    print(f"== liere vs PyTorch, {args.rounds} interleaved round(s), {args.threads} threads, {pin}, "
          f"load average {load:.2f} on {os.cpu_count()} CPUs")
    all_rows, gflops, raw = [], [], []
    sgemm_best, gemm_name = 0.0, None  # liere's sgemm rate (its GEMM), probed by the rotation and attention benchmarks
    if "rotation" in args.workloads:
        blocks = [int(b) for b in args.blocks.split(",") if b]
        runs = collect(args, "rotation", blocks, rotation_pair, [])
        rows = rotation_rows(runs, blocks)
        all_rows += rows
        gflops += print_gflops("rotation", runs, blocks, sgemm_of(runs, "liere"), sgemm_of(runs, "torch"), args.peak_gflops)
        sgemm_best = max(sgemm_best, sgemm_of(runs, "liere").get("sgemm_gflops") or 0)
        gemm_name = sgemm_of(runs, "liere").get("gemm") or gemm_name
        raw += [dict(r, _config=str(c)) for (c, i), recs in runs.items() for r in recs]
    if "attention" in args.workloads:
        encs = [e for e in args.enc.split(",") if e]
        dense = not args.no_dense_official and "liere64" in encs

        def dense_cmd(a, _first):
            return attention_pair(a, "liere64-dense-official", False)[1]

        runs = collect(args, "attention", encs, attention_pair, [("liere64-dense-official", dense_cmd)] if dense else [])
        rows = attention_rows(runs, encs, dense)
        all_rows += rows
        gflops += print_gflops("attention", runs, encs, sgemm_of(runs, "liere"), sgemm_of(runs, "torch"),
                               args.peak_gflops)
        sgemm_best = max(sgemm_best, sgemm_of(runs, "liere").get("sgemm_gflops") or 0)
        gemm_name = sgemm_of(runs, "liere").get("gemm") or gemm_name
        raw += [dict(r, _config=str(c)) for (c, i), recs in runs.items() for r in recs]
    if "vit" in args.workloads:
        encs = [e for e in args.vit_enc.split(",") if e]
        runs = collect(args, "vit", encs, vit_pair, [])
        all_rows += vit_rows(runs, encs)
        gflops += print_vit(runs, encs, {"sgemm_gflops": sgemm_best or None, "gemm": gemm_name}, args.peak_gflops)
        raw += [dict(r, _config=str(c)) for (c, i), recs in runs.items() for r in recs]
    print(f"\n  median over {args.rounds} round(s) of each run's median; ratio = torch / liere (higher: liere faster); "
          f"load average now {os.getloadavg()[0]:.2f}")
    print_rows(all_rows)
    missed = [r for r in all_rows if r["met"] is False]
    print(f"\n  targets: {sum(r['met'] is True for r in all_rows)} met, {len(missed)} missed")
    if args.json:
        # First line: the command, the dates and the machine; then the table rows, GFLOP/s rows and every raw record.
        machine = machine_info(args)
        machine["loadavg_end"] = list(os.getloadavg())
        machine["liere_gemm"] = gemm_name or next((r.get("gemm") for r in raw if r.get("impl") == "liere"
                                                   and r.get("gemm")), None)
        torch_env = next((r for r in raw if r.get("impl") == "torch"), {})
        machine["torch_blas"] = torch_env.get("blas")
        meta = {"type": "meta", "command": [sys.executable] + sys.argv,
                "env": {k: os.environ[k] for k in ("OMP_NUM_THREADS", "LIERE_GEMM") if k in os.environ},
                "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
                "finished_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "wall_s": round(time.time() - started, 1), "rounds": args.rounds, "machine": machine}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json + ".tmp", "w") as f:
            f.write(json.dumps(meta) + "\n")
            for r in all_rows:
                f.write(json.dumps({"type": "row", **r}) + "\n")
            for g in gflops:
                f.write(json.dumps({"type": "gflops", **g}) + "\n")
            for r in raw:
                f.write(json.dumps({"type": "run", **r}) + "\n")
        os.replace(args.json + ".tmp", args.json)  # whole or not at all
        print(f"  wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
