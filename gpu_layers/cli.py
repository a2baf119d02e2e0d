"""`python -m gpu_layers ...`: the command line. Each subcommand is a thin shell over a module."""
from __future__ import annotations

import argparse
import json
import sys

from gpu_layers.errors import QwenGPUError


def _json_value(v):
    """One element for JSON: ints as ints, finite floats as numbers (exact: the repr of a float32's
    float64 value round-trips to the same float32). JSON has no literal for NaN or infinity, so
    they are the strings "nan", "inf", "-inf" (the spellings a case file accepts as f32 input);
    every NaN prints as "nan", its sign and payload lost: `run --bits` keeps them."""
    if isinstance(v, float):
        if v != v:
            return "nan"
        if v in (float("inf"), float("-inf")):
            return "inf" if v > 0 else "-inf"
    return v


def outputs_to_json(outputs) -> str:
    """{buffer: [values]}: ints as JSON integers, float32 as the decimal of its exact value (as in
    truth.json's "values"; -0.0 keeps its sign), NaN / inf / -inf as the strings "nan" / "inf" / "-inf"."""
    out = {}
    for name, arr in outputs.items():
        out[name] = [_json_value(x) for x in arr.tolist()]
    return json.dumps(out)


def element_bits(arr) -> list[str]:
    """Each element's raw bits as lowercase hex, zero-padded to the element's width (8 digits for
    32-bit types, 16 for 64-bit ones; float32 as its IEEE bits): the "bits" of gpu-truth's truth.json."""
    import numpy as np

    a = np.ascontiguousarray(arr)
    width = a.dtype.itemsize
    u = a.view(np.dtype(f"u{width}"))
    return [format(int(x), f"0{2 * width}x") for x in u]


def outputs_to_bits_json(outputs) -> str:
    """{buffer: ["7fc00001", ...]}: every element's raw bits (see element_bits)."""
    return json.dumps({name: element_bits(arr) for name, arr in outputs.items()})


def cmd_ptx(args) -> int:
    from gpu_layers.nvcc import compile_cuda

    with open(args.file, encoding="utf-8") as f:
        source = f.read()
    sys.stdout.write(compile_cuda(source, arch=args.arch))
    return 0


def cmd_run(args) -> int:
    from gpu_layers.cases import load_case
    from gpu_layers.interp import run_case

    case = load_case(args.case, name=args.name)
    if args.backend == "model":
        from gpu_layers.machine.backend import run_case_model, stderr_progress

        if args.lanes != 4:
            raise QwenGPUError("the compiled machine has 4 lanes (--lanes 4)")
        outputs, _ = run_case_model(case, max_tokens=args.max_tokens, progress=stderr_progress,
                                    engine=args.engine, checkpoint=args.checkpoint)
    else:
        if args.engine != "fast" or args.checkpoint:
            raise QwenGPUError("--engine and --checkpoint choose how the model runs: use them with --backend model")
        outputs = run_case(case, lanes=args.lanes, step_budget=args.step_budget).outputs
    print(outputs_to_bits_json(outputs) if args.bits else outputs_to_json(outputs))
    return 0


def cmd_demo(args) -> int:
    from gpu_layers.demo import main as demo_main

    return demo_main(args)


# Named here without importing torch (parsing stays fast); tests/test_kl.py checks them against
# gpu_layers.hosts.TINY_HOSTS and gpu_layers.craft.machines.MACHINES.
KL_HOSTS = ("tiny", "tiny-small-residual", "tiny-2b-layers")
KL_MACHINES = ("regfile", "regfile-prefix", "core")


def cmd_kl(args) -> int:
    from gpu_layers.kl import main as kl_main

    return kl_main(args)


def cmd_build(args) -> int:
    from gpu_layers.build import main as build_main

    return build_main(args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m gpu_layers", description="qwenGPU command line")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("ptx", help="compile a .cu file to PTX with the pip-installed nvcc")
    s.add_argument("file")
    s.add_argument("--arch", default="sm_75")
    s.set_defaults(func=cmd_ptx)

    s = sub.add_parser("run", help="run a launch case (JSON) and print its output buffers as JSON "
                           "(values; NaN/inf as the strings \"nan\", \"inf\", \"-inf\"; --bits: raw hex bits)")
    s.add_argument("case", help="a case JSON file (one case, or a list of cases with --name)")
    s.add_argument("--name", help="which case, when the file holds several")
    s.add_argument("--backend", default="interp", choices=["interp", "model"],
                   help="interp: the reference interpreter; model: inside the compiled machine core (fast "
                        "executor; compiled on first use and cached, see gpu_layers/machine/backend.py)")
    s.add_argument("--max-tokens", type=int, default=5_000_000,
                   help="model backend: machine-token budget (default 5,000,000)")
    s.add_argument("--engine", default="fast", choices=["fast", "stock"],
                   help="model backend: fast (the fast executor on the compiled core, default) or stock (a "
                        "spliced checkpoint of the core through stock transformers generate)")
    s.add_argument("--checkpoint", metavar="DIR",
                   help="model backend: a build of `python -m gpu_layers build --machine core` (default for "
                        "--engine stock: the tiny-host build, made on first use and cached)")
    s.add_argument("--lanes", type=int, default=4, help="machine lanes (default 4)")
    s.add_argument("--step-budget", type=int, default=None, help="max warp-instruction steps")
    s.add_argument("--bits", action="store_true",
                   help="print each element's raw bits in hex (as in gpu-truth's truth.json) instead of "
                        "its value; keeps NaN payloads")
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("demo", help="compile and run a small kernel end to end")
    s.set_defaults(func=cmd_demo)

    s = sub.add_parser("kl", help="KL(original || spliced) on text, measured on the saved and reloaded checkpoint")
    s.add_argument("--host",
                   help=f"a built-in test host ({', '.join(KL_HOSTS)}), a checkpoint directory, or a hub id")
    s.add_argument("--text", required=True, help="a UTF-8 text file")
    s.add_argument("--machine", metavar="NAME",
                   help=f"the compiled machine to splice in: {', '.join(KL_MACHINES)}")
    s.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="dtype of the host, the checkpoint and the measurement (default float32)")
    s.add_argument("--out", metavar="DIR", help="keep the spliced checkpoint here (default: a temporary directory)")
    s.add_argument("--checkpoint", metavar="DIR",
                   help="measure this build of `python -m gpu_layers build` instead (its host, machine and "
                        "dtype from its manifest)")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s.add_argument("--max-tokens", type=int, default=4096)
    s.set_defaults(func=cmd_kl)

    s = sub.add_parser("build", help="write a spliced checkpoint (host + compiled machine) that stock "
                                     "AutoModelForCausalLM.from_pretrained loads")
    s.add_argument("--host", required=True,
                   help=f"a built-in test host ({', '.join(KL_HOSTS)}), a checkpoint directory, or a hub id "
                        "such as Qwen/Qwen3.5-2B (weights streamed shard by shard)")
    s.add_argument("--machine", required=True, metavar="NAME",
                   help=f"the compiled machine to splice in: {', '.join(KL_MACHINES)}")
    s.add_argument("--out", required=True, metavar="DIR", help="the checkpoint directory to write (new or empty)")
    s.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"],
                   help="dtype of the checkpoint (default float32; regfile is exact in fp32 only, "
                        "regfile-prefix in bf16 too)")
    s.add_argument("--force", action="store_true", help="replace DIR when it holds a previous build")
    s.set_defaults(func=cmd_build)
    return p


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except QwenGPUError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except FileNotFoundError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
