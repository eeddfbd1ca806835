"""One training run from a validated config: run directory, seed, data, model, method,
optimiser, schedule, evaluator, trainer."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ugncl.build import build_method, build_model, build_optimizer_and_schedule, open_run_data
from ugncl.config import Config, save_config
from ugncl.engine.device import select_device, select_precision
from ugncl.engine.recorder import MetricsRecorder, create_run_dir, setup_logging
from ugncl.engine.seed import draw_seed, seed_everything
from ugncl.engine.trainer import Trainer
from ugncl.evaluation import Evaluator
from ugncl.experiment import record_noise

logger = logging.getLogger(__name__)


@dataclass
class TrainResult:
    run_dir: Path
    best_rsum: float
    best_epoch: int | None
    test: dict[str, Any] | None


def default_run_name(config_name: str) -> str:
    return f"{config_name}-{time.strftime('%Y%m%d-%H%M%S')}"


def train(config: Config, *, config_name: str, resume_dir: str | Path | None = None) -> TrainResult:
    """Train (or resume) the run described by ``config`` and evaluate its best checkpoint.

    A new run writes ``config.yaml`` with the seed actually used; ``resume_dir`` continues
    the run in that directory from ``checkpoints/last.pt``.
    """
    if config.train.seed is None:
        config = dataclasses.replace(
            config, train=dataclasses.replace(config.train, seed=draw_seed())
        )
    if resume_dir is not None:
        run_dir = create_run_dir(Path(resume_dir).parent, Path(resume_dir).name, resume=True)
    else:
        name = config.run.name or default_run_name(config_name)
        config = dataclasses.replace(config, run=dataclasses.replace(config.run, name=name))
        run_dir = create_run_dir(config.run.out_dir, name)
        save_config(config, run_dir / "config.yaml")
    setup_logging(run_dir / "train.log")
    if config.train.threads is not None:
        torch.set_num_threads(config.train.threads)
    seed = seed_everything(config.train.seed)
    logger.info("run %s, seed %d", run_dir, seed)

    data = open_run_data(config)
    model = build_model(config, data)
    device = select_device(config.train.device)
    precision = select_precision(config.train.amp, device)
    training_data = data.training_data()
    method = build_method(config, model, training_data.num_samples)
    steps_per_epoch = training_data.num_samples // config.train.batch_size
    optimizer, schedule = build_optimizer_and_schedule(config, model, method, steps_per_epoch)
    evaluator = Evaluator(
        val=data.dev,
        test=data.open_test,
        score=method.retrieval_score,
        batch_size=config.train.eval_batch_size,
        memory_budget_bytes=config.eval.memory_budget_mb * 2**20,
    )
    recorder = MetricsRecorder(run_dir)
    try:
        sha = record_noise(data.image_index, run_dir)
        described = data.describe()
        recorder.write("setup", seed=seed, device=str(device), noise_sha256=sha, **described)
        logger.info("training data: %s, noise sha256 %s", described, sha)
        trainer = Trainer(
            model=model,
            method=method,
            data=training_data,
            optimizer=optimizer,
            schedule=schedule,
            evaluator=evaluator,
            run_dir=run_dir,
            recorder=recorder,
            device=device,
            precision=precision,
            seed=seed,
            epochs=config.train.epochs,
            warmup_epochs=config.train.warmup_epochs,
            batch_size=config.train.batch_size,
            grad_clip=config.train.grad_clip,
            log_every=config.train.log_every,
            num_workers=config.data.num_workers,
            stop_after_epochs=config.train.stop_after_epochs,
            checkpoint_extra={"config": config.to_dict(), **data.checkpoint_extra()},
        )
        if resume_dir is not None:
            trainer.resume(run_dir / "checkpoints" / "last.pt")
        summary = trainer.fit()
        test = None
        finished = trainer.epoch >= trainer.total_epochs
        if finished and config.eval.test_after_training:
            test = trainer.test()
        return TrainResult(run_dir, summary["best_rsum"], summary["best_epoch"], test)
    finally:
        recorder.close()
