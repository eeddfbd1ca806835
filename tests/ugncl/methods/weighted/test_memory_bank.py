"""NPC/SDD memory bank on tiny sets with known neighbours
(ugncl/methods/weighted/memory_bank.py)."""

import numpy as np
import pytest
import torch

from ugncl.methods.weighted.memory_bank import (
    EmbeddingTable,
    MemoryBank,
    build_memory_bank,
    gmm_clean_set,
    nearest_clean,
)

# 3 images, 2 captions each (samples 0-5), embeddings on the unit circle at known angles.
IMAGE_INDEX = np.array([0, 0, 1, 1, 2, 2])


def _angle(deg):
    r = np.deg2rad(np.asarray(deg, dtype=np.float64))
    return np.stack([np.cos(r), np.sin(r)], axis=1).astype(np.float32)


IMAGE_ANGLE = {0: 0.0, 1: 10.0, 2: 90.0}  # images 0 and 1 are close, 2 is far
CAPTION_ANGLE = [0.0, 45.0, 12.0, 80.0, 88.0, 180.0]


def _tables():
    image_emb = _angle([IMAGE_ANGLE[i] for i in IMAGE_INDEX]) * np.array(
        [[1.0], [1.0], [3.0], [3.0], [1.0], [1.0]], dtype=np.float32
    )
    caption_emb = _angle(CAPTION_ANGLE)
    return image_emb, caption_emb


def test_known_neighbours_query_excluded():
    image_emb, caption_emb = _tables()
    clean = np.ones(6, dtype=bool)
    bank = build_memory_bank(
        clean, image_emb, caption_emb, IMAGE_INDEX, np.zeros(6), image_neighbour="other_image"
    )
    # Image 0 (0 deg): its own pairs (0, 1) are excluded; nearest other image is 1 (10 deg),
    # first sample of image 1 is 2. Image 1 -> image 0 (sample 0). Image 2 (90) -> image 1.
    # One entry per sample: siblings share their image's neighbour.
    assert bank.image_bank.tolist() == [2, 2, 0, 0, 2, 2]
    # Captions (nearest angle among the others): 0 (0) -> 2 (12); 1 (45) -> 2 (12, 33 deg away;
    # 80 is 35 away); 2 (12) -> 0; 3 (80) -> 4 (88); 4 (88) -> 3; 5 (180) -> 4 (88, 92 away).
    assert bank.text_bank.tolist() == [2, 2, 0, 4, 3, 4]
    assert (bank.text_bank != np.arange(6)).all()  # never the query itself


def test_image_itself_is_the_nearest_clean_neighbour_through_a_clean_sibling():
    # The papers' reading (default): only the sample's own pair is excluded, so an image whose
    # sibling caption is clean finds itself (cosine 1) through that sibling.
    image_emb, caption_emb = _tables()
    clean = np.array([True, False, False, True, True, True])  # samples 1 and 2 noisy
    bank = build_memory_bank(clean, image_emb, caption_emb, IMAGE_INDEX, np.zeros(6))
    assert bank.image_neighbour == "image_itself"
    # 0: its sibling 1 is not clean -> nearest other image 1 via its clean pair 3 (10 deg);
    # 1 (noisy): its image's clean pair 0; 2 (noisy): image 1's clean pair 3; 3: the only clean
    # pair of image 1 is itself -> image 0 (sample 0); 4 <-> 5 siblings.
    assert bank.image_bank.tolist() == [3, 0, 3, 0, 5, 4]
    assert (bank.image_bank != np.arange(6)).all()  # never the sample's own pair
    other = build_memory_bank(
        clean, image_emb, caption_emb, IMAGE_INDEX, np.zeros(6), image_neighbour="other_image"
    )
    assert other.image_bank.tolist() == [3, 3, 0, 0, 3, 3]  # never the query's image
    with pytest.raises(ValueError, match="image_neighbour"):
        build_memory_bank(clean, image_emb, caption_emb, IMAGE_INDEX, np.zeros(6),
                          image_neighbour="self")  # fmt: skip


def test_only_clean_keys_are_returned_and_norms_do_not_matter():
    image_emb, caption_emb = _tables()  # image 1 rows have norm 3: normalised keys ignore it
    clean = np.array([True, True, False, False, True, True])  # image 1 is not clean
    bank = build_memory_bank(
        clean, image_emb, caption_emb, IMAGE_INDEX, np.zeros(6), image_neighbour="other_image"
    )
    assert bank.image_bank.tolist() == [4, 4, 0, 0, 0, 0]  # image 0 -> image 2, not image 1
    assert clean[bank.text_bank].all()
    # Keys 0 (0), 1 (45), 4 (88), 5 (180): 0 -> 1; 1 (45) -> 4 (43 away; 0 is 45 away); 2 -> 0;
    # 3 (80) -> 4; 4 (88) -> 1 (43 away); 5 (180) -> 4 (92 away; 45 is 135 away).
    assert bank.text_bank.tolist() == [1, 4, 0, 4, 1, 4]


def test_scatter_by_index_makes_loader_order_irrelevant():
    # The releases index loader-ordered features with dataset ids; here batches of any order
    # scatter into sample-indexed tables, and the bank is the same.
    image_emb, caption_emb = _tables()
    ref = build_memory_bank(np.ones(6, bool), image_emb, caption_emb, IMAGE_INDEX, np.zeros(6))
    order = np.array([4, 1, 5, 0, 3, 2])
    img_t, cap_t = EmbeddingTable(6), EmbeddingTable(6)
    for chunk in np.array_split(order, 3):
        img_t.add(torch.as_tensor(chunk), torch.as_tensor(image_emb[chunk]))
        cap_t.add(chunk, caption_emb[chunk])
    assert img_t.visited.all()
    bank = build_memory_bank(np.ones(6, bool), img_t.values, cap_t.values, IMAGE_INDEX, np.zeros(6))
    assert np.array_equal(bank.image_bank, ref.image_bank)
    assert np.array_equal(bank.text_bank, ref.text_bank)


def test_blocked_search_equals_brute_force():
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(37, 5, generator=g), torch.randn(23, 5, generator=g)
    qid, kid = torch.arange(37), torch.arange(23) * 2  # even queries are excluded from one key
    got = nearest_clean(q, k, kid, qid, query_block=4, key_block=5)
    s = torch.nn.functional.normalize(q) @ torch.nn.functional.normalize(k).T
    s[qid[:, None] == kid[None, :]] = -float("inf")
    assert torch.equal(got, s.argmax(dim=1))
    none = nearest_clean(q[:1], k[:1], torch.tensor([0]), torch.tensor([0]))
    assert none.tolist() == [-1]


def test_gmm_clean_set_lower_loss_component():
    losses = np.array([0.5, 0.6, 0.55, 0.52, 4.0, 4.2, 3.9, 4.1])
    clean, p = gmm_clean_set(losses, 0.99)
    assert clean.tolist() == [True] * 4 + [False] * 4
    assert p.dtype == np.float32


def test_save_load_roundtrip_and_consistency_checks(tmp_path):
    image_emb, caption_emb = _tables()
    bank = build_memory_bank(np.ones(6, bool), image_emb, caption_emb, IMAGE_INDEX, np.arange(6))
    path = tmp_path / "bank.npz"
    bank.save(path)
    back = MemoryBank.load(path, IMAGE_INDEX)
    for name in ("clean", "image_bank", "text_bank", "image_index", "score"):
        assert np.array_equal(getattr(back, name), getattr(bank, name))
    assert back.image_bank.dtype == np.int64
    with pytest.raises(ValueError, match="different caption->image index"):
        MemoryBank.load(path, IMAGE_INDEX[::-1].copy())
    bad = dict(np.load(path))
    bad["clean"] = np.zeros(6, dtype=bool)
    np.savez(tmp_path / "bad.npz", **bad)
    with pytest.raises(ValueError, match="outside the clean set"):
        MemoryBank.load(tmp_path / "bad.npz")
    old = dict(np.load(path))  # an older file: one image-bank entry per image, no setting
    old["image_bank"] = old["image_bank"][[0, 2, 4]]
    del old["image_neighbour"]
    np.savez(tmp_path / "old.npz", **old)
    with pytest.raises(ValueError, match="delete it to rebuild"):
        MemoryBank.load(tmp_path / "old.npz")


def test_lookup_by_sample_index_not_subset_position():
    image_emb, caption_emb = _tables()
    bank = build_memory_bank(np.ones(6, bool), image_emb, caption_emb, IMAGE_INDEX, np.zeros(6))
    # A self-dropped epoch keeps samples 3 and 5; the batch carries their sample indices.
    index = torch.tensor([3, 5])
    img_side, txt_side = bank.lookup(index, torch.as_tensor(IMAGE_INDEX[[3, 5]]))
    assert txt_side.tolist() == [bank.text_bank[3], bank.text_bank[5]]
    assert txt_side.tolist() != bank.text_bank[[0, 1]].tolist()  # the release's position lookup
    assert img_side.tolist() == [bank.image_bank[3], bank.image_bank[5]]


def test_empty_or_single_image_clean_set_is_a_clear_error():
    """A bank whose clean pairs show fewer than 2 images leaves some query without a
    neighbour (the query itself and its image are excluded): refused at build time with the
    settings to change, not a lookup failure mid-epoch."""
    from precomputed.errors import InvalidSettingError

    image_emb, caption_emb = _tables()
    with pytest.raises(InvalidSettingError, match="clean set is empty or too small"):
        build_memory_bank(np.zeros(6, bool), image_emb, caption_emb, IMAGE_INDEX, np.zeros(6))
    one = np.zeros(6, bool)
    one[0] = True
    with pytest.raises(InvalidSettingError, match="auto_beta_std"):
        build_memory_bank(one, image_emb, caption_emb, IMAGE_INDEX, np.zeros(6))
