#!/usr/bin/python3
"""The official LieRE encoder's computation against liere's PyTorch operators (issue 24), same run, CPU.

Workload: the rotation tables of ViT-Tiny on CIFAR (liere's ViT-Tiny: dim 192, 3 heads of 64, 12 layers),
32x32 images in 4x4 patches: 64 tokens + CLS, per-layer and per-head generators, position dimension 2,
block b = 8 (W (2, 12, 24, 8, 8)) or b = 64 (W (2, 12, 3, 64, 64)), float32 or float64. The tables do not
depend on the batch (B = 128 images share one table per forward); the encoder runs once per training step.

  official : the official LierePositionEncoder.forward (StanfordMIMI/LieRE models/rope_vit.py, restated as in
             bench/torch_common.py): U = triu(W, 1) - 0.5, G = U - U^T, A = sum_a p_a G_a over
             (1, 64, 2, 12, m, b, b), a zero generator for CLS, then torch.matrix_exp per layer
             (EXPONENTIATE_LOOP, A rounded to float32 and cast to the dtype as the official code does);
  liere    : liere_torch.LierePositionEncoder, the drop-in with the same parameters (its state dict loaded from the
             official module's), i.e. torch.ops.liere.rotation_tables (at b = 64 the spectral path);
  liere-poly (b = 64 only): the same with LIERE_TABLE_METHOD=polynomial, the scaling-and-squaring path that b = 64
             took before the spectral one (docs/math.md), for the side-by-side comparison.

Timed (median and min over --reps after --warmup, wall time, torch.set_num_threads(--threads) on both sides, and
OMP_NUM_THREADS / OPENBLAS_NUM_THREADS / MKL_NUM_THREADS = --threads for the children unless set):
  fwd      : the encoder's forward under torch.no_grad()
  fwd+bwd  : forward, loss = (R * C).sum() with a fixed C ~ N(0, 1), loss.backward() to W
Peak memory: each (impl, b, dtype) runs in its own child process; peak_rss_mib is ru_maxrss at the end,
base_rss_mib the peak RSS after the parameters, positions and C were built, before the first call, so
peak - base is what the encoder's forward and backward need at their peak (the same C on both sides).

  /usr/bin/python3 bench/torch_liere_ops.py --threads 1 --reps 3 --json bench/results/torch_liere_ops.json
  /usr/bin/python3 bench/torch_liere_ops.py --quick            # smoke run
The library is found as liere_torch finds it (LIERE_TORCH_LIBRARY or build/python/liere_torch/).
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "python"))
import torch_common as tc  # noqa: E402

DIM, HEADS, DEPTH, IMAGE, PATCH = 192, 3, 12, 32, 4
BLOCKS = (8, 64)
DTYPES = {"float32": torch.float32, "float64": torch.float64}


class OfficialEncoder(torch.nn.Module):
    """The official encoder's parameters and forward for this workload (learned phase, per layer and head)."""

    def __init__(self, block: int):
        super().__init__()
        m = (DIM // HEADS) // block * HEADS
        self.generator_raw_params = torch.nn.Parameter(tc.liere_init(2, DEPTH, m, block=block))
        self.generator_transform = torch.nn.Identity()

    def forward(self, positions: torch.Tensor, dtype) -> torch.Tensor:
        bases = tc.skew_from_raw(self.generator_transform(self.generator_raw_params))
        a = (positions.reshape(list(positions.shape) + [1] * 4) * bases).sum(dim=-5)  # (1, N, L, m, b, b)
        a = torch.cat((torch.zeros_like(a[:, 0]).unsqueeze(1), a), dim=1)
        out = [torch.matrix_exp(a[:, :, i:i + 1].to(torch.float32).contiguous().to(dtype)) for i in range(a.shape[2])]
        return torch.cat(out, dim=2)


def run_case(args, env, impl: str, block: int, dtype_name: str) -> dict:
    dtype = DTYPES[dtype_name]
    torch.manual_seed(args.seed + block)
    official = OfficialEncoder(block).to(dtype)
    positions = tc.grid_positions(IMAGE // PATCH).unsqueeze(0)  # (1, 64, 2), official grid at training size
    if impl == "liere-poly":  # read by the library at its first use
        os.environ["LIERE_TABLE_METHOD"] = "polynomial"
    if impl == "official":
        module = official

        def forward():
            return module(positions.to(dtype), dtype)
    else:
        import liere_torch
        module = liere_torch.LierePositionEncoder(IMAGE, PATCH, DIM, "learned", "sequential", HEADS, 2, block, DEPTH,
                                                  True, True).to(dtype)
        module.load_state_dict(official.state_dict())
        sizes = torch.tensor([[IMAGE, IMAGE]])

        def forward():
            return module(sizes, dtype)

    m = official.generator_raw_params.shape[2]
    shape = (1, positions.shape[1] + 1, DEPTH, m, block, block)
    c = torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(args.seed))
    base_rss = tc.peak_rss_mib()  # before the first call: peak - base is what the calls need
    with torch.no_grad():
        assert tuple(forward().shape) == shape

    def fwd():
        with torch.no_grad():
            forward()

    def fwdbwd():
        module.generator_raw_params.grad = None
        (forward() * c).sum().backward()

    reps = args.reps if not (impl == "official" and block == 64) else args.reps_official64
    t_f = tc.time_fn(fwd, reps, args.warmup)
    t_fb = tc.time_fn(fwdbwd, reps, args.warmup)
    rec = {"bench": "liere_ops_encoder", "impl": impl, "block": block, "dtype": dtype_name, "tokens": shape[1],
           "tables": shape[1] * shape[2] * shape[3], "fwd_ms": t_f["median_ms"], "fwd_min_ms": t_f["min_ms"],
           "fwdbwd_ms": t_fb["median_ms"], "fwdbwd_min_ms": t_fb["min_ms"], "fwd_times_ms": t_f["times_ms"],
           "fwdbwd_times_ms": t_fb["times_ms"], "fwdbwd_cpu_ms": t_fb["cpu_median_ms"], "reps": reps,
           "base_rss_mib": round(base_rss, 1), "peak_rss_mib": round(tc.peak_rss_mib(), 1),
           "threads": torch.get_num_threads()}
    print(f"   {impl:8s} b={block:2d} {dtype_name}: fwd {rec['fwd_ms']:9.1f} ms, fwd+bwd {rec['fwdbwd_ms']:9.1f} ms, "
          f"peak RSS {rec['peak_rss_mib']:.0f} MiB (base {rec['base_rss_mib']:.0f})", flush=True)
    return rec


def main() -> int:
    p = tc.make_parser(__doc__, reps=3, warmup=1)
    p.add_argument("--reps-official64", type=int, default=None,
                   help="reps for the official encoder at b = 64 (default: --reps; each fwd+bwd takes seconds)")
    p.add_argument("--case", default=None, help=argparse_suppress())
    args = p.parse_args()
    tc.quick_overrides(args, reps=1, warmup=0)
    if args.reps_official64 is None:
        args.reps_official64 = args.reps
    if args.case:  # child: one configuration
        env = tc.setup(args, "torch_liere_ops")
        impl, block, dtype_name = args.case.split(":")
        tc.child_return(args, [run_case(args, env, impl, int(block), dtype_name)])
        return 0
    args.skip_sgemm = True
    env = tc.setup(args, "torch_liere_ops")
    cases = [f"{impl}:{b}:{dt}" for b in BLOCKS for dt in DTYPES
             for impl in (("liere", "official", "liere-poly") if b == 64 else ("liere", "official"))]
    records = tc.run_children(args, env, "--case", cases)
    rows = []
    for b in BLOCKS:
        for dt in DTYPES:
            got = {r["impl"]: r for r in records if r["block"] == b and r["dtype"] == dt}
            if "official" not in got or "liere" not in got:
                continue
            o, l = got["official"], got["liere"]
            pp = got.get("liere-poly")
            rows.append({"case": f"b={b} {dt}", "off_f": o["fwd_ms"], "lie_f": l["fwd_ms"],
                         "x_f": o["fwd_ms"] / l["fwd_ms"], "off_fb": o["fwdbwd_ms"], "lie_fb": l["fwdbwd_ms"],
                         "x_fb": o["fwdbwd_ms"] / l["fwdbwd_ms"], "off_mem": o["peak_rss_mib"] - o["base_rss_mib"],
                         "lie_mem": l["peak_rss_mib"] - l["base_rss_mib"],
                         "poly_fb": pp["fwdbwd_ms"] if pp else float("nan"),
                         "x_poly": o["fwdbwd_ms"] / pp["fwdbwd_ms"] if pp else float("nan"),
                         "poly_mem": pp["peak_rss_mib"] - pp["base_rss_mib"] if pp else float("nan")})
    tc.print_table(rows, [("case", "case", "{}"), ("off_f", "official fwd ms", "{:.1f}"),
                          ("lie_f", "liere fwd ms", "{:.1f}"), ("x_f", "fwd ×", "{:.1f}"),
                          ("off_fb", "official fwd+bwd ms", "{:.1f}"), ("lie_fb", "liere fwd+bwd ms", "{:.1f}"),
                          ("x_fb", "fwd+bwd ×", "{:.1f}"), ("off_mem", "official +MiB", "{:.0f}"),
                          ("lie_mem", "liere +MiB", "{:.0f}"), ("poly_fb", "liere-poly fwd+bwd ms", "{:.1f}"),
                          ("x_poly", "poly fwd+bwd ×", "{:.1f}"), ("poly_mem", "poly +MiB", "{:.0f}")])
    if args.json:
        commit = subprocess.run(["git", "-C", HERE, "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True).stdout.strip()
        out = {"command": " ".join([sys.executable] + sys.argv), "date": datetime.datetime.now().isoformat(
            timespec="seconds"), "commit": commit, "machine": {**env, "platform": platform.platform(),
                                                                 "loadavg_end": os.getloadavg()},
               "workload": {"dim": DIM, "heads": HEADS, "depth": DEPTH, "image": IMAGE, "patch": PATCH,
                            "tokens": 65, "position_dim": 2, "per_layer": True, "per_head": True},
               "records": records, "summary": rows}
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")
        os.replace(tmp, args.json)
    return 0


def argparse_suppress():
    import argparse
    return argparse.SUPPRESS


if __name__ == "__main__":
    sys.exit(main())
