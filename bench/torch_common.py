"""Shared helpers for the PyTorch reference benchmarks in bench/torch_*.py.

The PyTorch scripts are the "peer" side of liere's benchmarks: the C++ library is timed against them on the
same machine in the same run. This module holds what every script needs:

* argument parsing (``--threads --reps --warmup --json --quick --selftest --seed``),
* timing (median and min of wall time over reps, ``time.perf_counter``),
* peak resident memory (``ru_maxrss``, MiB),
* a BLAS check (which libblas/openblas the process really loaded; Debian's reference BLAS is ~45x slower),
* an sgemm GFLOP/s probe (M=8320, K=192, N=576 -- the qkv projection of B=128, T=65, dim 192 -- and 1024^3),
* JSON-lines output, and running one configuration per child process so that peak RSS is per configuration,
* the position and skew-generator formulas of the official LieRE code (StanfordMIMI/LieRE,
  models/rope_vit.py: PositionEncoderBase.forward and LierePositionEncoder.forward), restated.

Run the scripts with Debian's PyTorch: ``/usr/bin/python3 bench/torch_attention.py --reps 10``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time

import torch

# --------------------------------------------------------------------------------------------------------------
# Argument parsing
# --------------------------------------------------------------------------------------------------------------


def make_parser(description: str, reps: int | None, warmup: int, isolate: bool = False) -> argparse.ArgumentParser:
    """A parser with the options every bench script shares; scripts add their own on top.

    reps=None: the script counts its repetitions itself (e.g. --steps) and has no --reps option.
    """
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--threads", type=int, default=2,
                   help="torch.set_num_threads (default 2: both cores of the bench machine)")
    if reps is not None:
        p.add_argument("--reps", type=int, default=reps, help=f"timed repetitions (default {reps})")
    p.add_argument("--warmup", type=int, default=warmup, help=f"untimed warm-up repetitions (default {warmup})")
    p.add_argument("--json", metavar="PATH", default=None, help="append one JSON object per result line to PATH")
    p.add_argument("--quick", action="store_true", help="smoke run: few reps, at most one warm-up call")
    p.add_argument("--selftest", action="store_true",
                   help="run the numerical checks of the implementations instead of timing them")
    p.add_argument("--seed", type=int, default=0, help="seed of every random tensor (default 0)")
    if isolate:
        p.add_argument("--no-isolate", action="store_true",
                       help="run every configuration in this process (default: one child process per "
                            "configuration, so that the peak RSS printed is that configuration's own)")
    p.add_argument("--skip-sgemm", action="store_true", help="do not measure the sgemm rate (faster smoke runs)")
    # Internal: set by the parent when it runs one configuration per child process.
    p.add_argument("--_child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--_env", default=None, help=argparse.SUPPRESS)
    return p


def quick_overrides(args, reps: int = 2, warmup: int = 1) -> None:
    if args.quick:
        args.reps = min(args.reps, reps)
        args.warmup = min(args.warmup, warmup)


# --------------------------------------------------------------------------------------------------------------
# Environment: threads, BLAS, sgemm
# --------------------------------------------------------------------------------------------------------------


def loaded_blas_libraries() -> list[str]:
    """Shared objects mapped into this process whose names say BLAS/LAPACK (after torch has been imported)."""
    libs = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split()
                if len(parts) >= 6:
                    name = os.path.basename(parts[-1]).lower()
                    if any(s in name for s in ("blas", "lapack", "mkl_", "libmkl", "blis")):
                        libs.add(parts[-1])
    except OSError:
        pass
    return sorted(libs)


def blas_alternative() -> str:
    """Where Debian's libblas.so.3 alternative points (update-alternatives --display libblas.so.3-<arch>)."""
    link = "/usr/lib/x86_64-linux-gnu/libblas.so.3"
    try:
        return os.path.realpath(link)
    except OSError:
        return "?"


def blas_kind(libs: list[str]) -> str:
    joined = " ".join(libs).lower()
    if "openblas" in joined:
        return "openblas-openmp" if "openmp" in joined else ("openblas-pthread" if "pthread" in joined else "openblas")
    if "mkl" in joined:
        return "mkl"
    if "blis" in joined:
        return "blis"
    if "/blas/libblas" in joined:
        return "reference-blas (SLOW: install libopenblas0-openmp)"
    return "unknown"


def sgemm_gflops(m: int, k: int, n: int, reps: int = 10, min_time: float = 0.3) -> float:
    """Best-of-reps GFLOP/s of C = A(m,k) @ B(k,n) in float32 (the min time, so the least disturbed run)."""
    g = torch.Generator().manual_seed(1234)
    a = torch.randn(m, k, generator=g)
    b = torch.randn(k, n, generator=g)
    c = torch.empty(m, n)
    for _ in range(2):
        torch.mm(a, b, out=c)
    best = math.inf
    t_start = time.perf_counter()
    i = 0
    while i < reps or time.perf_counter() - t_start < min_time:
        t0 = time.perf_counter()
        torch.mm(a, b, out=c)
        best = min(best, time.perf_counter() - t0)
        i += 1
        if i >= 200:
            break
    return 2.0 * m * k * n / best / 1e9


def setup(args, bench_name: str) -> dict:
    """Set threads and seeds; in the parent process print (once) the environment and the sgemm rates.

    Returns the environment dict that goes into every JSON line.
    """
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args._env is not None:  # child: the parent measured and printed everything already
        return json.loads(args._env)
    libs = loaded_blas_libraries()
    env = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "threads": torch.get_num_threads(),
        "blas": blas_kind(libs),
        "blas_libs": libs,
        "libblas_alternative": blas_alternative(),
        "host": socket.gethostname(),
        "cpu": _cpu_name(),
        "nproc": os.cpu_count(),
        "loadavg_1min": os.getloadavg()[0],
    }
    print(f"== {bench_name}: PyTorch {env['torch']} (python {env['python']}), threads={env['threads']}, "
          f"{env['nproc']} CPUs ({env['cpu']}), load average {env['loadavg_1min']:.2f}")
    print(f"   BLAS in use: {env['blas']}")
    for lib in libs:
        print(f"     mapped: {lib}")
    print(f"   libblas.so.3 alternative -> {env['libblas_alternative']}")
    if "reference" in env["blas"] or env["blas"] == "unknown":
        print("   WARNING: torch is not using an optimised BLAS; timings will be ~45x too slow.")
    if not args.skip_sgemm:
        env["sgemm_gflops_8320x192x576"] = round(sgemm_gflops(8320, 192, 576), 2)
        env["sgemm_gflops_1024"] = round(sgemm_gflops(1024, 1024, 1024), 2)
        print(f"   sgemm GFLOP/s (best of reps): M=8320 K=192 N=576: {env['sgemm_gflops_8320x192x576']:.1f}, "
              f"1024^3: {env['sgemm_gflops_1024']:.1f}")
    torch.manual_seed(args.seed)
    return env


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


# --------------------------------------------------------------------------------------------------------------
# Timing and memory
# --------------------------------------------------------------------------------------------------------------


def time_fn(fn, reps: int, warmup: int) -> dict:
    """Wall time of fn() in ms: median and min over reps after warmup calls.

    Also the process CPU time (all threads, time.process_time) per call: on a shared machine a wall time far
    above cpu_ms / threads means the run waited for a core (OpenMP spin-waits count as CPU time, so cpu_ms is
    an upper bound of the useful work).
    """
    for _ in range(warmup):
        fn()
    times, cpu = [], []
    for _ in range(max(1, reps)):
        c0 = time.process_time()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
        cpu.append((time.process_time() - c0) * 1e3)
    return {"median_ms": statistics.median(times), "min_ms": min(times), "times_ms": times,
            "cpu_median_ms": statistics.median(cpu)}


def peak_rss_mib() -> float:
    """Peak resident set size of this process so far (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# --------------------------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------------------------


def emit_json(args, env: dict, record: dict) -> None:
    """Append one JSON line (record + environment fields) to --json, if given."""
    if not args.json:
        return
    full = {**record}
    full.setdefault("impl", "torch")
    full.setdefault("threads", env.get("threads"))
    for key in ("torch", "blas", "sgemm_gflops_8320x192x576", "sgemm_gflops_1024", "host", "loadavg_1min"):
        if key in env:
            full.setdefault(key, env[key])
    full.setdefault("reps", args.reps)
    full.setdefault("warmup", args.warmup)
    full.setdefault("quick", bool(args.quick))
    full.setdefault("time_unix", round(time.time(), 1))
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    with open(args.json, "a") as f:
        f.write(json.dumps(full) + "\n")


def print_table(rows: list[dict], columns: list[tuple[str, str, str]]) -> None:
    """columns: (key, header, format) -- e.g. ("fwd_ms", "fwd ms", "{:.2f}")."""
    cells = [[h for _, h, _ in columns]]
    for r in rows:
        line = []
        for key, _, fmt in columns:
            v = r.get(key)
            line.append("-" if v is None else (fmt.format(v) if isinstance(v, (int, float)) else str(v)))
        cells.append(line)
    widths = [max(len(c[i]) for c in cells) for i in range(len(columns))]
    for j, line in enumerate(cells):
        print("  " + "  ".join(c.rjust(w) for c, w in zip(line, widths)))
        if j == 0:
            print("  " + "  ".join("-" * w for w in widths))


# --------------------------------------------------------------------------------------------------------------
# One configuration per child process (so ru_maxrss is that configuration's peak)
# --------------------------------------------------------------------------------------------------------------


def child_env(args) -> dict:
    """The children's environment: OpenMP's and the BLAS libraries' thread counts set to --threads where the caller
    left them unset. torch.set_num_threads alone does not bound OpenBLAS's threads (the official side then used
    the second core: CPU time 1.7-1.9x wall at --threads 1) nor liere's OpenMP loops, so a "one thread" ratio
    depended on which side got the idle core (bench/README.md, the torch operators on a quiet machine)."""
    e = dict(os.environ)
    n = getattr(args, "threads", None)
    if n:
        for k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            e.setdefault(k, str(n))
    return e


def run_children(args, env: dict, option: str, values: list[str]) -> list[dict]:
    """Re-run this script once per value of `option` (e.g. --enc), collect the records the children return.

    The children inherit stdout/stderr, skip the environment probe, and write their records (one JSON per
    line) to a temporary file; the parent appends them to --json itself.
    """
    argv = _strip_option(sys.argv[1:], option)
    argv = _strip_option(argv, "--json")
    records = []
    for v in values:
        with tempfile.NamedTemporaryFile("r", suffix=".jsonl", delete=True) as tmp:
            cmd = [sys.executable, sys.argv[0], *argv, option, v, "--_child", tmp.name, "--_env", json.dumps(env)]
            res = subprocess.run(cmd, env=child_env(args))
            if res.returncode != 0:
                print(f"   child for {option} {v} failed with exit code {res.returncode}")
                continue
            with open(tmp.name) as f:
                for line in f:
                    if line.strip():
                        records.append(json.loads(line))
    return records


def child_return(args, records: list[dict]) -> None:
    with open(args._child, "a") as f:
        for r in records:
            f.write(json.dumps(r) + "\n")


def _strip_option(argv: list[str], option: str) -> list[str]:
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == option:
            skip = True
            continue
        if a.startswith(option + "="):
            continue
        out.append(a)
    return out


# --------------------------------------------------------------------------------------------------------------
# LieRE formulas of the official code, restated (StanfordMIMI/LieRE models/rope_vit.py)
# --------------------------------------------------------------------------------------------------------------


def grid_positions(side: int = 8, integer: bool = False, dtype=torch.float32) -> torch.Tensor:
    """(side*side, 2) positions of a side x side patch grid, first axis outermost (token t = row*side + col).

    Official LieRE (PositionEncoderBase.forward at the training resolution): per axis linspace(0, 1, side),
    torch.cartesian_prod over the axes, so token t has (p0, p1) = (row/(side-1), col/(side-1)).
    integer=True gives the rope-vit grid values (row, col) in 0..side-1 in the same token order.
    """
    if integer:
        axis = torch.arange(side, dtype=dtype)
    else:
        axis = torch.linspace(0.0, 1.0, side, dtype=dtype)
    return torch.cartesian_prod(axis, axis)


def liere_init(*shape_prefix: int, block: int, generator=None) -> torch.Tensor:
    """Raw generator parameters W ~ U[0, 2*pi) of shape (*shape_prefix, block, block) (official init)."""
    return torch.rand(*shape_prefix, block, block, generator=generator) * (2.0 * math.pi)


def skew_from_raw(w: torch.Tensor) -> torch.Tensor:
    """Official skew basis: U = triu(W, 1) - 0.5; G = U - U^T (the -0.5 cancels; kept for fidelity)."""
    upper = torch.triu(w, diagonal=1) - 0.5
    return upper - upper.transpose(-1, -2)


def generators_at(positions: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """A(p) = sum_a p_a G_a, the official broadcast-and-sum form.

    positions (T, D); g (D, *rest, b, b) -> (T, *rest, b, b).
    """
    t, d = positions.shape
    extra = g.dim() - 1
    return (positions.reshape(t, d, *([1] * extra)) * g.unsqueeze(0)).sum(dim=1)


def with_cls_identity(a: torch.Tensor) -> torch.Tensor:
    """Prepend a zero generator for the CLS token (token 0), so that its rotation is the identity."""
    return torch.cat((torch.zeros_like(a[:1]), a), dim=0)
