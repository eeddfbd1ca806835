"""Raw-image pairs for the CLIP track, on the same split definition as the precomputed track.

Item ``k`` of :class:`ImagePairDataset` pairs caption ``k`` with image ``image_index[k]`` (the
noisy index of ``precomputed.noise``), exactly like ``precomputed.PairDataset``; only the image
side differs (pixels instead of region features). Reading pixels and tokenising happen in
``__getitem__``, so DataLoader workers do them. With a pixel source
(:mod:`ugncl.backbones.clip.pixels`: the uint8 cache, or decode + geometry) an item's image is
``(3, H, W)`` uint8 and the model normalises it on its device; without one, the transform's
float output. The tokenizer and the image transform are
injected: the data does not know the model (``open_clip.get_tokenizer(name)`` and the
preprocess of ``open_clip.create_model_and_transforms`` fit).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from precomputed.errors import DataFormatError, DataNotFoundError
from precomputed.image_layout import ImageSplit

# ugncl.core.data.PairBatch has exactly these fields.
from ugncl.core.data import PairBatch, SplitTrainingData

__all__ = [
    "CaptionDataset",
    "ImageDataset",
    "ImagePairDataset",
    "ImageTrainingData",
    "PixelSource",
    "Tokenizer",
    "Transform",
    "as_batch",
    "caption_lengths",
    "collate_image_pairs",
    "load_rgb",
]

Tokenizer = Callable[[list[str]], Tensor]  # list of n captions -> (n, L) int64, 0-padded
Transform = Callable[[Image.Image], Tensor]  # PIL RGB image -> (3, H, W) float
PixelSource = Callable[[int], Tensor]  # image number -> (3, H, W) uint8


def caption_lengths(tokens: Tensor, pad_id: int = 0) -> Tensor:
    """Tokens up to and including the last non-pad one, (K, L) -> (K,) int64.

    Not ``(tokens != pad).sum()``: in CLIP's BPE vocabulary id 0 is both the pad and "!", so a
    "!" inside a caption would be miscounted; the end-of-text token is always last.
    """
    nonpad = tokens != pad_id
    last = tokens.shape[1] - torch.argmax(nonpad.flip(1).to(torch.int8), dim=1)
    return torch.where(nonpad.any(dim=1), last, torch.zeros_like(last)).to(torch.int64)


def load_rgb(path: str | Path) -> Image.Image:
    """Decode an image file as RGB.

    Raises:
        DataNotFoundError: missing file.
        DataFormatError: not an image Pillow can decode.
    """
    try:
        with Image.open(path) as img:
            return img.convert("RGB")
    except FileNotFoundError:
        raise DataNotFoundError(
            f"image {path} not found (it was there when the split was opened; was it moved?)"
        ) from None
    except (UnidentifiedImageError, OSError, Image.DecompressionBombError) as err:
        raise DataFormatError(
            f"image {path} cannot be decoded ({err}); replace the file with a valid image"
        ) from err


def _image(
    split: ImageSplit, image: int, transform: Transform, pixels: PixelSource | None
) -> Tensor:
    if pixels is not None:
        return pixels(image)
    return transform(load_rgb(split.image_path(image)))


def _tokenize_one(tokenizer: Tokenizer, text: str) -> Tensor:
    ids = torch.as_tensor(tokenizer([text]))
    if ids.ndim != 2 or ids.shape[0] != 1:
        raise ValueError(
            f"the tokenizer must map a list of n captions to an (n, L) tensor, got shape "
            f"{tuple(ids.shape)} for one caption"
        )
    return ids[0].to(torch.int64)


class ImagePairDataset(torch.utils.data.Dataset):
    """Caption-indexed pairs of a raw-image split.

    Item k is ``(image (3, H, W), ids (L,) int64, k, image_index[k], clean[k])``; the image
    is ``pixels(image_index[k])`` (uint8) when a pixel source is given, else the transform's
    float output.
    """

    def __init__(
        self,
        split: ImageSplit,
        transform: Transform,
        tokenizer: Tokenizer,
        pixels: PixelSource | None = None,
    ) -> None:
        self.split = split
        self.transform = transform
        self.tokenizer = tokenizer
        self.pixels = pixels

    def __len__(self) -> int:
        return self.split.num_captions

    def __getitem__(self, k: int) -> tuple[Tensor, Tensor, int, int, bool]:
        s = self.split
        image = int(s.image_index[k])
        return (
            _image(s, image, self.transform, self.pixels),
            _tokenize_one(self.tokenizer, s.captions[k]),
            int(k),
            image,
            bool(s.clean[k]),
        )


class ImageDataset(torch.utils.data.Dataset):
    """Each image of a split once, in SCAN order (evaluation encodes every image once)."""

    def __init__(
        self, split: ImageSplit, transform: Transform, pixels: PixelSource | None = None
    ) -> None:
        self.split = split
        self.transform = transform
        self.pixels = pixels

    def __len__(self) -> int:
        return self.split.num_images

    def __getitem__(self, i: int) -> Tensor:
        return _image(self.split, int(i), self.transform, self.pixels)


class CaptionDataset(torch.utils.data.Dataset):
    """Each caption of a split once, tokenised: item k is ``(L,) int64``."""

    def __init__(self, split: ImageSplit, tokenizer: Tokenizer) -> None:
        self.split = split
        self.tokenizer = tokenizer

    def __len__(self) -> int:
        return self.split.num_captions

    def __getitem__(self, k: int) -> Tensor:
        return _tokenize_one(self.tokenizer, self.split.captions[int(k)])


def collate_image_pairs(items: Sequence[tuple]) -> PairBatch:
    """Collate :class:`ImagePairDataset` items into a PairBatch; keeps the item order.

    ``images`` (K, 3, H, W) uint8 (from a pixel source) or float, ``captions`` (K, L) int64
    as tokenised (CLIP pads to its context length), ``lengths`` (K,) = tokens up to
    end-of-text (:func:`caption_lengths`).
    """
    images, ids, index, image_index, clean = zip(*items)
    captions = torch.stack(ids)
    return PairBatch(
        images=as_batch(torch.stack(images)),
        captions=captions,
        lengths=caption_lengths(captions),
        index=torch.tensor(index, dtype=torch.int64),
        image_index=torch.tensor(image_index, dtype=torch.int64),
        clean=torch.tensor(clean, dtype=torch.bool),
    )


def as_batch(images: Tensor) -> Tensor:
    """uint8 pixels stay uint8 (normalised on the device); anything else becomes float32."""
    return images if images.dtype == torch.uint8 else images.float()


@dataclass
class ImageTrainingData(SplitTrainingData):
    """The contract's ``TrainingData`` for a raw-image split.

    Attributes:
        split: the opened split (its ``image_index`` is the noisy index trained on).
        dataset: caption-indexed pairs (item -> one sample).
        collate: items -> :class:`PairBatch`.
        pixels: uint8 pixels by image number (the cache), or None to run ``transform``.
    """

    split: ImageSplit
    transform: Transform
    tokenizer: Tokenizer
    pixels: PixelSource | None = None
    dataset: ImagePairDataset = field(init=False)
    collate: Callable[[Sequence[tuple]], PairBatch] = field(init=False)

    def __post_init__(self) -> None:
        self.dataset = ImagePairDataset(self.split, self.transform, self.tokenizer, self.pixels)
        self.collate = collate_image_pairs
