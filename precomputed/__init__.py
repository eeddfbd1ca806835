"""Data layer for precomputed region features in the SCAN/NCR layout (plus a synthetic world).

The torch-dependent names (``PairDataset``, ``pad_captions``, ...) are imported lazily so that
numpy-only users (tools/make_synthetic.py, the feature scan) do not pay for importing torch.
"""

import importlib

from .catalog import CATALOG, DatasetEntry, dataset_entry, split_protocol
from .errors import DataFormatError, DataNotFoundError, InvalidSettingError, UserError
from .features import FeatureStore, open_features
from .layout import SplitPaths, locate_split
from .noise import (
    clean_image_index,
    image_permutation_to_caption_index,
    load_noise_index,
    make_caption_noise,
    noise_sha256,
    save_noise_index,
)
from .tokenizer import tokenize_caption, word_tokenize
from .tokens import TokenizedCaptions
from .vocab import Vocabulary, build_vocab, load_vocab

__all__ = [
    "CATALOG",
    "DataFormatError",
    "DataNotFoundError",
    "DatasetEntry",
    "FeatureStore",
    "InvalidSettingError",
    "PairDataset",
    "PrecomputedSplit",
    "SplitPaths",
    "TokenizedCaptions",
    "UserError",
    "Vocabulary",
    "build_vocab",
    "clean_image_index",
    "dataset_entry",
    "image_permutation_to_caption_index",
    "load_noise_index",
    "load_vocab",
    "locate_split",
    "make_caption_noise",
    "noise_sha256",
    "open_features",
    "open_split",
    "pad_captions",
    "save_noise_index",
    "split_protocol",
    "tokenize_caption",
    "word_tokenize",
]

_LAZY = {
    "pad_captions": "collate",
    "PairDataset": "dataset",
    "PrecomputedSplit": "dataset",
    "open_split": "dataset",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
