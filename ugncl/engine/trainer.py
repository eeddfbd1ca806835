"""The one training loop. Methods supply loss terms; everything else lives here."""

from __future__ import annotations

import logging
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader

from precomputed.collate import PairBatch, collate_pairs
from precomputed.dataset import PairDataset, PrecomputedSplit
from ugncl.engine.checkpoint import CHECKPOINT_VERSION, load_checkpoint, save_checkpoint
from ugncl.engine.device import Precision
from ugncl.engine.recorder import MetricsRecorder
from ugncl.engine.seed import capture_rng_state, epoch_generator, restore_rng_state
from ugncl.evaluation import default_protocol, evaluate_models
from ugncl.methods.base import Method, StepContext

logger = logging.getLogger(__name__)

TRAIN_STREAM = 0  # RNG stream of the training order


class NonFiniteLossError(FloatingPointError):
    """A loss term turned NaN/inf; the message names the term and the step."""


class Trainer:
    """Adam, step lr schedule, clipping, AMP, warm-up, validation, checkpoints, exact resume.

    Epochs are counted from 0 with the ``warmup_epochs`` warm-up epochs first; the lr is
    multiplied by ``lr_decay`` every ``lr_update`` main epochs (warm-up runs at ``lr``).
    Checkpoints are written at the end of every epoch, so a resumed run continues at an epoch
    boundary; the data order of an epoch depends only on (seed, epoch).
    """

    def __init__(
        self,
        *,
        model: nn.Module,
        method: Method,
        train_split: PrecomputedSplit,
        dev_split: PrecomputedSplit | None,
        run_dir: Path,
        recorder: MetricsRecorder,
        device: torch.device,
        precision: Precision,
        seed: int,
        epochs: int,
        warmup_epochs: int = 0,
        batch_size: int = 128,
        lr: float = 2e-4,
        lr_update: int = 20,
        lr_decay: float = 0.1,
        grad_clip: float = 2.0,
        log_every: int = 50,
        eval_batch_size: int = 128,
        eval_score: str = "evidence",
        tau: float = 0.1,
        memory_budget_bytes: int = 512 * 2**20,
        num_workers: int = 0,
        stop_after_epochs: int | None = None,
        checkpoint_extra: dict[str, Any] | None = None,
    ) -> None:
        self.model = model.to(device)
        self.method = method
        self.train_split = train_split
        self.dev_split = dev_split
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
        self.eval_batch_size = eval_batch_size
        self.eval_score = eval_score
        self.tau = tau
        self.memory_budget_bytes = memory_budget_bytes
        self.num_workers = num_workers
        self.stop_after_epochs = stop_after_epochs
        self.checkpoint_extra = checkpoint_extra or {}

        self.train_dataset = PairDataset(train_split)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, _step_schedule(warmup_epochs, lr_update, lr_decay)
        )
        self.scaler = torch.amp.GradScaler(device.type, enabled=precision.use_grad_scaler)
        self.epoch = 0  # epochs completed
        self.global_step = 0
        self.best_rsum = -math.inf
        self.best_epoch: int | None = None

    @property
    def total_epochs(self) -> int:
        return self.warmup_epochs + self.epochs

    # ------------------------------------------------------------------ data order
    def ordered_batches(
        self, epoch: int, batch_size: int, *, stream: int, drop_last: bool = False
    ) -> DataLoader:
        """Batches of the training set in the seeded order of (epoch, stream).

        With ``drop_last`` the incomplete tail is dropped (training: BatchNorm needs > 1
        sample); otherwise a tail shorter than half a batch joins the previous batch so every
        sample is visited in a batch of comparable size (the division pass).
        """
        n = len(self.train_dataset)
        order = torch.randperm(n, generator=epoch_generator(self.seed, epoch, stream)).tolist()
        batches = [order[i : i + batch_size] for i in range(0, n, batch_size)]
        if batches and len(batches[-1]) < batch_size:
            if drop_last:
                batches.pop()
            elif len(batches) > 1 and len(batches[-1]) < batch_size // 2:
                batches[-2].extend(batches.pop())
        return DataLoader(
            self.train_dataset,
            batch_sampler=batches,
            collate_fn=collate_pairs,
            num_workers=self.num_workers,
        )

    # ------------------------------------------------------------------ main loop
    def fit(self) -> dict[str, Any]:
        """Train until ``total_epochs`` (or ``stop_after_epochs`` in this invocation)."""
        ran = 0
        while self.epoch < self.total_epochs:
            if self.stop_after_epochs is not None and ran >= self.stop_after_epochs:
                logger.info("stopping after %d epoch(s) as asked; --resume continues", ran)
                break
            self._run_epoch(self.epoch)
            ran += 1
        return {"epoch": self.epoch, "best_rsum": self.best_rsum, "best_epoch": self.best_epoch}

    def _run_epoch(self, epoch: int) -> None:
        warmup = epoch < self.warmup_epochs
        division = self.method.on_epoch_start(self, epoch)
        if division is not None:
            self.recorder.write("division", epoch=epoch, **division)
            logger.info("epoch %d division: %s", epoch, _format(division))
        self.model.train()
        loader = self.ordered_batches(epoch, self.batch_size, stream=TRAIN_STREAM, drop_last=True)
        if len(loader) == 0:
            raise ValueError(
                f"the training split has {len(self.train_dataset)} captions, fewer than one "
                f"batch of {self.batch_size}; lower train.batch_size"
            )
        started = time.perf_counter()
        for i, batch in enumerate(_progress(loader, epoch, self.total_epochs)):
            ctx = StepContext(epoch, self.global_step, warmup, self.device)
            terms = self._train_step(batch.to(self.device), ctx)
            if self.global_step % self.log_every == 0 or i == len(loader) - 1:
                self._log_train(epoch, terms, i + 1, len(loader), started)
        self.scheduler.step()
        self.epoch = epoch + 1
        val = self.evaluate(self.dev_split, "val", epoch) if self.dev_split is not None else None
        self._checkpoint(epoch, val)

    def _train_step(self, batch: PairBatch, ctx: StepContext) -> dict[str, float]:
        with self.precision.autocast(self.device):
            terms = self.method.training_step(self.model, batch, ctx)
        loss_terms = {k: v for k, v in terms.items() if k.startswith("loss")}
        if not loss_terms:
            raise RuntimeError(
                f"method {self.method.name!r} returned no 'loss*' term: {list(terms)}"
            )
        total = torch.stack([v.float() for v in loss_terms.values()]).sum()
        if not torch.isfinite(total):
            bad = [k for k, v in loss_terms.items() if not torch.isfinite(v).all()]
            values = {k: float(v.detach()) for k, v in terms.items() if v.numel() == 1}
            raise NonFiniteLossError(
                f"loss term {bad[0]!r} is non-finite at epoch {ctx.epoch}, step {ctx.global_step} "
                f"(all terms: {values}). Lower train.lr, check the input features for NaN, or "
                "set method.ugncl.evidence_ceiling lower."
            )
        self.optimizer.zero_grad(set_to_none=True)
        self.scaler.scale(total).backward()
        if self.grad_clip > 0:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.global_step += 1
        logged = {k: float(v.detach()) for k, v in terms.items() if _is_scalar(v)}
        logged["loss"] = float(total.detach())
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
            "epoch %d [%d/%d] step %d lr %.2e loss %.4f (%s) eta %.0fs",
            epoch, done, total, self.global_step, lr, terms["loss"],
            _format({k: v for k, v in terms.items() if k != "loss"}), eta,
        )  # fmt: skip

    # ------------------------------------------------------------------ evaluation
    @torch.no_grad()
    def evaluate(
        self, split: PrecomputedSplit, event: str, epoch: int, protocol: str = "full"
    ) -> dict[str, Any]:
        """Encode ``split`` once, score all pairs in shards, write one ``event`` record per
        protocol section (e.g. COCO ``testall/5fold`` and ``testall/5k``); returns the first."""
        results, _ = evaluate_models(
            [self.model],
            split,
            protocol=protocol,
            eval_score=self.eval_score,
            tau=self.tau,
            batch_size=self.eval_batch_size,
            device=self.device,
            memory_budget_bytes=self.memory_budget_bytes,
        )
        for section, metrics in results.items():
            name = split.split if section in {"full", "1k"} else f"{split.split}/{section}"
            self.recorder.write(event, epoch=epoch, split=name, **metrics)
            logger.info("%s %s epoch %d: %s", event, name, epoch, _format(metrics))
        return next(iter(results.values()))

    def test(self, split: PrecomputedSplit, protocol: str | None = None) -> dict[str, Any]:
        """Evaluate the best checkpoint (the last one when no validation ran) on ``split``."""
        best = self.run_dir / "checkpoints" / "best.pt"
        path = best if best.is_file() else self.run_dir / "checkpoints" / "last.pt"
        state = load_checkpoint(path, map_location=self.device)
        self.model.load_state_dict(state["model"])
        protocol = protocol or default_protocol(split.name, split.split)
        return self.evaluate(split, "test", int(state["epoch"]) - 1, protocol=protocol)

    # ------------------------------------------------------------------ checkpoints
    def _checkpoint(self, epoch: int, val: dict[str, Any] | None) -> None:
        ckpt_dir = self.run_dir / "checkpoints"
        is_best = val is not None and val["rsum"] > self.best_rsum
        if is_best:
            self.best_rsum, self.best_epoch = val["rsum"], epoch
        state = self.state_dict(val)
        save_checkpoint(state, ckpt_dir / "last.pt")
        if is_best:
            save_checkpoint(state, ckpt_dir / "best.pt")
            logger.info("epoch %d: new best rsum %.2f -> %s", epoch, self.best_rsum, ckpt_dir)

    def state_dict(self, metrics: dict[str, Any] | None = None) -> dict[str, Any]:
        """A plain dict (``torch.load(weights_only=True)``) with everything resume needs."""
        return {
            "version": CHECKPOINT_VERSION,
            "epoch": self.epoch,
            "global_step": self.global_step,
            "model": self.model.state_dict(),
            "model_config": dict(self.model.config),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict(),
            "method": self.method.name,
            "method_state": self.method.state_dict(),
            "rng": capture_rng_state(),
            "seed": self.seed,
            "best_rsum": self.best_rsum,
            "best_epoch": self.best_epoch,
            "metrics": metrics or {},
            **self.checkpoint_extra,
        }

    def resume(self, path: str | Path) -> None:
        """Restore model, optimiser, scheduler, scaler, counters, RNG and method state."""
        state = load_checkpoint(path, map_location=self.device)
        if state.get("method") != self.method.name:
            raise ValueError(
                f"checkpoint {path} was written by method {state.get('method')!r}, "
                f"this run uses {self.method.name!r}"
            )
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.scaler.load_state_dict(state["scaler"])
        self.method.load_state_dict(state["method_state"])
        restore_rng_state(state["rng"])
        self.epoch = int(state["epoch"])
        self.global_step = int(state["global_step"])
        self.best_rsum = float(state["best_rsum"])
        self.best_epoch = state["best_epoch"]
        logger.info("resumed from %s at epoch %d, step %d", path, self.epoch, self.global_step)


def _step_schedule(warmup_epochs: int, lr_update: int, lr_decay: float):
    def factor(epoch: int) -> float:
        main_epoch = max(0, epoch - warmup_epochs)
        return lr_decay ** (main_epoch // max(1, lr_update))

    return factor


def _progress(loader: DataLoader, epoch: int, total_epochs: int) -> Iterator[PairBatch]:
    """A tqdm bar with ETA on interactive terminals; plain iteration otherwise (log lines)."""
    if sys.stdout.isatty():
        from tqdm import tqdm

        return iter(tqdm(loader, desc=f"epoch {epoch + 1}/{total_epochs}", leave=False))
    return iter(loader)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, Tensor) and value.numel() == 1


def _format(values: dict[str, Any]) -> str:
    parts = []
    for key, value in values.items():
        parts.append(f"{key}={value:.4g}" if isinstance(value, float) else f"{key}={value}")
    return " ".join(parts)
