"""Raw-image pairs for the CLIP track: items, batches, workers, and one noise for both tracks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from precomputed.dataset import open_split
from precomputed.image_layout import open_image_split
from precomputed.noise import clean_image_index, load_noise_index, make_caption_noise, noise_sha256
from precomputed.synthetic import make_synthetic
from precomputed.synthetic.render import write_clip_images
from precomputed.vocab import load_vocab
from ugncl.backbones.clip.data import (
    CaptionDataset,
    ImageDataset,
    ImageTrainingData,
    caption_lengths,
)

from ....precomputed.clip_layout import image_number, write_clip_dataset

CONTEXT = 12


def fake_tokenizer(texts: list[str]) -> torch.Tensor:
    """Stand-in with open_clip's contract: (n, CONTEXT) int64, start=1 ... end=2, 0-padded."""
    out = torch.zeros((len(texts), CONTEXT), dtype=torch.int64)
    for i, t in enumerate(texts):
        ids = [1, *[3 + len(w) for w in t.split()][: CONTEXT - 2], 2]
        out[i, : len(ids)] = torch.tensor(ids)
    return out


def to_tensor(img) -> torch.Tensor:
    return torch.from_numpy(np.asarray(img, dtype=np.float32)).permute(2, 0, 1) / 255.0


@pytest.fixture
def split(tmp_path):
    root, _ = write_clip_dataset(tmp_path, naming="coco", num_images=6, cpi=2)
    noise = make_caption_noise(clean_image_index(6, 2), 0.5, seed=0)
    return open_image_split(root, "train", naming="coco", captions_per_image=2, noise_index=noise)


def test_item_pairs_caption_k_with_its_noisy_image(split):
    data = ImageTrainingData(split, to_tensor, fake_tokenizer)
    assert data.num_samples == 12 and np.array_equal(data.image_index, split.image_index)
    assert not data.clean.all() and np.array_equal(data.clean, split.clean)
    for k in range(12):
        image, ids, index, image_index, clean = data.dataset[k]
        assert image.shape == (3, 8, 8) and ids.dtype == torch.int64 and ids.shape == (CONTEXT,)
        assert index == k and image_index == split.image_index[k]
        assert clean == (image_index == k // 2)
        pixel = tuple(round(float(v) * 255) for v in image[:, 4, 4])
        assert image_number(pixel) == image_index  # the noisy image was decoded
        assert torch.equal(ids, fake_tokenizer([split.captions[k]])[0])


def test_collate_gives_the_pair_batch_fields(split):
    data = ImageTrainingData(split, to_tensor, fake_tokenizer)
    batch = data.collate([data.dataset[k] for k in (5, 0, 3)])
    assert batch.images.shape == (3, 3, 8, 8) and batch.images.dtype == torch.float32
    assert batch.captions.shape == (3, CONTEXT) and batch.captions.dtype == torch.int64
    assert batch.index.tolist() == [5, 0, 3]
    assert batch.image_index.tolist() == split.image_index[[5, 0, 3]].tolist()
    assert batch.clean.dtype == torch.bool
    # "caption 1 of image 2" -> start + 5 words + end
    assert batch.lengths.tolist() == [7, 7, 7]


def test_lengths_count_up_to_the_end_token_even_with_inner_zero_ids():
    # In CLIP's vocabulary id 0 is both the pad and "!": an inner 0 is not padding.
    tokens = torch.tensor([[49406, 320, 0, 49407, 0, 0], [49406, 49407, 0, 0, 0, 0], [0] * 6])
    assert caption_lengths(tokens).tolist() == [4, 2, 0]


def test_workers_decode_the_same_batches(split):
    data = ImageTrainingData(split, to_tensor, fake_tokenizer)

    def batches(workers: int) -> list:
        loader = torch.utils.data.DataLoader(
            data.dataset, batch_size=5, collate_fn=data.collate, num_workers=workers
        )
        return list(loader)

    for a, b in zip(batches(0), batches(2), strict=True):
        assert torch.equal(a.images, b.images) and torch.equal(a.captions, b.captions)
        assert torch.equal(a.image_index, b.image_index)


def test_evaluation_datasets_visit_each_image_and_caption_once(split):
    images = ImageDataset(split, to_tensor)
    captions = CaptionDataset(split, fake_tokenizer)
    assert len(images) == 6 and len(captions) == 12
    for i in range(6):
        pixel = tuple(round(float(v) * 255) for v in images[i][:, 0, 0])
        assert image_number(pixel) == i


def test_one_noise_file_gives_one_sha256_through_both_tracks(tmp_path):
    make_synthetic(tmp_path, num_train=8, num_dev=2, num_test=2, regions=4, feature_dim=8,
                   noise_ratios=(0.5,))  # fmt: skip
    clip_root = write_clip_images(tmp_path, size=16)
    noise_file = tmp_path / "synthetic_precomp" / "noise_0.5_seed0.npy"
    noise = load_noise_index(noise_file, num_images=8, captions_per_image=5)
    vocab = load_vocab(tmp_path / "synthetic_precomp_vocab.json")
    features = open_split(
        tmp_path, "synthetic_precomp", "train", vocab, captions_per_image=5
    ).with_noise(noise)
    images = open_image_split(
        clip_root, "train", naming="f30k", captions_per_image=5, noise_index=noise
    )
    assert noise_sha256(features.image_index) == noise_sha256(images.image_index)
    assert noise_sha256(images.image_index) == noise_sha256(np.load(noise_file))
    assert np.array_equal(features.clean, images.clean) and not images.clean.all()
    assert np.array_equal(features.true_image, images.true_image)
    assert features.num_captions == images.num_captions


def test_open_clip_tokenizer_and_transform_plug_in(tmp_path):
    open_clip = pytest.importorskip("open_clip")
    from open_clip.transform import image_transform

    root, _ = write_clip_dataset(tmp_path, naming="cc", num_images=2, cpi=1)
    split = open_image_split(root, "train", naming="cc", captions_per_image=1)
    data = ImageTrainingData(split, image_transform(32, is_train=False), open_clip.get_tokenizer(
        "ViT-B-32"))  # fmt: skip
    batch = data.collate([data.dataset[0], data.dataset[1]])
    assert batch.images.shape == (2, 3, 32, 32) and batch.captions.shape == (2, 77)
    end = batch.captions.argmax(dim=1)  # CLIP's end-of-text id is the largest id
    assert torch.equal(batch.lengths, end + 1)
