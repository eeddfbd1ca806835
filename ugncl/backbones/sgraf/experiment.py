"""The precomputed track's data for a run: vocabulary, the noisy training split, dev and test.

``ugncl.run.training`` and ``tools/eval.py`` call these; nothing here parses a command line.
Models, methods and optimisers are built by :mod:`ugncl.run.build`.
"""

from __future__ import annotations

import hashlib
import logging
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from precomputed.captions import read_captions
from precomputed.dataset import PrecomputedSplit, open_split
from precomputed.errors import CheckpointError, DataNotFoundError, MissingDataError
from precomputed.layout import locate_split
from precomputed.split import training_noise
from precomputed.vocab import Vocabulary, load_vocab
from ugncl.backbones.sgraf.data import PrecomputedTrainingData
from ugncl.core.data import training_split_summary

if TYPE_CHECKING:
    from ugncl.core.config import DataConfig

logger = logging.getLogger(__name__)

DATA_HINT = (
    "Get the SCAN/NCR precomputed features (f30k_precomp, coco_precomp, cc152k_precomp; see "
    "README 'Real data') and set data.root, or run the synthetic demo: `make demo` "
    "(or `python tools/make_synthetic.py` then `python tools/train.py --cfg ugncl_synthetic.yaml`)."
)


def vocab_identity(vocab: Vocabulary) -> dict[str, Any]:
    """What identifies a vocabulary in a checkpoint: its size and the sha256 of its words in
    id order (a reordered word list changes every caption's ids)."""
    digest = hashlib.sha256("\n".join(vocab.idx2word).encode("utf-8")).hexdigest()
    return {"vocab_size": len(vocab), "vocab_sha256": digest}


def check_vocab(state: dict[str, Any], vocab: Vocabulary, vocab_path: Path, where: str) -> None:
    """Refuse a vocabulary other than the one the checkpoint ``where`` was trained with.

    Checkpoints written before the identity was stored are accepted on the size alone (the
    embedding table's row count)."""
    have = vocab_identity(vocab)
    size = state.get("vocab_size")
    if size is None:
        table = state.get("model", {}).get("txt_enc.embed.weight")
        size = None if table is None else int(table.shape[0])
    if size is not None and int(size) != have["vocab_size"]:
        raise CheckpointError(
            f"vocabulary {vocab_path} has {have['vocab_size']} words but {where} was trained "
            f"with {size}; pass the vocabulary it was trained with (--vocab / data.vocab)"
        )
    sha = state.get("vocab_sha256")
    if sha is not None and sha != have["vocab_sha256"]:
        raise CheckpointError(
            f"vocabulary {vocab_path} has the right size ({size}) but other words or another "
            f"word order than the one {where} was trained with (sha256 {sha[:12]}... vs "
            f"{have['vocab_sha256'][:12]}...); caption ids would mean other words. Pass the "
            "vocabulary it was trained with (--vocab / data.vocab)"
        )


@dataclass
class PrecomputedRunData:
    """:class:`ugncl.core.data.RunData` of the precomputed track (SGRAF's builder also reads
    ``vocab`` and ``train``)."""

    config: DataConfig
    train: PrecomputedSplit
    dev: PrecomputedSplit | None
    vocab: Vocabulary
    vocab_path: Path
    noise_source: str  # "built(ratio, seed)" | path of the loaded file

    @property
    def image_index(self) -> np.ndarray:
        return self.train.image_index

    def image_feature_rms(self, max_images: int = 256) -> float:
        """Root mean square of the training region features over the first ``max_images``
        images (float64 sums): the scale ``train.image_decay_per_rms`` is counted in."""
        features = self.train.features
        n_img, regions, dim = features.shape
        n = min(n_img, max_images)
        total = 0.0
        for start in range(0, n, 32):
            block = np.asarray(features.slice(start, min(n, start + 32)))
            total += float(np.square(block, dtype=np.float64).sum())
        return math.sqrt(total / (n * regions * dim))

    def training_data(self) -> PrecomputedTrainingData:
        """The training split behind the :class:`ugncl.core.data.TrainingData` interface."""
        return PrecomputedTrainingData(self.train)

    def open_test(self) -> PrecomputedSplit:
        return open_data_split(self.config, self.config.test_split, self.vocab)

    def describe(self) -> dict[str, Any]:
        return {
            **training_split_summary(self.train, self.noise_source),
            "vocab": str(self.vocab_path),
            "n_truncated_captions": {
                "train": self.train.num_truncated_captions,
                **({} if self.dev is None else {"dev": self.dev.num_truncated_captions}),
            },
        }

    def train_captions(self) -> list[str]:
        """The training split's caption texts in order (read again from its caption file:
        the split keeps token ids only), e.g. to check a second view holds the same pairs."""
        path = locate_split(self.config.root, self.config.name, self.config.train_split).captions
        return read_captions(path)[: self.train.num_captions]

    def checkpoint_extra(self) -> dict[str, Any]:
        return {"vocab_path": str(self.vocab_path), **vocab_identity(self.vocab)}

    def check_checkpoint(self, state: dict[str, Any], where: str) -> None:
        """Refuse a checkpoint trained with another vocabulary (resume)."""
        check_vocab(state, self.vocab, self.vocab_path, where)


def vocab_candidates(data: DataConfig) -> list[Path]:
    if data.vocab is not None:
        return [Path(data.vocab)]
    root = Path(data.root)
    return [root / f"{data.name}_vocab.json", root / "vocab" / f"{data.name}_vocab.json"]


def open_vocab(data: DataConfig) -> tuple[Vocabulary, Path]:
    candidates = vocab_candidates(data)
    for path in candidates:
        if path.is_file():
            return load_vocab(path), path
    tried = ", ".join(str(p) for p in candidates)
    raise MissingDataError(
        f"vocabulary for '{data.name}' not found (looked for: {tried}). Set data.vocab to the "
        f"SCAN vocab JSON (the SGRAF release ships vocab/{data.name}_vocab.json) or build one "
        f"with `python tools/build_vocab.py`. {DATA_HINT}"
    )


def open_data_split(
    data: DataConfig, split: str, vocab: Vocabulary, *, max_images: int | None = None
) -> PrecomputedSplit:
    """Open one split; a missing file becomes a :class:`MissingDataError` with the hint."""
    try:
        return open_split(
            data.root,
            data.name,
            split,
            vocab,
            captions_per_image=data.captions_per_image,
            max_images=max_images,
            allow_nonfinite=data.allow_nonfinite,
            max_caption_tokens=data.max_caption_tokens,
        )
    except DataNotFoundError as err:
        raise MissingDataError(f"{err}\n{DATA_HINT}") from err


def open_eval_split(data: DataConfig, split: str, model: Any = None) -> PrecomputedSplit:
    """One whole precomputed split for ``tools/eval.py`` (the vocabulary gives the ids; the
    model is not needed)."""
    vocab, _ = open_vocab(data)
    return open_data_split(data, split, vocab)


def open_training_data(data: DataConfig) -> PrecomputedRunData:
    """Vocabulary, the noisy training split and the dev subset."""
    vocab, vocab_path = open_vocab(data)
    train = open_data_split(data, data.train_split, vocab, max_images=data.train_images)
    noise, source = training_noise(data.noise_spec(), train.num_images, train.captions_per_image)
    train = train.with_noise(noise)
    dev = open_data_split(data, data.dev_split, vocab, max_images=data.dev_images)
    return PrecomputedRunData(data, train, dev, vocab, vocab_path, source)
