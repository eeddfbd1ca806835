"""Raw-image splits in the NPC/SDD (annotations/scan_split) and OSA (annotations) layouts."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from precomputed.errors import DataFormatError, DataNotFoundError
from precomputed.image_layout import PackedStrings, locate_image_split, open_image_split
from precomputed.noise import clean_image_index, make_caption_noise

from .clip_layout import image_colour, image_number, write_clip_dataset


@pytest.mark.parametrize("naming", ["f30k", "coco", "cc"])
@pytest.mark.parametrize("layout", ["scan_split", "osa"])
def test_every_naming_and_layout_aligns_captions_with_images(tmp_path, naming, layout):
    root, captions = write_clip_dataset(
        tmp_path, naming=naming, layout=layout, num_images=4, cpi=2, first_id=3
    )
    split = open_image_split(root, "train", naming=naming, captions_per_image=2)
    assert split.num_images == 4 and split.num_captions == 8
    assert list(split.captions) == captions
    assert np.array_equal(split.true_image, clean_image_index(4, 2))
    assert split.clean.all()
    for k in range(8):  # caption k belongs to image k // cpi, decoded from its pixels
        with Image.open(split.image_path(split.image_index[k])) as img:
            assert image_number(img.convert("RGB").getpixel((4, 4))) == k // 2
    expected = {"f30k": "1003.jpg", "coco": "COCO_2014_000000000003.jpg", "cc": "img3.jpg"}
    assert split.image_files[0] == expected[naming]


def test_ids_listed_once_per_caption_are_collapsed(tmp_path):
    root, _ = write_clip_dataset(tmp_path, split="test", num_images=3, cpi=5, ids_per_caption=True)
    split = open_image_split(root, "test", naming="f30k", captions_per_image=5)
    assert split.num_images == 3 and list(split.image_files) == ["1000.jpg", "1001.jpg", "1002.jpg"]


def test_a_caption_block_with_differing_ids_is_refused(tmp_path):
    root, _ = write_clip_dataset(tmp_path, split="dev", num_images=2, cpi=2, ids_per_caption=True)
    ids = root / "annotations/scan_split/dev_ids.txt"
    ids.write_text("0\n1\n1\n1\n")
    with pytest.raises(DataFormatError, match=r"dev_ids.txt:2 has id '1' but line 1 has '0'"):
        open_image_split(root, "dev", naming="f30k", captions_per_image=2)


def test_id_count_fitting_neither_convention_is_refused(tmp_path):
    root, _ = write_clip_dataset(tmp_path, num_images=4, cpi=2)
    (root / "annotations/scan_split/train_ids.txt").write_text("0\n1\n2\n")
    with pytest.raises(DataFormatError, match=r"3 ids .* expected 4 ids \(one per image\) or 8"):
        open_image_split(root, "train", naming="f30k", captions_per_image=2)


def test_wrong_captions_per_image_is_named(tmp_path):
    root, _ = write_clip_dataset(tmp_path, num_images=4, cpi=2)
    with pytest.raises(DataFormatError, match="captions_per_image"):
        open_image_split(root, "train", naming="f30k", captions_per_image=3)


def test_an_image_listed_twice_is_refused(tmp_path):
    root, _ = write_clip_dataset(tmp_path, naming="coco", num_images=3, cpi=1)
    (root / "annotations/scan_split/train_ids.txt").write_text("0\n1\n0\n")
    with pytest.raises(DataFormatError, match="image id '0' is listed for image 0 and image 2"):
        open_image_split(root, "train", naming="coco", captions_per_image=1)


def test_missing_images_are_named_with_the_naming_fix(tmp_path):
    root, _ = write_clip_dataset(tmp_path, naming="coco", num_images=3, cpi=1)
    (root / "images/COCO_2014_000000000001.jpg").unlink()
    with pytest.raises(DataNotFoundError) as err:
        open_image_split(root, "train", naming="coco", captions_per_image=1)
    msg = str(err.value)
    assert "1 of 3 images are missing" in msg and "COCO_2014_000000000001.jpg" in msg
    assert "MSCOCO_rename.py" in msg
    split = open_image_split(root, "train", naming="coco", captions_per_image=1, check_files=False)
    assert split.num_images == 3


def test_missing_annotation_files_and_folders_are_named(tmp_path):
    with pytest.raises(DataNotFoundError, match="dataset root .* not found"):
        locate_image_split(tmp_path / "nope", "train", naming="f30k")
    root, _ = write_clip_dataset(tmp_path, num_images=2, cpi=1)
    with pytest.raises(DataNotFoundError, match=r"scan_split/dev_caps.txt, .*annotations/dev_caps"):
        locate_image_split(root, "dev", naming="f30k")
    (root / "annotations/scan_split/image_name.txt").unlink()
    (root / "annotations/scan_split/train_ids.txt").unlink()
    with pytest.raises(DataNotFoundError, match="train_ids.txt, .*image_name.txt"):
        locate_image_split(root, "train", naming="f30k")
    # coco needs no image_name.txt, but still the ids and the images folder
    (root / "annotations/scan_split/train_ids.txt").write_text("0\n1\n")
    for f in (root / "images").iterdir():
        f.unlink()
    (root / "images").rmdir()
    with pytest.raises(DataNotFoundError, match=r"missing .*images"):
        locate_image_split(root, "train", naming="coco")


def test_both_layouts_at_once_is_ambiguous_unless_named(tmp_path):
    write_clip_dataset(tmp_path, layout="scan_split", num_images=2, cpi=1)
    write_clip_dataset(tmp_path, layout="osa", num_images=3, cpi=1)
    with pytest.raises(DataFormatError, match="both layouts"):
        locate_image_split(tmp_path, "train", naming="f30k")
    assert locate_image_split(tmp_path, "train", naming="f30k", layout="osa").layout == "osa"
    split = open_image_split(tmp_path, "train", naming="f30k", captions_per_image=1, layout="osa")
    assert split.num_images == 3


def test_f30k_id_beyond_image_name_and_non_integer_coco_id(tmp_path):
    root, _ = write_clip_dataset(tmp_path, num_images=2, cpi=1)
    (root / "annotations/scan_split/train_ids.txt").write_text("0\n7\n")
    with pytest.raises(DataFormatError, match=r"image id 7 is outside .*image_name.txt \(2 lines"):
        open_image_split(root, "train", naming="f30k", captions_per_image=1)
    (root / "annotations/scan_split/train_ids.txt").write_text("0\nabc\n")
    with pytest.raises(DataFormatError, match="'abc' .* not an integer"):
        open_image_split(root, "train", naming="coco", captions_per_image=1, check_files=False)


def test_noise_index_and_subset(tmp_path):
    root, _ = write_clip_dataset(tmp_path, num_images=6, cpi=2)
    noise = make_caption_noise(clean_image_index(6, 2), 0.5, seed=1)
    split = open_image_split(root, "train", naming="f30k", captions_per_image=2, noise_index=noise)
    assert np.array_equal(split.image_index, noise)
    assert np.array_equal(split.clean, noise == np.arange(12) // 2)
    with pytest.raises(DataFormatError, match="length 10; expected 12"):
        open_image_split(root, "train", naming="f30k", captions_per_image=2, noise_index=noise[:10])
    sub = open_image_split(root, "train", naming="f30k", captions_per_image=2, max_images=2)
    assert sub.num_images == 2 and sub.num_captions == 4
    assert sub.captions[3] == "caption 1 of image 1"


def test_packed_strings_behave_like_a_list():
    items = ["a", "", "ünïcode ✓", "last"]
    packed = PackedStrings(items)
    assert len(packed) == 4 and list(packed) == items and packed[-1] == "last"
    assert packed[1:3] == items[1:3]
    with pytest.raises(IndexError):
        packed[4]
    assert image_colour(0) != image_colour(1)


def test_a_truncated_jpeg_is_refused_when_the_split_opens(tmp_path):
    """A JPEG cut off by a failed copy has a valid header; its missing end marker names it
    before any run folder exists (decoding would fail only in a loader worker)."""
    root, _ = write_clip_dataset(tmp_path, num_images=3, cpi=1)
    path = root / "images" / "1001.jpg"
    noise = np.random.default_rng(0).integers(0, 256, (128, 128, 3), dtype=np.uint8)
    Image.fromarray(noise).save(path)  # the scan data is most of the file
    data = path.read_bytes()
    assert data.endswith(b"\xff\xd9")
    path.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(DataFormatError, match=r"1001.jpg \(truncated: no JPEG end marker\)"):
        open_image_split(root, "train", naming="f30k", captions_per_image=1)
