"""How a config is put together: a chain of bases (track bases over base.yaml), the method's
reading under the keys a config states itself, YAML 1.2 words, and ``--print-config``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest
import yaml

from ugncl.core.errors import ConfigError
from ugncl.core.method import Method
from ugncl.methods import METHODS, MethodSpec
from ugncl.run.config import explicit_keys, load_config, load_yaml_tree, parse_scalar


def _write(path, text: str):
    path.write_text(text, encoding="utf-8")
    return path


def test_a_track_base_may_stand_on_base_yaml_and_an_experiment_on_the_track(tmp_path) -> None:
    track = _write(tmp_path / "track.yaml", "_base_: base.yaml\ntrain:\n  epochs: 7\n  lr: 0.001\n")
    exp = _write(tmp_path / "exp.yaml", "_base_: track.yaml\ntrain:\n  lr: 0.002\n")
    config, _ = load_config(exp)
    assert (config.train.epochs, config.train.lr) == (7, 0.002)
    assert config.train.batch_size == 128  # base.yaml's default, from the root of the chain
    assert explicit_keys(exp) == {"train.lr"}  # the track's keys sit below a reading
    assert load_yaml_tree(track)["train"]["epochs"] == 7


def test_a_looping_chain_is_one_error(tmp_path) -> None:
    _write(tmp_path / "a.yaml", "_base_: b.yaml\n")
    _write(tmp_path / "b.yaml", "_base_: a.yaml\n")
    with pytest.raises(ConfigError, match="loops"):
        load_config(tmp_path / "a.yaml")


def test_yaml_words_stay_words() -> None:
    assert parse_scalar("off") == "off" and parse_scalar("on") == "on"
    assert parse_scalar("true") is True and parse_scalar("False") is False
    config, _ = load_config("triplet_synthetic", ["train.amp=off"])
    assert config.train.amp == "off"


@dataclass
class ReadConfig:
    CHOICES: ClassVar[dict] = {"reading": ("paper", "release", "package")}
    READINGS: ClassVar[dict] = {
        "package": {},
        "paper": {"method.read.margin": 0.5, "train.optimizer": "adam", "train.weight_decay": 0.0},
        "release": {"method.read.margin": 0.3},
    }
    reading: str = "package"
    margin: float = 0.2


class ReadMethod(Method):
    name = "read"

    def __init__(self, *, reading: str = "package", margin: float = 0.2, eval_score: str = "raw"):
        super().__init__(eval_score=eval_score)


@pytest.fixture
def read_method(monkeypatch):
    monkeypatch.setitem(METHODS, "read", MethodSpec(ReadConfig, ReadMethod))


def test_a_reading_sets_its_keys_and_a_stated_key_wins(read_method, tmp_path) -> None:
    cfg = _write(tmp_path / "r.yaml", "method:\n  name: read\n  read:\n    reading: paper\n")
    config, _ = load_config(cfg)
    assert (config.method.read.margin, config.train.optimizer, config.train.weight_decay) == (
        0.5, "adam", 0.0,
    )  # fmt: skip
    config, _ = load_config(cfg, ["method.read.margin=0.9"])
    assert config.method.read.margin == 0.9 and config.train.optimizer == "adam"
    config, _ = load_config(cfg, ["method.read.reading=release"])
    assert config.method.read.margin == 0.3 and config.train.optimizer == "adamw"
    config, _ = load_config(cfg, ["method.read.reading=package"])
    assert config.method.read.margin == 0.2


def test_a_reading_sets_its_keys_over_a_track_base(read_method, tmp_path) -> None:
    _write(tmp_path / "track.yaml", "train:\n  optimizer: adamw\n  epochs: 3\n")
    cfg = _write(
        tmp_path / "r.yaml",
        "_base_: track.yaml\nmethod:\n  name: read\n  read:\n    reading: paper\n",
    )
    config, _ = load_config(cfg)
    assert (config.train.optimizer, config.train.epochs) == ("adam", 3)


def test_a_saved_run_config_is_complete_and_takes_no_reading(read_method, tmp_path) -> None:
    from ugncl.run.config import save_config

    cfg = _write(tmp_path / "r.yaml", "method:\n  name: read\n  read:\n    reading: paper\n")
    config, _ = load_config(cfg, ["method.read.margin=0.9"])
    saved = tmp_path / "config.yaml"
    save_config(config, saved)
    tree = yaml.safe_load(saved.read_text())
    _write(saved, yaml.safe_dump({"_base_": None, **tree}, sort_keys=False))
    again, _ = load_config(saved)
    assert again.to_dict() == config.to_dict()


def test_print_config_shows_the_resolved_values_and_writes_nothing(tool, tmp_path, capsys):
    code = tool("train").main(
        ["--cfg", "triplet_synthetic", "--set", f"run.out_dir={tmp_path}", "train.amp=off",
         "train.epochs=3", "--print-config"]
    )  # fmt: skip
    assert code == 0
    printed = yaml.safe_load(capsys.readouterr().out)
    assert printed["train"]["amp"] == "off" and printed["train"]["epochs"] == 3
    assert printed["method"]["name"] == "triplet"
    assert not any(tmp_path.iterdir())
