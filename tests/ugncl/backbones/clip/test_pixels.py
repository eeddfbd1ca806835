"""The uint8 pixel cache: the same pixels as open_clip's transform, keyed by file identity."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
import torch
from PIL import Image

from precomputed.image_layout import open_image_split
from ugncl.backbones.clip.adapter import build_clip
from ugncl.backbones.clip.data import ImageTrainingData, load_rgb
from ugncl.backbones.clip.pixels import (
    DecodedPixels,
    normalize_pixels,
    open_pixel_cache,
    split_transform,
)

from ....precomputed.clip_layout import write_clip_dataset


def _photos(folder, n: int = 3) -> list:
    """Noisy JPEGs of Flickr30K's aspect (500 x 375 and a portrait one), quality 90."""
    rng = np.random.default_rng(0)
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        w, h = (500, 375) if i % 2 == 0 else (375, 500)
        pixels = rng.integers(0, 256, (h, w, 3), dtype=np.uint8)
        path = folder / f"{i}.jpg"
        Image.fromarray(pixels).save(path, quality=90)
        paths.append(path)
    return paths


@pytest.fixture(scope="module")
def model():
    return build_clip()  # the tiny architecture, 64 px


def test_cached_pixels_normalised_equal_open_clip_transform(tmp_path, model):
    paths = _photos(tmp_path / "img")
    transform = model.image_transform(train=False)
    spec = model.pixel_transform()
    cache = open_pixel_cache(paths, spec, tmp_path / "cache")
    assert cache.shape == (3, 3, 64, 64)
    for i, p in enumerate(paths):
        pixels = cache(i)
        assert pixels.dtype == torch.uint8
        reference = transform(load_rgb(p))
        ours = normalize_pixels(pixels.unsqueeze(0), spec.mean, spec.std)[0]
        torch.testing.assert_close(ours, reference, atol=1e-6, rtol=0)
    # The model normalises uint8 input itself: the same embedding as from the float pixels.
    with torch.no_grad():
        from_uint8 = model.encode_images(torch.stack([cache(i) for i in range(3)]))
        from_float = model.encode_images(torch.stack([transform(load_rgb(p)) for p in paths]))
    torch.testing.assert_close(from_uint8, from_float, atol=1e-5, rtol=0)


def test_cache_is_reused_and_rebuilt_when_a_file_or_the_size_changes(tmp_path, model):
    paths = _photos(tmp_path / "img", n=2)
    spec = model.pixel_transform()
    first = open_pixel_cache(paths, spec, tmp_path / "cache")
    again = open_pixel_cache(paths, spec, tmp_path / "cache")
    assert again.path == first.path
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [first.path.name]  # no tmp left

    Image.new("RGB", (500, 375), (200, 10, 10)).save(paths[1], quality=90)
    st = os.stat(paths[1])
    os.utime(paths[1], ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
    changed = open_pixel_cache(paths, spec, tmp_path / "cache")
    assert changed.path != first.path
    assert torch.equal(changed(0), first(0)) and not torch.equal(changed(1), first(1))
    assert torch.equal(changed(1), DecodedPixels(paths, spec)(1))

    bigger = split_transform(build_clip(image_size=96).image_transform(train=False))
    resized = open_pixel_cache(paths, bigger, tmp_path / "cache")
    assert resized.path not in (first.path, changed.path) and resized.shape[-1] == 96


def test_cache_pickles_without_its_mapping_and_feeds_workers(tmp_path, model):
    root, _ = write_clip_dataset(tmp_path, naming="cc", num_images=4, cpi=2)
    split = open_image_split(root, "train", naming="cc", captions_per_image=2)
    spec = model.pixel_transform()
    cache = open_pixel_cache(
        [split.image_path(i) for i in range(4)], spec, tmp_path / "cache", num_workers=1
    )
    cache(0)
    assert pickle.loads(pickle.dumps(cache))._array is None
    data = ImageTrainingData(
        split, model.image_transform(train=False), model.tokenizer(), pixels=cache
    )
    loader = torch.utils.data.DataLoader(
        data.dataset, batch_size=8, num_workers=1, collate_fn=data.collate
    )
    batch = next(iter(loader))
    assert batch.images.dtype == torch.uint8 and batch.images.shape == (8, 3, 64, 64)
    assert torch.equal(batch.images[3], cache(int(split.image_index[3])))
    # Bank samples (NPC/SDD fetch samples by index through the dataset) read the same cache.
    fetched = data.collate([data.dataset[5], data.dataset[1]])
    assert torch.equal(fetched.images[0], cache(int(split.image_index[5])))


def test_split_transform_refuses_a_transform_it_cannot_cache():
    with pytest.raises(ValueError, match="cannot cache the pixels"):
        split_transform(lambda img: img)


def test_pixel_source_follows_the_data_settings(tmp_path, model):
    from ugncl.backbones.clip.run_data import ImageEvalData, pixel_source
    from ugncl.core.config import DataConfig, ImageDataConfig

    root, _ = write_clip_dataset(tmp_path, naming="cc", num_images=3, cpi=1)
    split = open_image_split(root, "train", naming="cc", captions_per_image=1)
    spec = model.pixel_transform()
    decoded = pixel_source(
        DataConfig(root=str(root.parent), name=root.name, clip=ImageDataConfig(pixel_cache=False)),
        split,
        spec,
    )
    cached = pixel_source(DataConfig(root=str(root.parent), name=root.name), split, spec)
    assert isinstance(decoded, DecodedPixels) and cached.path.parent == root / "cache" / "pixels"
    assert all(torch.equal(decoded(i), cached(i)) for i in range(3))
    eval_data = ImageEvalData(
        split, model.image_transform(), model.tokenizer(), name="cc", pixels=cached
    )
    assert eval_data.images(0, 3).dtype == torch.uint8
    assert torch.equal(eval_data.images(1, 2)[0], cached(1))


def test_building_the_cache_leaves_the_global_generator_as_it_was(tmp_path, model):
    """A run that builds the cache draws the same numbers afterwards as one that finds it
    built (the build's DataLoader would draw its base seed from the global generator)."""
    paths = _photos(tmp_path / "img", n=2)
    torch.manual_seed(3)
    open_pixel_cache(paths, model.pixel_transform(), tmp_path / "cache")  # builds
    after_build = torch.rand(4)
    torch.manual_seed(3)
    open_pixel_cache(paths, model.pixel_transform(), tmp_path / "cache")  # finds it
    assert torch.equal(torch.rand(4), after_build)
