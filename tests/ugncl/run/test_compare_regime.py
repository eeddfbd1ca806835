"""The report's "Regime" sentences from hand-written per-seed scores: what noise costs the
plain line, the share of that loss the best method wins back, and the CLIP stand-in's
zero-shot against the clean fine-tune."""

from __future__ import annotations

from ugncl.run.compare_regime import noise_cost_sentence, stand_in_sentence


def test_noise_cost_and_the_share_won_back_per_seed() -> None:
    clean = {0: 200.0, 1: 220.0, 2: 210.0}
    noisy = {0: 150.0, 1: 176.0, 2: 189.0}
    best = {0: 200.0, 1: 187.0, 2: 210.0}
    line = noise_cost_sentence("clip", 0.5, "finetune", clean, noisy, ("osa", best))
    assert line is not None and line.startswith("clip, noise 0.50: noise costs `finetune` 18.3%")
    assert "(171.7 against 210.0; per seed 25.0, 20.0, 10.0%)" in line
    # the share of each seed's own loss: 50/50, 11/44, 21/21; on the mean 27.3/38.3
    assert "`osa`, wins back 71% of that loss (per seed 100, 25, 100%)." in line
    # a seed the best line was not trained on is left out of every figure
    assert "per seed 25.0, 20.0%" in noise_cost_sentence(
        "clip", 0.5, "finetune", clean, noisy, ("osa", {0: 1.0, 1: 1.0})
    )


def test_a_seed_where_noise_costs_nothing_has_no_share_to_win_back() -> None:
    line = noise_cost_sentence("clip", 0.2, "finetune", {0: 200.0, 1: 200.0},
                               {0: 190.0, 1: 205.0}, ("sdd", {0: 210.0, 1: 210.0}))  # fmt: skip
    assert "`finetune` 1.2% of" in line and "per seed 5.0, -2.5%" in line
    assert "a seed loses nothing" in line and "wins back" not in line
    above = noise_cost_sentence("clip", 0.2, "finetune", {0: 200.0}, {0: 205.0})
    assert (
        "costs `finetune` nothing on the mean (205.0 against the clean reference's 200.0;" in above
    )
    assert noise_cost_sentence("clip", 0.5, "finetune", {0: 1.0}, {1: 1.0}) is None
    assert noise_cost_sentence("sgraf (SGR)", 0.5, "hinge", {0: 100.0}, {0: 80.0}).endswith(
        "(80.0 against 100.0; per seed 20.0%)."
    )


def test_the_stand_in_line_reads_its_pretraining_record() -> None:
    record = {
        "train": {"steps": 10000, "pool_images": 20000, "seconds": 2267.77,
                  "config": {"batch_size": 32}},
        "zero_shot": {"split": "test", "rsum": 217.6},
        "threads": 1,
    }  # fmt: skip
    line = stand_in_sentence("w.pt", record, {0: 212.2, 1: 217.6, 2: 212.3})
    assert line == (
        "CLIP stand-in `w.pt`: pretrained 10000 steps of batch 32 on 20000 images in 2268 s of "
        "1 thread; zero-shot test rSum 217.6, 1.02 of the clean fine-tune's 214.0 "
        "(per seed 1.03, 1.00, 1.02)."
    )
    assert stand_in_sentence("w.pt", {"zero_shot": {"rsum": 100.0}}) == (
        "CLIP stand-in `w.pt`; zero-shot test rSum 100.0."
    )
    assert stand_in_sentence("w.pt", {"train": {"steps": 1}}) is None
    renamed = {"pool": {"shift": "renamed"}, "renamed": {"red": "crimson"},
               "zero_shot": {"rsum": 339.3}}  # fmt: skip
    assert stand_in_sentence("w.pt", renamed) == (
        'CLIP stand-in `w.pt`; pool shift `renamed` (its pool calls "red" "crimson"); '
        "zero-shot test rSum 339.3."
    )
