"""The report's "Regime" section: where a comparison's world stands, computed from its runs.

A method comparison only says something when noise costs the plain baseline a visible share of
the clean reference, and (on CLIP) when the pretrained start is already a strong retriever. A
plain CLIP ViT-B/32 fine-tune on Flickr30K ends at 544.2 test rSum clean, 513.6 at 40% noise and
464.9 at 60% (docs/anchors.md, NPC's release): noise costs it about a tenth. A synthetic world is
read against that. The sentences are pure functions of per-seed test rSums (``{seed: rsum}``),
so a test can build them from hand-written numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["noise_cost_sentence", "stand_in_sentence"]


def _common(*lines: Mapping[Any, float]) -> list[Any]:
    seeds = set(lines[0])
    for line in lines[1:]:
        seeds &= set(line)
    return sorted(seeds, key=str)


def _per_seed(values: Sequence[float], spec: str) -> str:
    return ", ".join(format(v, spec) for v in values)


def noise_cost_sentence(
    where: str,
    ratio: float,
    plain: str,
    clean: Mapping[Any, float],
    noisy: Mapping[Any, float],
    best: tuple[str, Mapping[Any, float]] | None = None,
) -> str | None:
    """What noise costs the plain baseline, and what the best method wins back.

    Args:
        where: the backbone (and head) as the report names it.
        ratio: the noise ratio of ``noisy``.
        plain: the plain baseline's line.
        clean: the clean reference's test rSum per seed (the plain model at 0% noise).
        noisy: the plain baseline's test rSum per seed at ``ratio``.
        best: the best method line and its test rSum per seed (None: no method line).

    Returns:
        One sentence over the seeds all lines share: the loss ``1 - noisy / clean`` and the
        share of it the best method recovers, ``(best - noisy) / (clean - noisy)``, per seed
        and on the mean (a share above 100% ends above the clean reference); None where no
        seed is shared.
    """
    lines = [clean, noisy] + ([best[1]] if best else [])
    seeds = _common(*lines)
    if not seeds:
        return None
    costs = [100.0 * (1.0 - noisy[s] / clean[s]) for s in seeds]
    mean_clean = sum(clean[s] for s in seeds) / len(seeds)
    mean_noisy = sum(noisy[s] for s in seeds) / len(seeds)
    cost = 100.0 * (1.0 - mean_noisy / mean_clean)
    said = (
        f"{cost:.1f}% of the clean reference's test rSum ({mean_noisy:.1f} against "
        if cost > 0
        else f"nothing on the mean ({mean_noisy:.1f} against the clean reference's "
    )
    out = (
        f"{where}, noise {ratio:.2f}: noise costs `{plain}` {said}{mean_clean:.1f}; "
        f"per seed {_per_seed(costs, '.1f')}%)"
    )
    if best is None:
        return out + "."
    name, scores = best
    lost = [clean[s] - noisy[s] for s in seeds]
    if min(lost) <= 0:
        return out + f"; a seed loses nothing, so no share of a loss is read for `{name}`."
    shares = [100.0 * (scores[s] - noisy[s]) / loss for s, loss in zip(seeds, lost)]
    mean_best = sum(scores[s] for s in seeds) / len(seeds)
    mean_share = 100.0 * (mean_best - mean_noisy) / (mean_clean - mean_noisy)
    return out + (
        f"; the best method, `{name}`, wins back {mean_share:.0f}% of that loss "
        f"(per seed {_per_seed(shares, '.0f')}%)."
    )


def stand_in_sentence(
    path: str, record: Mapping[str, Any], clean: Mapping[Any, float] | None = None
) -> str | None:
    """The CLIP stand-in: its pretraining and zero-shot test rSum from its record (the JSON
    :mod:`ugncl.backbones.clip.pretrain` writes beside the weights), and zero-shot over the
    clean fine-tune per seed where ``clean`` (its test rSum per seed) is given. None where the
    record has no zero-shot score."""
    zero = (record.get("zero_shot") or {}).get("rsum")
    if zero is None:
        return None
    train = record.get("train") or {}
    out = f"CLIP stand-in `{path}`"
    if train.get("steps") is not None:
        config = train.get("config") or {}
        batch = f" of batch {config['batch_size']}" if "batch_size" in config else ""
        out += f": pretrained {train['steps']} steps{batch}"
        if train.get("pool_images") is not None:
            out += f" on {train['pool_images']} images"
        if train.get("seconds") is not None:
            threads = record.get("threads")
            used = f" of {threads} thread{'s' if threads != 1 else ''}" if threads else ""
            out += f" in {float(train['seconds']):.0f} s{used}"
    pool = record.get("pool") or {}
    if pool.get("shift", "none") != "none":
        renamed = record.get("renamed") or {}
        said = ", ".join(f'"{word}" "{pool_word}"' for word, pool_word in renamed.items())
        out += f"; pool shift `{pool['shift']}`" + (f" (its pool calls {said})" if said else "")
    out += f"; zero-shot test rSum {float(zero):.1f}"
    seeds = sorted(clean, key=str) if clean else []
    if seeds:
        mean = sum(clean[s] for s in seeds) / len(seeds)
        ratios = [float(zero) / clean[s] for s in seeds]
        out += (
            f", {float(zero) / mean:.2f} of the clean fine-tune's {mean:.1f} "
            f"(per seed {_per_seed(ratios, '.2f')})"
        )
    return out + "."
