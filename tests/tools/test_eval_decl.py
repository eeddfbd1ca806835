"""DECL-SGRAF through tools/eval.py: a saf run and an sgr run ranked by their averaged evidence,
from this package's checkpoints and from the same weights in DECL's released container."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.sgraf.test_checkpoint import to_released_parts
from tests.tools.test_train import tiny_overrides
from ugncl.backbones.registry import model_from_file
from ugncl.core.evaluation import as_eval_data, encode_split, score_matrix
from ugncl.core.metrics import retrieval_metrics
from ugncl.methods.decl import DECLMethod

pytestmark = pytest.mark.usefixtures("keep_threads")


@pytest.fixture(scope="module")
def decl_pair(tmp_path_factory, tiny_world: Path, tool) -> tuple[Path, Path, Path]:
    """Two one-epoch DECL runs (saf, sgr) on the tiny world; their best.pt files."""
    out = tmp_path_factory.mktemp("decl_pair")
    from tests.conftest import TINY_MODEL

    paths = []
    for head in ("saf", "sgr"):
        args = tiny_overrides(
            tiny_world, out, head, TINY_MODEL, "model.sgraf.num_views=1",
            f"model.sgraf.head={head}", "train.epochs=1", "train.warmup_epochs=1",
            "train.threads=1", "eval.test_after_training=false",
        )  # fmt: skip
        assert tool("train").main(["--cfg", "decl_synthetic", "--set", *args]) == 0
        paths.append(out / head / "checkpoints" / "best.pt")
    return paths[0], paths[1], out


def expected_rsum(paths, world: Path) -> float:
    """The release's DECL-SGRAF evaluation written out: each model's evidence
    ``exp(tanh(raw) / 0.1)`` on the test split, averaged, ranked."""
    from ugncl.backbones.registry import BACKBONES
    from ugncl.run.config import build_config

    evidence = []
    for path in paths:
        model, state = model_from_file(str(path))
        data = build_config(state["config"]).data
        split = as_eval_data(BACKBONES["sgraf"].open_eval_split(data, "test", model))
        encoded = encode_split(model.eval(), split)
        raw = score_matrix(model, encoded, eval_score="raw")
        evidence.append(np.exp(np.tanh(raw) / 0.1))
    c2i = np.asarray(split.caption_to_image)
    return retrieval_metrics((evidence[0] + evidence[1]) / 2, c2i)["rsum"]


@pytest.mark.slow
def test_decl_pair_averages_evidence_and_reads_released_files(
    decl_pair, tool, tiny_world, tmp_path
) -> None:
    saf, sgr, _ = decl_pair
    ours = tmp_path / "ours.json"
    assert tool("eval").main([str(saf), str(sgr), "--protocol", "full", "--json", str(ours)]) == 0
    result = json.loads(ours.read_text())["results"]
    rsum = result["rsum"] if "rsum" in result else result[next(iter(result))]["rsum"]
    assert rsum == pytest.approx(expected_rsum([saf, sgr], tiny_world), abs=1e-6)

    # The same weights in DECL's released container, converted, evaluated without a config.
    converted = []
    for path in (saf, sgr):
        model, _ = model_from_file(str(path))
        container = {
            "epoch": 1, "model": to_released_parts(model), "best_rsum": 1.0, "step": 12,
            "opt": argparse.Namespace(tau="0.1", data_name="synthetic_precomp", module_name="x"),
        }  # fmt: skip
        release = tmp_path / f"{path.parent.parent.name}_best.pth.tar"
        torch.save(container, release)
        dst = tmp_path / f"{path.parent.parent.name}.pt"
        assert tool("convert_checkpoint").main([str(release), str(dst)]) == 0
        converted.append(dst)
    theirs = tmp_path / "theirs.json"
    data = ["--data-root", str(tiny_world), "--name", "synthetic_precomp", "--protocol", "full"]
    assert tool("eval").main([*map(str, converted), *data, "--json", str(theirs)]) == 0
    assert json.loads(theirs.read_text())["results"] == json.loads(ours.read_text())["results"]


def test_released_decl_file_ranks_by_its_own_tau(tool) -> None:
    eval_tool = tool("eval")
    state = {"source": {"format": "decl", "opt": {"tau": "0.05"}}}
    assert eval_tool.released_method(state) == {"method": {"name": "decl", "decl": {"tau": 0.05}}}
    assert eval_tool.released_method({"source": {"format": "ncr"}}) == {}
    method = DECLMethod(tau=0.05)
    raw = torch.tensor([[[0.5, -0.5]]])
    torch.testing.assert_close(method.retrieval_score(raw), torch.exp(torch.tanh(raw[0]) / 0.05))
