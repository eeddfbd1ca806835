"""The run's typed configuration: one dataclass per section, and :class:`Config`, the whole.

These are plain data. The model and method sections hold a selector (``model.backbone``,
``method.name``) and, once a config is built by :mod:`ugncl.run.config`, one field per
registered backbone or method: the run room derives those subclasses from the registries, so
this module imports no backbone and no method. Below the run room nothing sees a dict: the
builders unpack these objects into explicit constructor arguments.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from precomputed.split import NoiseSpec

__all__ = [
    "Config",
    "DataConfig",
    "EstimatorViewConfig",
    "EvalConfig",
    "ImageDataConfig",
    "MethodSection",
    "ModelSection",
    "PrefilterConfig",
    "RunConfig",
    "TrainConfig",
]


@dataclass
class ImageDataConfig:
    """``data.clip``: how a raw-image dataset of the CLIP track names and lays out its files.

    The dataset folder is ``<data.root>/<data.name>`` holding ``images/`` and ``annotations/``
    (``precomputed.image_layout``); splits, captions per image, caps and noise are the shared
    ``data.*`` keys, so one noise file drives both tracks.
    """

    # auto: from data.name (f30k, coco, cc120k, synthetic_clip); else f30k | coco | cc.
    naming: str = "auto"
    layout: str = "auto"  # auto | scan_split (NPC/SDD) | osa
    check_files: bool = True  # stat every image when a split opens (names what is missing)
    # Decode and resize each image once into a memory-mapped uint8 cache at the model's input
    # size (ugncl.backbones.clip.pixels); false: decode every time an image is read.
    pixel_cache: bool = True
    cache_dir: str | None = None  # null: <data.root>/<data.name>/cache/pixels


@dataclass
class EstimatorViewConfig:
    """``data.estimator``: the same training pairs in another backbone's input format, for a
    frozen estimator of that backbone (OSA's CLIP estimator weighting an SGRAF run).

    The view is the folder ``<root or data.root>/<name>`` read like a run of ``backbone``; it
    must hold the same training split (same images and captions, in order) and gives the
    same noise index under the run's ``data.*`` noise keys, else the run refuses to start.
    """

    backbone: str = "clip"  # whose input format (clip: raw images, data.clip.* naming/layout)
    name: str | None = None  # null: no second view; e.g. synthetic_clip
    root: str | None = None  # null: data.root


@dataclass
class DataConfig:
    """Where the split lives (precomputed features or, for the CLIP backbone, raw images under
    ``root/name``) and which noisy index to train on."""

    root: str = "data/scan"  # folder holding <name>/ (the SCAN/NCR release layout)
    name: str = "f30k_precomp"
    # SCAN vocabulary JSON; null -> <root>/<name>_vocab.json, then <root>/vocab/<name>_vocab.json.
    vocab: str | None = None
    captions_per_image: int = 5
    train_split: str = "train"
    dev_split: str = "dev"
    test_split: str = "test"
    # Dev subset (first N images and their captions) used for per-epoch validation.
    dev_images: int | None = 1000
    # Optional cap on training images (first N); null uses the whole split.
    train_images: int | None = None
    noise_ratio: float = 0.2
    noise_seed: int = 0
    # An existing noise index (NCR caption format, or UGNCL image permutation with
    # noise_format: image). When set, noise_ratio/noise_seed are not used to build one.
    noise_file: str | None = None
    noise_format: str = "caption"
    allow_nonfinite: bool = False
    num_workers: int = 0  # DataLoader workers (the CLIP track decodes images in them)
    # Longest caption in tokens (<start>/<end> included); longer ones are cut and counted
    # (the ``setup`` record's ``n_truncated_captions``). null: no cap.
    max_caption_tokens: int | None = 100
    clip: ImageDataConfig = field(default_factory=ImageDataConfig)
    estimator: EstimatorViewConfig = field(default_factory=EstimatorViewConfig)

    def noise_spec(self) -> NoiseSpec:
        """The split's noise keys as :class:`precomputed.split.NoiseSpec`."""
        return NoiseSpec(self.noise_file, self.noise_format, self.noise_ratio, self.noise_seed)


@dataclass
class TrainConfig:
    """Optimisation and run control. Warm-up epochs come before ``epochs`` main epochs."""

    epochs: int = 40
    warmup_epochs: int = 5
    batch_size: int = 128
    # samples: an epoch is one pass over the samples it visits (the method's epoch_samples
    # less the pre-filter's rejections; every pair unless one shrinks it), as the papers
    # train. full: an epoch whose samples are fewer than the training set's passes over them
    # again, in further seeded orders, until it takes as many batches as a pass over every
    # pair (N // batch_size), so that runs compare at equal optimiser steps (make compare);
    # an epoch over every pair is the same at both (ugncl.core.engine.sampling).
    epoch_length: str = "samples"
    lr: float = 2e-4
    # AdamW at 0.2: the CLIP fine-tuning setting of open_clip and the weight-based releases,
    # and for UGNCL a decision (its release uses Adam without decay): a noisy pair is
    # memorised through its own weights, and the decay lifted UGNCL's grid
    # (docs/methods/ugncl.md, "Weight decay"). The plain SGRAF baselines' configs set Adam, 0.
    optimizer: str = "adamw"  # adam | adamw
    weight_decay: float = 0.2  # > 0: biases, norms, embeddings, logit_scale are exempt
    # Weight decay of the image projection alone (SGRAF's per-view fc weights, the map that
    # reads each image's raw features), per unit of the training features' RMS: the decay
    # applied is this x RMS, so it means the same for features of any scale. 2.7 (decision):
    # memorisation of noisy pairs runs through this matrix (docs/methods/ugncl.md). null:
    # train.weight_decay. A backbone without such a projection (CLIP) ignores it, and says so.
    image_decay_per_rms: float | None = 2.7
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    adam_eps: float = 1e-8
    schedule: str = "step"  # step (per epoch) | cosine (per optimiser step)
    lr_update: int = 20  # step: lr x lr_decay every lr_update main epochs (warm-up runs at lr)
    lr_decay: float = 0.1
    warmup_steps: int = 0  # cosine: linear warm-up over this many optimiser steps
    grad_clip: float = 2.0
    amp: str = "auto"  # auto (bf16/fp16 on CUDA, off on CPU) | off | bf16 | fp16
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    seed: int | None = None  # null -> drawn once, logged and written to config.yaml
    log_every: int = 50
    eval_batch_size: int = 128
    # Stop this invocation after N epochs (preemptible jobs); --resume continues the run.
    stop_after_epochs: int | None = None
    threads: int | None = None  # torch CPU threads; null keeps torch's default
    # torch.compile the model the training step runs (off until a GPU measurement says it
    # pays; docs/gpu.md)
    compile: bool = False


@dataclass
class PrefilterConfig:
    """``prefilter``: a selection of the training pairs made before any training, that any
    method trains on for the first ``epochs`` epochs after the warm-up (the pairs it rejects
    leave the objective; UGNCL divides by it instead: its kept pairs hard-clean, the rest
    hard-noisy). ``ugncl.core.prefilter`` has the maths, docs/methods/ugncl.md the measurements.
    """

    # none | linear: a cross-fitted ridge fit of caption words to pooled region features,
    # whose per-pair p-values test "this caption's image is unrelated". Region features only:
    # on raw images (CLIP) the run trains as none, with a warning. UGNCL's package reading
    # sets linear; every paper and release reading none.
    kind: str = "none"
    # A pair is kept when its p-value is below alpha (about alpha of the noisy pairs pass,
    # whatever the noise ratio) and inside the Benjamini-Hochberg set at false-discovery
    # rate fdr (a weak fit keeps fewer pairs, or none).
    alpha: float = 0.02
    fdr: float = 0.1
    epochs: int = 6  # epochs after train.warmup_epochs that train on the selection


@dataclass
class EvalConfig:
    # evidence | evidence_mean_exp | sigmoid | raw (ugncl.framework.evaluation.EVAL_SCORES)
    eval_score: str = "evidence"
    # Working set of one all-pairs scoring block; null: the device's plan (CUDA: half its free
    # memory, sgraf.scoring.device_memory_budget; CPU: 512).
    memory_budget_mb: int | None = None
    # fp32 | bf16 (autocast) | tf32 (fp32 storage, TF32 matmuls on CUDA; fp32 elsewhere):
    # the arithmetic of encoding and scoring a split (docs/gpu.md)
    precision: str = "fp32"
    test_after_training: bool = True


@dataclass
class RunConfig:
    out_dir: str = "runs"
    name: str | None = None  # null -> <config stem>-<timestamp>


@dataclass
class ModelSection:
    """``model``: ``backbone`` selects the model. The run room's subclass adds one section per
    registered backbone (``ugncl.backbones.registry.BACKBONES``), e.g. ``model.sgraf``."""

    backbone: str = "sgraf"


@dataclass
class MethodSection:
    """``method``: ``name`` selects the method. The run room's subclass adds one section per
    registered method (``ugncl.methods.METHODS``), e.g. ``method.ugncl``."""

    name: str = "ugncl"


@dataclass
class Config:
    """A whole run's settings. Built from YAML by :func:`ugncl.run.config.load_config`, whose
    instances carry the registered model and method sections."""

    data: DataConfig = field(default_factory=DataConfig)
    model: ModelSection = field(default_factory=ModelSection)
    method: MethodSection = field(default_factory=MethodSection)
    train: TrainConfig = field(default_factory=TrainConfig)
    prefilter: PrefilterConfig = field(default_factory=PrefilterConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    run: RunConfig = field(default_factory=RunConfig)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
