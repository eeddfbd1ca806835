"""The datasets the package knows by name: what each one's folder holds and how it is evaluated.

One entry per ``data.name`` the shipped configs and tools use:

=================== =========== ====== ========= ===================================== ======
name                family      view   captions  evaluation protocol per split          naming
=================== =========== ====== ========= ===================================== ======
f30k_precomp        Flickr30K   region 5         test: 1k                               -
f30k                Flickr30K   image  5         test: 1k                               f30k
coco_precomp        MS-COCO     region 5         testall: coco5fold, test: 1k           -
coco                MS-COCO     image  5         testall: coco5fold, test: 1k (5K: 5f)  coco
cc152k_precomp      CC152K      region 1         test: 1k                               -
cc120k              CC120K      image  1         test: 1k                               cc
synthetic_precomp   synthetic   region 5         (full)                                 -
synthetic_clip      synthetic   image  5         (full)                                 f30k
=================== =========== ====== ========= ===================================== ======

Every split a table row does not name (dev splits, the synthetic world's test) is ranked whole
(``full``). COCO's 5K test set is evaluated as five 1K folds and the 5K matrix
(``coco5fold``) whether it is called ``testall`` (SCAN/NCR) or ``test`` with 5000 images (the
NPC/SDD/OSA raw-image layout). Every generator of ``tools/make_synthetic.py`` writes
``synthetic_precomp`` (``synthetic_clip`` is its rendered view).

A name the catalog does not hold is a dataset the user brings: nothing is guessed from the
name's letters (a folder called ``my_coco_subset`` is not COCO). Its splits are ranked whole
(``full``; ``tools/eval.py --protocol`` picks another), its captions per image and dev size are
what the config states, and its raw-image naming must be set (``data.clip.naming``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "CATALOG",
    "COCO_5K_IMAGES",
    "IMAGE_NAMINGS",
    "UNKNOWN_PROTOCOL",
    "DatasetEntry",
    "dataset_entry",
    "image_datasets",
    "split_protocol",
]

#: Raw-image naming schemes (``precomputed.image_layout``): ``f30k`` (``image_name.txt`` line
#: ``id``), ``coco`` (``COCO_2014_<12-digit id>.jpg``), ``cc`` (``<id>.jpg``).
IMAGE_NAMINGS = ("f30k", "coco", "cc")
#: The protocol of any split the catalog does not name, and of every split of an unknown name.
UNKNOWN_PROTOCOL = "full"
#: Images of COCO's 5K test set (five 1K folds).
COCO_5K_IMAGES = 5000


@dataclass(frozen=True)
class DatasetEntry:
    """What one known dataset folder holds.

    Attributes:
        name: the folder name, ``data.name``.
        family: the dataset it is a view of (``Flickr30K``, ``MS-COCO``, ``CC152K``,
            ``CC120K``, ``synthetic``).
        view: ``region`` (SCAN/NCR precomputed features) or ``image`` (raw images).
        captions_per_image: captions per image in every split (SCAN order).
        dev_images: images of the dev subset that selects the epoch (NCR: the first 1000; the
            CLIP releases select COCO on the 5K dev set); None: the whole dev split.
        protocols: split -> evaluation protocol (``1k``, ``coco5fold``); others are ``full``.
        five_fold_test: a ``test`` split of :data:`COCO_5K_IMAGES` images is COCO's 5K test
            set (``coco5fold``).
        image_naming: raw-image naming scheme (:data:`IMAGE_NAMINGS`); None for region views.
    """

    name: str
    family: str
    view: str
    captions_per_image: int
    dev_images: int | None
    protocols: Mapping[str, str] = field(default_factory=dict)
    five_fold_test: bool = False
    image_naming: str | None = None


_ONE_K_TEST = MappingProxyType({"test": "1k"})
_COCO = MappingProxyType({"testall": "coco5fold", "test": "1k"})

CATALOG: Mapping[str, DatasetEntry] = MappingProxyType(
    {
        entry.name: entry
        for entry in (
            DatasetEntry("f30k_precomp", "Flickr30K", "region", 5, 1000, _ONE_K_TEST),
            DatasetEntry("f30k", "Flickr30K", "image", 5, 1000, _ONE_K_TEST, image_naming="f30k"),
            DatasetEntry("coco_precomp", "MS-COCO", "region", 5, 1000, _COCO),
            DatasetEntry("coco", "MS-COCO", "image", 5, 5000, _COCO, True, image_naming="coco"),
            DatasetEntry("cc152k_precomp", "CC152K", "region", 1, 1000, _ONE_K_TEST),
            DatasetEntry("cc120k", "CC120K", "image", 1, 1000, _ONE_K_TEST, image_naming="cc"),
            DatasetEntry("synthetic_precomp", "synthetic", "region", 5, None),
            # tools/render_synthetic.py lists the rendered images in image_name.txt.
            DatasetEntry("synthetic_clip", "synthetic", "image", 5, None, image_naming="f30k"),
        )
    }
)


def dataset_entry(name: str) -> DatasetEntry | None:
    """The catalog's entry for ``name`` (exactly; a name differing in case or letters is not
    the dataset), or None for a dataset the user brings."""
    return CATALOG.get(name)


def split_protocol(name: str, split: str, num_images: int | None = None) -> str:
    """The published evaluation protocol of ``split`` of dataset ``name``.

    Known names: the split's protocol in the catalog (COCO's ``test`` of 5000 images:
    ``coco5fold``); a split it does not name, and every split of an unknown name:
    :data:`UNKNOWN_PROTOCOL`.
    """
    entry = CATALOG.get(name)
    if entry is None:
        return UNKNOWN_PROTOCOL
    if entry.five_fold_test and split == "test" and num_images == COCO_5K_IMAGES:
        return "coco5fold"
    return entry.protocols.get(split, UNKNOWN_PROTOCOL)


def image_datasets() -> dict[str, DatasetEntry]:
    """The known raw-image datasets, by name."""
    return {name: e for name, e in CATALOG.items() if e.image_naming is not None}
