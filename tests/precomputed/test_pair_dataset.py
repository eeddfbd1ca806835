import numpy as np
import pytest
import torch

from precomputed.collate import pad_captions
from precomputed.dataset import PairDataset, open_split
from precomputed.errors import DataFormatError
from precomputed.noise import clean_image_index, make_caption_noise
from tests.precomputed.conftest import tiny_captions
from ugncl.backbones.sgraf.data import collate_pairs


@pytest.mark.parametrize("fmt,caps,cpi", [("npy", "txt", 5), ("h5", "tsv", 1)])
def test_open_split_and_items(make_split, toy_vocab, fmt, caps, cpi):
    root = make_split(fmt=fmt, caps=caps, cpi=cpi, num_images=8)
    split = open_split(root, "toy_precomp", "train", toy_vocab, captions_per_image=cpi)
    assert split.num_images == 8 and split.num_captions == 8 * cpi
    assert split.true_image.tolist() == (np.arange(8 * cpi) // cpi).tolist()
    assert split.clean.all()
    feats, ids, k, image, clean = PairDataset(split)[cpi * 3]
    assert feats.shape == (4, 6) and feats[0, 0] == 3 and image == 3 and clean
    assert ids.dtype == np.int64 and ids[0] == 1 and ids[-1] == 2 and k == cpi * 3


def test_noise_and_batch(make_split, toy_vocab):
    root = make_split()
    noisy = make_caption_noise(clean_image_index(8, 5), 0.5, seed=0)
    split = open_split(root, "toy_precomp", "train", toy_vocab, captions_per_image=5)
    split = split.with_noise(noisy)
    ds = PairDataset(split)
    batch = collate_pairs([ds[k] for k in range(40)])
    assert batch.images.shape == (40, 4, 6) and batch.images.dtype == torch.float32
    assert batch.index.tolist() == list(range(40))
    assert batch.image_index.tolist() == noisy.tolist()
    assert batch.clean.tolist() == (noisy == np.arange(40) // 5).tolist()
    assert batch.images[:, 0, 0].long().tolist() == noisy.tolist()  # noisy image is served
    assert (batch.captions[:, 0] == 1).all() and batch.lengths.dtype == torch.int64
    assert batch.to("cpu").captions.shape == batch.captions.shape


def test_pad_captions_no_sort():
    caps, lengths = pad_captions([np.array([1, 5, 2]), np.array([1, 2]), np.array([1, 4, 4, 2])])
    assert lengths.tolist() == [3, 2, 4]
    assert caps.tolist() == [[1, 5, 2, 0], [1, 2, 0, 0], [1, 4, 4, 2]]


def test_max_images_subset(make_split, toy_vocab):
    root = make_split(split="dev", num_images=8)
    split = open_split(root, "toy_precomp", "dev", toy_vocab, captions_per_image=5, max_images=3)
    assert split.num_images == 3 and split.num_captions == 15 and len(split.features) == 3
    assert [split.features[i][0, 0] for i in (2, 0)] == [2, 0]
    with pytest.raises(IndexError):
        split.features[3]
    with pytest.raises(DataFormatError, match="subset"):
        split.with_noise(clean_image_index(8, 5))


def test_count_mismatch_reports_both_counts(make_split, toy_vocab):
    root = make_split(num_images=8, cpi=5)
    with pytest.raises(DataFormatError, match=r"40 captions for 8 images.*=5 would match"):
        open_split(root, "toy_precomp", "train", toy_vocab, captions_per_image=1)


def test_bad_noise_index_for_split(make_split, toy_vocab):
    root = make_split()
    with pytest.raises(DataFormatError, match="length 8"):
        open_split(root, "toy_precomp", "train", toy_vocab, captions_per_image=5).with_noise(
            np.arange(8)
        )


def test_long_captions_are_capped_and_counted(make_split, toy_vocab, caplog):
    """A 14k-token web caption made SGR scoring run for minutes: captions are capped."""
    texts = tiny_captions(8, 5)
    texts[3] = " ".join(["dog"] * 14_000)
    texts[7] = " ".join(["cat"] * 99)  # 99 words + <start>/<end> = 101 ids: cut as well
    texts[9] = " ".join(["red"] * 98)  # exactly 100 ids: kept whole
    root = make_split(captions=texts)
    with caplog.at_level("WARNING", logger="precomputed.dataset"):
        split = open_split(root, "toy_precomp", "train", toy_vocab, captions_per_image=5)
    lengths = split.tokens.lengths
    assert lengths.max() == 100 and lengths[3] == 100 and lengths[7] == 100 and lengths[9] == 100
    assert split.tokens[3][-1] == 2 and split.tokens[3][0] == 1  # still <start> ... <end>
    assert split.num_truncated_captions == 2
    assert "2 of 40 captions are longer than max_caption_tokens=100" in caplog.text
    uncapped = open_split(
        root, "toy_precomp", "train", toy_vocab, captions_per_image=5, max_caption_tokens=None
    )
    assert uncapped.tokens.lengths[3] == 14_002 and uncapped.num_truncated_captions == 0
    with pytest.raises(ValueError, match="max_caption_tokens must be >= 3"):
        open_split(root, "toy_precomp", "train", toy_vocab, captions_per_image=5,
                   max_caption_tokens=2)  # fmt: skip
