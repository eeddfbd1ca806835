"""The comparison's computed sentences: per-query hits add up to the test's rSum, paired
claims carry the label their numbers earn, and each lift splits into the pre-filter's share
and the method's."""

from __future__ import annotations

import numpy as np
import pytest

from ugncl.core.engine.trainer import QUERY_HITS_FILE, save_query_hits
from ugncl.core.metrics import query_hits, retrieval_metrics
from ugncl.run.compare_claims import (
    QUERY_FILE,
    best_method,
    claim_pairs,
    claim_sentence,
    gain_lines,
    load_query_hits,
    paired_claim,
    rsum_of_hits,
)


def test_query_hits_add_up_to_the_test_rsum(tmp_path) -> None:
    rng = np.random.default_rng(0)
    scores = rng.normal(size=(20, 100)).astype(np.float32)
    scores[:, :10] = 1.0  # ties: the expected hits under random tie-breaking
    c2i = np.arange(100) // 5
    i2t, t2i = query_hits(scores, c2i)
    assert i2t.shape == (20, 3) and t2i.shape == (100, 3)
    assert rsum_of_hits(i2t.astype(np.float64), t2i.astype(np.float64)) == pytest.approx(
        retrieval_metrics(scores, c2i)["rsum"], abs=1e-3
    )
    assert QUERY_HITS_FILE == QUERY_FILE
    save_query_hits(tmp_path, {"i2t": i2t, "t2i": t2i})
    loaded = load_query_hits(tmp_path)
    assert loaded is not None and np.allclose(loaded[0], i2t) and np.allclose(loaded[1], t2i)
    assert load_query_hits(tmp_path / "none") is None


def _hits(p_img: float, p_cap: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Hit probabilities of a model that finds each query's match with probability p."""
    rng = np.random.default_rng(seed)
    i2t = (rng.random((200, 1)) < p_img).astype(float).repeat(3, axis=1)
    t2i = (rng.random((1000, 1)) < p_cap).astype(float).repeat(3, axis=1)
    return i2t, t2i


def _claim(pairs: dict[int, tuple[tuple, tuple]]):
    hits_a = {s: a for s, (a, _) in pairs.items()}
    hits_b = {s: b for s, (_, b) in pairs.items()}
    rsum_a = {s: rsum_of_hits(*h) for s, h in hits_a.items()}
    rsum_b = {s: rsum_of_hits(*h) for s, h in hits_b.items()}
    return paired_claim("sgraf", 0.5, "a", "b", rsum_a, rsum_b, hits_a, hits_b)


def test_a_claim_is_labelled_by_its_numbers() -> None:
    better = _claim({s: (_hits(0.6, 0.6, s), _hits(0.3, 0.3, s + 10)) for s in range(3)})
    assert better.label == "every seed" and better.mean > 0 and better.low > 0
    assert "is" in claim_sentence(better) and "above `b`, every seed" in claim_sentence(better)
    # the same hits shuffled over the queries: per-query differences, none on the whole
    shuffled = {s: _hits(0.4, 0.4, s) for s in range(3)}
    same = _claim({s: (h, (h[0][::-1], h[1][::-1])) for s, h in shuffled.items()})
    assert same.label == "within the spread" and same.low <= 0 <= same.high
    assert "within the spread" in claim_sentence(same)
    # two seeds far ahead, one slightly behind: the mean holds, not every seed
    mixed = {
        0: (_hits(0.7, 0.7, 0), _hits(0.3, 0.3, 10)),
        1: (_hits(0.7, 0.7, 1), _hits(0.3, 0.3, 11)),
        2: (_hits(0.30, 0.30, 2), _hits(0.32, 0.32, 12)),
    }
    assert _claim(mixed).label == "on the mean"
    # without per-query files: seeds only, and the sentence says so
    seeds_only = paired_claim("clip", 0.5, "a", "b", {0: 5.0, 1: 3.0}, {0: 1.0, 1: 2.0})
    assert seeds_only.label == "every seed" and seeds_only.low is None
    assert "seeds only" in claim_sentence(seeds_only) and "+4.0, +1.0" in claim_sentence(seeds_only)
    assert paired_claim("clip", 0.5, "a", "b", {0: 1.0}, {1: 1.0}) is None


def test_claim_pairs() -> None:
    pairs = claim_pairs(["hinge", "hinge+pf", "ugncl", "ugncl+pf", "ugncl-paper"], "hinge")
    assert ("ugncl+pf", "hinge") in pairs and ("ugncl+pf", "ugncl") in pairs
    assert ("hinge+pf", "hinge") in pairs and ("ugncl-paper", "ugncl") in pairs
    assert ("hinge", "hinge") not in pairs and len(pairs) == len(set(pairs))


def test_the_best_method_line_is_set_against_every_other_method_line() -> None:
    rsums = {
        "finetune": {0: 150.0, 1: 140.0},
        "osa": {0: 181.0, 1: 182.0},
        "ugncl-clip": {0: 180.0, 1: 184.0},
        "oracle": {0: 300.0, 1: 300.0},
    }
    best = best_method(rsums, "finetune", controls=("oracle",))
    assert best == "ugncl-clip"  # mean 182.0 over osa's 181.5; the oracle is a control
    pairs = claim_pairs(sorted(rsums), "finetune", best, controls=("oracle",))
    assert ("ugncl-clip", "osa") in pairs
    assert ("ugncl-clip", "ugncl-clip") not in pairs
    # the best line also stands against the control: above or below a perfect division
    assert pairs.index(("ugncl-clip", "oracle")) > pairs.index(("ugncl-clip", "osa"))
    assert best_method({"finetune": {0: 1.0}}, "finetune") is None
    assert claim_pairs(["a", "b"], "a", None) == [("b", "a")]


def test_the_lift_splits_into_the_prefilters_share_and_the_methods() -> None:
    rsums = {
        "hinge": {0: 100.0, 1: 110.0},
        "hinge+pf": {0: 180.0, 1: 190.0},
        "ugncl+pf": {0: 200.0, 1: 210.0},
        "npc": {0: 120.0},
        "oracle": {0: 300.0, 1: 300.0},
    }
    lines = gain_lines(rsums, "hinge", controls=("oracle",))
    ugncl = next(line for line in lines if line.startswith("- `ugncl+pf`"))
    assert "+100.0 rSum over `hinge`" in ugncl and "the pre-filter +80.0" in ugncl
    assert "the method +20.0 (80% / 20%)" in ugncl and "2 seeds" in ugncl
    npc = next(line for line in lines if line.startswith("- `npc`"))
    assert "+20.0" in npc and "the pre-filter 0" in npc and "1 seed." in npc
    assert not any("oracle" in line for line in lines)
    without = gain_lines({k: v for k, v in rsums.items() if k != "hinge+pf"}, "hinge")
    assert any("not measured" in line for line in without)
