"""A plain install leaves out the ML stack (pyproject's extras). Run with those packages made
unimportable: the light commands work, and a command that needs an extra names it in one
line. (`.ci/run` checks the same from a real `pip install .` into a fresh virtualenv.)"""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from pagecast.trace.regions import Region
from pagecast.trace.schema import Kind
from pagecast.trace.writer import TraceWriter

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "onnx", "onnxruntime", "gymnasium", "stable_baselines3", "stable-baselines3")
# the heavy packages made unimportable, then `pagecast ARGS`
WITHOUT_EXTRAS = r"""
import sys
class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in {"torch", "onnx", "onnxruntime", "gymnasium", "stable_baselines3"}:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Missing())
from pagecast.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _pagecast(cwd: Path, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", WITHOUT_EXTRAS, *argv], cwd=cwd, capture_output=True, text=True)


def test_base_dependencies_leave_out_the_ml_stack():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = [d.split("[")[0].split(">")[0].split("=")[0].strip().lower() for d in project["dependencies"]]
    assert not set(names) & set(HEAVY)
    extras = project["optional-dependencies"]
    assert {"learn", "gym", "all"} <= set(extras)
    assert any(d.startswith("torch") for d in extras["learn"])
    assert any(d.startswith("gymnasium") for d in extras["gym"])


@pytest.fixture()
def trace(tmp_path: Path) -> Path:
    out = tmp_path / "t.parquet"
    rng = np.random.default_rng(0)
    with TraceWriter(out, source="test") as w:
        w.add_region(Region(0, "anon#0", kind="anon", length=256 * 4096, order=0))
        pages = np.concatenate([np.arange(200), rng.integers(0, 256, 300)])
        w.write(t_ns=np.arange(len(pages)) * 1000, region=np.zeros(len(pages), np.int32), page=pages,
                kind=np.full(len(pages), Kind.FAULT_MINOR, np.int8))  # fmt: skip
    return out


def test_light_commands_work_without_the_extras(trace, tmp_path):
    for argv in (
        ["info", str(trace)],
        ["simulate", str(trace), "--capacity", "25%", "--policy", "nextline", "--json"],
        ["heatmap", str(trace), "-o", str(tmp_path / "h.png")],
        ["eval", str(trace), "--policy", "stride"],
        ["--help"],
    ):
        p = _pagecast(tmp_path, *argv)
        assert p.returncode == 0, (argv, p.stderr[-600:])


@pytest.mark.parametrize(
    ("argv", "extra", "package"),
    [
        (["train", "{trace}", "-o", "m.pt"], "learn", "torch"),
        (["gym", "gen", "g", "--seeds", "0-1"], "gym", "gymnasium"),
    ],
)
def test_a_command_needing_an_extra_names_it_in_one_line(trace, tmp_path, argv, extra, package):
    p = _pagecast(tmp_path, *[a.format(trace=trace) for a in argv])
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, p.stderr[-600:]
    assert f"needs {package}" in lines[0] and f"pip install 'pagecast[{extra}]'" in lines[0]
