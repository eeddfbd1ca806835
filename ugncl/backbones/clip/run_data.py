"""The CLIP track's data for a run: raw-image splits on the shared split definition.

The same ``data.*`` keys as the precomputed track choose the splits, the caps
(``train_images``, ``dev_images``) and the noise (``noise_file``, or ``noise_ratio`` +
``noise_seed``; :func:`precomputed.split.training_noise`), so one noise file drives
an SGRAF run
and a CLIP run and both ``setup`` records carry the same sha256. What differs is the folder:
``<data.root>/<data.name>/{images,annotations}`` in a CLIP-family layout
(:mod:`precomputed.image_layout`, keys ``data.clip.*``).

Pixels and token ids follow the model (its open_clip preprocessing and tokenizer), so the run
data is bound to the model once it is built (:meth:`CLIPRunData.use_model`). Each split's images
are decoded and resized once into a uint8 cache (``data.clip.pixel_cache``,
:mod:`ugncl.backbones.clip.pixels`, built in ``data.num_workers`` workers on first use); the
model normalises the uint8 pixels on its device.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader, Subset

from precomputed.catalog import dataset_entry, image_datasets
from precomputed.errors import DataNotFoundError, MissingDataError
from precomputed.image_layout import ImageSplit, open_image_split
from precomputed.split import training_noise
from ugncl.core.data import training_split_summary
from ugncl.core.engine.distributed import on_main
from ugncl.core.errors import ConfigError

from .data import (
    CaptionDataset,
    ImageDataset,
    ImageTrainingData,
    PixelSource,
    Tokenizer,
    Transform,
    as_batch,
    caption_lengths,
)
from .pixels import CachedPixels, DecodedPixels, PixelTransform, open_pixel_cache

if TYPE_CHECKING:
    from ugncl.core.config import DataConfig

__all__ = [
    "CLIPRunData",
    "ImageEvalData",
    "dataset_dir",
    "image_naming",
    "open_clip_split",
    "open_clip_view",
    "pixel_source",
]

CLIP_DATA_HINT = (
    "Put the images and annotations of the dataset under <data.root>/<data.name>/ (README 'CLIP "
    "track': the NPC/SDD annotations/scan_split/ or the OSA annotations/ layout), or for the "
    "synthetic world run `python tools/make_synthetic.py` (it renders "
    "data/synthetic/synthetic_clip/)."
)
_TOKENIZE_CHUNK = 4096


def dataset_dir(data: DataConfig) -> Path:
    """``<data.root>/<data.name>``: the folder holding ``images/`` and ``annotations/``."""
    return Path(data.root) / data.name


def image_naming(data: DataConfig) -> str:
    """``data.clip.naming``, or with ``auto`` the catalog's naming of ``data.name``
    (:mod:`precomputed.catalog`)."""
    if data.clip.naming != "auto":
        return data.clip.naming
    entry = dataset_entry(data.name)
    if entry is not None and entry.image_naming is not None:
        return entry.image_naming
    raise ConfigError(
        f"data.clip.naming is auto but data.name {data.name!r} is not a known image dataset "
        f"({', '.join(image_datasets())}); set data.clip.naming to f30k (image_name.txt), coco "
        "(COCO_2014_<12-digit id>.jpg) or cc (<id>.jpg)"
    )


def open_clip_split(data: DataConfig, split: str, *, max_images: int | None = None) -> ImageSplit:
    """Open one raw-image split (clean pairs); missing files become a :class:`MissingDataError`
    naming what was looked for and how to get it."""
    try:
        return open_image_split(
            dataset_dir(data),
            split,
            naming=image_naming(data),
            captions_per_image=data.captions_per_image,
            layout=data.clip.layout,
            max_images=max_images,
            check_files=data.clip.check_files,
        )
    except DataNotFoundError as err:
        raise MissingDataError(f"{err}\n{CLIP_DATA_HINT}") from err


def pixel_source(data: DataConfig, split: ImageSplit, pixels: PixelTransform) -> PixelSource:
    """uint8 pixels of ``split``'s images under ``pixels``' geometry: the cache
    (``data.clip.pixel_cache``, built here on first use) or a decode per read.

    Under several processes rank 0 builds the cache and the others map the file it wrote
    (the folder is one every rank sees, as the run directory is).
    """
    paths = [split.image_path(i) for i in range(split.num_images)]
    if not data.clip.pixel_cache:
        return DecodedPixels(paths, pixels)
    folder = data.clip.cache_dir or dataset_dir(data) / "cache" / "pixels"
    built = on_main(
        lambda: open_pixel_cache(paths, pixels, folder, num_workers=data.num_workers).path
    )
    return CachedPixels(built)


class ImageEvalData:
    """:class:`ugncl.core.data.EvalData` over a raw-image split.

    Captions are tokenised once (on first use) and kept as one ``(n_cap, ctx)`` tensor. Images
    are decoded in ``num_workers`` DataLoader workers: consecutive ``images(a, b)`` calls of
    one size (what :func:`ugncl.core.evaluation.encode_split` makes) read one stream of
    batches; any
    other call starts a new stream at ``a``.
    """

    def __init__(
        self,
        split: ImageSplit,
        transform: Transform,
        tokenizer: Tokenizer,
        *,
        name: str,
        num_workers: int = 0,
        pixels: PixelSource | None = None,
    ) -> None:
        self.source = split
        self.name = str(name)
        self.split = str(split.split)
        self.num_workers = int(num_workers)
        self._images = ImageDataset(split, transform, pixels)
        self._captions = CaptionDataset(split, tokenizer)
        self._tokens: Tensor | None = None
        self._stream: Any = None
        self._next = -1
        self._batch = 0

    @property
    def num_images(self) -> int:
        return self.source.num_images

    @property
    def num_captions(self) -> int:
        return self.source.num_captions

    @property
    def caption_to_image(self) -> np.ndarray:
        return np.asarray(self.source.true_image, dtype=np.int64)

    @property
    def tokens(self) -> Tensor:
        """(n_cap, ctx) int64 token ids of every caption."""
        if self._tokens is None:
            tokenizer = self._captions.tokenizer
            texts = self.source.captions
            chunks = [
                torch.as_tensor(tokenizer(texts[a : a + _TOKENIZE_CHUNK])).to(torch.int64)
                for a in range(0, len(texts), _TOKENIZE_CHUNK)
            ]
            self._tokens = torch.cat(chunks) if chunks else torch.zeros((0, 0), dtype=torch.int64)
        return self._tokens

    @property
    def lengths(self) -> np.ndarray:
        return caption_lengths(self.tokens).numpy()

    def captions(self, start: int, stop: int) -> tuple[Tensor, Tensor]:
        ids = self.tokens[start:stop]
        return ids, caption_lengths(ids)

    def images(self, start: int, stop: int) -> Tensor:
        """(stop - start, 3, H, W) pixels of images ``[start, stop)``: uint8 from a pixel
        source, else float."""
        if self.num_workers == 0:
            return as_batch(torch.stack([self._images[i] for i in range(start, stop)]))
        size = stop - start
        tail = stop == self.num_images and size <= self._batch
        if self._stream is None or start != self._next or (size != self._batch and not tail):
            indices = range(start, self.num_images)
            loader = DataLoader(
                Subset(self._images, indices), batch_size=size, num_workers=self.num_workers
            )
            self._stream, self._batch = iter(loader), size
        batch = next(self._stream)
        if batch.shape[0] != size:  # cannot happen for in-order calls; never return wrong rows
            raise RuntimeError(f"image stream returned {batch.shape[0]} images, wanted {size}")
        self._next = stop
        if stop == self.num_images:
            self._stream = None
        return as_batch(batch)


@dataclass
class CLIPRunData:
    """:class:`ugncl.core.data.RunData` of the CLIP track.

    Attributes:
        config: the ``data`` section.
        train: the (noisy) training split.
        dev_split: the validation subset (first ``dev_images`` images), or None.
        noise_source: where the training index came from (file, built, clean).
        transform, tokenizer: the model's, set by :meth:`use_model`.
    """

    config: DataConfig
    train: ImageSplit
    dev_split: ImageSplit | None
    noise_source: str
    transform: Transform | None = None
    tokenizer: Tokenizer | None = None
    pixels: PixelTransform | None = None
    _dev: ImageEvalData | None = field(default=None, repr=False)

    def use_model(self, model: Any) -> None:
        """Take pixels and token ids from ``model`` (a CLIPSimilarity): open_clip's eval
        preprocessing for training too, as the references (no training augmentation)."""
        self.transform = model.image_transform(train=False)
        self.tokenizer = model.tokenizer()
        self.pixels = model.pixel_transform()
        self._dev = None

    def _bound(self) -> tuple[Transform, Tokenizer, PixelTransform]:
        if self.transform is None or self.tokenizer is None or self.pixels is None:
            raise RuntimeError("CLIPRunData.use_model(model) must be called before use")
        return self.transform, self.tokenizer, self.pixels

    @property
    def image_index(self) -> np.ndarray:
        return self.train.image_index

    @property
    def dev(self) -> ImageEvalData | None:
        if self.dev_split is None:
            return None
        if self._dev is None:
            self._dev = self.eval_data(self.dev_split)
        return self._dev

    def eval_data(self, split: ImageSplit) -> ImageEvalData:
        transform, tokenizer, pixels = self._bound()
        return ImageEvalData(
            split, transform, tokenizer, name=self.config.name,
            num_workers=self.config.num_workers,
            pixels=pixel_source(self.config, split, pixels),
        )  # fmt: skip

    def training_data(self) -> ImageTrainingData:
        transform, tokenizer, pixels = self._bound()
        return ImageTrainingData(
            self.train, transform, tokenizer, pixel_source(self.config, self.train, pixels)
        )

    def open_test(self) -> ImageEvalData:
        return self.eval_data(open_clip_split(self.config, self.config.test_split))

    def describe(self) -> dict[str, Any]:
        return {
            **training_split_summary(self.train, self.noise_source),
            "images": str(self.train.image_dir),
            "naming": self.train.naming,
        }

    def train_captions(self) -> list[str]:
        """The training split's caption texts in order."""
        return list(self.train.captions)

    def checkpoint_extra(self) -> dict[str, Any]:
        return {}

    def check_checkpoint(self, state: dict[str, Any], where: str) -> None:
        """Pixels and BPE tokens carry no per-run state a checkpoint could disagree with."""


def open_clip_view(data: DataConfig, run: Any) -> Callable[[Any], ImageTrainingData]:
    """The run's training pairs as raw images (``data.estimator``, backbone ``clip``).

    Opens the training split of ``<data.estimator.root or data.root>/<data.estimator.name>``
    with the run's ``data.*`` split, cap and ``data.clip.*`` keys, and checks that it is the
    run's split: the same caption texts in the same order, the same number of images and the
    same noise index under the run's noise keys; it is then paired by the run's own index.

    Args:
        data: the run's ``data`` section.
        run: the run's data (``image_index``, ``train_captions()``, ``train.num_images``).

    Returns:
        ``model -> ImageTrainingData`` in that model's pixels and token ids (a CLIP estimator).

    Raises:
        ConfigError: the view holds other images, captions or noise than the run.
    """
    view = data.estimator
    cfg = dataclasses.replace(data, root=view.root or data.root, name=view.name)
    where = f"data.estimator ({dataset_dir(cfg)})"
    split = open_clip_split(cfg, cfg.train_split, max_images=cfg.train_images)
    run_index = np.asarray(run.image_index, dtype=np.int64)
    captions = run.train_captions()
    if split.num_images != run.train.num_images or split.num_captions != len(captions):
        raise ConfigError(
            f"{where}: its {cfg.train_split} split has {split.num_images} images and "
            f"{split.num_captions} captions, the run's has {run.train.num_images} and "
            f"{len(captions)}; point data.estimator.name at the same split rendered for the "
            "estimator (for the synthetic world: synthetic_clip)"
        )
    differ = next((k for k, (a, b) in enumerate(zip(split.captions, captions)) if a != b), None)
    if differ is not None:
        raise ConfigError(
            f"{where}: caption {differ} of the {cfg.train_split} split is "
            f"{split.captions[differ]!r}, the run's is {captions[differ]!r}; the estimator "
            "view must hold the same captions in the same order"
        )
    noise, _ = training_noise(cfg.noise_spec(), split.num_images, split.captions_per_image)
    if not np.array_equal(noise, run_index):
        raise ConfigError(
            f"{where}: the run's data.noise_* keys give this view another caption->image "
            "index than the run's; use the same noise file (data.noise_file) for both"
        )
    split = dataclasses.replace(split, image_index=run_index)

    def bind(model: Any) -> ImageTrainingData:
        return ImageTrainingData(
            split, model.image_transform(train=False), model.tokenizer(),
            pixel_source(cfg, split, model.pixel_transform()),
        )  # fmt: skip

    return bind
