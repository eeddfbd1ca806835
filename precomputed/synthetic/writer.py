"""Write the synthetic world in the SCAN/NCR layout (``<out>/synthetic_precomp/...``).

Output of :func:`make_synthetic` (``out_dir`` defaults to ``data/synthetic``)::

    <out>/synthetic_precomp/{train,dev,test}_ims.npy     (N, regions, feature_dim) float32
    <out>/synthetic_precomp/{train,dev,test}_caps.txt    5 captions per image, in image order
    <out>/synthetic_precomp/{train,dev,test}_scenes.jsonl one Scene per line (for rendering)
    <out>/synthetic_precomp/noise_{ratio}_seed{noise_seed}.npy   NCR noise of the train split
    <out>/synthetic_precomp/noise_{ratio}_seed{noise_seed}_train{n}.npy  ... of its first n images
    <out>/synthetic_precomp/world.json                    the generator settings
    <out>/synthetic_precomp_vocab.json                    SCAN vocabulary (all splits' words)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from ..noise import clean_image_index, make_caption_noise, noise_sha256, save_noise_index
from ..vocab import build_vocab
from .captions import caption_scene
from .features import DirectionBank, RegionRecipes, plan_regions, render_features
from .generators import GENERATORS
from .world import read_world_settings, sample_scenes

__all__ = ["DATASET_NAME", "make_synthetic", "noise_file_name", "redraw_nuisance"]

DATASET_NAME = "synthetic_precomp"
CAPTIONS_PER_IMAGE = 5
_SPLIT_CODES = {"train": 0, "dev": 1, "test": 2}
_CHUNK_IMAGES = 64


def noise_file_name(ratio: float, seed: int, num_images: int | None = None) -> str:
    """``noise_{ratio}_seed{seed}.npy`` (e.g. ``noise_0.2_seed0.npy``) for the whole train split;
    ``noise_{ratio}_seed{seed}_train{num_images}.npy`` for its first ``num_images`` images.

    A noise file is an index over the captions of the images it was built for, so a run with
    ``data.train_images: n`` needs the ``_train{n}`` file: the first ``5 n`` entries of the
    whole-split file are *not* NCR noise of the subset (they point at images beyond it).
    """
    suffix = "" if num_images is None else f"_train{num_images}"
    return f"noise_{float(ratio):g}_seed{seed}{suffix}.npy"


def _check_knob(name: str, value: float) -> float:
    if not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be in [0, 1], got {value}")
    return float(value)


def _split_recipes(
    seed: int, split: str, num: int, bank: DirectionBank, *, regions: int, sharing: float,
    background: float,
) -> tuple[list, RegionRecipes]:  # fmt: skip
    """The split's scenes and region recipes (deterministic given the world's settings)."""
    code = _SPLIT_CODES[split]
    scenes = sample_scenes(np.random.default_rng([seed, code, 1]), num, sharing=sharing)
    recipes = plan_regions(
        np.random.default_rng([seed, code, 2]), scenes, bank, regions, background
    )
    return scenes, recipes


def _write_features(
    path: Path, split: str, recipes: RegionRecipes, bank: DirectionBank, *, seed: int,
    render: dict, nuisance_redraw: int | None = None,
) -> None:  # fmt: skip
    """Render the split's features chunk by chunk into ``path`` (a ``.npy`` file); with
    ``nuisance_redraw`` every image's nuisance vector comes from that redraw's stream."""
    code = _SPLIT_CODES[split]
    num, regions = recipes.rows.shape[:2]
    shape = (num, regions, bank.table.shape[1])
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype("<f4")), "fortran_order": False,
              "shape": shape}  # fmt: skip
    # Streamed chunk by chunk with plain writes: memory stays bounded (a writable memory map
    # would keep every written page of the ~0.6 GB train file resident until it is closed).
    with open(path, "wb") as f:
        np.lib.format.write_array_header_1_0(f, header)
        for chunk, start in enumerate(range(0, num, _CHUNK_IMAGES)):
            stop = min(num, start + _CHUNK_IMAGES)
            rng = np.random.default_rng([seed, code, 4, chunk])
            redraw = (
                None
                if nuisance_redraw is None
                else np.random.default_rng([seed, code, 5, nuisance_redraw, chunk])
            )
            block = render_features(recipes, bank, start, stop, rng, **render, nuisance_rng=redraw)
            f.write(np.ascontiguousarray(block, dtype="<f4").tobytes())


def _write_split(
    folder: Path, split: str, num: int, bank: DirectionBank, *, seed: int, regions: int,
    sharing: float, partialness: float, background: float, render: dict,
) -> list[str]:  # fmt: skip
    code = _SPLIT_CODES[split]
    scenes, recipes = _split_recipes(
        seed, split, num, bank, regions=regions, sharing=sharing, background=background
    )
    cap_rng = np.random.default_rng([seed, code, 3])
    captions = [
        c for s in scenes for c in caption_scene(cap_rng, s, CAPTIONS_PER_IMAGE, partialness)
    ]
    _write_features(folder / f"{split}_ims.npy", split, recipes, bank, seed=seed, render=render)
    (folder / f"{split}_caps.txt").write_text("\n".join(captions) + "\n", encoding="utf-8")
    with open(folder / f"{split}_scenes.jsonl", "w", encoding="utf-8") as f:
        for s in scenes:
            f.write(json.dumps(s.to_dict(), sort_keys=True) + "\n")
    return captions


def make_synthetic(
    out_dir: str | Path = "data/synthetic",
    *,
    num_train: int = 1000,
    num_dev: int = 250,
    num_test: int = 250,
    seed: int = 0,
    regions: int = 36,
    feature_dim: int = 2048,
    region_noise: float = 0.5,
    attribute_sharing: float = 0.8,
    partialness: float = 0.7,
    background: float = 1 / 6,
    nuisance: float = 0.5,
    sparsity: float = 0.0,
    feature_scale: float = 0.5,
    noise_ratios: tuple[float, ...] = (0.2, 0.5),
    noise_seed: int = 0,
    noise_subsets: tuple[int, ...] = (1000,),
    generator: str = "default",
) -> Path:
    """Generate the synthetic world; deterministic given the arguments.

    Args:
        out_dir: data root; the dataset goes to ``<out_dir>/synthetic_precomp``.
        num_train, num_dev, num_test: images per split (5 captions each).
        seed: world seed (directions, scenes, captions, feature noise).
        regions: regions per image (BUTD: 36).
        feature_dim: region feature size (BUTD: 2048).
        region_noise: std of per-region Gaussian noise relative to unit-variance directions.
        attribute_sharing: in [0, 1]; how strongly a few categories/colours/scenes dominate
            (more sharing -> more images fit a partial caption).
        partialness: in [0, 1]; how many objects/attributes a caption leaves out.
        background: in [0, 1); least share of regions showing background/clutter (scene type
            plus one of 16 clutter directions) instead of objects.
        nuisance: std of a per-image random vector added to every region (image-level
            appearance shift that carries no content).
        sparsity: threshold subtracted before the ReLU (>= 0); higher makes features sparser.
        feature_scale: multiplier of all features (> 0); changes magnitudes, not content.
        noise_ratios: NCR noise files to write for the train split (each in [0, 1)).
        noise_seed: seed of the noise files.
        noise_subsets: also write noise files for the first ``n`` train images for each ``n``
            here below ``num_train`` (the ``data.train_images`` of the synthetic configs);
            each equals the noise a run with that ``train_images`` builds from ``noise_seed``.
        generator: ``default`` (the scene world of this module) or a name of
            :data:`precomputed.synthetic.generators.GENERATORS` (a world of other structure;
            the feature and caption knobs above are the default generator's and do not apply,
            ``world.json`` records only what does).

    Returns:
        The data root ``out_dir`` (use it as ``data.root`` with name ``synthetic_precomp``).
    """
    sizes = {"train": num_train, "dev": num_dev, "test": num_test}
    for split, n in sizes.items():
        if n < 1:
            raise ValueError(f"num_{split} must be >= 1, got {n}")
    if regions < 2 or feature_dim < 1:
        raise ValueError(f"need regions >= 2 and feature_dim >= 1, got {regions}, {feature_dim}")
    for name, value in (("region_noise", region_noise), ("nuisance", nuisance),
                        ("sparsity", sparsity)):  # fmt: skip
        if not np.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be finite and >= 0, got {value}")
    if not np.isfinite(feature_scale) or feature_scale <= 0:
        raise ValueError(f"feature_scale must be finite and > 0, got {feature_scale}")
    if not 0.0 <= background < 1.0:
        raise ValueError(f"background must be in [0, 1), got {background}")
    sharing = _check_knob("attribute_sharing", attribute_sharing)
    partial = _check_knob("partialness", partialness)
    if generator != "default" and generator not in GENERATORS:
        names = ", ".join(["default", *GENERATORS])
        raise ValueError(f"unknown generator {generator!r}; choose one of {names}")
    root = Path(out_dir)
    folder = root / DATASET_NAME
    folder.mkdir(parents=True, exist_ok=True)
    if generator != "default":
        all_captions = []
        for split, n in sizes.items():
            data = GENERATORS[generator](seed, split, n, regions=regions, dim=feature_dim)
            np.save(folder / f"{split}_ims.npy", data.features.astype("<f4", copy=False))
            (folder / f"{split}_caps.txt").write_text(
                "\n".join(data.captions) + "\n", encoding="utf-8"
            )
            with open(folder / f"{split}_scenes.jsonl", "w", encoding="utf-8") as f:
                for s in data.scenes:
                    f.write(json.dumps(s, sort_keys=True) + "\n")
            all_captions += data.captions
        settings = {
            "generator": generator, "num_train": num_train, "num_dev": num_dev,
            "num_test": num_test, "seed": seed, "regions": regions, "feature_dim": feature_dim,
            "captions_per_image": 5, "noise_seed": noise_seed,
        }  # fmt: skip
        return _finish_world(root, all_captions, settings, num_train, noise_ratios, noise_subsets)
    bank = DirectionBank.draw(seed, feature_dim)
    render = {"region_noise": region_noise, "nuisance": nuisance, "sparsity": sparsity,
              "scale": feature_scale}  # fmt: skip
    all_captions = []
    for split, n in sizes.items():
        all_captions += _write_split(
            folder, split, n, bank, seed=seed, regions=regions, sharing=sharing,
            partialness=partial, background=background, render=render,
        )  # fmt: skip
    settings = {
        "num_train": num_train, "num_dev": num_dev, "num_test": num_test, "seed": seed,
        "regions": regions, "feature_dim": feature_dim, "region_noise": region_noise,
        "attribute_sharing": sharing, "partialness": partial, "background": background,
        "nuisance": nuisance, "sparsity": sparsity, "feature_scale": feature_scale,
        "captions_per_image": 5,
        "noise_seed": noise_seed,
    }  # fmt: skip
    return _finish_world(root, all_captions, settings, num_train, noise_ratios, noise_subsets)


def _finish_world(
    root: Path, all_captions: list[str], settings: dict, num_train: int,
    noise_ratios: tuple[float, ...], noise_subsets: tuple[int, ...],
) -> Path:  # fmt: skip
    """Vocabulary, noise files and ``world.json`` (``settings`` plus the noise digests)."""
    folder = root / DATASET_NAME
    noise_seed = settings["noise_seed"]
    # Every word of every split: the synthetic world has no out-of-vocabulary words.
    build_vocab(all_captions, min_count=1).save(root / f"{DATASET_NAME}_vocab.json")
    subsets = sorted({int(n) for n in noise_subsets if 0 < int(n) < num_train})
    noise = {}
    for ratio in noise_ratios:
        for n in [None, *subsets]:
            clean = clean_image_index(num_train if n is None else n, CAPTIONS_PER_IMAGE)
            index = make_caption_noise(clean, ratio, noise_seed)
            name = noise_file_name(ratio, noise_seed, n)
            save_noise_index(folder / name, index)
            noise[name] = noise_sha256(index)
    settings = {**settings, "noise_sha256": noise}
    (folder / "world.json").write_text(json.dumps(settings, indent=2, sort_keys=True) + "\n")
    return root


def redraw_nuisance(src_root: str | Path, out_dir: str | Path, redraw: int = 1) -> Path:
    """Copy the world in ``src_root`` to ``out_dir`` with every image's nuisance vector drawn
    anew: the same scenes, regions, region noise, captions, vocabulary and noise files, only
    each image's identity (the vector shared by its regions) changes.

    A model that divides a noisy pair differently on the redrawn images learnt that pair
    through its image's identity, not its content (docs/methods/ugncl.md;
    ``tools/audit_division.py --data-root``).

    Args:
        src_root: data root of a world :func:`make_synthetic` wrote.
        out_dir: new data root (its ``synthetic_precomp`` folder must not exist).
        redraw: which redraw (>= 1): each gives other vectors, deterministically.

    Returns:
        ``out_dir``; its ``world.json`` adds ``"nuisance_redraw": redraw``.
    """
    if redraw < 1:
        raise ValueError(f"redraw must be >= 1, got {redraw}")
    src = Path(src_root) / DATASET_NAME
    world = read_world_settings(src_root, DATASET_NAME)
    needed = ("seed", "feature_dim", "regions", "attribute_sharing", "background",
              "region_noise", "nuisance", "sparsity", "feature_scale",
              *(f"num_{split}" for split in _SPLIT_CODES))  # fmt: skip
    missing = [key for key in needed if key not in world]
    if missing:
        raise ValueError(
            f"{src / 'world.json'} lacks {', '.join(missing)} (a world of an older generator); "
            "generate it again with tools/make_synthetic.py"
        )
    root = Path(out_dir)
    folder = root / DATASET_NAME
    if folder.exists():
        raise FileExistsError(f"{folder} already exists; pass a new --out")
    folder.mkdir(parents=True)
    for path in src.iterdir():
        if path.is_file() and not path.name.endswith(("_ims.npy", ".finite.json")):
            shutil.copyfile(path, folder / path.name)
    vocab = Path(src_root) / f"{DATASET_NAME}_vocab.json"
    shutil.copyfile(vocab, root / vocab.name)
    bank = DirectionBank.draw(world["seed"], world["feature_dim"])
    render = {"region_noise": world["region_noise"], "nuisance": world["nuisance"],
              "sparsity": world["sparsity"], "scale": world["feature_scale"]}  # fmt: skip
    for split in _SPLIT_CODES:
        _, recipes = _split_recipes(
            world["seed"], split, world[f"num_{split}"], bank, regions=world["regions"],
            sharing=world["attribute_sharing"], background=world["background"],
        )  # fmt: skip
        _write_features(
            folder / f"{split}_ims.npy", split, recipes, bank, seed=world["seed"],
            render=render, nuisance_redraw=redraw,
        )  # fmt: skip
    world["nuisance_redraw"] = int(redraw)
    (folder / "world.json").write_text(json.dumps(world, indent=2, sort_keys=True) + "\n")
    return root
