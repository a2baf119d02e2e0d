import pytest

from gpu_layers.cli import build_parser, outputs_to_json
import numpy as np


def test_parser_knows_every_subcommand():
    p = build_parser()
    for argv in (["ptx", "k.cu"], ["run", "c.json"], ["demo"], ["kl", "--host", "tiny", "--text", "t"]):
        assert p.parse_args(argv).command == argv[0]


def test_float32_outputs_round_trip_exactly():
    vals = np.array([0.1, 1 / 3, -2.5e-38, 3.4028235e38], dtype=np.float32)
    import json

    back = np.array(json.loads(outputs_to_json({"y": vals}))["y"], dtype=np.float32)
    assert back.view(np.uint32).tolist() == vals.view(np.uint32).tolist()


def test_unknown_subcommand_is_refused():
    with pytest.raises(SystemExit):
        build_parser().parse_args(["frobnicate"])
