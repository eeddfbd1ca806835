"""docs/design.md's worked example stays true: its toy method and toy backbone, taken from the
page's code blocks as written, register with one line each and train through the real trainer,
evaluator and eval tool."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
import yaml

from ugncl.core.engine.recorder import read_metrics
from ugncl.methods import METHODS, MethodSpec
from ugncl.run.build import BACKBONES
from ugncl.run.config import load_config
from ugncl.run.training import train

DESIGN = Path(__file__).resolve().parents[1] / "docs" / "design.md"


def _block(text: str, marker: str, lang: str = "python") -> str:
    """The fenced ``lang`` block that follows ``<!-- example: marker -->``."""
    m = re.search(rf"<!-- example: {marker} -->\s*```{lang}\n(.*?)\n```", text, re.DOTALL)
    assert m, f"docs/design.md has no {lang} block after <!-- example: {marker} -->"
    return m.group(1)


def _exec(code: str, name: str, monkeypatch) -> dict:
    """Run the block as the module ``docs_example_<name>`` (dataclasses look their module up)."""
    module = types.ModuleType(f"docs_example_{name}")
    monkeypatch.setitem(sys.modules, module.__name__, module)
    exec(compile(code, f"docs/design.md:{name}", "exec"), module.__dict__)
    return module.__dict__


@pytest.fixture
def example(monkeypatch):
    text = DESIGN.read_text(encoding="utf-8")
    method = _exec(_block(text, "toy-method"), "toy_method", monkeypatch)
    backbone = _exec(_block(text, "toy-backbone"), "toy_backbone", monkeypatch)
    # The registration lines are the page's, verbatim.
    assert 'METHODS["soft_hinge"] = MethodSpec(SoftHingeConfig, SoftHingeMethod)' in text
    assert 'BACKBONES["bag"] = BAG' in text
    spec = MethodSpec(method["SoftHingeConfig"], method["SoftHingeMethod"])
    monkeypatch.setitem(METHODS, "soft_hinge", spec)
    monkeypatch.setitem(BACKBONES, "bag", backbone["BAG"])
    yaml_block = re.search(r"`configs/soft_hinge_synthetic.yaml`:\s*```yaml\n(.*?)\n```", text,
                           re.DOTALL)  # fmt: skip
    assert yaml_block, "docs/design.md lost the example YAML"
    return yaml_block.group(1) + "\n"


def test_the_toy_method_joins_the_smoke_sweep_and_its_yaml_loads_as_a_file(example, tmp_path):
    """Registering the method is all the method x backbone sweep needs; the page's YAML is a
    config file over ugncl_synthetic.yaml whose first line names the method."""
    from tests.ugncl.methods.test_method_backbone import smoke_cells
    from tests.ugncl.run.test_config_files import first_line_problem

    cells = smoke_cells(METHODS, BACKBONES)
    assert {(b, "soft_hinge", ()) for b in ("sgraf", "clip", "bag")} <= set(cells)
    path = tmp_path / "soft_hinge_synthetic.yaml"
    path.write_text(example, encoding="utf-8")
    assert yaml.safe_load(example)["_base_"] == "ugncl_synthetic.yaml"
    assert first_line_problem(path) is None
    config, _ = load_config(path)
    assert config.method.name == "soft_hinge" and config.method.soft_hinge.temperature == 0.5
    assert config.train.epochs == load_config("ugncl_synthetic")[0].train.epochs


@pytest.mark.slow
def test_the_worked_example_trains_through_the_trainer(example, tiny_world, tmp_path, tool):
    path = tmp_path / "soft_hinge_synthetic.yaml"
    path.write_text(example, encoding="utf-8")
    overrides = [
        "model.backbone=bag",  # the page's command
        f"data.root={tiny_world}", "data.dev_images=12", "data.noise_ratio=0.5",
        f"run.out_dir={tmp_path}", "run.name=toy", "train.batch_size=16",
        "train.eval_batch_size=12", "train.seed=0", "train.warmup_epochs=1", "train.epochs=1",
        "train.threads=1", "model.bag.embed_dim=8",
    ]  # fmt: skip
    config, _ = load_config(path, overrides)
    assert config.method.name == "soft_hinge" and config.method.soft_hinge.temperature == 0.5
    result = train(config, config_name="soft_hinge_synthetic")

    records = read_metrics(result.run_dir)
    weights = [r for r in records if r["event"] == "soft_hinge_weights"]
    assert weights[0]["mean_weight"] == 1.0  # warm-up epoch: every pair weight 1
    assert len(weights) == 2 and 0.0 < weights[1]["mean_weight"] < 1.0
    assert {"setup", "train", "val", "test"} <= {r["event"] for r in records}
    assert all("loss_hinge" in r for r in records if r["event"] == "train")
    best = result.run_dir / "checkpoints" / "best.pt"
    assert tool("eval").main([str(best), "--json", str(tmp_path / "e.json")]) == 0
