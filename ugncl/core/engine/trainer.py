"""The one training loop: any similarity model, any method, any training data.

The trainer owns the device, AMP, the epoch order, optimiser and schedule steps, gradient
clipping, validation, checkpoints and exact resume. It knows no backbone and no method: the
method supplies loss terms (and its lifecycle hooks), the evaluator ranks splits.
"""

from __future__ import annotations

import functools
import logging
import math
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

from ugncl.core.data import PairBatch, TrainingData
from ugncl.core.engine import distributed
from ugncl.core.engine.checkpoint import (
    CHECKPOINT_VERSION,
    CheckpointError,
    clean_partial_files,
    copy_checkpoint,
    load_checkpoint,
    save_checkpoint,
)
from ugncl.core.engine.context import MethodContext, StepContext
from ugncl.core.engine.device import Precision
from ugncl.core.engine.distributed import DistEnv
from ugncl.core.engine.recorder import MetricsRecorder
from ugncl.core.engine.sampling import (
    EPOCH_LENGTHS,
    batch_indices,
    epoch_order,
    training_batches,
)
from ugncl.core.engine.seed import capture_rng_state, restore_rng_state
from ugncl.core.errors import UserError
from ugncl.core.method import Method
from ugncl.core.optim import Schedule
from ugncl.core.prefilter import Prefilter, PrefilterSelection, training_pair_pvalues

logger = logging.getLogger(__name__)

TRAIN_STREAM = 0  # RNG stream of the training order
LOADER_PREFETCH = 4  # batches each loader worker prepares ahead


class NonFiniteLossError(UserError, FloatingPointError):
    """A loss term turned NaN/inf; the message names the term, the step and the setting to
    change (a ``UserError``: the tools print it as one ``error:`` line)."""


class Evaluator(Protocol):
    """What the trainer needs to validate and test (``ugncl.core.evaluation.Evaluator``)."""

    @property
    def has_val(self) -> bool: ...

    def evaluate(self, model: nn.Module, which: str) -> dict[str, dict[str, float]]:
        """``{record split name: metrics}`` of ``which`` ("val" | "test"); headline first."""
        ...


#: The test's per-query hit probabilities in a run folder (``ugncl.core.metrics.query_hits``).
QUERY_HITS_FILE = "test_queries.npz"


def save_query_hits(run_dir: Path, hits: dict[str, np.ndarray]) -> Path:
    """Write the test's per-query hit probabilities (``i2t``, ``t2i``) to the run folder,
    atomically (a kill leaves the old file or the new one)."""
    path = Path(run_dir) / QUERY_HITS_FILE
    tmp = path.with_suffix(".tmp.npz")
    np.savez_compressed(tmp, **hits)
    tmp.replace(path)
    return path


class _EpochItems:
    """A sampler of the trainer's loaders: the current epoch's items, replaced before each
    epoch (a sampler is iterated in the main process, so persistent workers see each epoch's
    order). The training loader's items are batches of sample indices; the loader with a
    method's extra samples gets ``(batch, asking)`` pairs (:class:`_WithExtra`)."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    def __iter__(self) -> Iterator[Any]:
        return iter(self.items)

    def __len__(self) -> int:
        return len(self.items)


def _as_is(item: Any) -> Any:
    return item


class _WithExtra(torch.utils.data.Dataset):
    """A batch of the training data with the samples ``extra(indices)`` asked for beside it,
    both collated where the loader runs (its workers): a memory bank's pairs are decoded
    there, not in the main process at every step.

    Its items are keyed by ``(batch indices, asking indices)`` pairs that its sampler
    (:class:`_EpochItems`) hands out each epoch (``asking``: the indices whose extra samples
    the batch brings: the batch's own, or a gathered method's global batch), so the dataset
    holds no per-epoch state and its workers can persist across epochs."""

    def __init__(self, data: TrainingData, extra: Callable[[np.ndarray], Any]) -> None:
        self.data, self.extra = data, extra

    def __getitem__(self, item: tuple[list[int], list[int]]) -> tuple[PairBatch, PairBatch | None]:
        batch_indices, asking = item
        idx = np.asarray(batch_indices, dtype=np.int64)
        more = np.asarray(self.extra(np.asarray(asking, dtype=np.int64)), dtype=np.int64)
        more = more.reshape(-1)
        batch = self.data.collate([self.data.dataset[int(i)] for i in idx])
        if not more.size:
            return batch, None
        return batch, self.data.collate([self.data.dataset[int(i)] for i in more])


class Trainer:
    """Train ``model`` with ``method`` on ``data``; validate and checkpoint every epoch.

    Epochs are counted from 0 with the ``warmup_epochs`` warm-up epochs first. Checkpoints are
    written at the end of every epoch, so a resumed run continues at an epoch boundary; the
    data order of an epoch depends only on (seed, epoch).
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        method: Method,
        data: TrainingData,
        optimizer: torch.optim.Optimizer,
        schedule: Schedule,
        evaluator: Evaluator | None,
        run_dir: Path,
        recorder: MetricsRecorder,
        device: torch.device,
        precision: Precision,
        seed: int,
        epochs: int,
        warmup_epochs: int = 0,
        batch_size: int = 128,
        grad_clip: float = 2.0,
        log_every: int = 50,
        num_workers: int = 0,
        stop_after_epochs: int | None = None,
        checkpoint_extra: dict[str, Any] | None = None,
        dist: DistEnv | None = None,
        prefilter: Prefilter | None = None,
        compile: bool = False,
        epoch_length: str = "samples",
    ) -> None:
        self.dist = dist or DistEnv()
        self.model = model.to(device)
        self.method = method.to(device)
        self.data = data
        self.optimizer = optimizer
        self.schedule = schedule
        self.evaluator = evaluator
        self.run_dir = Path(run_dir)
        self.recorder = recorder
        self.device = device
        self.precision = precision
        self.seed = seed
        self.epochs = epochs
        self.warmup_epochs = warmup_epochs
        self.batch_size = batch_size
        self.grad_clip = grad_clip
        self.log_every = max(1, log_every)
        self.num_workers = num_workers
        self.stop_after_epochs = stop_after_epochs
        self.checkpoint_extra = checkpoint_extra or {}
        self.prefilter = prefilter
        if epoch_length not in EPOCH_LENGTHS:
            raise ValueError(f"unknown epoch_length {epoch_length!r}; use one of {EPOCH_LENGTHS}")
        self.epoch_length = epoch_length  # train.epoch_length (sampling.training_batches)
        self.params = [p for group in optimizer.param_groups for p in group["params"]]
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision.use_grad_scaler)
        self.epoch = 0  # epochs completed
        self.saved_epoch = 0  # epochs completed that checkpoints/last.pt holds
        self.global_step = 0
        self.best_rsum = -math.inf
        self.best_epoch: int | None = None
        self.setup_done = False
        # Several processes: DDP around the model; the method trains through a proxy whose
        # forward scores the global batch (negatives ``gathered``) or the rank's micro-batch.
        self.local_batch = distributed.check_global_batch(batch_size, self.dist.world)
        # ``compile`` (train.compile): the model the method's step calls goes through
        # torch.compile (its forward; other methods such as ``score`` run as written); the
        # model the passes and the evaluation see stays the plain module.
        self.train_model: Any = torch.compile(self.model) if compile else self.model
        if self.dist.enabled:
            gathered = getattr(method, "negatives", "gathered") == "gathered"
            ddp = distributed.wrap_model(self.model, device)
            ddp = torch.compile(ddp) if compile else ddp
            self.train_model = distributed.DistributedModel(ddp, gathered=gathered)
        self._epoch_seconds: list[float] = []  # wall time of each epoch run by this process
        self._epoch_batches = _EpochItems()
        self._loader: DataLoader | None = None
        # The loader of a method's extra samples (Method.prefetch_samples) and its function.
        self._extra_items = _EpochItems()
        self._extra_loader: DataLoader | None = None
        self._extra_fn: Callable[[np.ndarray], Any] | None = None

    @property
    def total_epochs(self) -> int:
        return self.warmup_epochs + self.epochs

    def context(self, epoch: int | None = None) -> MethodContext:
        """What the method may see of this trainer (at the start of ``epoch``: the
        pre-filter's selection where it applies)."""
        return MethodContext(
            model=self.model,
            device=self.device,
            precision=self.precision,
            run_dir=self.run_dir,
            seed=self.seed,
            warmup_epochs=self.warmup_epochs,
            batch_size=self.batch_size,
            num_samples=self.data.num_samples,
            clean=np.asarray(self.data.clean),
            recorder=self.recorder,
            batches=self.ordered_batches,
            image_index=np.asarray(self.data.image_index, dtype=np.int64),
            fetch=self.fetch,
            global_step=self.global_step,
            prefilter=None if epoch is None else self._prefilter_at(epoch),
            every_batch=functools.partial(self.ordered_batches, shard=False),
        )

    def _prefilter_at(self, epoch: int) -> PrefilterSelection | None:
        """The pre-filter's selection where it applies to ``epoch`` (None elsewhere). Its
        p-values are computed once, by rank 0 alone, and broadcast (every rank gets the same
        array); the first computation writes a ``prefilter`` record."""
        if self.prefilter is None or not self.prefilter.applies(epoch, self.warmup_epochs):
            return None

        def pvalues() -> np.ndarray | None:
            n = self.data.num_samples
            return distributed.on_main(
                lambda: training_pair_pvalues(self.fetch, n, self.batch_size, self.seed)
            )

        selection, fresh = self.prefilter.selection(pvalues)
        if fresh and selection is not None:
            fields = selection.record(np.asarray(self.data.clean))
            self.recorder.write("prefilter", epoch=epoch, kind=self.prefilter.kind, **fields)
            logger.info("prefilter: %s", _format(fields))
        return selection

    def fetch(self, indices: torch.Tensor | np.ndarray) -> PairBatch:
        """The training samples ``indices`` (K,) as one batch, in that order (on the CPU)."""
        items = [self.data.dataset[int(i)] for i in np.asarray(indices).reshape(-1)]
        return self.data.collate(items)

    # ------------------------------------------------------------------ data order
    def ordered_batches(
        self,
        epoch: int,
        batch_size: int,
        stream: int = TRAIN_STREAM,
        indices: np.ndarray | None = None,
        *,
        drop_last: bool = False,
        data: TrainingData | None = None,
        shard: bool = True,
    ) -> DataLoader:
        """Batches of the training samples (or ``indices``) in the seeded order of
        (epoch, stream); see :func:`ugncl.core.engine.sampling.batch_indices` for the tail.
        ``data``: the same samples in another input format (default: the training data).
        Several processes: this rank's whole batches ``rank::world`` of the pass (merge the
        per-sample results with :func:`ugncl.core.engine.distributed.merge_rows`); every
        batch with ``shard=False``."""
        data = self.data if data is None else data
        order = epoch_order(data.num_samples, self.seed, epoch, stream, indices)
        batches = batch_indices(order, batch_size, drop_last=drop_last)
        if self.dist.enabled and shard:
            batches = distributed.shard_pass_batches(batches, self.dist)
        # One loader per pass (a pass runs once an epoch): its workers are not kept, but its
        # batches are pinned on CUDA like the training loader's.
        return DataLoader(
            data.dataset,
            batch_sampler=batches,
            collate_fn=data.collate,
            num_workers=self.num_workers,
            pin_memory=self.device.type == "cuda",
        )

    # ------------------------------------------------------------------ main loop
    def fit(self) -> dict[str, Any]:
        """Train until ``total_epochs`` (or ``stop_after_epochs`` in this invocation)."""
        if not self.setup_done:
            fields = self.method.setup(self.context())
            if fields is not None:
                self.recorder.write("method_setup", method=self.method.name, **fields)
                logger.info("%s setup: %s", self.method.name, _format(fields))
            self.setup_done = True
        ran = 0
        while self.epoch < self.total_epochs:
            if self.stop_after_epochs is not None and ran >= self.stop_after_epochs:
                logger.info("stopping after %d epoch(s) as asked; --resume continues", ran)
                break
            self._run_epoch(self.epoch)
            ran += 1
        return {"epoch": self.epoch, "best_rsum": self.best_rsum, "best_epoch": self.best_epoch}

    def _run_epoch(self, epoch: int) -> None:
        epoch_started = time.perf_counter()
        warmup = epoch < self.warmup_epochs
        ctx = self.context(epoch)
        fields = self.method.on_epoch_start(ctx, epoch)
        if fields is not None:
            event = self.method.epoch_record
            self.recorder.write(event, epoch=epoch, **fields)
            logger.info("epoch %d %s: %s", epoch, event, _format(fields))
        subset = self.method.epoch_samples(ctx, epoch)
        if ctx.prefilter is not None and not self.method.reads_prefilter:
            subset = ctx.prefilter.keep(subset)  # the rejected pairs leave the objective
        self.model.train()
        extra = self.method.prefetch_samples()
        loader, global_batches = self._training_batches(epoch, subset, extra)
        if len(loader) == 0:
            n = self.data.num_samples if subset is None else len(subset)
            kept = " (the pre-filter's selection)" if ctx.prefilter is not None else ""
            raise ValueError(
                f"epoch {epoch} visits {n} samples{kept}, fewer than one batch of "
                f"{self.batch_size}; lower train.batch_size"
            )
        started = time.perf_counter()
        for i, item in enumerate(_progress(loader, epoch, self.total_epochs)):
            batch, more = item if extra is not None else (item, None)
            lr = float(self.optimizer.param_groups[0]["lr"])
            step = StepContext(epoch, self.global_step, warmup, self.device, lr, more)
            batch = self._method_batch(batch, global_batches[i])
            terms = self._train_step(batch.to(self.device, non_blocking=True), step)
            if self.global_step % self.log_every == 0 or i == len(loader) - 1:
                self._log_train(epoch, terms, i + 1, len(loader), started)
        fields = self.method.on_epoch_end(ctx, epoch)
        if fields is not None:
            self.recorder.write(self.method.epoch_record, epoch=epoch, at="end", **fields)
        self.schedule.after_epoch()
        self.epoch = epoch + 1
        val = None
        if self.evaluator is not None and self.evaluator.has_val:
            val = self.evaluate("val", epoch)
        self._checkpoint(epoch, val)
        self._epoch_seconds.append(time.perf_counter() - epoch_started)

    def _training_batches(
        self,
        epoch: int,
        subset: np.ndarray | None,
        extra: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> tuple[DataLoader, list[list[int]]]:
        """The epoch's loader (this rank's micro-batches) and its global batches.

        The order is ``epoch_order(seed, epoch)`` in every process; it is cut into global
        batches of ``batch_size`` (the incomplete tail dropped; with ``epoch_length`` ``full``
        a shrunken subset is passed again up to a whole epoch's count,
        :func:`~ugncl.core.engine.sampling.training_batches`) and, with several processes,
        rank r loads slice ``[r*b, (r+1)*b)`` of each (b = batch_size / world). With
        ``extra`` (:meth:`Method.prefetch_samples`) the loader yields ``(batch, PairBatch of
        extra(batch indices) or None)``, both decoded in the loader's workers."""
        global_batches = training_batches(
            self.data.num_samples, self.batch_size, self.seed, epoch, TRAIN_STREAM, subset,
            length=self.epoch_length,
        )  # fmt: skip
        local = global_batches
        if self.dist.enabled:
            local = distributed.shard_global_batches(global_batches, self.dist)
        if extra is not None:
            # A gathered method sees the global batch's indices: its extras are that batch's.
            gathered = getattr(self.method, "negatives", "gathered") == "gathered"
            asking = global_batches if gathered else local
            if self._extra_loader is None or self._extra_fn is not extra:
                # Kept, with its workers, while the method hands out the same ``extra``
                # (Method.prefetch_samples); a new one is a new dataset for the workers.
                self._extra_fn, self._extra_loader = extra, self._make_loader(
                    _WithExtra(self.data, extra), sampler=self._extra_items,
                    batch_size=None, collate_fn=_as_is,
                )  # fmt: skip
            self._extra_items.items = list(zip(local, asking))
            return self._extra_loader, global_batches
        if self._loader is None:
            # Built once and iterated each epoch over that epoch's batches: with workers they
            # persist across epochs (no respawn per epoch), prefetch ahead and, on CUDA, hand
            # out pinned batches that the step copies without waiting (non_blocking).
            self._loader = self._make_loader(
                self.data.dataset, batch_sampler=self._epoch_batches,
                collate_fn=self.data.collate,
            )  # fmt: skip
        self._epoch_batches.items = local
        return self._loader, global_batches

    def _make_loader(self, dataset: Any, **kwargs: Any) -> DataLoader:
        """A loader whose workers persist across epochs and prefetch ahead; on CUDA it hands
        out pinned batches that the step copies without waiting (non_blocking)."""
        workers = self.num_workers
        return DataLoader(
            dataset, num_workers=workers, pin_memory=self.device.type == "cuda",
            persistent_workers=workers > 0,
            prefetch_factor=LOADER_PREFETCH if workers > 0 else None, **kwargs,
        )  # fmt: skip

    def _method_batch(self, batch: PairBatch, global_batch: list[int]) -> PairBatch:
        """The batch the method sees. With gathered negatives in several processes: this
        rank's images and captions, but the global batch's per-sample fields (``index``,
        ``image_index``, ``clean``) in global order, matching the rows of the global matrix."""
        if not self.dist.enabled or getattr(self.method, "negatives", "gathered") != "gathered":
            return batch
        index = np.asarray(global_batch, dtype=np.int64)
        return PairBatch(
            images=batch.images,
            captions=batch.captions,
            lengths=batch.lengths,
            index=torch.from_numpy(index),
            image_index=torch.as_tensor(np.asarray(self.data.image_index)[index]),
            clean=torch.as_tensor(np.asarray(self.data.clean)[index]),
        )

    def _train_step(self, batch: PairBatch, step: StepContext) -> dict[str, float]:
        with self.precision.autocast(self.device):
            terms = self.method.training_step(self.train_model, batch, step)
        loss_terms = {k: v for k, v in terms.items() if k.startswith("loss")}
        if not loss_terms:
            raise RuntimeError(
                f"method {self.method.name!r} returned no 'loss*' term: {list(terms)}"
            )
        total = torch.stack([v.float() for v in loss_terms.values()]).sum()
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(total).backward()
        # One read of the device per step: every scalar term and the total in one copy,
        # after the backward pass is queued and before the update, so a non-finite loss
        # stops the run with its weights untouched.
        # float64: every term's value exactly as ``float(term)`` reads it, whatever its shape
        # (one element) and device.
        scalars = {
            k: v.detach().reshape(()).to(total.device, torch.float64)
            for k, v in terms.items()
            if _is_scalar(v)
        }
        read = torch.stack([total.detach().double(), *scalars.values()]).tolist()
        logged = dict(zip(scalars, read[1:]))
        if not math.isfinite(read[0]):
            self.optimizer.zero_grad(set_to_none=True)
            bad = [k for k, v in loss_terms.items() if not torch.isfinite(v).all()]
            raise NonFiniteLossError(
                f"loss term {bad[0]!r} is non-finite at epoch {step.epoch}, step "
                f"{step.global_step} (all terms: {logged}; train.lr is now {step.lr:g}). "
                f"{self.method.nonfinite_hint} A new run takes the change: --cfg "
                f"{self.run_dir / 'config.yaml'} --set train.lr=... run.name=NEW"
            )
        if self.grad_clip > 0:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.params, self.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.schedule.after_step()
        self.global_step += 1
        logged["loss"] = read[0]
        return logged

    def _log_train(
        self, epoch: int, terms: dict[str, float], done: int, total: int, started: float
    ) -> None:
        lr = self.optimizer.param_groups[0]["lr"]
        record = {"epoch": epoch, "step": self.global_step, "lr": lr, **terms}
        record.update(self.method.stats())
        self.recorder.write("train", **record)
        elapsed = time.perf_counter() - started
        eta = elapsed / done * (total - done)
        logger.info(
            "epoch %d [%d/%d] step %d lr %.2e loss %.4f (%s) eta %.0fs, run eta %s",
            epoch, done, total, self.global_step, lr, terms["loss"],
            _format({k: v for k, v in terms.items() if k != "loss"}), eta,
            _clock(self.run_eta(epoch, eta, elapsed / done * total)),
        )  # fmt: skip

    def run_eta(self, epoch: int, epoch_eta: float, epoch_steps_seconds: float) -> float:
        """Seconds until the last epoch ends: this epoch's rest, then each remaining epoch at
        the mean wall time of the epochs this process completed (passes, validation and
        checkpoints included), or at this epoch's step time before one has completed."""
        left = self.total_epochs - epoch - 1
        if self.stop_after_epochs is not None:
            left = min(left, max(0, self.stop_after_epochs - len(self._epoch_seconds) - 1))
        per_epoch = (
            sum(self._epoch_seconds) / len(self._epoch_seconds)
            if self._epoch_seconds
            else epoch_steps_seconds
        )
        return epoch_eta + left * per_epoch

    # ------------------------------------------------------------------ evaluation
    def evaluate(self, which: str, epoch: int, **extra: Any) -> dict[str, Any]:
        """Rank the evaluator's ``which`` split ("val" | "test"), write one record per
        protocol section (e.g. COCO ``testall/5fold`` and ``testall/5k``) with ``extra``
        fields; returns the first. Records carry the global step (TensorBoard's x-axis)."""
        if self.evaluator is None:
            raise RuntimeError("this trainer has no evaluator")
        results = self.evaluator.evaluate(self.model, which)
        for name, metrics in results.items():
            self.recorder.write(
                which, epoch=epoch, step=self.global_step, split=name, **extra, **metrics
            )
            logger.info("%s %s epoch %d: %s", which, name, epoch, _format(metrics))
        return next(iter(results.values()))

    def test(self) -> dict[str, Any]:
        """Evaluate the best checkpoint (the last one when no validation ran) on the test split.

        The record names the file and the epoch of the weights (``checkpoint``, ``epoch``).
        """
        path = distributed.on_main(lambda: checkpoint_for_test(self.run_dir / "checkpoints"))
        state = load_checkpoint(path, map_location=self.device)
        self.model.load_state_dict(state["model"])
        # The method's modules of the same epoch: a method that evaluates with more than the
        # model (Method.evaluation_models, e.g. a second co-trained network) tests them too.
        self.method.load_state_dict(state["method_state"])
        epoch = int(state["epoch"]) - 1
        logger.info("testing %s (weights of epoch %d)", path, epoch)
        record = self.evaluate("test", epoch, checkpoint=str(path))
        hits = getattr(self.evaluator, "test_query_hits", None)
        if hits is not None:
            distributed.on_main(lambda: save_query_hits(self.run_dir, hits))
        return record

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint(self, epoch: int, val: dict[str, Any] | None) -> None:
        ckpt_dir = self.run_dir / "checkpoints"
        is_best = val is not None and val["rsum"] > self.best_rsum
        if is_best:
            self.best_rsum, self.best_epoch = val["rsum"], epoch
        state = self.state_dict(val)  # every rank: it gathers the ranks' RNG states
        if self.dist.is_main:  # rank 0 alone writes; the others wait for the files
            # last.pt first, then best.pt as its copy: last.pt names the best epoch, so a kill
            # between the two writes is repaired from last.pt itself (ensure_best).
            save_checkpoint(state, ckpt_dir / "last.pt")
            if is_best:
                copy_checkpoint(ckpt_dir / "last.pt", ckpt_dir / "best.pt")
                logger.info("epoch %d: new best rsum %.2f -> %s", epoch, self.best_rsum, ckpt_dir)
        distributed.barrier()
        self.saved_epoch = self.epoch

    def state_dict(self, metrics: dict[str, Any] | None = None) -> dict[str, Any]:
        """A plain dict (``torch.load(weights_only=True)``) with everything resume needs
        (several processes: also every rank's RNG state, ``rng_ranks``; a collective)."""
        extra = {}
        if self.dist.enabled:
            extra["rng_ranks"] = distributed.all_gather_state(capture_rng_state())
        return {
            "version": CHECKPOINT_VERSION,
            "epoch": self.epoch,
            "global_step": self.global_step,
            "model": self.model.state_dict(),
            "backbone": str(getattr(self.model, "backbone", "")),
            "model_config": dict(getattr(self.model, "config", {})),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.schedule.state_dict(),
            "scaler": self.scaler.state_dict(),
            "method": self.method.name,
            "method_state": self.method.state_dict(),
            "rng": capture_rng_state(),
            "seed": self.seed,
            "best_rsum": self.best_rsum,
            "best_epoch": self.best_epoch,
            "metrics": metrics or {},
            "prefilter": None if self.prefilter is None else self.prefilter.state_dict(),
            **self.checkpoint_extra,
            **extra,
        }

    def resume(self, path: str | Path, state: dict[str, Any] | None = None) -> None:
        """Restore model, optimiser, schedule, scaler, counters, RNG and method state from
        ``path`` (``state``: its content, already loaded). Leftover temp files of an
        interrupted write are deleted and a ``best.pt`` cut off by a kill is restored."""
        if self.dist.is_main:  # the files are rank 0's to repair
            clean_partial_files(Path(path).parent)
            ensure_best(Path(path).parent)
        distributed.barrier()
        if state is None:
            state = load_checkpoint(path, map_location=self.device)
        if state.get("method") != self.method.name:
            raise CheckpointError(
                f"checkpoint {path} was written by method {state.get('method')!r}, "
                f"this run uses {self.method.name!r}"
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.schedule.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.method.load_state_dict(state["method_state"])
        if self.prefilter is not None and state.get("prefilter") is not None:
            self.prefilter.load_state_dict(state["prefilter"])
        ranks = state.get("rng_ranks")
        if self.dist.enabled and ranks is not None and len(ranks) == self.dist.world:
            restore_rng_state(ranks[self.dist.rank])
        else:
            restore_rng_state(state["rng"])
        self.epoch = int(state["epoch"])
        self.saved_epoch = self.epoch
        self.global_step = int(state["global_step"])
        self.best_rsum = float(state["best_rsum"])
        self.best_epoch = state["best_epoch"]
        self.setup_done = True  # setup's products are in the method state
        logger.info("resumed from %s at epoch %d, step %d", path, self.epoch, self.global_step)


def _epoch_of(path: Path) -> int | None:
    """Index of the epoch whose weights ``path`` holds (None: no such file)."""
    if not path.is_file():
        return None
    return int(load_checkpoint(path)["epoch"]) - 1


def ensure_best(ckpt_dir: Path) -> Path | None:
    """Make ``best.pt`` hold the epoch ``last.pt`` names as best, repairing a kill between the
    ``last.pt`` and ``best.pt`` writes; returns ``best.pt`` (None: no validation ran).

    Raises:
        CheckpointError: validation chose an epoch whose weights neither file holds.
    """
    last, best = ckpt_dir / "last.pt", ckpt_dir / "best.pt"
    state = load_checkpoint(last)
    best_epoch = state.get("best_epoch")
    if best_epoch is None:
        return None
    if _epoch_of(best) == best_epoch:
        return best
    if int(state["epoch"]) - 1 == best_epoch:  # last.pt is the best: the copy was cut off
        logger.warning("%s is missing or stale; restoring it from %s (epoch %d)",
                       best, last, best_epoch)  # fmt: skip
        copy_checkpoint(last, best)
        return best
    raise CheckpointError(
        f"{best} does not hold the best epoch {best_epoch} that {last} names (the file is "
        f"missing or was replaced); the best weights are lost. Evaluate {last} with "
        "tools/eval.py, or re-run training"
    )


def checkpoint_for_test(ckpt_dir: Path) -> Path:
    """The checkpoint the final test uses: ``best.pt`` when validation ran (never a silent
    fallback to ``last.pt``), else ``last.pt``."""
    last = ckpt_dir / "last.pt"
    if not last.is_file():
        raise CheckpointError(f"{last} does not exist: the run has no checkpoint to test")
    return ensure_best(ckpt_dir) or last


def _progress(loader: DataLoader, epoch: int, total_epochs: int) -> Iterator[PairBatch]:
    """A tqdm bar with ETA on interactive terminals; plain iteration otherwise (log lines)."""
    if sys.stdout.isatty():
        from tqdm import tqdm

        return iter(tqdm(loader, desc=f"epoch {epoch + 1}/{total_epochs}", leave=False))
    return iter(loader)


def _clock(seconds: float) -> str:
    """``1h02m03s`` / ``2m03s`` / ``3s``."""
    total = round(max(0.0, seconds))
    h, rest = divmod(total, 3600)
    m, sec = divmod(rest, 60)
    return f"{h}h{m:02d}m{sec:02d}s" if h else (f"{m}m{sec:02d}s" if m else f"{sec}s")


def _is_scalar(value: Any) -> bool:
    return isinstance(value, Tensor) and value.numel() == 1


def _format(values: dict[str, Any]) -> str:
    parts = []
    for key, value in values.items():
        if isinstance(value, (list, tuple)):  # e.g. weight histograms: metrics.jsonl only
            continue
        parts.append(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts)
