"""One opened split (features + tokenised captions + caption->image map) and its pair dataset."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .captions import check_caption_count, read_captions
from .errors import DataFormatError, InvalidSettingError
from .features import FeatureStore, open_features
from .layout import locate_split
from .noise import clean_image_index
from .tokens import DEFAULT_MAX_CAPTION_TOKENS, TokenizedCaptions
from .vocab import Vocabulary

__all__ = ["PairDataset", "PrecomputedSplit", "open_split"]

logger = logging.getLogger(__name__)


@dataclass
class PrecomputedSplit:
    """One opened split; holds arrays only, no per-item Python objects.

    Attributes:
        name: dataset folder name, e.g. ``f30k_precomp``.
        split: ``train``/``dev``/``test``/``testall``.
        features: (N_img, R, D) region features.
        tokens: N_cap tokenised captions.
        captions_per_image: captions per image.
        true_image: (N_cap,) int64 clean caption -> image map (``k // cpi``).
        image_index: (N_cap,) int64 caption -> image used for training (noisy or clean).
    """

    name: str
    split: str
    features: FeatureStore
    tokens: TokenizedCaptions
    captions_per_image: int
    true_image: np.ndarray
    image_index: np.ndarray

    def __post_init__(self) -> None:
        self._clean = self.image_index == self.true_image  # computed once (UGNCL did O(N)/item)

    @property
    def clean(self) -> np.ndarray:
        """(N_cap,) bool: caption k is paired with its own image."""
        return self._clean

    @property
    def num_images(self) -> int:
        return int(len(self.true_image) // self.captions_per_image)

    @property
    def num_captions(self) -> int:
        return len(self.tokens)

    @property
    def num_truncated_captions(self) -> int:
        """Captions cut to ``max_caption_tokens`` when the split was opened."""
        return self.tokens.num_truncated

    def with_noise(self, image_index: np.ndarray) -> PrecomputedSplit:
        """This split paired for training by ``image_index``: (N_cap,) caption -> image of
        this (subset) split, e.g. from :func:`~precomputed.noise.load_noise_index`; checked."""
        subset = isinstance(self.features, _SubsetStore)
        n_file = len(self.features._base) if subset else len(self.features)
        index = _check_noise(
            image_index, self.num_images, len(self.true_image), n_file,
            self.num_images if subset else None,
        )  # fmt: skip
        return dataclasses.replace(self, image_index=index)


def open_split(
    root: str | Path,
    name: str,
    split: str,
    vocab: Vocabulary,
    *,
    captions_per_image: int,
    max_images: int | None = None,
    allow_nonfinite: bool = False,
    max_caption_tokens: int | None = DEFAULT_MAX_CAPTION_TOKENS,
) -> PrecomputedSplit:
    """Open ``<root>/<name>/{split}_*`` with explicit captions-per-image and subset size.

    Args:
        root: data root.
        name: dataset folder name.
        split: split name.
        vocab: vocabulary for the caption ids.
        captions_per_image: checked against the files: N_cap must equal cpi * N_img.
        max_images: keep the first ``max_images`` images and their ``cpi * max_images``
            captions (NCR's dev subset); None keeps all.
        allow_nonfinite: accept NaN/inf features.
        max_caption_tokens: cap on token ids per caption (``<start>``/``<end>`` included;
            default 100, far above any caption of the released datasets); longer captions
            are cut and counted, with one warning per split. None: no cap.

    Raises:
        DataNotFoundError, DataFormatError, InvalidSettingError: see messages.
    """
    paths = locate_split(root, name, split)
    features = open_features(paths.features, allow_nonfinite=allow_nonfinite)
    captions = read_captions(paths.captions)
    n_img = len(features)
    check_caption_count(len(captions), n_img, captions_per_image, where=str(paths.captions))
    if max_images is not None:
        if not max_images >= 1:
            raise InvalidSettingError(f"max_images must be >= 1 or None, got {max_images}")
        n_img = min(n_img, int(max_images))
        captions = captions[: n_img * captions_per_image]
    true_image = clean_image_index(n_img, captions_per_image)
    tokens = TokenizedCaptions.from_texts(captions, vocab, max_tokens=max_caption_tokens)
    if tokens.num_truncated:
        logger.warning(
            "%s/%s: %d of %d captions are longer than max_caption_tokens=%d and were cut to "
            "their first %d words",
            name,
            split,
            tokens.num_truncated,
            len(tokens),
            max_caption_tokens,
            max_caption_tokens - 2,
        )
    if max_images is not None and n_img < len(features):
        features = _SubsetStore(features, n_img)
    return PrecomputedSplit(
        name=name,
        split=split,
        features=features,
        tokens=tokens,
        captions_per_image=captions_per_image,
        true_image=true_image,
        image_index=true_image.copy(),
    )


def _check_noise(
    noise_index: np.ndarray, n_img: int, n_cap: int, n_img_file: int, max_images: int | None
) -> np.ndarray:
    index = np.asarray(noise_index)
    if index.ndim != 1 or not np.issubdtype(index.dtype, np.integer):
        raise DataFormatError(
            f"noise_index must be 1-D integer, got shape {index.shape} dtype {index.dtype}"
        )
    if len(index) != n_cap:
        extra = ""
        if max_images is not None and n_img < n_img_file:
            extra = (
                f" (the subset of max_images={max_images}; build the noise for the subset with "
                "make_caption_noise(clean_image_index(max_images, cpi), ...))"
            )
        raise DataFormatError(
            f"noise_index has length {len(index)}; expected {n_cap} captions{extra}"
        )
    if len(index) and (index.min() < 0 or index.max() >= n_img):
        raise DataFormatError(
            f"noise_index values lie in [{index.min()}, {index.max()}]; expected [0, {n_img})"
        )
    return index.astype(np.int64)


class _SubsetStore(FeatureStore):
    """The first ``n`` images of a store (NCR dev subset), same read API."""

    def __init__(self, base: FeatureStore, n: int) -> None:
        self._base = base
        self.path = base.path
        self.dtype = base.dtype
        self.shape = (n, *base.shape[1:])

    def __getitem__(self, idx: int) -> np.ndarray:
        return self._base[self._check_index(int(idx))]

    def slice(self, start: int, stop: int) -> np.ndarray:
        start, stop, _ = slice(start, stop).indices(self.shape[0])
        return self._base.slice(start, stop)

    def close(self) -> None:
        self._base.close()

    def __getstate__(self) -> dict:
        return {"base": self._base, "n": self.shape[0]}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["base"], state["n"])


class PairDataset(torch.utils.data.Dataset):
    """Caption-indexed pairs: item k pairs caption k with image ``image_index[k]``.

    Item k is ``(features (R, D) float32, ids (L,) int64, k, image_index[k], clean[k])``.
    """

    def __init__(self, split: PrecomputedSplit) -> None:
        self.split = split

    def __len__(self) -> int:
        return self.split.num_captions

    def __getitem__(self, k: int) -> tuple[np.ndarray, np.ndarray, int, int, bool]:
        s = self.split
        image = int(s.image_index[k])
        return (
            s.features[image],
            s.tokens[k].astype(np.int64),
            int(k),
            image,
            bool(s.clean[k]),
        )
