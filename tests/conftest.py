"""Shared test helpers: where the GPU ground truth lives, and how its absence is treated."""
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TRUTH_DIR = Path(os.environ.get("QWENGPU_GPU_TRUTH") or ROOT.parent / "shared" / "gpu-truth")


def require_gpu_truth() -> Path:
    """The gpu-truth folder; a developer without it skips, CI (which always has it) fails."""
    if not (TRUTH_DIR / "cases.json").is_file():
        msg = f"gpu-truth folder not found at {TRUTH_DIR} (set QWENGPU_GPU_TRUTH)"
        if os.environ.get("CI"):
            pytest.fail(msg)
        pytest.skip(msg)
    return TRUTH_DIR


@pytest.fixture(scope="module")
def one_torch_thread():
    """Small batched torch ops: one thread is several times faster than two on a busy 2-core machine."""
    import torch

    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
