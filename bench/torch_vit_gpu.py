#!/usr/bin/python3
"""PyTorch peer of the GPU training benchmark (train_cifar --bench-steps N --device cuda): the model of
torch_vit_step.py (ViT-Tiny/CIFAR shape: B 128, 32x32, patch 4, 100 classes; --model base for ViT-B) on a CUDA
device, Adam, one fixed random batch on the device; img/s over --steps steps after --warmup, with
torch.cuda.synchronize() around the timed loop.

--precision (liere's flag of the same name): fp32 (PyTorch's default: TF32 off), tf32 (TF32 matrix products and
convolutions allowed; --tf32 is the same), bf16 (the forward and the loss under
torch.autocast('cuda', dtype=torch.bfloat16), fp32 weights and Adam: the one line a PyTorch user adds), fp16
(autocast float16 with torch.cuda.amp.GradScaler, PyTorch's fp16 recipe; cuda only).

  python3 bench/torch_vit_gpu.py --enc abs,rope-mixed,liere8,liere64 --steps 30 [--model base] [--precision bf16]
                                 [--json OUT]
  /usr/bin/python3 bench/torch_vit_gpu.py --device cpu --enc liere8 --precision bf16 --steps 1 --warmup 0 --batch 4
                                 # a smoke test of the script (CPU autocast), no GPU figures
Prints one JSON object per encoding; --json OUT also appends them to OUT, each with the command, the date and the
machine (GPU, driver, CUDA, torch, CPU). bench/gpu_compare.py runs this and liere's side together.
"""
import argparse
import json
import os
import platform
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

from torch_vit_step import B, CLASSES, ViT, make_step  # noqa: E402


def gpu_machine() -> dict:
    """The GPU, its driver, the CUDA torch was built with, torch, and the host CPU."""
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else None
    info = {"gpu": gpu, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "python": platform.python_version(), "cpu": platform.processor() or "?"}
    try:
        with open("/proc/cpuinfo") as f:
            info["cpu"] = next((l.split(":", 1)[1].strip() for l in f if l.startswith("model name")), info["cpu"])
    except OSError:
        pass
    try:
        q = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=60)
        info["nvidia_smi"] = q.stdout.strip() or None
    except (OSError, subprocess.TimeoutExpired):
        info["nvidia_smi"] = None
    return info


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--enc", default="abs,rope-mixed,liere8,liere64")
    p.add_argument("--model", default="tiny", choices=["tiny", "base"])
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--batch", type=int, default=B)
    p.add_argument("--precision", default="fp32", choices=["fp32", "tf32", "bf16", "fp16"],
                   help="fp32, tf32 (TF32 matrix products allowed), bf16 (torch.autocast bfloat16), fp16 "
                        "(torch.autocast float16 with GradScaler; cuda only) [fp32]")
    p.add_argument("--tf32", action="store_true", help="the same as --precision tf32")
    p.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                   help="cpu: a smoke test of this script (its figures are not the benchmark's) [cuda]")
    p.add_argument("--json", metavar="OUT", help="append one JSON object per encoding (with command, date, machine)")
    a = p.parse_args()
    if a.tf32:
        if a.precision not in ("fp32", "tf32"):
            p.error(f"--tf32 and --precision {a.precision} contradict each other (--tf32 is --precision tf32)")
        a.precision = "tf32"
    if a.device == "cuda" and not torch.cuda.is_available():
        print("torch_vit_gpu: no CUDA device (--device cpu runs a smoke test)", file=sys.stderr)
        return 2
    if a.device == "cpu" and a.precision in ("tf32", "fp16"):
        p.error(f"--precision {a.precision} needs --device cuda")
    tf32 = a.precision == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(a.precision)
    cuda = a.device == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize()
    machine = gpu_machine()
    size = dict(dim=192, heads=3, mlp=768) if a.model == "tiny" else dict(dim=768, heads=12, mlp=3072)
    for enc in a.enc.split(","):
        model = ViT(enc, **size).to(a.device)
        x = torch.randn(a.batch, 3, 32, 32, device=a.device)
        y = torch.randint(0, CLASSES, (a.batch,), device=a.device)
        step = make_step(model, x, y, autocast_dtype)
        for _ in range(a.warmup):
            step()
        sync()
        t0 = time.perf_counter()
        loss = None
        for _ in range(a.steps):
            loss = step()
        sync()
        s = time.perf_counter() - t0
        rec = {"peer": "pytorch " + torch.__version__,
               "device": torch.cuda.get_device_name() if cuda else "cpu (smoke test)",
               "model": a.model, "enc": enc, "batch": a.batch, "tf32": tf32, "precision": a.precision,
               "steps": a.steps, "img_per_s": round(a.batch * a.steps / s, 1), "step_ms": round(1000 * s / a.steps, 2),
               "loss": None if loss is None else round(float(loss), 4)}
        print(json.dumps(rec), flush=True)
        if a.json:
            rec.update(command=[sys.executable] + sys.argv, date_utc=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       machine=machine)
            os.makedirs(os.path.dirname(os.path.abspath(a.json)), exist_ok=True)
            with open(a.json, "a") as f:
                f.write(json.dumps(rec) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
