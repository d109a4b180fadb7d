#!/usr/bin/python3
"""PyTorch peer of the GPU training benchmark (train_cifar --bench-steps N --device cuda): the model of
torch_vit_step.py (ViT-Tiny/CIFAR shape: B 128, 32x32, patch 4, 100 classes; --model base for ViT-B) on a CUDA
device, Adam, one fixed random batch on the device; img/s over --steps steps after --warmup, with
torch.cuda.synchronize() around the timed loop. --tf32 allows TF32 matrix products (PyTorch's default is off).

  python3 bench/torch_vit_gpu.py --enc abs,rope-mixed,liere8,liere64 --steps 30 [--model base] [--tf32] [--json OUT]
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
    info = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "torch_cuda": torch.version.cuda,
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
    p.add_argument("--tf32", action="store_true")
    p.add_argument("--json", metavar="OUT", help="append one JSON object per encoding (with command, date, machine)")
    a = p.parse_args()
    if not torch.cuda.is_available():
        print("torch_vit_gpu: no CUDA device", file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = a.tf32
    torch.backends.cudnn.allow_tf32 = a.tf32
    machine = gpu_machine()
    size = dict(dim=192, heads=3, mlp=768) if a.model == "tiny" else dict(dim=768, heads=12, mlp=3072)
    for enc in a.enc.split(","):
        model = ViT(enc, **size).cuda()
        x = torch.randn(a.batch, 3, 32, 32, device="cuda")
        y = torch.randint(0, CLASSES, (a.batch,), device="cuda")
        step = make_step(model, x, y)
        for _ in range(a.warmup):
            step()
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(a.steps):
            step()
        torch.cuda.synchronize()
        s = time.perf_counter() - t0
        rec = {"peer": "pytorch " + torch.__version__, "device": torch.cuda.get_device_name(),
               "model": a.model, "enc": enc, "batch": a.batch, "tf32": a.tf32, "steps": a.steps,
               "img_per_s": round(a.batch * a.steps / s, 1), "step_ms": round(1000 * s / a.steps, 2)}
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
