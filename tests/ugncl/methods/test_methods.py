"""Methods: what each returns per step and how warm-up changes it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from sgraf.model import SGRAF
from ugncl.core.data import PairBatch
from ugncl.methods import METHODS, InfoNCEMethod, StepContext, TripletMethod, UGNCLMethod
from ugncl.methods.ugncl.losses import triplet_objective


def tiny_batch(k: int = 6, views: int = 1) -> tuple[SGRAF, PairBatch]:
    torch.manual_seed(0)
    model = SGRAF(20, word_dim=8, img_dim=12, embed_dim=16, sim_dim=8, num_regions=4,
                  num_views=views)  # fmt: skip
    lengths = torch.tensor([5, 3, 4, 5, 2, 5][:k])
    captions = torch.randint(4, 20, (k, 5)) * (torch.arange(5) < lengths[:, None])
    batch = PairBatch(
        images=torch.rand(k, 4, 12),
        captions=captions,
        lengths=lengths,
        index=torch.arange(k),
        image_index=torch.arange(k),
        clean=torch.ones(k, dtype=torch.bool),
    )
    return model, batch


def ctx(warmup: bool, epoch: int = 0) -> StepContext:
    return StepContext(epoch=epoch, global_step=0, warmup=warmup, device=torch.device("cpu"))


def test_registry_names_every_method() -> None:
    assert set(METHODS) == {"triplet", "ugncl", "infonce", "npc", "sdd", "osa", "decl", "ncr"}


def test_triplet_uses_all_negatives_only_in_warmup() -> None:
    model, batch = tiny_batch()
    model.eval()  # no dropout: the same raw scores for the three calls
    method = TripletMethod(margin=0.2, max_violation=True)
    raw = model(batch.images, batch.captions, batch.lengths)
    warm = method.training_step(model, batch, ctx(warmup=True))["loss_triplet"]
    main = method.training_step(model, batch, ctx(warmup=False))["loss_triplet"]
    expected_warm = triplet_objective(raw, margin=0.2, max_violation=False)["loss_triplet"]
    expected_main = triplet_objective(raw, margin=0.2, max_violation=True)["loss_triplet"]
    torch.testing.assert_close(warm, expected_warm)
    torch.testing.assert_close(main, expected_main)
    assert warm > main  # summing over all negatives >= the hardest one alone


@pytest.mark.parametrize("warmup_loss", ["hinge_all", "released"])
def test_ugncl_warmup_step_needs_no_division_but_main_step_does(warmup_loss: str) -> None:
    model, batch = tiny_batch(views=2)
    model.eval()  # no dropout: the same raw scores for both calls
    method = UGNCLMethod(lambda_min=2, warmup_loss=warmup_loss)
    terms = method.training_step(model, batch, ctx(warmup=True))
    if warmup_loss == "released":
        assert {"loss_edl", "loss_trl"} <= set(terms)
    else:  # the hinge over all negatives, as the plain model's warm-up
        raw = model(batch.images, batch.captions, batch.lengths)
        expected = triplet_objective(raw, margin=0.2, max_violation=False)
        torch.testing.assert_close(terms, expected)
    assert all(torch.isfinite(v).all() for v in terms.values())
    with pytest.raises(RuntimeError, match="without a division"):
        method.training_step(model, batch, ctx(warmup=False, epoch=1))


def test_ugncl_rejects_unknown_warmup_and_start_rules() -> None:
    from ugncl.run.config import ConfigError

    with pytest.raises(ConfigError, match="warmup_loss"):
        UGNCLMethod(warmup_loss="nope")
    with pytest.raises(ConfigError, match="division_start"):
        UGNCLMethod(division_start="nope")


@pytest.mark.parametrize(("anneal", "epoch", "expected"), [(0, 0, 0.1), (0, 5, 0.1), (4, 0, 0.0),
                                                          (4, 2, 0.05), (4, 9, 0.1)])  # fmt: skip
def test_kl_weight_annealing(anneal: int, epoch: int, expected: float) -> None:
    method = UGNCLMethod(kl_weight=0.1, kl_anneal_epochs=anneal)
    assert method.kl_weight_at(epoch) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("name", "evidence", "soft_label"),
    [("ugncl_synthetic", "tanh", "top_rival"), ("ugncl_flickr", "softplus", "belief"),
     ("ugncl_coco", "softplus", "belief"), ("ugncl_cc152k", "softplus", "belief")],
)  # fmt: skip
def test_ugncl_configs_use_paper_xi1_and_tau(name: str, evidence: str, soft_label: str) -> None:
    """The paper's xi1 = 0.1 and tau = 0.1 in every UGNCL config (the synthetic one
    used xi1 = 0 to dodge the softplus collapse); the real-data configs run the paper's softplus
    evidence (Eq. 3) and b_ii soft label (Eq. 11), the package reading tanh and the top rival."""
    from ugncl.run.config import load_config

    config, _ = load_config(name)
    options = config.method.ugncl
    assert (options.kl_weight, options.tau, options.evidence) == (0.1, 0.1, evidence)
    assert options.soft_label == soft_label
    assert UGNCLMethod().config.evidence == "tanh"


def test_default_trust_delta_keeps_hard_clean_margins_when_u_is_saturated() -> None:
    """After warm-up at xi1 = 0.1 every pair has u_bar ~ 0.995 (docs/methods/ugncl.md).
    The paper's Delta = 10 gives f_C = sigmoid(-10 logit(0.995)) ~ 1e-23: no margin for any
    hard-clean pair. The default Delta = 0 keeps half the soft margin."""
    from ugncl.methods.ugncl.losses import soft_margin, trusted_margins
    from ugncl.methods.ugncl.method import UGNCLConfig

    sets = torch.tensor([2, 3])  # HARD_CLEAN, HARD_NOISY
    y = torch.tensor([0.8, 0.3])
    u_bar = torch.full((2,), 0.995)
    delta = UGNCLConfig().trust_delta
    assert delta == UGNCLMethod().config.trust_delta
    margins = trusted_margins(sets, y, u_bar, delta=delta)
    torch.testing.assert_close(margins, 0.5 * soft_margin(y))
    assert trusted_margins(sets, y, u_bar, delta=10.0)[0].item() < 1e-12


@pytest.mark.parametrize("hard_noisy_trl", [True, False])
def test_hard_noisy_pairs_get_a_hinge_only_with_the_paper_switch(hard_noisy_trl: bool) -> None:
    """Default (false, docs/methods/ugncl.md): a batch divided entirely into hard-noisy
    pairs gets no trusted-robust term; the paper's Eq. 16 (true) gives it the soft hinge."""
    import numpy as np

    from ugncl.methods.ugncl.division import HARD_NOISY, DivisionResult

    model, batch = tiny_batch(views=2)
    model.eval()
    k = len(batch.index)
    method = UGNCLMethod(lambda_min=2, margin=0.2, hard_noisy_trl=hard_noisy_trl)
    assert UGNCLMethod().config.hard_noisy_trl is False
    method.division = DivisionResult(
        u=np.full(k, 0.99, np.float32), u_bar=np.full(k, 0.99, np.float32),
        soft_label=np.full(k, 0.4, np.float32), sets=np.full(k, HARD_NOISY, np.int8),
    )  # fmt: skip
    terms = method.training_step(model, batch, ctx(warmup=False, epoch=1))
    assert (terms["loss_trl"].item() > 0) is hard_noisy_trl


def test_noisy_pairs_keep_the_papers_evidential_target_by_default() -> None:
    """Default noisy_edl=True (paper Eq. 15): a batch divided entirely hard-noisy has an
    evidential loss; noisy_edl=False (measured, not adopted: docs/methods/ugncl.md)
    leaves every query out, L_e = 0."""
    import numpy as np

    from ugncl.methods.ugncl.division import HARD_NOISY, DivisionResult
    from ugncl.methods.ugncl.method import UGNCLConfig

    model, batch = tiny_batch(views=2)
    model.eval()
    k = len(batch.index)
    assert UGNCLMethod().config.noisy_edl is True and UGNCLConfig().noisy_edl is True
    losses = {}
    for paper in (True, False):
        method = UGNCLMethod(lambda_min=2, noisy_edl=paper)
        method.division = DivisionResult(
            u=np.ones(k, np.float32), u_bar=np.ones(k, np.float32),
            soft_label=np.full(k, 0.2, np.float32), sets=np.full(k, HARD_NOISY, np.int8),
        )  # fmt: skip
        losses[paper] = method.training_step(model, batch, ctx(warmup=False, epoch=1))["loss_edl"]
    assert losses[False].item() == 0.0
    assert losses[True].item() > 0


def test_hard_target_switch_reaches_the_evidential_loss() -> None:
    """``hard_target``: the paper's soft label by default; ``set`` trains hard-noisy pairs
    (soft label 0.4 here) with target 0, so L_e changes while the margins of L_t (from y) do
    not (measured, not adopted: docs/methods/ugncl.md)."""
    import numpy as np

    from ugncl.methods.ugncl.division import HARD_CLEAN, HARD_NOISY, DivisionResult
    from ugncl.methods.ugncl.method import UGNCLConfig

    model, batch = tiny_batch(views=2)
    model.eval()
    k = len(batch.index)
    assert UGNCLMethod().config.hard_target == "soft" and UGNCLConfig().hard_target == "soft"
    sets = np.where(np.arange(k) % 2 == 0, HARD_CLEAN, HARD_NOISY).astype(np.int8)
    terms = {}
    for target in ("soft", "set"):
        method = UGNCLMethod(lambda_min=2, hard_target=target)
        method.division = DivisionResult(
            u=np.ones(k, np.float32), u_bar=np.ones(k, np.float32),
            soft_label=np.where(sets == HARD_CLEAN, 0.6, 0.4).astype(np.float32), sets=sets,
        )  # fmt: skip
        terms[target] = method.training_step(model, batch, ctx(warmup=False, epoch=1))
    assert terms["soft"]["loss_edl"].item() != pytest.approx(terms["set"]["loss_edl"].item())
    assert terms["soft"]["loss_trl"].item() == pytest.approx(terms["set"]["loss_trl"].item())


def method_context(tmp_path, *, model, clean, batches, batch_size, global_step=0):
    """A MethodContext for one UGNCL epoch start on CPU (warm-up: 1 epoch)."""
    from ugncl.core.engine.context import MethodContext
    from ugncl.core.engine.device import select_precision

    cpu = torch.device("cpu")
    return MethodContext(
        model=model, device=cpu, precision=select_precision("off", cpu), run_dir=tmp_path,
        seed=0, warmup_epochs=1, batch_size=batch_size, num_samples=len(clean), clean=clean,
        recorder=None, batches=batches, global_step=global_step,
    )  # fmt: skip


def test_division_lambda_follows_the_trainers_global_step(tmp_path) -> None:
    """``lambda_clock: global``: top_rival's rival count is Eq. 16's hardness at the trainer's
    step count (restored on resume), not one re-derived from the epoch: step 1000, K = 6 ->
    max(6 - 25, theta) = 2."""
    import numpy as np

    model, batch = tiny_batch(views=2)
    k = len(batch.index)
    ctx = method_context(
        tmp_path, model=model, clean=np.ones(k, bool), batches=lambda *a, **kw: [batch],
        batch_size=k, global_step=1000,
    )  # fmt: skip
    settings = dict(lambda_min=2, division_pass="separate", division_start="fixed",
                    lambda_clock="global")  # fmt: skip
    record = UGNCLMethod(**settings).on_epoch_start(ctx, epoch=1)
    assert record["division_lambda"] == 2
    assert (
        UGNCLMethod(**settings).on_epoch_start(dataclasses.replace(ctx, global_step=0), epoch=1)[
            "division_lambda"
        ]
        == k - 1
    )


def test_division_clock_counts_hardness_from_the_division_start(tmp_path) -> None:
    """``lambda_clock: division`` (default): warm-up steps do not harden Eq. 16; the schedule
    starts at K - 1 at the division start, whatever the global step, and the start step
    travels in the checkpoint state."""
    import numpy as np

    model, batch = tiny_batch(views=2)
    k = len(batch.index)
    ctx = method_context(
        tmp_path, model=model, clean=np.ones(k, bool), batches=lambda *a, **kw: [batch],
        batch_size=k, global_step=1000,
    )  # fmt: skip
    method = UGNCLMethod(lambda_min=2, division_pass="separate", division_start="fixed")
    assert method.hardness(k, 1000) == k - 1  # before the start: the hinge over all negatives
    assert method.on_epoch_start(ctx, epoch=1)["division_lambda"] == k - 1
    assert method.hardness(k, 1000 + 40) == max(k - 1, 2)  # 40 steps x 0.025 = 1 negative
    assert method.hardness(k, 1000 + 1000) == 2
    resumed = UGNCLMethod(lambda_min=2, division_pass="separate", division_start="fixed")
    resumed.set_extra_state(method.get_extra_state())
    assert resumed.hardness(k, 2000) == 2 and resumed.hardness(k, 1000) == k - 1


def test_division_lambda_min_floors_only_the_divisions_rival_count(tmp_path) -> None:
    """``division_lambda_min``: the division stops hardening at n rivals (step 1000, K = 6:
    the schedule says 2, the division uses 4) while the trusted robust loss goes on to the
    schedule's 2."""
    import numpy as np

    from ugncl.methods.ugncl.division import divide_batch

    model, batch = tiny_batch(views=2)
    model.eval()
    k = len(batch.index)
    ctx_ = method_context(
        tmp_path, model=model, clean=np.ones(k, bool), batches=lambda *a, **kw: [batch],
        batch_size=k, global_step=1000,
    )  # fmt: skip
    method = UGNCLMethod(
        lambda_min=2,
        division_lambda_min=4,
        p=0.0,
        division_pass="separate",
        division_start="fixed",
        lambda_clock="global",
    )  # every pair hard; fmt: skip
    assert method.on_epoch_start(ctx_, epoch=1)["division_lambda"] == 4
    with torch.no_grad():
        raw = model(batch.images, batch.captions, batch.lengths)
    common = dict(tau=0.1, function="tanh", soft_label="top_rival", p=0.0)
    floored, scheduled = (divide_batch(raw, lam=lam, **common) for lam in (4, 2))
    assert not torch.equal(floored.soft_label, scheduled.soft_label)
    np.testing.assert_allclose(method.division.soft_label, floored.soft_label.numpy(), rtol=1e-6)
    step = dataclasses.replace(ctx(warmup=False, epoch=1), global_step=1000)
    method.training_step(model, batch, step)
    assert method._last_lambda == 2
    unfloored = UGNCLMethod(
        lambda_min=2,
        division_pass="separate",
        division_start="fixed",
        lambda_clock="global",
    )
    assert unfloored.on_epoch_start(ctx_, epoch=1)["division_lambda"] == 2


def test_truth_division_is_the_ground_truth_split_of_hard_pairs(tmp_path) -> None:
    """``division_source: truth`` (a diagnostic ceiling) puts every true-clean pair in
    hard-clean with label 1 and every noisy pair in hard-noisy with label 0, u_bar = 1, and
    the division record scores it F1 1; the model is not run."""
    import numpy as np

    from ugncl.methods.ugncl.division import HARD_CLEAN, HARD_NOISY

    clean = np.array([True, False, True, True, False, False])

    def no_batches(*args, **kwargs):
        raise AssertionError("the truth division must not run the model")

    ctx = method_context(tmp_path, model=None, clean=clean, batches=no_batches, batch_size=4)
    method = UGNCLMethod(division_source="truth")
    assert method.on_epoch_start(ctx, epoch=0) is None  # warm-up: no division
    record = method.on_epoch_start(ctx, epoch=1)
    division = method.division
    assert division.sets.tolist() == np.where(clean, HARD_CLEAN, HARD_NOISY).tolist()
    assert division.soft_label.tolist() == clean.astype(float).tolist()
    assert (division.u_bar == 1).all()
    assert record["noisy_f1"] == 1.0
    assert UGNCLMethod().config.division_source == "model"


def test_truth_division_refuses_a_run_without_noise_flags() -> None:
    """CC152K (real, unlabelled noise) and noise_ratio 0 mark every pair clean: "truth" must
    refuse instead of training on every pair as clean."""
    import numpy as np

    from ugncl.methods.ugncl.method import truth_division
    from ugncl.run.config import ConfigError

    with pytest.raises(ConfigError, match="division_source=model"):
        truth_division(np.ones(5, bool))


def _pairs(batch: PairBatch, index) -> PairBatch:
    """The pairs ``index`` of ``batch`` (every field indexed the same way)."""
    index = torch.as_tensor(index)
    return PairBatch(**{f.name: getattr(batch, f.name)[index] for f in dataclasses.fields(batch)})


def test_training_pass_division_reads_the_training_steps_scores(tmp_path) -> None:
    """``division_pass: training``: the epoch-start division is the division of the scores the
    training steps computed (each pair within its training batch), with no model pass; pairs
    no step scored are divided by a pass over them plus rivals filling a batch of K."""
    import numpy as np

    from ugncl.methods.ugncl.division import UNVISITED, divide_batch
    from ugncl.methods.ugncl.losses import lambda_schedule

    model, batch = tiny_batch(views=2)
    model.eval()  # no dropout: the step's scores equal the ones recomputed here
    k = len(batch.index)
    seen, unseen = [0, 1, 2, 3], [4, 5]
    method = UGNCLMethod(lambda_min=2, division_pass="training")
    method.prepare(model, k)
    method.training_step(model, _pairs(batch, seen), ctx(warmup=True))
    with torch.no_grad():
        raw = model(batch.images, batch.captions, batch.lengths)
    expected = divide_batch(
        raw[:, :4, :4], tau=0.1, function="tanh", soft_label="top_rival",
        lam=lambda_schedule(4, 0, theta=2),
    )  # fmt: skip
    passes = []

    def batches(epoch, batch_size, stream=0, indices=None):
        passes.append(sorted(np.asarray(indices).tolist()))
        yield _pairs(batch, indices)

    context = method_context(
        tmp_path, model=model, clean=np.ones(k, bool), batches=batches, batch_size=4
    )
    method.on_epoch_start(context, epoch=1)
    division = method.division
    assert division.sets[seen].tolist() == expected.sets.tolist()
    np.testing.assert_allclose(division.soft_label[seen], expected.soft_label.numpy(), rtol=1e-6)
    # One pass over the two unscored pairs and two rivals (a batch of K = 4).
    assert len(passes) == 1 and len(passes[0]) == 4 and set(unseen) <= set(passes[0])
    assert (division.sets != UNVISITED).all()
    # The recorded opinions travel in checkpoints (a resumed run divides the same way).
    resumed = UGNCLMethod(lambda_min=2, division_pass="training")
    resumed.prepare(model, k)
    resumed.set_extra_state(method.get_extra_state())
    assert resumed._recorded.result().sets.tolist() == division.sets.tolist()


def test_training_pass_division_refuses_its_own_batch_size() -> None:
    from ugncl.run.config import ConfigError

    assert UGNCLMethod().config.division_pass == "training"
    with pytest.raises(ConfigError, match="division_batch_size"):
        UGNCLMethod(division_pass="training", division_batch_size=64)
    with pytest.raises(ConfigError, match="division_lambda_min must be >= 1"):
        UGNCLMethod(division_lambda_min=0)


@pytest.mark.parametrize("level", [0.0, 1.0, -0.1])
def test_null_level_must_be_a_share(level) -> None:
    from ugncl.run.config import ConfigError

    with pytest.raises(ConfigError, match="null_level must be in"):
        UGNCLMethod(null_level=level)


def test_clean_pairs_oracle_visits_only_the_pairs_the_truth_keeps(tmp_path) -> None:
    clean = torch.tensor([True, False, True, True, False, False]).numpy()
    model, _ = tiny_batch()
    context = method_context(tmp_path, model=model, clean=clean, batches=None, batch_size=2)
    for oracle, plain in (
        (TripletMethod(margin=0.2, max_violation=True, train_pairs="clean"),
         TripletMethod(margin=0.2, max_violation=True)),
        (InfoNCEMethod(train_pairs="clean"), InfoNCEMethod()),
    ):  # fmt: skip
        assert oracle.epoch_samples(context, 0).tolist() == [0, 2, 3]
        assert plain.epoch_samples(context, 0) is None


def test_clean_pairs_oracle_is_a_named_choice() -> None:
    from ugncl.run.config import ConfigError, load_config

    for cfg, name in (("triplet_synthetic", "triplet"), ("clip_synthetic", "infonce")):
        config, _ = load_config(cfg, [f"method.name={name}", f"method.{name}.train_pairs=clean"])
        assert getattr(config.method, name).train_pairs == "clean"
        with pytest.raises(ConfigError, match="train_pairs"):
            load_config(cfg, [f"method.name={name}", f"method.{name}.train_pairs=truth"])


@pytest.mark.parametrize("level", [0.0, 1.0, 1.5])
def test_determined_level_must_be_a_share(level) -> None:
    from ugncl.run.config import ConfigError

    with pytest.raises(ConfigError, match="determined_level must be in"):
        UGNCLMethod(determined_level=level)
    with pytest.raises(ConfigError, match="determined_rule must be one of"):
        UGNCLMethod(determined_rule="median")


def test_the_method_divides_with_its_determined_rule() -> None:
    """``method.ugncl.determined_rule`` reaches the division: a clean pair one rival
    outranks is noisy under the paper's argmax and clean under the null test."""
    import torch

    K = 8
    raw = torch.full((1, K, K), -0.5)
    raw[0, torch.arange(K), torch.arange(K)] = 0.6
    raw[0, 1, 0] = 0.8
    paper = UGNCLMethod(evidence="tanh").divide(raw, K - 1)
    tested = UGNCLMethod(evidence="tanh", determined_rule="null_test").divide(raw, K - 1)
    assert paper.sets[0] == 1 and tested.sets[0] == 0  # NOISY, CLEAN
