"""Siamese copy and the NPC / SDD / OSA methods on a tiny CLIP-like model (CPU, seconds).

The trainer's MethodContext is stood in for by ``FakeContext`` (the names of docs/design.md:
model, device, precision, run_dir, seed, num_samples, clean, image_index, batches, fetch).
"""

from __future__ import annotations

import contextlib
import copy
import math
from dataclasses import dataclass, replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from ugncl.core.optim import build_optimizer
from ugncl.methods.infonce import info_nce_directions, info_nce_per_sample
from ugncl.methods.weighted.npc import NPCMethod, adamw_factory, pair_logits
from ugncl.methods.weighted.osa import OSAMethod
from ugncl.methods.weighted.sdd import SDDMethod
from ugncl.methods.weighted.siamese import SiameseCopy, draws_random_numbers

N_IMG, CAPS, D_IMG, VOCAB = 12, 2, 8, 16


class TinyClip(nn.Module):
    """raw = logit_scale.exp() * cos, shape (1, n_img, n_cap): the CLIP SimilarityModel scale."""

    backbone = "tiny_clip"
    num_views = 1

    def __init__(self, seed: int = 0, scale: float = 10.0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.img = nn.Linear(D_IMG, 6)
        self.txt = nn.EmbeddingBag(VOCAB, 6)
        self.logit_scale = nn.Parameter(torch.tensor(math.log(scale)))

    def encode_images(self, images):
        return self.img(images)

    def encode_captions(self, captions, lengths):
        return self.txt(captions)

    def score(self, img, cap, lengths):
        return (self.logit_scale.exp() * F.normalize(img, dim=-1) @ F.normalize(cap, dim=-1).T)[
            None
        ]

    def forward(self, images, captions, lengths):
        return self.score(
            self.encode_images(images), self.encode_captions(captions, lengths), lengths
        )


@dataclass
class Batch:
    images: torch.Tensor
    captions: torch.Tensor
    lengths: torch.Tensor
    index: torch.Tensor
    image_index: torch.Tensor
    clean: torch.Tensor

    def to(self, device):
        return replace(self, **{k: v.to(device) for k, v in vars(self).items()})


class FakeContext:
    def __init__(self, model, run_dir, noise=0.5, seed=0):
        g = np.random.default_rng(seed)
        self.model, self.device, self.run_dir, self.seed = model, torch.device("cpu"), run_dir, seed
        self.precision = type(
            "P", (), {"autocast": staticmethod(lambda d: contextlib.nullcontext())}
        )
        self.features = torch.as_tensor(g.normal(size=(N_IMG, D_IMG)), dtype=torch.float32)
        true_image = np.repeat(np.arange(N_IMG), CAPS)
        self.num_samples = len(true_image)
        # Captions: 3 tokens determined by their true image.
        self.tokens = torch.as_tensor((true_image[:, None] * 3 + np.arange(3)) % VOCAB)
        noisy = g.random(self.num_samples) < noise
        perm = g.permutation(np.flatnonzero(noisy))
        self.image_index = true_image.copy()
        self.image_index[np.flatnonzero(noisy)] = true_image[perm]
        self.clean = self.image_index == true_image
        self.fetched: list[list[int]] = []

    def fetch(self, indices):
        idx = torch.as_tensor(indices).long()
        self.fetched.append(idx.tolist())
        img = torch.as_tensor(self.image_index)[idx]
        return Batch(self.features[img], self.tokens[idx], torch.full((len(idx),), 3), idx, img,
                     torch.as_tensor(self.clean)[idx])  # fmt: skip

    def batches(self, epoch, batch_size, stream, indices=None):
        g = np.random.default_rng([epoch, stream])
        order = np.arange(self.num_samples) if indices is None else np.asarray(indices)
        order = g.permutation(order)
        for i in range(0, len(order), batch_size):
            yield self.fetch(order[i : i + batch_size])


def _step(epoch=0):
    return type("S", (), {"epoch": epoch, "global_step": 0, "warmup": False, "lr": 1e-2})()


def _sgd(lr):
    return lambda params, module: torch.optim.SGD(params, lr=lr)


# ---------------------------------------------------------------------------------- siamese


def test_siamese_sync_step_and_buffers_reused():
    model = TinyClip()
    sia = SiameseCopy(model, _sgd(0.5))
    ptrs = [p.data_ptr() for p in sia.copy.parameters()]
    ctx = FakeContext(model, None)
    batch = ctx.fetch(np.arange(8))
    before_model = [p.detach().clone() for p in model.parameters()]

    def loss_fn(m):
        return info_nce_per_sample(pair_logits(m, batch)).mean()

    def bank(m):
        return (info_nce_per_sample(pair_logits(m, batch)),)

    res = sia.one_step(model, loss_fn, bank)
    # One SGD step on the very pairs the bank holds lowers their loss (ratio > 1).
    assert res.after[0].mean() < res.before[0].mean()
    assert all(torch.equal(a, b) for a, b in zip(before_model, model.parameters()))
    assert not all(torch.equal(a, b) for a, b in zip(model.parameters(), sia.copy.parameters()))
    sia.sync(model)
    assert all(torch.equal(a, b) for a, b in zip(model.parameters(), sia.copy.parameters()))
    assert [p.data_ptr() for p in sia.copy.parameters()] == ptrs  # synced in place
    assert all(p.grad is None for p in model.parameters())


def test_siamese_step_that_hurts_the_bank_gives_weight_below_one():
    from ugncl.methods.weighted.weights import significance_weight

    model = TinyClip()
    ctx = FakeContext(model, None)
    bank_batch = ctx.fetch(np.arange(8))
    sia = SiameseCopy(model, _sgd(0.5))

    def bank(m):
        per = info_nce_per_sample(pair_logits(m, bank_batch))
        return per, per, per, per

    res = sia.one_step(model, lambda m: -bank(m)[0].mean(), bank)  # a step against the bank
    w = significance_weight(res.before, res.after)
    assert (w < 1).all() and torch.allclose(w, torch.tanh(res.before[0] / res.after[0]), atol=1e-6)


def test_shared_step_equals_separate_siamese_forward():
    # one_step_shared takes the step's gradient and the before-losses from the model's own
    # forward at the synced weights: the same numbers as running the copy, one pass cheaper.
    model = TinyClip()
    ctx = FakeContext(model, None)
    batch, bank_batch = ctx.fetch(np.arange(8)), ctx.fetch(np.arange(8, 16))
    weights = torch.linspace(0.1, 1.0, 8)

    def bank(m):
        return (info_nce_per_sample(pair_logits(m, bank_batch)),)

    def train(m):
        return (weights * info_nce_per_sample(pair_logits(m, batch))).mean()

    separate = SiameseCopy(model, _sgd(0.3)).one_step(model, train, bank)
    shared_copy = SiameseCopy(model, _sgd(0.3))
    with torch.no_grad():
        before = bank(model)
    shared = shared_copy.one_step_shared(model, train(model), before, bank)
    assert torch.allclose(shared.before[0], separate.before[0], atol=1e-6)
    assert torch.allclose(shared.after[0], separate.after[0], atol=1e-5)
    assert not torch.allclose(shared.after[0], shared.before[0])
    assert all(p.grad is None for p in model.parameters())  # autograd.grad leaves .grad alone


def test_siamese_copies_only_trainable_state():
    model = TinyClip()
    model.logit_scale.requires_grad_(False)
    sia = SiameseCopy(model, _sgd(0.1))
    assert not sia.copy.logit_scale.requires_grad
    assert len(sia.optimizer.param_groups[0]["params"]) == 3  # img w/b, txt weight; no scale


# -------------------------------------------------------------------------------------- NPC


def _npc(tmp_path, siamese=None, **kw):
    model = TinyClip()
    ctx = FakeContext(model, tmp_path)
    siamese = {"lr": 1e-2, **(siamese or {})}
    npc = NPCMethod(clean_threshold=0.5, bank_batch_size=8, siamese=siamese, **kw)
    record = npc.setup(ctx)
    return npc, ctx, model, record


def test_npc_setup_builds_and_reuses_bank(tmp_path):
    npc, ctx, model, record = _npc(tmp_path)
    assert record["bank_keys"] > 0 and "bank_weight_auc" in record and "bank_noisy_f1" in record
    bank = npc.core.bank
    assert bank.clean[bank.text_bank].all() and (bank.text_bank != np.arange(ctx.num_samples)).all()
    with torch.no_grad():
        model.img.weight.mul_(-1)  # a resumed run starts from other weights: the bank is reused
    again = NPCMethod(clean_threshold=0.5, bank_batch_size=8, siamese={"lr": 1e-2})
    again.setup(ctx)
    assert np.array_equal(again.core.bank.text_bank, bank.text_bank)


@pytest.mark.parametrize("weighting", ["per_sample", "batch_scalar"])
def test_npc_per_sample_weights_vs_released_collapse(tmp_path, weighting):
    npc, ctx, model, _ = _npc(tmp_path, weighting=weighting)
    batch = ctx.fetch(np.arange(4))
    real = npc.core.significance
    fixed = torch.tensor([0.2, 1.0, 0.5, 1.0])

    def significance(*args):  # the real siamese step, then known weights
        w, res = real(*args)
        assert w.shape == (4,) and ((w > 0) & (w <= 1)).all()
        return fixed, res

    npc.core.significance = significance
    out = npc.training_step(model, batch, _step())
    per = info_nce_per_sample(pair_logits(model, batch)).detach()
    assert not torch.allclose(per, per[0].expand_as(per))
    per_sample, collapsed = (fixed * per).mean(), fixed.mean() * per.mean()
    assert per_sample.item() != pytest.approx(collapsed.item(), rel=1e-4)
    expected = per_sample if weighting == "per_sample" else collapsed
    assert out["loss"].item() == pytest.approx(expected.item(), rel=1e-5)
    # The step keeps its weights and its logged means on the device (no host wait inside the
    # step); they are read where they are used: epoch_weights, the trainer's one read of terms.
    assert len(npc.core._noted) == 1 and isinstance(out["weight_mean"], torch.Tensor)
    assert out["weight_mean"].item() == pytest.approx(float(fixed.mean()))
    assert out["weight_low"].item() == pytest.approx(float((fixed < 1).float().mean()))
    assert np.allclose(npc.core.epoch_weights[:4], fixed.numpy())
    assert not npc.core._noted


def test_npc_bank_loss_trains_the_model(tmp_path):
    npc, ctx, model, _ = _npc(tmp_path)
    out = npc.training_step(model, ctx.fetch(np.arange(6)), _step())
    out["loss_bank"].backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())
    (tmp_path / "r").mkdir()
    released, ctx2, model2, _ = _npc(tmp_path / "r", bank_loss="released")
    out = released.training_step(model2, ctx2.fetch(np.arange(6)), _step())
    assert not out["loss_bank"].requires_grad  # the release's L_MB: a constant
    record = npc.on_epoch_end(ctx, 0)
    assert record is not None and "weight_auc" in record
    assert npc.on_epoch_start(ctx, 1) is None and npc.on_epoch_end(ctx, 1) is None  # recorded once


def test_npc_own_pair_exclusion_switch_changes_bank_and_weights(tmp_path):
    # Package: a sample's own pair is never its neighbour. Paper and release: every clean key
    # is searched, so a clean caption finds itself and its weight measures the step's effect
    # on its own pair.
    runs = {}
    for exclude in (True, False):
        (tmp_path / str(exclude)).mkdir()
        npc, ctx, model, _ = _npc(tmp_path / str(exclude), {"exclude_own_pair": exclude})
        npc.training_step(model, ctx.fetch(np.arange(8)), _step())
        runs[exclude] = (npc.core.bank, npc.core.epoch_weights[:8].copy())
    (bank_in, w_in), (bank_out, w_out) = runs[False], runs[True]
    assert (bank_out.text_bank != np.arange(len(bank_out.text_bank))).all()
    # A clean key's nearest key is an identical entry (cosine 1): itself, or a sibling caption
    # of the same words / the same image that comes first (ties go to the lowest position).
    keys = np.flatnonzero(bank_in.clean)
    assert (bank_in.text_bank[keys] <= keys).all() and (bank_in.image_bank[keys] <= keys).all()
    assert (ctx.tokens[bank_in.text_bank[keys]] == ctx.tokens[keys]).all()
    index = bank_in.image_index
    assert (index[bank_in.image_bank[keys]] == index[keys]).all()
    assert not bank_in.exclude_own_pair and bank_out.exclude_own_pair
    assert not np.allclose(w_in, w_out)


# -------------------------------------------------------------------------------------- SDD


def test_sdd_consistency_norm_switch_min_max_or_raw_posterior(tmp_path):
    from ugncl.methods.weighted.weights import gmm_posterior

    weights = {}
    for norm in ("min_max", "none"):
        (tmp_path / norm).mkdir()
        model = TinyClip()
        ctx = FakeContext(model, tmp_path / norm)
        sdd = SDDMethod(thresholds="auto", auto_beta_std=1.0, pass_batch_size=8,
                        consistency_norm=norm, siamese={"lr": 1e-2})  # fmt: skip
        sdd.setup(ctx)
        diag = sdd._start_diag.copy()
        sdd.on_epoch_start(ctx, 0)
        weights[norm] = sdd.consistency
    raw = gmm_posterior(diag, "high", max_iter=10, tol=1e-2, reg_covar=5e-4, seed=0)
    assert np.allclose(weights["none"], raw, atol=1e-6)  # SDD's paper: the raw posterior
    lo, hi = raw.min(), raw.max()
    assert np.allclose(weights["min_max"], (raw - lo) / (hi - lo), atol=1e-6)  # the release
    assert weights["min_max"].min() == 0.0 and weights["min_max"].max() == pytest.approx(1.0)
    assert not np.allclose(weights["min_max"], weights["none"])


def test_sdd_drops_and_looks_up_by_sample_index(tmp_path):
    model = TinyClip()
    ctx = FakeContext(model, tmp_path)
    # beta at mean + 1 std: at the default 2 std the tiny model's bank shows one image, which
    # build_memory_bank refuses (tests/ugncl/test_memory_bank.py).
    sdd = SDDMethod(thresholds="auto", auto_beta_std=1.0, pass_batch_size=8, siamese={"lr": 1e-2})
    record = sdd.setup(ctx)
    assert record["beta"] > record["alpha"]
    rec = sdd.on_epoch_start(ctx, 0)
    assert {"weight_auc", "noisy_precision", "n_dropped"} <= set(rec)
    # Force a drop set, then train on a batch of the kept subset.
    sdd.keep = np.ones(ctx.num_samples, dtype=bool)
    sdd.keep[:5] = False
    kept = sdd.epoch_samples(ctx, 0)
    assert kept.tolist() == list(range(5, ctx.num_samples))
    batch = ctx.fetch(kept[:6])
    ctx.fetched.clear()
    views, real_view = [], sdd.core.bank_view
    sdd.core.bank_view = lambda b, e=None: views.append(real_view(b, e)) or views[-1]
    out = sdd.training_step(model, batch, _step())
    img_side, txt_side = views[0].plan.bank_ids.tolist()
    bank = sdd.core.bank
    assert txt_side == bank.text_bank[kept[:6]].tolist()  # by sample index, not position 0..5
    assert img_side == bank.image_bank[kept[:6]].tolist()
    # Only the bank samples the batch lacks are fetched, each once.
    lacking = sorted(set(img_side + txt_side) - set(kept[:6].tolist()))
    assert ctx.fetched == ([lacking] if lacking else [])
    # The consistency weights go to the batches' device once an epoch and are looked up
    # there by sample index (no copy of the indices to the host inside a step).
    on_device = sdd._consistency_weights(batch.captions.device)
    assert on_device is sdd._consistency_on
    assert on_device[batch.index].tolist() == sdd.consistency[kept[:6]].tolist()
    sdd.on_epoch_start(ctx, 1)
    assert sdd._consistency_on is None
    out["loss"].backward()
    assert torch.isfinite(out["loss"])
    sdd.keep[:] = False
    assert sdd.epoch_samples(ctx, 0) is None  # nothing left: train on all rather than nothing


# -------------------------------------------------------------------------------------- OSA


def test_osa_weights_once_cached_and_sample_indexed(tmp_path):
    model = TinyClip()
    ctx = FakeContext(model, tmp_path)
    osa = OSAMethod(pass_batch_size=8)
    record = osa.setup(ctx)
    assert (tmp_path / "osa_weights.npz").exists()
    assert record["logit_scale"] == pytest.approx(10.0, rel=1e-3) and "weight_auc" in record
    w = osa.sample_weights()
    assert w.shape == (ctx.num_samples,) and np.isfinite(w).all() and (w >= 0).all()
    batch = ctx.fetch(np.array([3, 0, 7]))
    assert torch.allclose(osa.batch_weights(batch.index), torch.as_tensor(w[[3, 0, 7]]))
    out = osa.training_step(model, batch, _step())
    out["loss"].backward()
    assert model.img.weight.grad is not None
    # Resume: the cache is reused even though the model changed (the estimator is the start).
    with torch.no_grad():
        model.img.weight.mul_(-1)
    again = OSAMethod(pass_batch_size=8)
    again.setup(ctx)
    assert np.array_equal(again.sample_weights(), w)
    assert len(list(osa.parameters())) == 0  # the estimator is released after setup


def test_osa_beta_from_random_inputs_and_adaptation(tmp_path):
    # Eq. 4: beta is the estimator's mean score of random-input pairs (noise images, random
    # token ids), recomputable from the run's seed; the mismatched-pair reading is a switch.
    from ugncl.methods.weighted.osa import RANDOM_INPUT_BATCHES, random_input_shift

    runs = {}
    for name, kw in {
        "package": {},
        "mismatched": {"beta_source": "mismatched_pairs", "adapt": False},
        "no_adapt": {"adapt": False},
    }.items():
        (tmp_path / name).mkdir()
        model = TinyClip()
        ctx = FakeContext(model, tmp_path / name)
        osa = OSAMethod(pass_batch_size=8, adapt_lr=5e-2, adapt_threshold=0.5, **kw)
        runs[name] = (osa, osa.setup(ctx), ctx)
    osa, record, ctx = runs["no_adapt"]
    gen = torch.Generator().manual_seed(0)
    est = TinyClip()  # the start: no adaptation
    means = [random_input_shift(est, b, gen)[0] for b in ctx.batches(0, 8, 4)]
    assert record["beta"] == pytest.approx(np.mean(means[:RANDOM_INPUT_BATCHES]))
    assert record["beta"] != pytest.approx(record["mismatched_mean"])
    mis = runs["mismatched"][1]
    assert mis["beta"] == pytest.approx(mis["mismatched_mean"])
    # Adaptation (the package's default; the paper and release readings turn it off): a strict
    # clean set, then warm-up steps; the scores, hence the weights, move.
    package = runs["package"][1]
    assert package["adapt_clean"] > 0 and package["adapt_steps"] > 0
    assert not np.allclose(runs["package"][0].sim, osa.sim)
    assert not np.allclose(runs["package"][0].sample_weights(), osa.sample_weights())
    assert "adapt_clean" not in record


def test_osa_beta_at_random_level_silences_noisy_pairs_in_simulation():
    # Mismatched real pairs ~15 +- 3, clean pairs ~30 +- 4 (x100 scale). beta at the mismatched
    # mean (15) leaves half of the noisy pairs a positive weight; a beta where the two
    # distributions cross (22, about where random-input pairs sit in the paper's Table 1:
    # 0.215) leaves ~1% while nearly every clean pair keeps one.
    from ugncl.methods.weighted.weights import osa_weights

    g = torch.Generator().manual_seed(0)
    noisy = 15 + 3 * torch.randn(20000, generator=g)
    clean = 30 + 4 * torch.randn(20000, generator=g)

    def positive(sims, beta):
        return float((osa_weights(sims, beta) > 0).float().mean())

    pos = {b: (positive(noisy, b), positive(clean, b)) for b in (15.0, 22.0)}
    assert 0.45 < pos[15.0][0] < 0.55
    assert pos[22.0][0] < 0.015 and pos[22.0][1] > 0.97


def test_osa_no_nan_when_no_pair_exceeds_beta(tmp_path):
    model = TinyClip()
    ctx = FakeContext(model, tmp_path)
    osa = OSAMethod(beta=1e6, scoring="released", pass_batch_size=8)
    osa.setup(ctx)
    out = osa.training_step(model, ctx.fetch(np.arange(4)), _step())
    assert torch.isfinite(out["loss"]) and out["loss"].item() == 0.0


def test_osa_on_sgraf_sums_every_negative_unless_the_hardest_is_asked_for(tmp_path):
    from ugncl.methods.hinge import weighted_triplet

    model = TinyClip()
    ctx = FakeContext(model, tmp_path)
    losses = {}
    for hardest in (False, True):
        osa = OSAMethod(objective="triplet", adapt=False, pass_batch_size=8, beta=-10.0,
                        **({"max_violation": True} if hardest else {}))  # fmt: skip
        osa.setup(ctx)
        batch = ctx.fetch(np.arange(6))
        loss = osa.training_step(model, batch, _step())["loss_triplet"]
        raw = model(batch.images, batch.captions, batch.lengths).float()
        w = osa.batch_weights(batch.index)
        assert (w > 0).any()
        assert loss.item() == pytest.approx(weighted_triplet(raw, w, 0.2, hardest).item())
        losses[hardest] = loss.item()
        (tmp_path / "cache").mkdir(exist_ok=True)
        (tmp_path / osa.cache_file).rename(tmp_path / "cache" / str(hardest))
    assert losses[False] != pytest.approx(losses[True])


def test_osa_weighted_triplet_equals_plain_triplet_at_unit_weights():
    from ugncl.methods.hinge import triplet_objective, weighted_triplet

    g = torch.Generator().manual_seed(3)
    raw = torch.randn(2, 5, 5, generator=g)
    for mv in (True, False):
        plain = triplet_objective(raw, 0.2, mv)["loss_triplet"]
        assert torch.allclose(weighted_triplet(raw, torch.ones(5), 0.2, mv), plain)
    w = torch.tensor([1.0, 0.0, 0.0, 0.0, 0.0])
    assert weighted_triplet(raw, w) < weighted_triplet(raw, torch.ones(5))


def test_siamese_adamw_exempts_what_the_run_optimiser_exempts():
    model = TinyClip()
    sia = SiameseCopy(model, adamw_factory(1e-3, (0.9, 0.98), 1e-6, 0.2))
    run = build_optimizer("adamw", model.parameters(), modules=[model], lr=1e-3, weight_decay=0.2)
    names = {id(p): n for n, p in model.named_parameters()}
    copy_names = {id(p): n for n, p in sia.copy.named_parameters()}

    def decay(opt, table):
        return {table[id(p)]: g["weight_decay"] for g in opt.param_groups for p in g["params"]}

    assert decay(sia.optimizer, copy_names) == decay(run, names)
    assert decay(run, names)["logit_scale"] == 0.0 and decay(run, names)["img.weight"] == 0.2
    assert sia.optimizer.defaults["fused"] and not run.defaults["fused"]  # cheaper, same step


def test_draws_random_numbers_sees_dropout_in_training_mode_only():
    model = TinyClip()
    assert not draws_random_numbers(model)
    model.drop = nn.Dropout(0.0)
    assert not draws_random_numbers(model)
    model.drop = nn.Dropout(0.1)
    assert draws_random_numbers(model)
    model.eval()
    assert not draws_random_numbers(model)
    model.train()
    model.drop = nn.MultiheadAttention(6, 2, dropout=0.1)
    assert draws_random_numbers(model)


class DropoutClip(TinyClip):
    """TinyClip with dropout on the image embedding: two forwards at equal weights differ."""

    def __init__(self) -> None:
        super().__init__()
        self.drop = nn.Dropout(0.5)

    def encode_images(self, images):
        return self.drop(self.img(images))


def test_npc_with_dropout_runs_the_copys_own_forward(tmp_path, monkeypatch):
    # With dropout the model's batch forward is one draw of the masks and the copy's another,
    # so the shared step (the model's forward standing in for the copy's) would change the
    # procedure: the copy then runs its own batch and before passes (one_step), as released.
    calls = []
    for name in ("one_step", "one_step_shared"):
        real = getattr(SiameseCopy, name)
        monkeypatch.setattr(
            SiameseCopy, name, lambda *a, _r=real, _n=name, **k: calls.append(_n) or _r(*a, **k)
        )
    for cls, path in ((TinyClip, "plain"), (DropoutClip, "dropout")):
        model = cls()
        (tmp_path / path).mkdir()
        ctx = FakeContext(model, tmp_path / path)
        npc = NPCMethod(clean_threshold=0.5, bank_batch_size=8, siamese={"lr": 1e-2})
        npc.setup(ctx)
        model.train()
        out = npc.training_step(model, ctx.fetch(np.arange(6)), _step())
        assert torch.isfinite(out["loss"] + out["loss_bank"])
        assert out["loss"].requires_grad and out["loss_bank"].requires_grad
    assert calls == ["one_step_shared", "one_step"]


def test_osa_missing_estimator_checkpoint_is_a_user_error(tmp_path):
    from precomputed.errors import UserError

    osa = OSAMethod(estimator=str(tmp_path / "none.pt"))
    with pytest.raises(UserError, match="method.osa.estimator"):
        osa.build_estimator(TinyClip())


# ------------------------------------------------------------ NPC step vs the paper's procedure


class ReferenceNPC:
    """NPC's per-batch procedure written out plainly (paper; docs/methods/weighted.md): a siamese
    model loaded from the model's state, bank losses before, one AdamW step on the batch's mean
    InfoNCE, bank losses after, ``r`` grouped by direction (NPC Eq. 6-7: ``p`` the
    image-to-text cross-entropies of both bank entries, ``q`` the text-to-image ones; with
    ``grouping="bank"`` the release's per-entry ratios), ``w``, and ``mean(w * InfoNCE) +
    L_MB`` with the model."""

    def __init__(self, model, bank, fetch, lr, grouping="direction"):
        self.bank, self.fetch, self.lr, self.grouping = bank, fetch, lr, grouping
        self.siamese = copy.deepcopy(model)
        # torch's plain per-tensor AdamW (the method's copy runs the fused kernel)
        self.opt = build_optimizer(
            "adamw", self.siamese.parameters(), modules=[self.siamese], lr=lr,
            weight_decay=0.2, betas=(0.9, 0.98), eps=1e-6,
        )  # fmt: skip

    def step(self, model, batch):
        img_side, txt_side = self.bank.lookup(batch.index, batch.image_index)
        banks = self.fetch(img_side), self.fetch(txt_side)
        self.siamese.load_state_dict(model.state_dict())
        with torch.no_grad():
            before = [info_nce_directions(pair_logits(self.siamese, b)) for b in banks]
        self.opt.zero_grad()
        info_nce_per_sample(pair_logits(self.siamese, batch)).mean().backward()
        self.opt.step()
        with torch.no_grad():
            after = [info_nce_directions(pair_logits(self.siamese, b)) for b in banks]
        (bi2t, bt2i), (bti2t, btt2i) = before
        (ai2t, at2i), (ati2t, att2i) = after
        if self.grouping == "direction":  # p over both entries' i2t, q over their t2i
            r = ((bi2t + bti2t) / (ai2t + ati2t) + (bt2i + btt2i) / (at2i + att2i)) / 2
        else:  # the releases: symmetric InfoNCE of each entry
            r = ((bi2t + bt2i) / (ai2t + at2i) + (bti2t + btt2i) / (ati2t + att2i)) / 2
        w = torch.where(r < 1, torch.tanh(r), torch.ones_like(r))
        per = info_nce_per_sample(pair_logits(model, batch))
        bank_loss = sum(info_nce_per_sample(pair_logits(model, b)).mean() for b in banks)
        return w, (w * per).mean() + bank_loss


@pytest.mark.parametrize("grouping", ["direction", "bank"])
def test_npc_step_equals_the_papers_procedure_over_steps(tmp_path, grouping):
    # The optimised step (shared forward, autograd.grad for the siamese step, in-place sync,
    # each distinct bank image and caption encoded once) gives the reference's weights, loss
    # and gradients, step after step (the siamese AdamW moments carry over in both).
    npc, ctx, model, _ = _npc(tmp_path, {"ratio_grouping": grouping})
    ref_model = copy.deepcopy(model)
    ref = ReferenceNPC(ref_model, npc.core.bank, ctx.fetch, lr=1e-2, grouping=grouping)
    opts = [torch.optim.AdamW(m.parameters(), lr=5e-2) for m in (model, ref_model)]
    views, real_view = [], npc.core.bank_view
    npc.core.bank_view = lambda b, e=None: views.append(real_view(b, e)) or views[-1]
    order = np.random.default_rng(0).permutation(ctx.num_samples)
    seen = []
    for i in range(4):
        batch = ctx.fetch(order[(6 * i) % 24 : (6 * i) % 24 + 6])
        out = npc.training_step(model, batch, _step())
        w = torch.as_tensor(npc.core.epoch_weights[batch.index.numpy()])
        loss = out["loss"] + out["loss_bank"]
        ref_w, ref_loss = ref.step(ref_model, batch)
        assert torch.allclose(w, ref_w, atol=1e-5), (i, w, ref_w)
        seen.append(w)
        assert torch.allclose(loss, ref_loss, atol=1e-5)
        for opt, total in zip(opts, (loss, ref_loss)):
            opt.zero_grad()
            total.backward()
            opt.step()
        for p, q in zip(model.parameters(), ref_model.parameters()):
            assert torch.allclose(p, q, atol=1e-5)
    assert (torch.cat(seen) < 1).any()  # a weight below one was reproduced, not only w = 1
    plans = [v.plan for v in views]
    k = 6
    assert any((p.cap_rows < k).any() for p in plans)  # bank pairs shared with the batch ...
    assert any((p.cap_rows >= k).any() for p in plans)  # ... and fetched ones
    assert sum(p.extra_samples.size for p in plans) < sum(p.bank_ids.size for p in plans)


# ------------------------------------------------------------------- mixed precision (bf16)


def test_siamese_ratio_under_bf16_autocast_agrees_with_fp32(tmp_path):
    # Under autocast (train.amp: auto on CUDA) a small siamese step moves the bank losses by
    # less than bf16 resolves; the copy's before pass, step and after pass run in fp32, so r
    # under autocast is r in fp32. CPU autocast to bf16 emulates the CUDA path here.
    from ugncl.methods.weighted.weights import significance_ratio

    def ratios(npc, model, autocast):
        out = []
        for start in range(0, 24, 8):
            batch = ctx.fetch(np.arange(start, start + 8))
            ac = (
                torch.autocast("cpu", dtype=torch.bfloat16)
                if autocast
                else contextlib.nullcontext()
            )
            with ac:
                view = npc.core.bank_view(batch)
                img, cap, per = npc.core.encode_batch(model, batch)
                _, res = npc.core.significance(model, view, per, None, None, None, (img, cap))
            out.append(significance_ratio(res.before, res.after))
        return torch.cat(out)

    runs = []
    for name, autocast in (("fp32", False), ("bf16", True)):
        (tmp_path / name).mkdir()
        model = TinyClip()
        ctx = FakeContext(model, tmp_path / name)
        npc = NPCMethod(clean_threshold=0.5, bank_batch_size=8, siamese={"lr": 3e-5})
        npc.setup(ctx)
        runs.append(torch.cat([ratios(npc, model, autocast) for _ in range(3)]))
    r32, r16 = runs
    assert (r32 != 1).all()
    agree = ((r32 - 1).sign() == (r16 - 1).sign()).float().mean().item()
    assert agree == 1.0, agree
    assert torch.allclose(r32, r16, atol=1e-5)


def test_bank_pairs_prefetched_by_the_loader_are_not_fetched_again(tmp_path):
    # The trainer's loader decodes Method.prefetch_samples(batch) with the batch (in its
    # workers) and passes them as StepContext.extra; the step then fetches nothing itself and
    # computes what it computes when fetching.
    import pickle

    npc, ctx, model, _ = _npc(tmp_path)
    prefetch = pickle.loads(pickle.dumps(npc.prefetch_samples()))  # crosses to loader workers
    batch = ctx.fetch(np.arange(6))
    ref = copy.deepcopy(npc)
    extra = ctx.fetch(prefetch(np.arange(6)))
    ctx.fetched.clear()
    step = type("S", (), {"epoch": 0, "global_step": 0, "warmup": False, "lr": 1e-2,
                          "extra": extra})()  # fmt: skip
    out = npc.training_step(model, batch, step)
    assert ctx.fetched == []  # nothing decoded in the step
    expected = ref.training_step(model, batch, _step())  # fetches them itself (its own ctx copy)
    assert torch.allclose(out["loss"], expected["loss"])
