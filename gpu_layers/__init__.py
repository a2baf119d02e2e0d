"""qwenGPU: a SIMT GPU compiled into Qwen3.5 decoder layers.

Subpackages and modules (see ARCHITECTURE.md):
  nvcc      CUDA -> PTX with the pip-installed nvcc, sandboxed
  ptx       PTX parser, typed IR and validator
  cases     the JSON launch-case format shared with ../shared/gpu-truth
  interp    the reference SIMT interpreter (the definition of the machine)
"""
