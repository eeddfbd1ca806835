"""One training run from a validated config: run directory, seed, data, model, method,
optimiser, schedule, evaluator, trainer.

Everything a run needs (config values, every split including test, the model against the
data) is opened and checked before the run directory exists, and the directory appears with
its ``config.yaml`` in one step, so a failed setup leaves nothing behind and any run
directory can be continued with ``--resume`` (from epoch 0 when it has no checkpoint yet).
A resume may change only :data:`SAFE_RESUME_KEYS`; it rewrites ``metrics.jsonl`` (and
TensorBoard) back to the checkpoint, so the records read as one run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from precomputed._io import atomic_open
from precomputed.errors import UserError
from precomputed.split import record_noise
from ugncl.backbones.registry import REGISTRY_SERVICES
from ugncl.core.config import Config
from ugncl.core.engine import distributed, runlock
from ugncl.core.engine.allocator import keep_freed_memory
from ugncl.core.engine.checkpoint import clean_partial_files, load_checkpoint
from ugncl.core.engine.device import cpu_kernels, select_device, select_precision
from ugncl.core.engine.recorder import (
    MetricsRecorder,
    check_new_run_dir,
    create_run_dir,
    read_metrics,
    setup_logging,
    truncate_metrics,
)
from ugncl.core.engine.seed import draw_seed, seed_everything
from ugncl.core.engine.trainer import Trainer
from ugncl.core.evaluation import Evaluator
from ugncl.run.build import (
    build_method,
    build_model,
    build_optimizer_and_schedule,
    build_prefilter,
    check_method_backbone,
    open_run_data,
)
from ugncl.run.cli import check_writable
from ugncl.run.config import ConfigError, flat_tree, load_config
from ugncl.run.config_upgrade import upgrade_tree

logger = logging.getLogger(__name__)

#: Keys a ``--resume`` may change: how long and how the run is executed, never what it
#: learns from (data, model, method, optimiser settings, seed).
SAFE_RESUME_KEYS: tuple[str, ...] = (
    "train.epochs",
    "train.stop_after_epochs",
    "train.log_every",
    "train.eval_batch_size",
    "train.threads",
    "train.device",
    "data.num_workers",
    "eval.memory_budget_mb",
    "eval.precision",
    "eval.test_after_training",
)


def mib_to_bytes(mib: int | None) -> int | None:
    """``eval.memory_budget_mb`` in bytes; ``None`` (the device's plan) stays ``None``."""
    return None if mib is None else mib * 2**20


#: Config keys naming files whose content (not just whose path) the run learns from: their
#: sha256 is part of the run's identity, so a resume notices a file replaced underneath it.
WEIGHT_FILE_KEYS: tuple[str, ...] = ("model.clip.pretrained", "method.osa.estimator")
# Records that describe the run, not an epoch: kept when a resume rewinds metrics.jsonl.
_RUN_RECORDS = ("setup", "method_setup", "resume")


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C during a run; the message is the command that continues it."""


class RunNotFoundError(UserError, FileNotFoundError):
    """``--resume`` names no run directory."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass
class TrainResult:
    run_dir: Path
    best_rsum: float
    best_epoch: int | None
    test: dict[str, Any] | None
    finished_before: bool = False  # a resume of a run that had already finished and tested
    epochs_done: int | None = None  # epochs completed when the call returned


def default_run_name(config_name: str) -> str:
    return f"{config_name}-{time.strftime('%Y%m%d-%H%M%S')}"


def load_resume_config(run_dir: str | Path, overrides: tuple[str, ...] | list[str] = ()) -> Config:
    """The saved config of ``run_dir`` with ``overrides`` applied (checked by :func:`train`)."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise RunNotFoundError(
            f"--resume {run_dir}: no such run directory; pass the folder of an earlier run "
            "(run.out_dir/run.name, e.g. runs/ugncl_flickr-20250101-120000) or start a new run "
            "with --cfg CONFIG"
        )
    path = run_dir / "config.yaml"
    if not path.is_file():
        raise RunNotFoundError(
            f"--resume {run_dir}: the folder has no config.yaml, so it is not a run directory "
            "of tools/train.py; start a new run with --cfg CONFIG"
        )
    return load_config(path, overrides)[0]


def resume_changes(run_dir: Path, config: Config, *, restart: bool = False) -> dict[str, list[Any]]:
    """``{key: [saved, new]}`` of every value ``config`` changes in the run's saved config.

    A run that has neither a checkpoint nor a finished method setup has learnt nothing yet
    (its setup failed, e.g. an unreadable ``method.osa.estimator`` or an empty memory bank, or
    it was killed before its first epoch ended): it starts over from epoch 0, so any key may
    change, and the fixed setting continues the same folder. So may a ``restart`` (the run is
    trained again from epoch 0).

    Raises:
        ConfigError: a change outside :data:`SAFE_RESUME_KEYS` (it would change the experiment).
    """
    saved = flat_tree(load_resume_config(run_dir).to_dict())
    new = flat_tree(config.to_dict())
    changes = {k: [saved.get(k), v] for k, v in new.items() if saved.get(k) != v}
    fresh = restart or (
        not (run_dir / "checkpoints" / "last.pt").is_file()
        and not any(r.get("event") == "method_setup" for r in _records(run_dir))
    )
    for key, (old, value) in changes.items():
        if key not in SAFE_RESUME_KEYS and not fresh:
            raise ConfigError(
                f"--resume cannot change {key} ({old!r} -> {value!r}): it would change the "
                f"experiment half-way. A resume may change only {', '.join(SAFE_RESUME_KEYS)}; "
                f"start a new run for other values (--cfg {run_dir / 'config.yaml'} --set "
                f"{key}={value} run.name=NEW)"
            )
    return changes


def check_not_finished(run_dir: Path) -> None:
    """Refuse a resume that would train a run with results again from epoch 0: the run has
    no ``checkpoints/last.pt`` (deleted to save disk) but a ``best.pt`` or a ``test`` record,
    which the new attempt would replace.

    Raises:
        ConfigError: naming what would be lost and the two ways on (``tools/eval.py`` on
            ``best.pt``, or ``--restart``).
    """
    checkpoints = run_dir / "checkpoints"
    if (checkpoints / "last.pt").is_file():
        return
    kept = []
    if (checkpoints / "best.pt").is_file():
        kept.append(str(checkpoints / "best.pt"))
    if any(r.get("event") == "test" for r in _records(run_dir)):
        kept.append(f"the test record in {run_dir / 'metrics.jsonl'}")
    if kept:
        raise ConfigError(
            f"--resume {run_dir}: the run has no checkpoints/last.pt to continue from but keeps "
            f"{' and '.join(kept)}; resuming would train it again from epoch 0 and replace "
            f"them. Evaluate the best model with python tools/eval.py "
            f"{checkpoints / 'best.pt'}, or pass --restart to train the run again from epoch 0"
        )


def _drop_checkpoints(run_dir: Path) -> None:
    """Delete the run's checkpoints before a ``--restart`` trains it again: a restart killed
    before its first epoch ends must not leave the old model beside the new config."""
    for path in (run_dir / "checkpoints").glob("*.pt"):
        path.unlink()


def file_sha256(path: str | Path) -> str:
    """sha256 of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def run_identity(config: Config, image_index: Any, data: Any) -> dict[str, str]:
    """What the run learns from, hashed: the config (less :data:`SAFE_RESUME_KEYS`), the
    training noise index in effect, the vocabulary and every weights file the config names
    (:data:`WEIGHT_FILE_KEYS`). Stored in every checkpoint; a resume recomputes and compares it.
    """
    from precomputed.noise import noise_sha256

    flat = flat_tree(config.to_dict())
    learned = {k: v for k, v in flat.items() if k not in SAFE_RESUME_KEYS}
    identity = {
        "config": hashlib.sha256(
            json.dumps(learned, sort_keys=True, default=str).encode("utf-8")
        ).hexdigest(),
        "noise_index": noise_sha256(image_index),
    }
    vocab = data.checkpoint_extra().get("vocab_sha256")
    if vocab is not None:
        identity["vocab"] = str(vocab)
    for key in WEIGHT_FILE_KEYS:
        value = flat.get(key)
        if isinstance(value, str) and Path(value).is_file():
            identity[key] = file_sha256(value)
    return identity


def check_identity(
    state: dict[str, Any], config: Config, identity: dict[str, str], where: Path
) -> None:
    """Refuse to resume from ``where`` when anything the run learns from changed since that
    checkpoint was written: a config value (``config.yaml`` edited by hand), the noise index,
    the vocabulary or a weights file; the message names it.

    Raises:
        ConfigError: the first difference found.
    """
    saved = state.get("config")
    if isinstance(saved, dict):
        old, new = flat_tree(upgrade_tree(saved, str(where))), flat_tree(config.to_dict())
        # Keys of both only: a key this version of the package added has its default.
        for key in sorted(set(old) & set(new)):
            if key in SAFE_RESUME_KEYS or old[key] == new[key]:
                continue
            raise ConfigError(
                f"--resume: {key} is {new[key]!r} but {where} was trained with {old[key]!r} "
                f"(was {where.parent.parent / 'config.yaml'} edited?). A resume may change "
                f"only {', '.join(SAFE_RESUME_KEYS)}; put {key} back to {old[key]!r}, or "
                "start a new run"
            )
    names = {
        "noise_index": "the training noise index (data.noise_file / data.noise_seed)",
        "vocab": "the vocabulary file (data.vocab)",
    }
    for item, digest in (state.get("identity") or {}).items():
        if item == "config" or identity.get(item) == digest:
            continue
        what = names.get(item, f"the file {item} names")
        now = identity.get(item)
        raise ConfigError(
            f"--resume: {what} changed since {where} was written (sha256 {digest[:12]} -> "
            f"{now[:12] if now else 'missing'}); the run would continue on other data or "
            "weights. Restore the original file, or start a new run"
        )


def check_run_name(name: str) -> None:
    """``run.name`` is one folder name inside ``run.out_dir`` (no ``/``, no ``..``)."""
    if not name or name in (".", "..") or Path(name).name != name or "\\" in name:
        raise ConfigError(
            f"run.name={name!r} is not a plain folder name: the run folder must lie inside "
            "run.out_dir; choose the folder with run.out_dir and name it with run.name, e.g. "
            "--set run.out_dir=runs/mine run.name=first"
        )


def preflight(model: torch.nn.Module, data: Any) -> None:
    """Score one pair of training samples with the model before the run folder appears:
    an input the model cannot take (``model.clip.image_size=7``, an image that does not
    decode, a backbone built for other data) fails here, not after setup. Runs in eval mode
    without gradients on forked RNG state, so the run's weights, batch-norm statistics and
    random draws are unchanged."""
    k = min(2, data.num_samples)
    if k == 0:
        return
    batch = data.collate([data.dataset[i] for i in range(k)])
    was_training = model.training
    model.eval()  # batch norm must not update its running statistics from this probe
    try:
        with torch.random.fork_rng(devices=[]), torch.no_grad():
            model(batch.images, batch.captions, batch.lengths)
    except (RuntimeError, ValueError) as err:
        first = (str(err).splitlines() or [""])[0][:300]
        raise ConfigError(
            f"the {type(model).__name__} model cannot score a batch of the training data "
            f"(images {tuple(batch.images.shape)}, captions {tuple(batch.captions.shape)}): "
            f"{type(err).__name__}: {first}. Check the model.* settings against the data"
        ) from err
    finally:
        model.train(was_training)


def check_weight_files(config: Config) -> None:
    """Every weights file the config names (:data:`WEIGHT_FILE_KEYS`) loads, before the run
    folder appears (the backbone reads ``model.clip.pretrained`` when it builds the model;
    ``method.osa.estimator`` would otherwise be read only by the method's setup)."""
    from ugncl.run.build import model_from_file

    path = flat_tree(config.to_dict()).get("method.osa.estimator")
    if config.method.name == "osa" and isinstance(path, str):
        try:
            model_from_file(path)
        except UserError as err:
            raise ConfigError(f"method.osa.estimator: {err}") from err


def check_epochs(config: Config) -> None:
    """A run trains at least one epoch (``train.stop_after_epochs=0`` is the way to set a run
    up without training it)."""
    if config.train.warmup_epochs + config.train.epochs < 1:
        raise ConfigError(
            f"train.epochs={config.train.epochs} with train.warmup_epochs="
            f"{config.train.warmup_epochs} trains no epoch, so the run would have no model to "
            "validate or test; give train.epochs >= 1 (train.stop_after_epochs=0 sets a run "
            "up and records its setup without training it)"
        )


@dataclass
class OpenedRun:
    """Everything a run trains with, opened and checked before its folder exists."""

    seed: int
    data: Any
    model: torch.nn.Module
    test_split: Any
    training_data: Any
    method: Any
    device: torch.device
    precision: Any


def open_and_check(config: Config, dist_env: distributed.DistEnv, device_name: str) -> OpenedRun:
    """Seed, open the data (every split the run reads), build the model and the method and
    score one batch (:func:`preflight`): every check a run makes before its folder appears.
    Sets torch's thread count (``train.threads``) and the global RNG state.

    Raises:
        UserError: the first problem found, naming the key or file to fix.
    """
    distributed.check_global_batch(config.train.batch_size, dist_env.world)
    if config.train.threads is not None:
        torch.set_num_threads(config.train.threads)
    seed = seed_everything(config.train.seed)  # before the model draws its initial weights
    data = open_run_data(config)
    try:
        model = build_model(config, data)  # a raw-image source takes its transforms from it
    except RuntimeError as err:  # the allocator's refusal of sizes no memory holds
        if "allocate" not in str(err) and "overflow" not in str(err):
            raise
        raise ConfigError(
            f"the {config.model.backbone} model does not fit in memory "
            f"({(str(err).splitlines() or [''])[0][:200]}); lower the model.{config.model.backbone}"
            ".* sizes"
        ) from err
    check_method_backbone(config, model)  # a method that cannot be meaningful here: refused
    test_split = data.open_test() if config.eval.test_after_training else None
    training_data = data.training_data()
    method = build_method(config)
    if dist_env.enabled and method.negatives != "gathered":
        # The same initial weights everywhere; a per-rank method's micro-batches draw their own
        # dropout masks. A gathered method's ranks keep one process's generator: each draws the
        # global batch's masks and keeps its rows (sgraf.shard).
        torch.manual_seed(seed * 1_000_003 + dist_env.rank + 1)
    method.bind_data(config, data, REGISTRY_SERVICES)  # what else it reads, checked now
    if training_data.num_samples < config.train.batch_size:
        raise ConfigError(
            f"train.batch_size={config.train.batch_size} is larger than the training split "
            f"({training_data.num_samples} samples), so an epoch has no batch; lower "
            "train.batch_size or use more training data (data.train_images)"
        )
    device = select_device(device_name)
    precision = select_precision(config.train.amp, device)
    preflight(model, training_data)
    check_weight_files(config)
    return OpenedRun(seed, data, model, test_split, training_data, method, device, precision)


def check_run(config: Config) -> OpenedRun:
    """The checks a new run of ``config`` makes before its folder exists, in this process
    (a world of one), without creating anything: what ``tools/fuzz_config.py`` calls."""
    check_epochs(config)
    if config.run.name is not None:
        check_run_name(config.run.name)
    return open_and_check(config, distributed.DistEnv(), config.train.device)


def train(
    config: Config,
    *,
    config_name: str,
    resume_dir: str | Path | None = None,
    restart: bool = False,
) -> TrainResult:
    """Train (or resume) the run described by ``config`` and evaluate its best checkpoint.

    A new run writes ``config.yaml`` with the seed actually used; ``resume_dir`` continues
    the run in that directory from ``checkpoints/last.pt`` (from epoch 0 without one). A run
    without ``last.pt`` that keeps a ``best.pt`` or a ``test`` record is refused
    (:func:`check_not_finished`) unless ``restart``: then it is trained again from epoch 0,
    its checkpoints and epoch records replaced. The process holds the run folder's lock
    (:mod:`ugncl.core.engine.runlock`) for the whole run.

    Started by ``torchrun`` (``WORLD_SIZE`` > 1), every process runs this function: rank 0
    alone writes the run directory, the checkpoints, ``metrics.jsonl`` and TensorBoard
    (``ugncl.core.engine.distributed`` says what is sharded).
    """
    dist_env, device_name = distributed.init_from_env(config.train.device)
    held: list[Path] = []  # the run folder whose lock this process took
    try:
        return _train(config, config_name, resume_dir, dist_env, device_name, restart, held)
    except Exception as err:
        if dist_env.enabled and distributed.is_collective_failure(err):
            where = resume_dir or Path(config.run.out_dir) / (config.run.name or config_name)
            raise distributed.rank_lost(err, where) from err
        raise
    finally:
        for folder in held:
            runlock.release(folder)
        if dist_env.enabled:
            distributed.shutdown()


def _train(
    config: Config,
    config_name: str,
    resume_dir: str | Path | None,
    dist_env: distributed.DistEnv,
    device_name: str,
    restart: bool,
    held: list[Path],
) -> TrainResult:
    changes: dict[str, list[Any]] = {}
    check_epochs(config)
    if resume_dir is not None:
        run_dir = Path(resume_dir)
        changes = resume_changes(run_dir, config, restart=restart)

        def hold() -> None:
            runlock.acquire(run_dir)
            held.append(run_dir)

        distributed.on_main(hold)
        if not restart:
            check_not_finished(run_dir)
    else:
        if config.train.seed is None:  # rank 0's draw, for every rank
            seed = distributed.broadcast_object(draw_seed())
            config = dataclasses.replace(config, train=dataclasses.replace(config.train, seed=seed))
        name = distributed.broadcast_object(config.run.name or default_run_name(config_name))
        config = dataclasses.replace(config, run=dataclasses.replace(config.run, name=name))
        check_run_name(name)
        run_dir = Path(config.run.out_dir) / name
        distributed.on_main(lambda: check_new_run_dir(run_dir))
        distributed.on_main(lambda: check_writable(run_dir.parent / f".{name}.probe", "run folder"))
    keep_freed_memory()  # no page faults on the largest tensors of each step (allocator.py)
    opened = open_and_check(config, dist_env, device_name)
    seed, data, model, method = opened.seed, opened.data, opened.model, opened.method
    test_split, training_data = opened.test_split, opened.training_data
    device, precision = opened.device, opened.precision
    wanted = config.data.train_images
    have = training_data.num_samples // max(1, config.data.captions_per_image)
    last = run_dir / "checkpoints" / "last.pt"
    identity = run_identity(config, training_data.image_index, data)
    state = None
    if resume_dir is not None and last.is_file() and not restart:
        state = load_checkpoint(last, map_location="cpu")
        data.check_checkpoint(state, str(last))
        check_identity(state, config, identity, last)
        done = int(state["epoch"])
        if config.train.warmup_epochs + config.train.epochs < done:
            raise ConfigError(
                f"--resume: train.epochs={config.train.epochs} ends the run before the {done} "
                f"epoch(s) {last} has completed; give train.epochs >= "
                f"{done - config.train.warmup_epochs} (evaluate the checkpoint with "
                "tools/eval.py)"
            )

    if resume_dir is None:

        def populate(folder: Path) -> None:
            _write_config(config, folder)
            runlock.write_lock(folder)  # the folder appears held by this process

        run_dir = distributed.on_main(
            lambda: create_run_dir(config.run.out_dir, config.run.name, populate=populate)
        )
        if dist_env.is_main:
            held.append(run_dir)
    if dist_env.is_main:
        setup_logging(run_dir / "train.log")
    if (
        dist_env.is_main and wanted is not None and have < wanted
    ):  # logged to train.log, not a second stderr line
        logger.warning(
            "data.train_images=%d but the training split has %d images: training on %d",
            wanted, have, have,
        )  # fmt: skip
    logger.info("run %s, seed %d", run_dir, seed)
    if config.train.amp in ("bf16", "fp16") and precision.autocast_dtype is None:
        logger.warning("train.amp=%s needs CUDA; on %s the run is fp32", config.train.amp, device)

    epoch, step = (0, 0) if state is None else (int(state["epoch"]), int(state["global_step"]))
    total = config.train.warmup_epochs + config.train.epochs
    if resume_dir is not None:
        distributed.on_main(lambda: clean_partial_files(run_dir / "checkpoints"))
        if restart:
            distributed.on_main(lambda: _drop_checkpoints(run_dir))
        tested = distributed.on_main(lambda: any(r["event"] == "test" for r in _records(run_dir)))
        if state is not None and epoch >= total and (tested or not config.eval.test_after_training):
            logger.info("run %s is finished (epoch %d of %d) and tested; nothing to do "
                        "(raise train.epochs to train on)", run_dir, epoch, total)  # fmt: skip
            return TrainResult(
                run_dir, float(state["best_rsum"]), state["best_epoch"], None, finished_before=True
            )
        keeper = _keeper(state is not None, epoch, epoch >= total)
        dropped = distributed.on_main(lambda: truncate_metrics(run_dir, keeper))
        if dropped:
            logger.info("dropped %d record(s) of the interrupted attempt after epoch %d",
                        dropped, epoch)  # fmt: skip
        if changes:
            distributed.on_main(lambda: _write_config(config, run_dir))
    # TensorBoard drops the killed attempt's steps (all of them when no checkpoint survived).
    purge = None if resume_dir is None else (0 if state is None else step + 1)
    recorder = MetricsRecorder(run_dir, purge_step=purge) if dist_env.is_main else NullRecorder()
    try:
        if resume_dir is not None:
            recorder.write("resume", epoch=epoch, step=step, changes=changes,
                           checkpoint=str(last) if state is not None else None)  # fmt: skip
            logger.info("resuming %s at epoch %d%s", run_dir, epoch,
                        f" with {changes}" if changes else "")  # fmt: skip
        if state is None and dist_env.is_main:
            _write_setup(recorder, run_dir, data, test_split, seed, device, precision, config)
        method.prepare(model, training_data.num_samples)
        steps_per_epoch = training_data.num_samples // config.train.batch_size
        optimizer, schedule = build_optimizer_and_schedule(
            config, model, method, steps_per_epoch, data=data
        )
        logger.info(
            "optimizer %s: weight decay per group %s", config.train.optimizer,
            ", ".join(f"{g['weight_decay']:.4g} ({len(g['params'])} tensors)"
                      for g in optimizer.param_groups),
        )  # fmt: skip
        evaluator = Evaluator(
            val=data.dev,
            test=test_split,
            score=method.retrieval_score,
            unit_scores=method.reads_unit_scores,
            models=method.evaluation_models,
            batch_size=config.train.eval_batch_size,
            memory_budget_bytes=mib_to_bytes(config.eval.memory_budget_mb),
            precision=config.eval.precision,
        )
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
            compile=config.train.compile,
            epoch_length=config.train.epoch_length,
            checkpoint_extra={
                "config": config.to_dict(),
                "identity": identity,
                **data.checkpoint_extra(),
            },
            dist=dist_env,
            prefilter=build_prefilter(config),
        )
        if dist_env.enabled:  # how this attempt ran (a resume may use another world size)
            recorder.write(
                "distributed", step=step, world=dist_env.world, backend=dist_env.backend,
                batch_per_rank=trainer.local_batch, negatives=getattr(method, "negatives", None),
            )  # fmt: skip
        if state is not None:
            trainer.resume(last, state=state)
        try:
            summary = trainer.fit()
        except KeyboardInterrupt as err:
            raise RunInterrupted(
                f"python tools/train.py --resume {run_dir} continues the run from its last "
                f"saved epoch ({trainer.saved_epoch} of {trainer.total_epochs} done)"
            ) from err
        test = None
        finished = trainer.epoch >= trainer.total_epochs
        if finished and config.eval.test_after_training:
            test = trainer.test()
        return TrainResult(
            run_dir, summary["best_rsum"], summary["best_epoch"], test,
            epochs_done=int(summary["epoch"]),
        )  # fmt: skip
    finally:
        recorder.close()


class NullRecorder:
    """The recorder of ranks other than 0 in a multi-process run: records are rank 0's."""

    def write(self, event: str, **fields: Any) -> None:
        pass

    def close(self) -> None:
        pass


def train_log_only(config: Config, *, config_name: str) -> tuple[TrainResult, float]:
    """:func:`train` with its console output dropped (the run's ``train.log`` keeps it all),
    and its wall seconds: for worker processes that train beside others
    (``tools/demo.py --jobs``)."""
    started = time.perf_counter()
    with open(os.devnull, "w") as sink, contextlib.redirect_stdout(sink):
        result = train(config, config_name=config_name)
    return result, time.perf_counter() - started


def _write_config(config: Config, run_dir: Path) -> None:
    import yaml

    with atomic_open(run_dir / "config.yaml", "w", encoding="utf-8") as handle:
        handle.write(yaml.safe_dump(config.to_dict(), sort_keys=False))


def _records(run_dir: Path) -> list[dict[str, Any]]:
    try:
        return read_metrics(run_dir)
    except (FileNotFoundError, ValueError):
        return []


def _keeper(has_checkpoint: bool, epoch: int, finished: bool):
    """Which records of ``metrics.jsonl`` a resume from ``epoch`` completed epochs keeps."""

    def keep(record: dict[str, Any]) -> bool:
        event = record.get("event")
        if not has_checkpoint:  # the run starts over: only earlier resume notes stay
            return event == "resume"
        if event in _RUN_RECORDS or record.get("epoch") is None:
            return True
        if event == "test":  # a test of the finished run stays; more training retests
            return finished
        return int(record["epoch"]) < epoch

    return keep


def _write_setup(
    recorder: MetricsRecorder,
    run_dir: Path,
    data: Any,
    test_split: Any,
    seed: int,
    device: torch.device,
    precision: Any,
    config: Config,
) -> None:
    sha = record_noise(data.image_index, run_dir)
    described = data.describe()
    truncated = described.get("n_truncated_captions")
    if isinstance(truncated, dict) and test_split is not None:
        n = getattr(test_split, "num_truncated_captions", None)
        if n is not None:
            truncated["test"] = int(n)
    dtype = precision.autocast_dtype
    amp = "fp32" if dtype is None else str(dtype).replace("torch.", "")
    recorder.write(
        "setup", seed=seed, device=str(device), amp=amp, amp_requested=config.train.amp,
        threads=torch.get_num_threads(), cpu_kernels=cpu_kernels(), noise_sha256=sha,
        **described,
    )  # fmt: skip
    logger.info("training data: %s, noise sha256 %s", described, sha)
