"""Resume is exact: a run interrupted in the middle of epoch 1 and resumed with ``--resume``
writes the same records and the same final tensors as the run that was never interrupted, for
every method (the siamese copy's optimiser state and the per-epoch weight records included)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.conftest import TINY_MODEL
from ugncl.core.engine.recorder import read_metrics
from ugncl.core.engine.trainer import Trainer
from ugncl.run.config import load_config
from ugncl.run.training import load_resume_config, train


def _overrides(tiny_world: Path, out: Path, name: str, method: str) -> list[str]:
    extra = {
        "npc": ["method.npc.clean_threshold=0.5"],
        "sdd": ["method.sdd.thresholds=auto", "method.sdd.pass_batch_size=32"],
        "osa": ["method.osa.logit_scale=10.0", "method.osa.pass_batch_size=32"],
    }.get(method, [])
    if method in ("ugncl", "triplet", "decl", "ncr"):  # SGRAF methods: the CPU-sized SGRAF model
        extra += ["model.backbone=sgraf", *TINY_MODEL]
    if method == "decl":  # one network
        extra.append("model.sgraf.num_views=1")
    return [
        f"data.root={tiny_world}", "data.noise_ratio=0.5", "data.dev_images=12",
        f"run.out_dir={out}", f"run.name={name}", "train.batch_size=16",
        "train.eval_batch_size=12", "train.seed=0", "train.warmup_epochs=0", "train.epochs=2",
        "model.backbone=meanpool", "model.meanpool.embed_dim=8", f"method.name={method}",
        "train.optimizer=adamw", "train.schedule=cosine", "train.warmup_steps=2",
        "train.lr=1e-3", "train.log_every=1", "eval.eval_score=raw",
        "train.image_decay_per_rms=null", "eval.test_after_training=false",
        "data.train_images=24", *extra,
    ]  # fmt: skip


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-equal, NaN equal to NaN (samples SDD dropped this epoch have no weight)."""
    return (
        a.shape == b.shape
        and a.dtype == b.dtype
        and torch.equal(a.isnan(), b.isnan())
        and (
            torch.equal(a[~a.isnan()], b[~b.isnan()])
            if a.is_floating_point()
            else torch.equal(a, b)
        )
    )


class KilledError(Exception):
    """Stands in for kill -9 / Ctrl-C: nothing after it runs."""


def _comparable(records: list[dict]) -> list[dict]:
    """The records without their clock fields (``time``, ``cpu``, durations such as OSA's
    ``adapt_seconds``): those are measurements of the machine, not of the run."""

    def clocked(key: str) -> bool:
        return key in ("time", "cpu") or key.endswith("_seconds")

    return [
        {k: v for k, v in r.items() if not clocked(k)} for r in records if r["event"] != "resume"
    ]


def _tensors(state: dict, prefix: str = "") -> dict[str, torch.Tensor]:
    out = {}
    for key, value in state.items():
        if isinstance(value, torch.Tensor):
            out[prefix + str(key)] = value
        elif isinstance(value, dict):
            out.update(_tensors(value, f"{prefix}{key}."))
    return out


#: The hinge's case trains a shrinking epoch at ``train.epoch_length=full``: the clean-pairs
#: oracle visits the 69 clean pairs of 120 in 7 batches of 16 (4 a pass) and is killed in its
#: second pass over them (an epoch over every pair is covered by the other methods).
OVER_A_SUBSET = ("method.triplet.train_pairs=clean", "train.epoch_length=full")


@pytest.mark.slow
@pytest.mark.parametrize(
    ("method", "sets", "kill_at"),
    [
        *(pytest.param(m, (), 2, id=m) for m in ("npc", "sdd", "osa", "ugncl", "decl", "ncr")),
        pytest.param("triplet", OVER_A_SUBSET, 4, id="triplet-clean-full"),
    ],
)
def test_resume_after_a_kill_in_epoch_1_is_bit_exact(
    meanpool, tiny_world: Path, tmp_path: Path, monkeypatch, method: str, sets, kill_at: int
) -> None:
    def overrides(name: str) -> list[str]:
        return [*_overrides(tiny_world, tmp_path, name, method), *sets]

    config, _ = load_config("ugncl_synthetic", overrides("whole"))
    train(config, config_name=method)

    original = Trainer._train_step
    steps_in_epoch_1 = []

    def dying_step(self, batch, step):
        if step.epoch == 1:
            if len(steps_in_epoch_1) == kill_at:  # the 3rd (5th) step of epoch 1
                raise KilledError
            steps_in_epoch_1.append(self.global_step)
        return original(self, batch, step)

    config, _ = load_config("ugncl_synthetic", overrides("cut"))
    monkeypatch.setattr(Trainer, "_train_step", dying_step)
    with pytest.raises(KilledError):
        train(config, config_name=method)
    monkeypatch.setattr(Trainer, "_train_step", original)
    run_dir = tmp_path / "cut"
    last_step = max(r["step"] for r in read_metrics(run_dir) if r["event"] == "train")
    assert last_step == steps_in_epoch_1[-1] + 1  # it died with epoch 1 part-way done
    train(load_resume_config(run_dir), config_name=method, resume_dir=run_dir)

    whole, cut = read_metrics(tmp_path / "whole"), read_metrics(run_dir)
    assert [r["event"] for r in cut].count("resume") == 1
    for a, b in zip(_comparable(whole), _comparable(cut), strict=True):
        a.pop("threads", None), b.pop("threads", None)
        assert a == b
    if method in ("npc", "sdd"):  # the per-epoch weight record of epoch 1 survived the kill
        assert [r["epoch"] for r in cut if r["event"] == "noise_detection"] == [0, 1]
    a = torch.load(tmp_path / "whole" / "checkpoints" / "last.pt", weights_only=True)
    b = torch.load(run_dir / "checkpoints" / "last.pt", weights_only=True)
    ta, tb = (
        _tensors({k: a[k] for k in ("model", "optimizer", "method_state")}),
        _tensors({k: b[k] for k in ("model", "optimizer", "method_state")}),
    )
    assert ta.keys() == tb.keys()
    differ = [k for k in ta if not _same(ta[k], tb[k])]
    assert not differ, f"{len(differ)} tensors differ, e.g. {differ[:3]}"
