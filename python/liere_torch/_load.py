"""Finding and loading liere's PyTorch operator library (libliere_torch.so) with a version check.

The library is C++ compiled against one libtorch; loaded into a process whose torch is another version it fails
to load with an undefined symbol, or worse, misbehaves. So the versions are compared before the library is
loaded (torch_version.txt, written beside the library by the build), and once more after (the version compiled
into the library, torch.ops.liere.torch_version()).

Where the library is looked for, in order:
  1. the path in the environment variable LIERE_TORCH_LIBRARY;
  2. this package's folder (an installed or copied package);
  3. <repository>/build/python/liere_torch/ (the README's build folder).
"""

from __future__ import annotations

import os
import re

import torch

LIBRARY_NAME = "libliere_torch.so"
VERSION_FILE = "torch_version.txt"


def version_tuple(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a torch version string: '1.13.0a0' and '1.13.0+cpu' give (1, 13, 0)."""
    m = re.match(r"\s*(\d+)\.(\d+)(?:\.(\d+))?", version)
    if not m:
        raise ImportError(f"liere_torch: cannot read the torch version {version!r}")
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def check_versions(compiled: str, running: str, library: str) -> None:
    """ImportError unless the libtorch the library was compiled against is the running torch's version."""
    if version_tuple(compiled) != version_tuple(running):
        raise ImportError(
            f"liere_torch: {library} was compiled against libtorch {compiled.strip()}, but this Python runs "
            f"torch {running} (from {os.path.dirname(torch.__file__)}); C++ operator libraries only load into "
            f"the torch version they were built for: rebuild liere with that torch's libtorch (CMake finds it "
            f"through Torch_DIR) or run the matching torch")


def candidates() -> list[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    out = []
    env = os.environ.get("LIERE_TORCH_LIBRARY")
    if env:
        out.append(env)
    out.append(os.path.join(here, LIBRARY_NAME))
    repo = os.path.dirname(os.path.dirname(here))
    out.append(os.path.join(repo, "build", "python", "liere_torch", LIBRARY_NAME))
    return out


def find_library() -> str:
    tried = candidates()
    if os.environ.get("LIERE_TORCH_LIBRARY"):
        path = tried[0]
        if not os.path.isfile(path):
            raise ImportError(f"liere_torch: LIERE_TORCH_LIBRARY={path} does not exist")
        return path
    for path in tried:
        if os.path.isfile(path):
            return path
    raise ImportError("liere_torch: libliere_torch.so not found; build it (cmake ... with libtorch installed, "
                      "target liere_torch) and set LIERE_TORCH_LIBRARY to its path. Looked in: " + ", ".join(tried))


def load(path: str | None = None) -> str:
    """Load the operator library once (torch.ops.liere.*); returns its path."""
    path = path or find_library()
    version_file = os.path.join(os.path.dirname(path), VERSION_FILE)
    if os.path.isfile(version_file):
        with open(version_file) as f:
            check_versions(f.read(), torch.__version__, path)
    if not _namespace_loaded():
        try:
            torch.ops.load_library(path)
        except OSError as e:
            raise ImportError(f"liere_torch: cannot load {path} into torch {torch.__version__}: {e} (a library built "
                              f"against another libtorch fails this way; rebuild liere against this torch)") from e
    check_versions(torch.ops.liere.torch_version(), torch.__version__, path)
    return path


def _namespace_loaded() -> bool:
    try:
        torch.ops.liere.so_exp  # noqa: B018 — raises when the operators are not registered
        return True
    except (AttributeError, RuntimeError):
        return False
