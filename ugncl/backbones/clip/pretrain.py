"""A stand-in for web pretraining: the tiny CLIP on a clean pool of synthetic scenes.

Every CLIP method fine-tunes a pretrained model and none can be downloaded, so the synthetic
CLIP track starts from a tiny open_clip model pretrained here with plain symmetric InfoNCE
(CLIP's loss) on scenes drawn from the same world as the train/dev/test splits but:

* from another random stream: the world's splits draw scenes and captions from
  ``default_rng([seed, code, 1])`` / ``([seed, code, 3])`` with codes 0/1/2
  (``precomputed.synthetic.writer``); the pool uses code :data:`POOL_CODE` + ``offset``;
* with every scene that equals a split scene (same scene type and the same objects)
  dropped, so no test image is seen in pretraining;
* clean: each pool image is paired with its own 5 captions (no noise).

Two shifts make the pool depart from the world, so that fine-tuning on the world's pairs has
something to teach the stand-in (without one, the clean fine-tune ends at zero-shot:
docs/research/2026-11-29-clip-step-size.md):

* ``shift="withheld"`` draws the same pool with captions that never state one concept the
  world's captions do (:data:`WITHHELD_WORDS`: counts in the counting world, sizes in the
  default world). Measured, the track's fine-tune does not learn the concept
  (docs/research/2026-11-29-clip-withheld-concept.md).
* ``shift="renamed"`` draws the same pool with captions that call a concept by another word
  (:data:`RENAMED_WORDS`: the colour red is "crimson"), as web alt-text and annotators name
  things differently. The image tower learns the concept; the text tower never reads the
  world's word for it, and the fine-tune teaches it
  (docs/research/2026-11-29-clip-renamed-word.md). :func:`exchange_token_rows` turns a
  stand-in of the unshifted pool into the renamed pool's stand-in exactly, without pretraining
  again (its docstring says why).

The renderer is passed in (``render(scene_record, size) -> PIL.Image``:
``precomputed.synthetic.render.render_scene``), so this module does not depend on it.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor
from torch.nn import functional as F

from precomputed.synthetic import CAPTIONS_PER_IMAGE, DATASET_NAME, caption_scene, sample_scenes
from precomputed.synthetic.generators import counting_captions, counting_scene
from ugncl.core.metrics import retrieval_metrics

from .adapter import CLIPSimilarity

if TYPE_CHECKING:
    import PIL.Image

logger = logging.getLogger(__name__)

__all__ = [
    "POOL_CODE",
    "POOL_SHIFT",
    "POOL_SIZE",
    "RENAMED_WORDS",
    "SHIFTS",
    "WITHHELD_WORDS",
    "PretrainConfig",
    "Renderer",
    "encode_split",
    "exchange_token_rows",
    "load_scenes",
    "load_world_settings",
    "make_pool",
    "pretrain",
    "rename",
    "rename_stand_in",
    "render_images",
    "scene_key",
    "tokenize_captions",
    "withhold",
    "zero_shot",
]

#: Split code of the pretraining pool's random streams (the world uses 0/1/2).
POOL_CODE = 7
#: Pool images of the default stand-in (5 captions each).
POOL_SIZE = 20000
#: Pool shifts (``make_pool``'s ``shift``): ``none`` draws the pool's captions as the world
#: writes its own; ``withheld`` drops :data:`WITHHELD_WORDS` from them; ``renamed`` says
#: :data:`RENAMED_WORDS`' pool words in place of the world's.
SHIFTS = ("none", "withheld", "renamed")
#: The stand-in's pool shift by default (tools/pretrain_clip.py's and tools/compare.py's;
#: make compare-clip asks for ``renamed``).
POOL_SHIFT = "none"
#: Words no ``withheld`` pool caption contains, per generator. Web alt-text rarely states
#: how many things an image shows or how large they are, and web-pretrained CLIP is known to
#: miss counts (Paiss et al., ICCV 2023, "Teaching CLIP to Count to Ten"). The shift tests
#: whether a concept absent from pretraining leaves the fine-tune something to teach, where
#: the unshifted pool leaves nothing (the clean fine-tune ends at or below zero-shot:
#: docs/research/2026-11-29-clip-step-size.md); measured, the fine-tune does not learn it.
WITHHELD_WORDS: dict[str, frozenset[str]] = {
    "counting": frozenset({"one", "two", "three", "several"}),
    "default": frozenset({"small", "little", "tiny", "large", "big", "huge"}),
}
#: World word -> the word a ``renamed`` pool says instead (every generator). Each is one
#: token of CLIP's vocabulary and no generator writes the pool word, so the stand-in's text
#: tower never reads the world's word. One colour: measured on the seed-0 cells of both
#: regime worlds, renaming three or more colours takes the clean fine-tune below 350 test rSum
#: (in 124 steps at lr 1e-4 the fine-tune wins back part of what a renamed word costs), and
#: one leaves it above 350 with a gain over zero-shot
#: (docs/research/2026-11-29-clip-renamed-word.md).
RENAMED_WORDS: dict[str, str] = {"red": "crimson"}
#: CLIP's upper bound on the temperature (open_clip training clamps logit_scale to ln 100).
MAX_LOGIT_SCALE = math.log(100.0)

#: ``render(scene_record, size) -> PIL.Image`` (``precomputed.synthetic.render.render_scene``).
Renderer = Callable[[dict, int], "PIL.Image.Image"]


def load_world_settings(data_root: str | Path) -> dict:
    """``world.json`` of a generated synthetic world (seed, sharing, partialness, sizes)."""
    path = Path(data_root) / DATASET_NAME / "world.json"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found; generate the world first: python tools/make_synthetic.py "
            f"--out {data_root}"
        )
    return json.loads(path.read_text(encoding="utf-8"))


def load_scenes(path: str | Path) -> list[dict]:
    """Scene records of one split from ``{split}_scenes.jsonl`` (one JSON object per line)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def scene_key(scene: dict) -> tuple:
    """What a scene record looks like, independent of its id: the default world's type +
    sorted objects, the counting world's place + sorted groups."""
    if "groups" in scene:
        groups = sorted((g["category"], g["colour"], g["count"]) for g in scene["groups"])
        return (scene["place"], *groups)
    objs = sorted((o["category"], o["colour"], o["size"], o["position"]) for o in scene["objects"])
    return (scene["scene_type"], *objs)


def _check_pool_generator(settings: dict) -> str:
    generator = settings.get("generator", "default")
    if generator not in ("default", "counting"):
        raise ValueError(
            f"the {generator} world has no images, so no CLIP stand-in; pretrain on a default "
            "or counting world"
        )
    return generator


def _draw_scenes(settings: dict, rng: np.random.Generator, num: int) -> list[tuple[dict, object]]:
    """``num`` (scene record, the generator's scene) drawn by the world's generator."""
    if _check_pool_generator(settings) == "counting":
        return [(scene, scene) for scene in (counting_scene(rng, 0) for _ in range(num))]
    drawn = sample_scenes(rng, num, sharing=settings["attribute_sharing"])
    return [(scene.to_dict(), scene) for scene in drawn]


def _caption(settings: dict, rng: np.random.Generator, scene: object) -> list[str]:
    if _check_pool_generator(settings) == "counting":
        return counting_captions(rng, scene, CAPTIONS_PER_IMAGE)
    return caption_scene(rng, scene, CAPTIONS_PER_IMAGE, settings["partialness"])


def withhold(caption: str, words: frozenset[str]) -> str:
    """``caption`` without the words in ``words`` (whole words, split on spaces)."""
    return " ".join(w for w in caption.split() if w not in words)


def rename(caption: str, renamed: Mapping[str, str]) -> str:
    """``caption`` with every word of ``renamed`` replaced by its value (whole words only)."""
    return " ".join(renamed.get(w, w) for w in caption.split())


def _pool_rewrite(shift: str, generator: str) -> Callable[[str], str] | None:
    """How ``shift`` rewrites each pool caption of a ``generator`` world (None: as drawn)."""
    if shift == "withheld":
        words = WITHHELD_WORDS[generator]
        return lambda caption: withhold(caption, words)
    if shift == "renamed":
        return lambda caption: rename(caption, RENAMED_WORDS)
    return None


def make_pool(
    settings: dict,
    num_scenes: int,
    exclude: Iterable[dict] = (),
    *,
    offset: int = 0,
    shift: str = POOL_SHIFT,
) -> tuple[list[dict], list[list[str]], int]:
    """Draw a clean pretraining pool from the world's generators on a disjoint stream.

    Args:
        settings: ``world.json`` (``seed``, ``attribute_sharing``, ``partialness``).
        num_scenes: pool images to return (after dropping duplicates of ``exclude``).
        exclude: scene records of the train/dev/test splits; equal scenes are redrawn.
        offset: shifts the stream (another pool of the same world).
        shift: one of :data:`SHIFTS`: how the pool's captions depart from the world's.

    Returns:
        (scene records as in ``{split}_scenes.jsonl``, captions per scene (5 each), number of
        drawn scenes dropped as duplicates of ``exclude``).
    """
    if num_scenes < 1:
        raise ValueError(f"num_scenes must be >= 1, got {num_scenes}")
    if shift not in SHIFTS:
        raise ValueError(f"unknown pool shift {shift!r}; choose one of {', '.join(SHIFTS)}")
    rewrite = _pool_rewrite(shift, _check_pool_generator(settings))
    seed, code = int(settings["seed"]), POOL_CODE + int(offset)
    banned = {scene_key(s) for s in exclude}
    scene_rng = np.random.default_rng([seed, code, 1])
    cap_rng = np.random.default_rng([seed, code, 3])
    scenes: list[dict] = []
    captions: list[list[str]] = []
    dropped = 0
    while len(scenes) < num_scenes:
        for record, scene in _draw_scenes(settings, scene_rng, num_scenes - len(scenes)):
            if scene_key(record) in banned:
                dropped += 1
                continue
            record["image_id"] = len(scenes)
            if hasattr(scene, "image_id"):
                scene.image_id = record["image_id"]
            scenes.append(record)
            caps = _caption(settings, cap_rng, scene)
            captions.append([rewrite(c) for c in caps] if rewrite else caps)
    return scenes, captions, dropped


def render_images(scenes: Sequence[dict], render: Renderer, size: int) -> Tensor:
    """Render scene records to a uint8 (N, 3, size, size) tensor (ToTensor's input x255)."""
    out = torch.empty((len(scenes), 3, size, size), dtype=torch.uint8)
    for i, scene in enumerate(scenes):
        img = np.array(render(scene, size).convert("RGB"), dtype=np.uint8)
        if img.shape != (size, size, 3):
            raise ValueError(f"renderer returned {img.shape} for size {size}")
        out[i] = torch.from_numpy(img).permute(2, 0, 1)
    return out


def tokenize_captions(model: CLIPSimilarity, captions: Sequence[str]) -> Tensor:
    """(n, ctx) token ids with open_clip's tokenizer at the model's context length."""
    return model.tokenizer()(list(captions))


def _single_token(model: CLIPSimilarity, word: str) -> int:
    ids = model.tokenizer().encode(word)
    if len(ids) != 1:
        raise ValueError(f"{word!r} is {len(ids)} tokens of the model's vocabulary, not one")
    return int(ids[0])


@torch.no_grad()
def exchange_token_rows(model: CLIPSimilarity, renamed: Mapping[str, str] = RENAMED_WORDS) -> None:
    """Exchange the token-embedding rows of each world word and its pool word, in place.

    Pretraining is a function of the initial weights and the token ids it reads. Let ``pi``
    exchange the ids of each pair of ``renamed`` (one token each). Pretraining on the renamed
    pool from initial weights ``theta`` is, step for step, pretraining on the unshifted pool
    from ``pi(theta)`` with ``pi`` applied to the result: only the token embedding's rows are
    addressed by id (the text tower pools at the highest id, the end token, above both), and
    every other weight sees the same numbers. ``pi(theta)`` is as random an initialisation as
    ``theta`` (the rows are drawn i.i.d.). So a stand-in of the unshifted pool with its rows
    exchanged is the renamed pool's stand-in from the initialisation with those rows exchanged,
    bit for bit (tests/ugncl/backbones/clip/test_pretrain.py checks it), made in a second
    instead of a pretraining's 38 minutes.

    Raises:
        ValueError: a word that is not one token of the model's vocabulary.
    """
    weight = model.model.token_embedding.weight
    for word, pool_word in renamed.items():
        a, b = _single_token(model, word), _single_token(model, pool_word)
        weight[[a, b]] = weight[[b, a]].clone()


def _normaliser(model: CLIPSimilarity) -> Callable[[Tensor], Tensor]:
    """uint8 (n, 3, H, W) at the model's image size -> CLIP-normalised float pixels.

    Equal to open_clip's eval transform (resize and centre crop are the identity at the
    model's size; ToTensor; Normalize with the model's mean/std).
    """
    from open_clip import get_model_preprocess_cfg

    cfg = get_model_preprocess_cfg(model.model)
    mean = torch.tensor(cfg["mean"]).view(1, 3, 1, 1)
    std = torch.tensor(cfg["std"]).view(1, 3, 1, 1)

    def normalise(u8: Tensor) -> Tensor:
        if u8.shape[-1] != model.image_size or u8.shape[-2] != model.image_size:
            raise ValueError(f"images are {tuple(u8.shape[-2:])}, model takes {model.image_size}")
        return (u8.float() / 255.0 - mean) / std

    return normalise


@dataclass
class PretrainConfig:
    """Optimisation of the stand-in pretraining (CLIP's recipe, sized for 2 CPU cores).

    AdamW betas 0.9/0.98, eps 1e-6 (CLIP); weight decay on matrices only (open_clip's rule:
    no decay for gains, biases and logit_scale); linear warm-up then cosine, in optimiser steps.
    """

    # 10000 steps on a pool of 20000 (about 38 min on one core): zero-shot test rSum 218 on
    # the default world (400 steps: 121; 2500: 165; 5000: 176) and 396 on the counting world
    # (2500: 281; 5000: 337), where the clean fine-tune reaches 388 and 50% noise costs the
    # plain fine-tune 11.1% on the mean of 3 seeds (9.4% on the lowest seed)
    # (docs/research/2026-11-29-clip-regime.md).
    steps: int = 10000
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.2
    warmup_steps: int = 100
    seed: int = 0
    log_every: int = 50


def _param_groups(model: CLIPSimilarity, weight_decay: float) -> list[dict]:
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        skip = p.ndim < 2 or "logit_scale" in name or "ln" in name or "bias" in name
        (no_decay if skip else decay).append(p)
    return [
        {"params": no_decay, "weight_decay": 0.0},
        {"params": decay, "weight_decay": weight_decay},
    ]


def _lr_at(step: int, cfg: PretrainConfig) -> float:
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return 0.5 * (1.0 + math.cos(math.pi * min(1.0, progress))) * cfg.lr


def symmetric_infonce(logits: Tensor) -> Tensor:
    """CLIP's loss on a (B, B) image x caption logit matrix with matches on the diagonal."""
    target = torch.arange(logits.shape[0], device=logits.device)
    return 0.5 * (F.cross_entropy(logits, target) + F.cross_entropy(logits.t(), target))


def pretrain(
    model: CLIPSimilarity,
    images: Tensor,
    tokens: Tensor,
    cfg: PretrainConfig,
    *,
    log: Callable[[dict], None] | None = None,
) -> dict:
    """Train ``model`` in place with symmetric InfoNCE on a clean pool.

    Args:
        model: the CLIP adapter (fp32, CPU or a device: batches follow its parameters).
        images: uint8 (N, 3, S, S) pool images at the model's image size.
        tokens: (N, C, ctx) token ids, C captions per image; each step pairs every image
            of the batch with one of its captions drawn at random.
        cfg: optimisation settings.
        log: called with a record every ``cfg.log_every`` steps and at the end.

    Returns:
        Summary: steps, pairs, wall seconds, pairs/s, first and last logged loss.
    """
    n = images.shape[0]
    if tokens.shape[0] != n or tokens.ndim != 3:
        raise ValueError(f"tokens must be (N={n}, captions, ctx), got {tuple(tokens.shape)}")
    if cfg.batch_size < 2 or cfg.batch_size > n:
        raise ValueError(f"batch_size must be in [2, {n}] (pool size), got {cfg.batch_size}")
    device = next(model.parameters()).device
    normalise = _normaliser(model)
    gen = torch.Generator().manual_seed(cfg.seed)
    opt = torch.optim.AdamW(
        _param_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(0.9, 0.98), eps=1e-6,
        fused=device.type in ("cpu", "cuda"),
    )  # fmt: skip
    model.train()
    order, pos = torch.randperm(n, generator=gen), 0
    history: list[dict] = []
    window: list[float] = []
    start = time.perf_counter()
    for step in range(cfg.steps):
        if pos + cfg.batch_size > n:  # new epoch over the pool; drop the ragged tail
            order, pos = torch.randperm(n, generator=gen), 0
        idx = order[pos : pos + cfg.batch_size]
        pos += cfg.batch_size
        pick = torch.randint(tokens.shape[1], (len(idx),), generator=gen)
        pixels = normalise(images[idx]).to(device)
        caps = tokens[idx, pick].to(device)
        for group in opt.param_groups:
            group["lr"] = _lr_at(step, cfg)
        loss = symmetric_infonce(model(pixels, caps)[0])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            model.logit_scale.clamp_(0.0, MAX_LOGIT_SCALE)
        window.append(loss.item())
        if (step + 1) % cfg.log_every == 0 or step + 1 == cfg.steps:
            elapsed = time.perf_counter() - start
            rec = {
                "step": step + 1, "loss": float(np.mean(window)), "lr": _lr_at(step, cfg),
                "logit_scale": model.logit_scale.exp().item(), "seconds": round(elapsed, 2),
                "pairs_per_s": round((step + 1) * cfg.batch_size / elapsed, 1),
            }  # fmt: skip
            history.append(rec)
            window = []
            if log is not None:
                log(rec)
    model.eval()
    seconds = time.perf_counter() - start
    return {
        "steps": cfg.steps, "pairs": cfg.steps * cfg.batch_size, "pool_images": n,
        "seconds": round(seconds, 2), "pairs_per_s": round(cfg.steps * cfg.batch_size / seconds, 1),
        "ms_per_step": round(1000 * seconds / cfg.steps, 1),
        "first_loss": history[0]["loss"], "last_loss": history[-1]["loss"], "config": asdict(cfg),
    }  # fmt: skip


@torch.no_grad()
def encode_split(
    model: CLIPSimilarity, images: Tensor, tokens: Tensor, *, batch: int = 256
) -> tuple[Tensor, Tensor]:
    """Embeddings of a rendered split: uint8 images ``(n_img, 3, S, S)`` and token ids
    ``(n_cap, ctx)`` -> ``(n_img, d)``, ``(n_cap, d)``, L2-normalised (their products are the
    cosines), on the model's device."""
    device = next(model.parameters()).device
    normalise = _normaliser(model)
    model.eval()
    img = torch.cat(
        [
            model.encode_images(normalise(images[i : i + batch]).to(device))
            for i in range(0, images.shape[0], batch)
        ]
    )
    cap = torch.cat(
        [
            model.encode_captions(tokens[i : i + batch].to(device))
            for i in range(0, tokens.shape[0], batch)
        ]
    )
    return img, cap


@torch.no_grad()
def zero_shot(
    model: CLIPSimilarity,
    images: Tensor,
    tokens: Tensor,
    captions_per_image: int,
    *,
    batch: int = 256,
) -> dict[str, float]:
    """Retrieval metrics of ``model`` as it is (no training) on a rendered split.

    Args:
        images: uint8 (n_img, 3, S, S).
        tokens: (n_cap, ctx) in SCAN order: caption k describes image k // captions_per_image.
    """
    n_img, n_cap = images.shape[0], tokens.shape[0]
    if n_cap != n_img * captions_per_image:
        raise ValueError(f"{n_cap} captions for {n_img} images x {captions_per_image}")
    img, cap = encode_split(model, images, tokens, batch=batch)
    scores = model.score_all_pairs(img, cap)
    return retrieval_metrics(scores[0], np.arange(n_cap) // captions_per_image)


def read_split(data_root: str | Path, split: str) -> tuple[list[dict], list[str]]:
    """(scenes, captions in SCAN order) of one split of a generated synthetic world."""
    folder = Path(data_root) / DATASET_NAME
    scenes = load_scenes(folder / f"{split}_scenes.jsonl")
    captions = (folder / f"{split}_caps.txt").read_text(encoding="utf-8").splitlines()
    if len(captions) != len(scenes) * CAPTIONS_PER_IMAGE:
        raise ValueError(
            f"{folder}: {len(captions)} {split} captions for {len(scenes)} scenes "
            f"(expected {CAPTIONS_PER_IMAGE} each); regenerate the world"
        )
    return scenes, captions


def pretrain_on_world(
    model: CLIPSimilarity,
    data_root: str | Path,
    render: Renderer,
    cfg: PretrainConfig,
    *,
    pool_size: int,
    offset: int = 0,
    shift: str = POOL_SHIFT,
    eval_split: str | None = "test",
    log: Callable[[dict], None] | None = None,
) -> dict:
    """Draw, render and tokenise a pool disjoint from the world's splits, pretrain, evaluate.

    Returns:
        Record with ``pool`` (size, duplicates dropped, render seconds), ``train`` (see
        :func:`pretrain`) and ``zero_shot`` (metrics on ``eval_split`` after training; absent
        when ``eval_split`` is None).
    """
    settings = load_world_settings(data_root)
    splits = {s: read_split(data_root, s) for s in ("train", "dev", "test")}
    exclude = [scene for scenes, _ in splits.values() for scene in scenes]
    t0 = time.perf_counter()
    scenes, captions, dropped = make_pool(settings, pool_size, exclude, offset=offset, shift=shift)
    images = render_images(scenes, render, model.image_size)
    flat = tokenize_captions(model, [c for caps in captions for c in caps])
    tokens = flat.view(len(scenes), CAPTIONS_PER_IMAGE, -1)
    pool = {
        "images": len(scenes), "captions": int(flat.shape[0]), "duplicates_dropped": dropped,
        "code": POOL_CODE + offset, "shift": shift, "world_seed": int(settings["seed"]),
        "prepare_seconds": round(time.perf_counter() - t0, 2),
    }  # fmt: skip
    if log is not None:
        log({"pool": pool})
    record = {"pool": pool, "train": pretrain(model, images, tokens, cfg, log=log)}
    if eval_split is not None:
        record["zero_shot"] = _zero_shot_record(model, *splits[eval_split], render, eval_split)
    return record


def _zero_shot_record(
    model: CLIPSimilarity, scenes: Sequence[dict], captions: Sequence[str], render: Renderer,
    split: str,
) -> dict:  # fmt: skip
    t0 = time.perf_counter()
    metrics = zero_shot(
        model, render_images(scenes, render, model.image_size),
        tokenize_captions(model, captions), CAPTIONS_PER_IMAGE,
    )  # fmt: skip
    return {"split": split, **metrics, "seconds": round(time.perf_counter() - t0, 2)}


def rename_stand_in(
    model: CLIPSimilarity,
    base: Mapping,
    data_root: str | Path,
    render: Renderer,
    *,
    eval_split: str | None = "test",
) -> dict:
    """Make ``model``, the stand-in of a world's unshifted pool, the ``renamed`` pool's stand-in
    (:func:`exchange_token_rows`, in place) and return its record.

    Args:
        base: the unshifted stand-in's pretraining record (its ``pool``, ``train``, ...).

    Returns:
        ``base`` with the pool's ``shift`` set to ``renamed``, ``renamed`` (the word pairs)
        and the new ``zero_shot`` on ``eval_split`` (dropped when None).

    Raises:
        ValueError: ``base`` is not a record of an unshifted pool of this world.
    """
    pool = base.get("pool") or {}
    if pool.get("shift", "none") != "none":
        raise ValueError(f"the stand-in's pool is already shifted ({pool.get('shift')!r})")
    seed = int(load_world_settings(data_root)["seed"])
    if pool.get("world_seed") != seed:
        raise ValueError(
            f"the stand-in was pretrained on a world of seed {pool.get('world_seed')}, "
            f"this world's is {seed}; pretrain one on this world first"
        )
    exchange_token_rows(model)
    record = {k: v for k, v in base.items() if k != "zero_shot"}
    record["pool"] = {**pool, "shift": "renamed"}
    record["renamed"] = dict(RENAMED_WORDS)
    if eval_split is not None:
        scenes, captions = read_split(data_root, eval_split)
        record["zero_shot"] = _zero_shot_record(model, scenes, captions, render, eval_split)
    return record
