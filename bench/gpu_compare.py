#!/usr/bin/python3
"""liere against PyTorch on one GPU: the training step of bench/README.md's GPU table, both sides in one run.

For every model (ViT-Tiny, ViT-B; CIFAR shape: B 128, 32 px, patch 4, 100 classes), encoding and precision
(--precisions, default $LIERE_GPU_PRECISIONS or fp32,tf32,bf16: float, TF32, and bf16 — liere's --precision bf16,
PyTorch's torch.autocast('cuda', dtype=torch.bfloat16)) it runs liere's
`train_cifar --device cuda --bench-steps N --precision P` (with each --threads value: the host threads that compute
the rotation tables) and PyTorch's `bench/torch_vit_gpu.py --precision P`, and writes everything to --json: a first
line with the command, the dates and the machine (CPU, GPU, driver, CUDA, torch, liere's commit), then one line per
run (each with "precision" and, as before, "tf32"). It prints the table as bench/README.md shows it (img/s; liere
with the first --threads value, the second in parentheses; a column per implementation and precision), then the
ratios: liere / PyTorch, and each encoding / abs on liere's side. --deadline-s holds it to a GPU lease's share.

  python3 bench/gpu_compare.py --build-dir build --json bench/results/gpu_<date>.jsonl
  python3 bench/gpu_compare.py --build-dir build --models tiny --enc liere8 --steps 5 --json /tmp/g.jsonl  # smoke
  /usr/bin/python3 bench/gpu_compare.py --device cpu --precisions fp32,bf16 --models tiny --enc abs --steps 1 \
      --batch 8 --threads 2 --python /usr/bin/python3 --json /tmp/g.jsonl     # the script itself, without a GPU

--python is the interpreter with a CUDA build of PyTorch (default: python3 on PATH; Debian's /usr/bin/python3 has a
CPU-only torch). The driver itself imports no torch.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PE_FLAGS = {"abs": ["--pe", "absolute"], "rope-mixed": ["--pe", "rope-mixed"],
            "liere8": ["--pe", "liere", "--block", "8"], "liere64": ["--pe", "liere", "--block", "64"]}
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")  # fp16: liere's --precision fp16, PyTorch's autocast + GradScaler
DEFAULT_PRECISIONS = ("fp32", "tf32", "bf16")
PRECISION_LABEL = {"fp32": "float", "tf32": "TF32", "bf16": "bf16", "fp16": "fp16"}
LABEL = {"tiny": "ViT-Tiny", "base": "ViT-B", "abs": "abs", "rope-mixed": "rope-mixed", "liere8": "liere-8",
         "liere64": "liere-64"}


def sh(cmd, timeout=60):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout).stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        return None


def machine(args) -> dict:
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "nproc": os.cpu_count(), "loadavg_start": list(os.getloadavg()),
            "nvidia_smi": sh(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"]),
            "nvcc": sh(["nvcc", "--version"]),
            "torch": sh([args.python, "-c", "import torch; print(torch.__version__, torch.version.cuda)"], 120),
            "liere_commit": sh(["git", "-C", HERE, "describe", "--always", "--dirty", "--abbrev=12"])}


def run_liere(args, model, enc, precision, threads, timeout) -> dict:
    cmd = [os.path.join(args.build_dir, "examples", "train_cifar"), "--data", "cifar100", "--model", model,
           "--patch", "4", "--batch", str(args.batch), "--device", args.device, "--bench-steps", str(args.steps),
           "--threads", str(threads), "--precision", precision] + PE_FLAGS[enc]
    t0 = time.time()
    try:
        res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        res = subprocess.CompletedProcess(cmd, 124, out + f"\n(stopped after {timeout:.0f} s)")
    rec = {"impl": "liere", "model": model, "enc": enc, "tf32": precision == "tf32", "precision": precision,
           "threads": threads, "command": cmd,
           "returncode": res.returncode, "wall_s": round(time.time() - t0, 1)}
    if res.returncode != 0:
        rec["output_tail"] = res.stdout[-2000:]
        return rec
    for tok in res.stdout.split():  # "device=cuda gemm=cuBLAS batch=128 ... train_img_per_s=…"
        if "=" in tok:
            k, v = tok.split("=", 1)
            try:
                rec[k] = float(v)
            except ValueError:
                rec[k] = v
    rec["img_per_s"] = rec.get("train_img_per_s")
    return rec


def run_torch(args, model, encs, precision, timeout) -> list:
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as tmp:
        cmd = [args.python, os.path.join(HERE, "torch_vit_gpu.py"), "--enc", ",".join(encs), "--model", model,
               "--steps", str(args.steps), "--batch", str(args.batch), "--precision", precision,
               "--device", args.device, "--json", tmp.name]
        try:
            res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 timeout=timeout)
        except subprocess.TimeoutExpired:
            res = subprocess.CompletedProcess(cmd, 124, f"(stopped after {timeout:.0f} s)")
        recs = [dict(json.loads(l), impl="torch") for l in open(tmp.name) if l.strip()]
    if res.returncode != 0 or not recs:
        # The encodings that finished keep their lines; the rest get one failure record (its output's tail).
        done = {r.get("enc") for r in recs}
        rest = [e for e in encs if e not in done]
        return recs + [{"impl": "torch", "model": model, "enc": ",".join(rest) or None, "tf32": precision == "tf32",
                        "precision": precision, "command": cmd, "returncode": res.returncode or 1,
                        "output_tail": res.stdout[-2000:]}]
    return recs


def outcome(r: dict) -> str:
    """'N img/s', or why the run failed: its return code and the last two lines of its output."""
    if r.get("returncode", 0) == 0 and r.get("img_per_s") is not None:
        return f"{r['img_per_s']} img/s"
    tail = [l.strip() for l in (r.get("output_tail") or "").splitlines() if l.strip()]
    return f"FAILED (returncode {r.get('returncode')}): {' / '.join(tail[-2:]) if tail else 'no output'}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build-dir", default="build")
    p.add_argument("--json", required=True, metavar="OUT", help="JSON lines: the run's meta line, then every run")
    p.add_argument("--models", default="tiny,base")
    p.add_argument("--enc", default="abs,rope-mixed,liere8,liere64")
    p.add_argument("--threads", default="16,2", help="liere's host threads, each a run [16,2]")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--python", default="python3", help="the interpreter with a CUDA PyTorch [python3]")
    p.add_argument("--precisions", default=os.environ.get("LIERE_GPU_PRECISIONS") or ",".join(DEFAULT_PRECISIONS),
                   help="the precisions to run, each a column per implementation: fp32, tf32, bf16, fp16 "
                        "(PyTorch: autocast float16 with GradScaler; liere: --precision fp16, dynamic loss scaling) "
                        "[$LIERE_GPU_PRECISIONS or fp32,tf32,bf16]")
    p.add_argument("--device", default="cuda",
                   help="both sides' --device (cpu: a smoke test of this script; tf32 needs cuda) [cuda]")
    p.add_argument("--no-torch", action="store_true", help="liere's side only")
    p.add_argument("--run-timeout", type=int, default=300,
                   help="seconds one liere run may take (PyTorch's run of all encodings: 4x) before it is recorded as "
                        "failed (returncode 124) and the next begins [300]")
    p.add_argument("--deadline-s", type=float, default=0,
                   help="seconds for the whole comparison (a GPU lease's share): no run starts after it, each run's "
                        "timeout is cut to what is left, the runs not made are listed as skipped, and the tables are "
                        "printed from the runs made [0: no limit]")
    a = p.parse_args()
    models, encs = a.models.split(","), a.enc.split(",")
    precisions = [x for x in a.precisions.split(",") if x]
    bad = [x for x in precisions if x not in PRECISIONS]
    if bad or not precisions:
        p.error(f"--precisions {a.precisions!r}: each must be one of {', '.join(PRECISIONS)}")
    threads = [int(t) for t in a.threads.split(",")]
    started = time.time()
    meta = {"type": "meta", "command": [sys.executable] + sys.argv,
            "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)), "machine": machine(a)}
    print(json.dumps(meta["machine"], indent=1), flush=True)
    runs = []
    # Each run is also appended to OUT.partial as it ends: a run cut short (a GPU lease's time limit) keeps its rows.
    os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
    partial = open(a.json + ".partial", "w")
    partial.write(json.dumps(meta) + "\n")

    def keep(r):
        runs.append(r)
        partial.write(json.dumps(dict(r, type="run")) + "\n")
        partial.flush()
    skipped = []

    def budget(limit):
        """The timeout of the next run: limit, cut to what is left of --deadline-s; None: no time is left."""
        if a.deadline_s <= 0:
            return limit
        left = started + a.deadline_s - time.time()
        return min(limit, left) if left >= 5 else None
    for model in models:
        for prec in precisions:
            for enc in encs:
                for t in threads:
                    timeout = budget(a.run_timeout)
                    if timeout is None:
                        skipped.append(f"liere {model} {enc} {prec} threads={t}")
                        continue
                    keep(run_liere(a, model, enc, prec, t, timeout))
                    r = runs[-1]
                    print(f"liere {model} {enc} {prec} threads={t}: {outcome(r)}", flush=True)
            if not a.no_torch:
                timeout = budget(4 * a.run_timeout)
                if timeout is None:
                    skipped.append(f"torch {model} {','.join(encs)} {prec}")
                    continue
                for r in run_torch(a, model, encs, prec, timeout):
                    keep(r)
                    print(f"torch {model} {r.get('enc')} {prec}: {outcome(r)}", flush=True)
    if skipped:
        meta["skipped_by_deadline"] = skipped
        print(f"--deadline-s {a.deadline_s:.0f}: {len(skipped)} runs not made: " + "; ".join(skipped), flush=True)
    meta["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    partial.close()
    with open(a.json + ".tmp", "w") as f:
        f.write(json.dumps(meta) + "\n")
        for r in runs:
            f.write(json.dumps(dict(r, type="run")) + "\n")
    os.replace(a.json + ".tmp", a.json)
    os.remove(a.json + ".partial")

    def rate(impl, model, enc, prec, t=None):
        for r in runs:
            if (r["impl"], r.get("model"), r.get("enc"), r.get("precision")) == (impl, model, enc, prec) and \
                    (t is None or r.get("threads") == t) and r.get("img_per_s"):
                return float(r["img_per_s"])
        return None

    def ips(impl, model, enc, prec, t=None):
        v = rate(impl, model, enc, prec, t)
        return "–" if v is None else f"{v:.0f}"

    def ratio(num, den):
        return "–" if num is None or den is None else f"{num / den:.2f}"

    def lcell(model, enc, prec):
        main = ips("liere", model, enc, prec, threads[0])
        return main + "".join(f" ({ips('liere', model, enc, prec, t)})" for t in threads[1:])

    impls = [("liere", "liere")] + ([] if a.no_torch else [("torch", "PyTorch")])
    cols = [(impl, prec, f"{name} {PRECISION_LABEL[prec]}") for impl, name in impls for prec in precisions]
    print("\n| model | encoding | " + " | ".join(c[2] for c in cols) + " |\n|---|---|" + "---|" * len(cols))
    for model in models:
        for enc in encs:
            cells = [lcell(model, enc, prec) if impl == "liere" else ips(impl, model, enc, prec)
                     for impl, prec, _ in cols]
            print(f"| {LABEL[model]} | {LABEL[enc]} | " + " | ".join(cells) + " |")
    # The issues' targets as ratios of the runs above (liere with its first --threads value): liere against PyTorch
    # for each encoding and precision (issue 21: LieRE-8 >= 2), and each encoding against abs on liere's side
    # (issue 21: LieRE-64 >= 0.9).
    t0 = threads[0]
    heads = ([f"liere / PyTorch {PRECISION_LABEL[p]}" for p in precisions] if not a.no_torch else []) + \
        [f"/ abs, liere {PRECISION_LABEL[p]}" for p in precisions]
    print("\n| model | encoding | " + " | ".join(heads) + " |\n|---|---|" + "---|" * len(heads))
    for model in models:
        for enc in encs:
            cells = ([ratio(rate("liere", model, enc, p, t0), rate("torch", model, enc, p)) for p in precisions]
                     if not a.no_torch else [])
            cells += [ratio(rate("liere", model, enc, p, t0), rate("liere", model, "abs", p, t0)) for p in precisions]
            print(f"| {LABEL[model]} | {LABEL[enc]} | " + " | ".join(cells) + " |")
    print(f"\nwrote {a.json}")
    return 0 if all(r.get("returncode", 0) == 0 for r in runs) else 1


if __name__ == "__main__":
    sys.exit(main())
