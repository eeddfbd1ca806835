"""What a training method supplies to the one trainer."""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Any, ClassVar, Protocol

import numpy as np
from torch import Tensor, nn

from ugncl.core.data import PairBatch
from ugncl.core.engine.context import MethodContext, StepContext
from ugncl.core.evaluation import view_reducer

__all__ = [
    "TRAIN_PAIRS",
    "Method",
    "MethodContext",
    "RunServices",
    "StepContext",
    "one_view_error",
    "section_defaults",
    "train_pair_samples",
]


def section_defaults(section: type) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """``@section_defaults(XConfig)`` on a method's ``__init__``: its keyword arguments named
    after the config section's fields take their defaults from the section (one source of
    truth: the dataclass), so the signature names them without repeating their values.

    Raises:
        TypeError: at class definition, a keyword argument without a default that is not a
            field of ``section`` (it would have no default anywhere).
    """
    names = {f.name for f in dataclasses.fields(section)}

    def wrap(init: Callable[..., None]) -> Callable[..., None]:
        params = inspect.signature(init).parameters
        stray = [n for n, p in params.items() if p.kind is p.KEYWORD_ONLY
                 and p.default is p.empty and n not in names]  # fmt: skip
        if stray:
            raise TypeError(f"{init.__qualname__}: {stray} are not fields of {section.__name__}")
        own = names & set(params)

        @functools.wraps(init)
        def init_with_defaults(self: Any, **kwargs: Any) -> None:
            defaults = section()
            for name in own - set(kwargs):
                kwargs[name] = getattr(defaults, name)
            init(self, **kwargs)

        return init_with_defaults

    return wrap


# ``train_pairs`` of the plain baselines (``method.triplet``, ``method.infonce``): all = every
# training pair as the noise file pairs them; clean = the clean-pairs oracle.
TRAIN_PAIRS = ("all", "clean")


def train_pair_samples(train_pairs: str, ctx: MethodContext) -> np.ndarray | None:
    """The samples a plain baseline's epoch visits: None (every pair) for ``all``; for
    ``clean`` the pairs the noise file keeps correct (``ctx.clean``, the truth): the clean-pairs
    oracle, the ceiling of a perfect sample selection on the same split and schedule."""
    if train_pairs == "clean":
        return np.flatnonzero(ctx.clean)
    return None


def one_view_error(what: str, model: nn.Module, note: str = "") -> str | None:
    """Refuse a model that scores several views where ``what`` (a method that reads one score
    per pair) needs one; ``note`` follows the fix in the sentence."""
    views = int(getattr(model, "num_views", 1))
    if views == 1:
        return None
    return (
        f"{what}, but the {model.backbone} model scores {views} views; set "
        f"model.{model.backbone}.num_views=1{note}"
    )


class RunServices(Protocol):
    """What the run room (:mod:`ugncl.run`) offers a method that reads beyond its training pairs,
    so that methods never import a backbone."""

    def model_from_file(self, path: str) -> nn.Module:
        """The similarity model a training checkpoint or a weights file holds, on the CPU."""
        ...

    def open_estimator_view(self, config: Any, data: Any) -> Callable[[nn.Module], Any] | None:
        """``data.estimator``: the run's training pairs in another backbone's input format, as
        a function of the model that reads them (None when not configured)."""
        ...


class Method(nn.Module):
    """A training method: loss terms per batch around a small lifecycle.

    The run calls ``bind_data`` once with its config and data, then ``prepare`` once, before
    the optimiser is built. The trainer calls, in
    order: ``setup`` once before the first epoch of a fresh run (a resumed run loads what
    ``setup`` made from the checkpoint instead);
    per epoch ``on_epoch_start`` then ``epoch_samples``; per batch ``training_step``, whose
    entries with keys starting ``loss`` are summed and back-propagated (every scalar entry is
    logged); ``stats`` at each log line. Evaluation ranks by ``retrieval_score``.

    A method is an ``nn.Module``: submodules (a frozen estimator, a siamese copy) and buffers
    move to the device with it and go into checkpoints (``method_state``); per-run state that
    is not a tensor goes through ``get_extra_state``. The optimiser trains only
    ``trainable_parameters(model)``.

    Class attributes:
        name: the registry key.
        epoch_record: the ``metrics.jsonl`` event of ``on_epoch_start``'s fields.
        nonfinite_hint: advice appended to the error when a loss term turns NaN/inf.
        negatives: where in-batch negatives come from with several processes. ``gathered``
            (default): ``model(images, captions, lengths)`` returns the global batch's
            ``(W, B, B)`` matrix (features gathered with gradient, open_clip's
            ``gather_with_grad`` without ``local_loss``) and ``batch.index`` etc. are the
            global batch's, so the loss equals the one-process loss at batch B. ``per_rank``:
            the method sees the rank's micro-batch of B / world and its own negatives.
        reads_unit_scores: the method reads the backbone's scores on their unit scale
            (``model.unit_scores(raw)``: SGRAF's raw scores, CLIP's cosine) in its training
            step, and evaluation hands ``retrieval_score`` unit scores too. False (default):
            raw scores throughout.
        reads_prefilter: the method trains on the pre-filter's selection itself
            (``MethodContext.prefilter``; UGNCL divides by it). False (default): in the
            pre-filter's epochs the trainer leaves the pairs it rejects out of the epoch.
    """

    name: ClassVar[str] = "method"
    epoch_record: ClassVar[str] = "epoch_start"
    nonfinite_hint: ClassVar[str] = (
        "Lower train.lr, or check the input features for NaN or huge values (their RMS also "
        "sets the image weight decay through train.image_decay_per_rms)."
    )
    negatives: ClassVar[str] = "gathered"
    reads_unit_scores: ClassVar[bool] = False
    reads_prefilter: ClassVar[bool] = False

    def __init__(self, *, eval_score: str = "raw") -> None:
        super().__init__()
        self.eval_score = eval_score
        view_reducer(eval_score)  # fail at construction on a bad name

    @classmethod
    def from_config(cls, section: Any, *, eval_score: str) -> Method:
        """The method of a ``method.<name>`` config section (a dataclass) and
        ``eval.eval_score``."""
        return cls(**dataclasses.asdict(section), eval_score=eval_score)

    def bind_data(self, config: Any, data: Any, services: RunServices) -> None:
        """Once, before the run directory exists, with the run's config and opened data (a
        :class:`~ugncl.core.data.RunData`) and what the run room offers beyond them
        (``services``: models from files, other views of the pairs): a method that reads more
        than the training pairs opens and checks it here, so a bad setting fails before
        anything is written
        (OSA: ``data.estimator``, the same pairs in its estimator's input format)."""

    def backbone_error(self, model: nn.Module) -> str | None:
        """Why this method (with its options) cannot be meaningful on ``model``'s backbone,
        as one sentence naming the fix, or None. Checked before the run folder appears
        (:func:`ugncl.run.build.check_method_backbone`); ``model`` is freshly built."""
        return None

    def prepare(self, model: nn.Module, num_samples: int) -> None:
        """Create submodules and buffers in their final shapes (a frozen copy of ``model``,
        per-sample arrays of length ``num_samples``), so the optimiser can include them and a
        checkpoint's method state loads into them; ``setup`` fills them."""

    def setup(self, ctx: MethodContext) -> dict[str, Any] | None:
        """Once before training (not again on resume); may pass over the data. The fields
        returned go into a ``method_setup`` record."""
        return None

    def on_epoch_start(self, ctx: MethodContext, epoch: int) -> dict[str, Any] | None:
        """Optional pass before epoch ``epoch``; fields returned go into an ``epoch_record``."""
        return None

    def prefetch_samples(self) -> Callable[[np.ndarray], np.ndarray] | None:
        """A picklable ``batch sample indices (K,) -> sample indices (M,)`` naming the
        training samples a step will need beside its batch (e.g. memory-bank pairs), or None.
        The training loader decodes them with the batch, in its workers, and hands them to the
        step as ``StepContext.extra``; asked once per epoch, after ``on_epoch_start``.
        Return the same object while the samples it names stay the same: the trainer keeps
        that loader and its workers across epochs, and builds a new one for a new object."""
        return None

    def on_epoch_end(self, ctx: MethodContext, epoch: int) -> dict[str, Any] | None:
        """After epoch ``epoch``'s last step (before validation); fields returned go into an
        ``epoch_record`` (e.g. the weights the epoch's steps applied)."""
        return None

    def epoch_samples(self, ctx: MethodContext, epoch: int) -> np.ndarray | None:
        """Sample indices epoch ``epoch`` visits (in the epoch's seeded order); None = all."""
        return None

    def trainable_parameters(self, model: nn.Module) -> Iterable[nn.Parameter]:
        """What the optimiser trains; the method's own modules stay frozen unless listed."""
        return model.parameters()

    def training_step(
        self, model: nn.Module, batch: PairBatch, step: StepContext
    ) -> dict[str, Tensor]:
        raise NotImplementedError

    def evaluation_models(self, model: nn.Module) -> list[nn.Module]:
        """The models whose score matrices evaluation averages: ``[model]``; a method that
        trains more than one network (its own modules) lists them too."""
        return [model]

    def retrieval_reducer(self) -> Callable[[Tensor], Tensor]:
        """``eval.eval_score`` as a map raw (W, a, b) -> (a, b) (see
        :func:`ugncl.core.evaluation.view_reducer`); an evidential method overrides it to
        rank by its own evidence (UGNCL: its tau and evidence function)."""
        return view_reducer(self.eval_score)

    def retrieval_score(self, raw: Tensor) -> Tensor:
        """Raw (W, n_img, n_cap) -> the (n_img, n_cap) score evaluation ranks by (unit scores
        where the method sets ``unit_scores``)."""
        return self.retrieval_reducer()(raw)

    def stats(self) -> dict[str, Any]:
        """Scalars added to every ``train`` record."""
        return {}
