"""When UGNCL's division is made and when it is used: the division's schedule.

Each epoch start asks :meth:`DivisionSchedule.divides` whether to divide at all (not in the
warm-up, except the reference division of the last warm-up epoch under ``division_start:
agreed``). An epoch on the pre-filter's selection starts the division at once
(:meth:`DivisionSchedule.start_now`). Otherwise the method divides (by the model or the
truth, from a pass or from the training steps' records: the method's business) and
:meth:`DivisionSchedule.decide` says whether the epoch trains on it or, deferred, on the
warm-up objective:

- ``fixed`` (paper): from ``train.warmup_epochs`` on;
- ``agreed``: once two consecutive divisions agree (Cohen's kappa of the noisy calls >=
  ``agreement``), at the latest ``max_wait`` epochs after the warm-up. Without a warm-up
  epoch (a pretrained backbone) the first division's reference is a second division of the
  same model in another batch order (:meth:`DivisionSchedule.wants_batching_reference`);
- ``separated``: once the soft labels' two modes separate (Ashman's D >= ``separation``, or D
  fell since the previous epoch start).

It also keeps the optimiser step at which the division started (Eq. 16's hardness clock
``division`` counts from it). Its state goes into the method's checkpoints.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ugncl.methods.ugncl.start import (
    division_agreement,
    label_logits,
    should_start_division,
    two_mode_separation,
)

__all__ = ["START_MODES", "DivisionSchedule"]

START_MODES = ("agreed", "separated", "fixed")


class DivisionSchedule:
    """The start rule of ``division_start`` and its state (see the module docstring).

    Attributes:
        started: whether the division has started.
        deferred: whether the current epoch trains with the warm-up objective although the
            warm-up is over (the start was deferred).
        start_step: the global optimiser step at which the division started (None before).
    """

    def __init__(self, start: str, separation: float, agreement: float, max_wait: int) -> None:
        if start not in START_MODES:
            raise ValueError(f"start must be one of {START_MODES}, got {start!r}")
        self.start, self.separation = start, separation
        self.agreement, self.max_wait = agreement, max_wait
        self.started = start == "fixed"
        self.deferred = False
        self.start_step: int | None = None
        self.separations: list[float] = []  # separated: Ashman's D at each epoch start
        self.previous_sets: np.ndarray | None = None  # agreed: the previous division's sets
        self.labels: list[np.ndarray] = []  # separated: top_rival labels since the last start

    @property
    def wants_labels(self) -> bool:
        """Whether divided batches should hand their ``top_rival`` labels to :attr:`labels`
        (``separated``, before the start)."""
        return self.start == "separated" and not self.started

    def divides(self, epoch: int, warmup_epochs: int) -> bool:
        """Whether epoch ``epoch``'s start divides: every epoch from ``warmup_epochs`` on, and
        under ``agreed`` (not yet started) the last warm-up epoch too, for reference. An
        epoch that does not divide forgets the labels kept so far (the start rule reads the
        latest epoch's opinions)."""
        reference = (
            self.start == "agreed" and not self.started and epoch >= 1
            and epoch == warmup_epochs - 1
        )  # fmt: skip
        if epoch < warmup_epochs and not reference:
            self.labels.clear()
            return False
        return True

    def wants_batching_reference(self, epoch: int, warmup_epochs: int) -> bool:
        """Whether epoch ``epoch``'s division needs a reference made now, in another batch
        order: ``agreed``, not started, no earlier division to compare with, and no warm-up
        epoch before it (``warmup_epochs == 0``: a pretrained backbone such as CLIP starts
        dividing at epoch 0, where the last-warm-up reference does not exist).

        Two batchings of one model disagree where a pair's call is the luck of its batch's
        rivals (a model that does not rank yet), and agree where the model ranks: the
        question the epoch-to-epoch agreement asks, answered without spending an epoch on
        the warm-up objective, which on a 2-epoch CLIP fine-tune would be the whole run."""
        return (
            self.start == "agreed" and not self.started and self.previous_sets is None
            and warmup_epochs == 0 and epoch == 0
        )  # fmt: skip

    def start_now(self, global_step: int) -> None:
        """Start (or keep) the division now: an epoch on the pre-filter's selection."""
        self.started, self.deferred = True, False
        if self.start_step is None:
            self.start_step = global_step

    def decide(self, waited: int, sets: np.ndarray, global_step: int) -> dict[str, Any]:
        """After this epoch's division: whether it is used. ``waited``: epochs since
        ``train.warmup_epochs`` (negative for the reference division of the last warm-up
        epoch). Returns the record's start fields, ``dividing`` among them; ``dividing``
        false means the epoch trains with the warm-up objective (or, when ``waited < 0``,
        is a warm-up epoch whose division was for reference only)."""
        record: dict[str, Any] = {}
        if self.start == "agreed" and not self.started:
            previous, self.previous_sets = self.previous_sets, np.asarray(sets).copy()
            if waited < 0:
                return {"dividing": False}
            kappa = None if previous is None else division_agreement(previous, self.previous_sets)
            record["start_agreement"] = kappa
            self.started = (kappa is not None and kappa >= self.agreement) or (
                waited >= self.max_wait
            )
        elif not self.started:
            # Every pair's diagonal against its lambda strongest rivals (top_rival's label,
            # whatever the set): a determined pair's 0/1 label would make two modes of its own.
            labels = np.concatenate(self.labels) if self.labels else np.empty(0)
            self.labels.clear()
            sep = two_mode_separation(label_logits(labels))
            self.separations.append(sep["separation"])
            self.started = should_start_division(self.separations, self.separation)
            record.update({f"start_{k}": v for k, v in sep.items()})
        self.deferred = not self.started
        if self.started and self.start_step is None:
            self.start_step = global_step
        record["dividing"] = self.started
        return record

    def steps_since_start(self, global_step: int) -> int:
        """Optimiser steps since the division started (0 before it)."""
        return 0 if self.start_step is None else max(global_step - self.start_step, 0)

    def state(self) -> dict[str, Any]:
        """The schedule's state for checkpoints (plain values and tensors)."""
        state: dict[str, Any] = {
            "started": self.started, "deferred": self.deferred,
            "separations": list(self.separations), "start_step": self.start_step,
        }  # fmt: skip
        if self.previous_sets is not None:
            state["previous_sets"] = torch.from_numpy(self.previous_sets.astype(np.int64))
        # The labels kept since the last epoch start: a run resumed at an epoch boundary
        # decides the start on the same opinions as an uninterrupted one.
        labels = np.concatenate(self.labels) if self.labels else np.empty(0)
        state["start_labels"] = torch.from_numpy(labels.astype(np.float32))
        return state

    def load_state(self, state: dict[str, Any]) -> None:
        self.started = bool(state.get("started", self.start == "fixed"))
        self.deferred = bool(state.get("deferred", False))
        self.separations = [float(x) for x in state.get("separations", [])]
        start_step = state.get("start_step")
        self.start_step = None if start_step is None else int(start_step)
        previous = state.get("previous_sets")
        self.previous_sets = None if previous is None else np.asarray(previous)
        labels = state.get("start_labels")
        self.labels = [] if labels is None or not len(labels) else [np.asarray(labels)]
