"""`python -m gpu_layers demo` runs end to end and checks itself."""
import subprocess
import sys
from pathlib import Path

from gpu_layers.demo import run_demo

ROOT = Path(__file__).resolve().parents[1]


def test_demo_command_exits_zero():
    p = subprocess.run([sys.executable, "-m", "gpu_layers", "demo"], cwd=ROOT, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    out = p.stdout
    for step in ("[1/5]", "[2/5]", "[3/5]", "[4/5]", "[5/5]"):
        assert step in out
    assert ".entry isqrt_u32(" in out
    assert "warp-instruction steps" in out and "lane-group issues" in out
    assert "match bit for bit" in out


def test_demo_other_case_and_unknown_case(capsys):
    assert run_demo("warp_compact") == 0
    assert "match bit for bit" in capsys.readouterr().out
    assert run_demo("no_such_kernel") == 2
