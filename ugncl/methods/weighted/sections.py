"""Config sections shared by the weight-based methods: the one-step siamese copy with its
memory bank (NPC and SDD: ``method.<name>.siamese``), the GMM they fit
(``method.<name>.gmm``), and the three readings every method names
(docs/methods/weighted.md, "Readings").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from ugncl.methods.weighted.memory_bank import IMAGE_NEIGHBOURS

__all__ = [
    "READING_CHOICES",
    "GMMConfig",
    "SiameseConfig",
    "nested_choices",
    "section_value",
]

#: ``paper``: every equation and setting as printed; ``release``: where the public code differs;
#: ``package``: this package's decisions (the dataclasses' defaults).
READING_CHOICES: tuple[str, ...] = ("paper", "release", "package")

S = TypeVar("S")


@dataclass
class SiameseConfig:
    """The memory bank's neighbours, the significance ratio and the siamese copy's optimiser
    (NPC and SDD alike; docs/methods/weighted.md)."""

    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {
        "ratio_grouping": ("direction", "bank"),
        "image_neighbour": IMAGE_NEIGHBOURS,
    }

    # direction: NPC Eq. 6-7, SDD Eq. 9-10; bank: the releases (main_NPC.py:181, SDD :230)
    ratio_grouping: str = "direction"
    image_neighbour: str = "image_itself"  # other_image: exclude every pair of the query image
    # true (package): a sample's own pair is never its own neighbour; false (papers, releases):
    # a clean pair may find itself (the releases search every clean key, the query included)
    exclude_own_pair: bool = True
    lr: float | None = None  # null: the trainer's current lr (StepContext.lr)
    reset_state: bool = False
    beta1: float = 0.9
    beta2: float = 0.98
    eps: float = 1.0e-6
    weight_decay: float = 0.2


@dataclass
class GMMConfig:
    """A two-component GMM (sklearn's ``GaussianMixture``) fitted on one value per pair."""

    max_iter: int = 100
    tol: float = 1.0e-2
    reg_covar: float = 5.0e-4

    def kwargs(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def nested_choices(name: str, section: type) -> dict[str, tuple[str, ...]]:
    """``section``'s ``CHOICES`` under the key ``name`` (``siamese.ratio_grouping``, ...)."""
    return {f"{name}.{key}": options for key, options in section.CHOICES.items()}


def section_value(default: S, value: S | dict[str, Any] | None) -> S:
    """A nested section as a method receives it: the config's dataclass, a mapping of the keys
    that differ from ``default`` (``Method.from_config`` passes ``dataclasses.asdict``), or
    None for ``default``."""
    if value is None:
        return default
    if isinstance(value, dict):
        return dataclasses.replace(default, **value)
    if not isinstance(value, type(default)):
        raise TypeError(f"expected {type(default).__name__} or a mapping, got {value!r}")
    return value
