"""The machine core run by stock transformers: `run --backend model --engine stock`.

A spliced checkpoint holding the core (`python -m gpu_layers build --machine core`), loaded with
stock `AutoModelForCausalLM.from_pretrained` (no custom code), generates the launch with stock
greedy `generate` over its whole vocabulary: the host appends nothing but the prompt. The fast
executor (`--engine fast`, the default) computes the same tokens with the compiled layers only.

Without a checkpoint the tiny-host build is made on first use and cached (`default_checkpoint`:
the `tiny-2b-layers` host and the core, about 33 GB of float32 files that take about 13 GB on
disk, since the zeros are holes; about 6 minutes on a 2-core CPU). A checkpoint is refused when it
was built for another machine or from other core sources (`check_core_build`).

Stock fp32 sums the core's wide gates in float32; the core carries a norm ballast and
re-digitizes its wide outputs, craft/precision.py bounds what fp32 does to every step, and
teacher-forced prefills of a build match the oracle's trace at every position on the four cases
checked on a CPU (docs/machine.md section 37). The fast executor computes the same tokens tens of
times faster.

On a CPU, from_pretrained maps the float32 shards, so a checkpoint bigger than memory runs, at the
speed of reading its nonzero pages once per token (`scripts/machine_core.py --engine stock`
measures it).
"""
from __future__ import annotations

import threading
import time
from pathlib import Path

from gpu_layers.errors import ExecutionError, QwenGPUError

DEFAULT_HOST = "tiny-2b-layers"


class StockEngineError(QwenGPUError):
    """The checkpoint cannot run the core (another machine, other core sources, not a build)."""


def default_checkpoint(progress=None) -> Path:
    """The tiny-host build of the core for today's core sources: built on first use, then cached
    ($QWENGPU_CACHE or ~/.cache/qwengpu, build-core-<key>/); builds of earlier sources are removed."""
    import shutil

    from gpu_layers.build import build
    from gpu_layers.machine.backend import cache_dir, core_key

    root = cache_dir().parent
    path = root / f"build-core-{core_key()}"
    if not (path / "qwengpu_build.json").is_file():
        say = progress or (lambda m: None)
        say(f"building the tiny-host checkpoint of the core (first use; about 6 minutes, 13 GB on disk) in {path} ...")
        build(DEFAULT_HOST, "core", path, dtype="float32", force=True, log=say)
        for old in root.glob("build-core-*"):
            if old != path and (old / "qwengpu_build.json").is_file():
                shutil.rmtree(old, ignore_errors=True)
    return path


def check_core_build(path) -> dict:
    """The manifest of a core build, or StockEngineError when it holds another machine, was built
    from other core sources than today's, or is not float32 (the core is exact in fp32 only)."""
    from gpu_layers.build import BuildError, check_build
    from gpu_layers.machine.backend import core_key

    try:
        man = check_build(path, "core", recompile=False)      # the source key below stands for the recompile
    except BuildError as e:
        raise StockEngineError(str(e)) from None
    key = man.get("core_key")
    if key != core_key():
        raise StockEngineError(f"{path} was built from other core sources (key {key}, today's {core_key()}): "
                               "rebuild it with `python -m gpu_layers build --machine core`")
    if man["dtype"] != "float32":
        raise StockEngineError(f"{path} is {man['dtype']}: the core is exact in float32 only")
    return man


class StockEngine:
    """A core build loaded with stock from_pretrained; `run` generates a launch with stock greedy
    generate. One per checkpoint and process (`shared_engine`): the weights are read-only, and each
    run has its own cache."""

    def __init__(self, path, progress=None):
        import torch

        from gpu_layers.splice import load_spliced

        self.path = Path(path)
        self.manifest = check_core_build(self.path)
        say = progress or (lambda m: None)
        say(f"loading {self.path} with stock from_pretrained ...")
        self.model = load_spliced(self.path, dtype=torch.float32)
        info = self.model.splice_info
        self.first = info.host_vocab
        self.names = list(info.token_names)
        self.ids = {n: self.first + k for k, n in enumerate(self.names)}

    def run(self, prompt: list[str], max_tokens: int, on_tokens=None) -> list[str]:
        """The generated machine tokens, up to and including <end> or <fault> (or max_tokens of
        them). on_tokens(n) every 1,000 tokens; it may raise to stop the run."""
        import torch
        from transformers import StoppingCriteria, StoppingCriteriaList

        stops = [self.ids["<end>"], self.ids["<fault>"]]
        n0 = len(prompt)

        class Tick(StoppingCriteria):
            def __call__(self, input_ids, scores, **kw):
                n = input_ids.shape[1] - n0
                if on_tokens is not None and n and n % 1000 == 0:
                    on_tokens(n)
                return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)

        with torch.no_grad():
            out = self.model.generate(torch.tensor([[self.ids[t] for t in prompt]]), max_new_tokens=max_tokens,
                                      do_sample=False, eos_token_id=stops, pad_token_id=stops[0],
                                      stopping_criteria=StoppingCriteriaList([Tick()]))[0, n0:].tolist()
        host = [i for i in out if i < self.first]
        if host:
            raise ExecutionError(f"the model emitted a host token (id {host[0]}) inside a launch: the checkpoint "
                                 f"at {self.path} does not run the core")
        return [self.names[i - self.first] for i in out]


_ENGINES: dict = {}
_LOCK = threading.Lock()


def shared_engine(path=None, progress=None) -> StockEngine:
    """The StockEngine of `path` (default: default_checkpoint()), loaded once per process."""
    with _LOCK:
        path = Path(path) if path is not None else default_checkpoint(progress)
        key = str(path.resolve())
        if key not in _ENGINES:
            t = time.time()
            _ENGINES[key] = StockEngine(path, progress)
            if progress:
                progress(f"loaded in {time.time() - t:.0f} s")
        return _ENGINES[key]
