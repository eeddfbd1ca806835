"""An earlier version's config names (the pre-filter under ``method.ugncl.seed*``, the plain
fine-tune as ``method.name: clip``) load as today's, for configs, run folders and the
checkpoint check of a resume."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from ugncl.run.config import load_config
from ugncl.run.config_upgrade import upgrade_tree


def _write(path: Path, tree: dict) -> Path:
    path.write_text(yaml.safe_dump(tree), encoding="utf-8")
    return path


def test_old_prefilter_keys_become_the_prefilter_section(tmp_path, caplog) -> None:
    old = {"_base_": "ugncl_synthetic.yaml",
           "method": {"ugncl": {"seed": "none", "seed_alpha": 0.05, "seed_fdr": 0.2,
                                "seed_epochs": 3}}}  # fmt: skip
    new = {"_base_": "ugncl_synthetic.yaml",
           "prefilter": {"kind": "none", "alpha": 0.05, "fdr": 0.2, "epochs": 3}}  # fmt: skip
    with caplog.at_level(logging.WARNING):
        got = load_config(_write(tmp_path / "old.yaml", old))[0]
    want = load_config(_write(tmp_path / "new.yaml", new))[0]
    assert got.to_dict() == want.to_dict()
    assert got.prefilter.kind == "none" and got.prefilter.alpha == 0.05
    assert "method.ugncl.seed is now prefilter.kind" in caplog.text


def test_the_old_clip_method_name_is_the_infonce_method(tmp_path) -> None:
    old = {"_base_": "clip_synthetic.yaml",
           "method": {"name": "clip", "clip": {"train_pairs": "clean"}}}  # fmt: skip
    config = load_config(_write(tmp_path / "old.yaml", old))[0]
    assert config.method.name == "infonce"
    assert config.method.infonce.train_pairs == "clean"


def test_a_tree_that_states_both_names_keeps_todays() -> None:
    tree = {"prefilter": {"kind": "linear"}, "method": {"ugncl": {"seed": "none"}}}
    assert upgrade_tree(tree)["prefilter"]["kind"] == "linear"
    assert "seed" not in upgrade_tree(tree)["method"]["ugncl"]
    assert tree["method"]["ugncl"]["seed"] == "none"  # the input is not changed


@pytest.mark.parametrize("name", ["ugncl", "triplet", "infonce"])
def test_todays_names_pass_unchanged(name: str) -> None:
    tree = {"method": {"name": name}, "prefilter": {"kind": "none"}}
    assert upgrade_tree(tree) == tree


def test_a_checkpoint_saved_under_the_old_names_passes_the_resume_check(tmp_path) -> None:
    """``check_identity`` reads the checkpoint's saved config through the same rewrite: the
    old names are not changes; a real change is still refused."""
    from ugncl.core.errors import ConfigError
    from ugncl.run.training import check_identity

    config = load_config("clip_synthetic")[0]
    saved = config.to_dict()
    saved["method"]["name"] = "clip"
    saved["method"]["clip"] = saved["method"].pop("infonce")
    where = tmp_path / "run" / "checkpoints" / "last.pt"
    check_identity({"config": saved}, config, {}, where)
    saved["train"]["lr"] = config.train.lr * 2
    with pytest.raises(ConfigError, match="train.lr"):
        check_identity({"config": saved}, config, {}, where)
