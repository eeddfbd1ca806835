"""Optimisers, schedules and the epoch order."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from ugncl.core.engine.sampling import batch_indices, epoch_order
from ugncl.core.errors import ConfigError
from ugncl.core.optim import build_optimizer, build_schedule, cosine_schedule, no_decay_ids
from ugncl.run.build import image_decay_override


class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.words = nn.Embedding(10, 4)
        self.proj = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.positional_embedding = nn.Parameter(torch.zeros(3, 4))
        self.logit_scale = nn.Parameter(torch.ones([]))


def test_no_decay_groups_exempt_biases_norms_embeddings_and_logit_scale() -> None:
    model = Tiny()
    exempt = no_decay_ids([model])
    decayed = [n for n, p in model.named_parameters() if id(p) not in exempt]
    assert decayed == ["proj.weight"]
    opt = build_optimizer("adamw", model.parameters(), modules=[model], lr=1e-3, weight_decay=0.2)
    assert isinstance(opt, torch.optim.AdamW)
    assert [len(g["params"]) for g in opt.param_groups] == [1, 6]
    assert [g["weight_decay"] for g in opt.param_groups] == [0.2, 0.0]


def test_overrides_give_listed_weights_their_own_decay_and_leave_the_rest() -> None:
    model = Tiny()
    other = nn.Linear(4, 4)
    other.requires_grad_(False)  # frozen parameters never enter a group
    params = [*model.parameters(), *other.parameters()]
    overrides = [([model.proj.weight, other.weight], 1.5)]
    opt = build_optimizer(
        "adamw", params, modules=[model], lr=1e-3, weight_decay=0.2, overrides=overrides
    )
    groups = [(g["weight_decay"], [id(p) for p in g["params"]]) for g in opt.param_groups]
    assert groups[-1] == (1.5, [id(model.proj.weight)])
    assert all(id(model.proj.weight) not in ids for _, ids in groups[:-1])
    assert sum(len(ids) for _, ids in groups) == 7
    # Without a global decay the listed weights still decay; the rest stay one group.
    opt = build_optimizer("adamw", model.parameters(), lr=1e-3, overrides=overrides)
    assert [(g["weight_decay"], len(g["params"])) for g in opt.param_groups] == [(0.0, 6), (1.5, 1)]


def test_plain_adam_keeps_one_group_in_parameter_order() -> None:
    model = Tiny()
    opt = build_optimizer("adam", model.parameters(), lr=1e-3)
    assert len(opt.param_groups) == 1
    assert opt.param_groups[0]["params"] == list(model.parameters())


def test_frozen_parameters_and_unknown_names() -> None:
    model = Tiny().requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        build_optimizer("adam", model.parameters(), lr=1e-3)
    with pytest.raises(ValueError, match="unknown optimizer"):
        build_optimizer("sgd", Tiny().parameters(), lr=1e-3)


def test_cosine_schedule_counts_optimiser_steps() -> None:
    factor = cosine_schedule(warmup_steps=4, total_steps=12)
    assert [factor(s) for s in range(4)] == pytest.approx([0.25, 0.5, 0.75, 1.0])
    assert factor(4) == pytest.approx(1.0)
    assert factor(8) == pytest.approx(0.5 * (1 + math.cos(math.pi * 4 / 8)))
    assert factor(12) == pytest.approx(0.0) and factor(20) == pytest.approx(0.0)


@pytest.mark.filterwarnings("ignore:Detected call of")  # no optimiser step in this test
def test_step_and_cosine_advance_at_their_interval() -> None:
    model = Tiny()
    opt = build_optimizer("adam", model.parameters(), lr=1.0)
    step = build_schedule("step", opt, warmup_epochs=0, lr_update=1, lr_decay=0.5)
    step.after_step()
    assert opt.param_groups[0]["lr"] == 1.0
    step.after_epoch()
    assert opt.param_groups[0]["lr"] == 0.5
    opt = build_optimizer("adam", model.parameters(), lr=1.0)
    cos = build_schedule("cosine", opt, warmup_steps=2, total_steps=10)
    assert opt.param_groups[0]["lr"] == 0.5
    cos.after_epoch()
    assert opt.param_groups[0]["lr"] == 0.5
    cos.after_step()
    assert opt.param_groups[0]["lr"] == 1.0


def test_epoch_order_is_pure_and_a_subset_keeps_its_order() -> None:
    full = epoch_order(50, seed=1, epoch=2, stream=0)
    assert sorted(full) == list(range(50)) and full == epoch_order(50, 1, 2, 0)
    assert full != epoch_order(50, 1, 3, 0)
    subset = np.array([3, 7, 11, 40, 41])
    assert epoch_order(50, 1, 2, 0, subset) == [k for k in full if k in set(subset.tolist())]
    batches = batch_indices(list(range(10)), 4, drop_last=False)
    assert batches == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    assert batch_indices(list(range(9)), 4, drop_last=False)[-1] == [4, 5, 6, 7, 8]
    assert batch_indices(list(range(10)), 4, drop_last=True) == [[0, 1, 2, 3], [4, 5, 6, 7]]


class _Features:
    """Run data reduced to what the image decay reads: the training features' RMS."""

    def image_feature_rms(self) -> float:
        return 0.5


class _WithProjection(Tiny):
    def image_projection_weights(self) -> list[nn.Parameter]:
        return [self.proj.weight]


def test_image_decay_scales_with_the_features_and_skips_backbones_without_a_projection(
    caplog,
) -> None:
    model = _WithProjection()
    [(weights, decay)] = image_decay_override(model, _Features(), 2.7)
    assert weights == [model.proj.weight] and decay == pytest.approx(1.35)
    assert image_decay_override(model, _Features(), None) == []
    # The default reaches CLIP runs too: no projection of precomputed features, said once.
    with caplog.at_level("INFO", logger="ugncl.run.build"):
        assert image_decay_override(Tiny(), None, 2.7) == []
    assert "has none, so it is not used" in caplog.text
    # A projection without its run's features cannot be scaled: one error, not a silent 0.
    with pytest.raises(ConfigError, match="set train.image_decay_per_rms to null"):
        image_decay_override(model, None, 2.7)
