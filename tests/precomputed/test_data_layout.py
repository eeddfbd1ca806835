import pytest

from precomputed.captions import check_caption_count, read_captions_tsv, read_captions_txt
from precomputed.errors import DataFormatError, DataNotFoundError
from precomputed.layout import locate_split


@pytest.mark.parametrize("fmt,caps", [("npy", "txt"), ("h5", "tsv")])
@pytest.mark.parametrize("split", ["train", "dev", "test", "testall"])
def test_locate_split_any_precomp_folder(make_split, fmt, caps, split):
    root = make_split(name="mydata_precomp", split=split, fmt=fmt, caps=caps)
    paths = locate_split(root, "mydata_precomp", split)
    assert paths.features.name == f"{split}_ims.{fmt}"
    assert paths.captions.name == f"{split}_caps.{caps}"
    assert locate_split(root, "mydata", split).features == paths.features  # suffix optional


def test_missing_folder_names_paths_and_hint(tmp_path):
    with pytest.raises(DataNotFoundError) as err:
        locate_split(tmp_path, "f30k", "test")
    msg = str(err.value)
    assert str(tmp_path / "f30k") in msg and str(tmp_path / "f30k_precomp") in msg
    assert "make_synthetic.py" in msg
    assert isinstance(err.value, FileNotFoundError)


def test_missing_caption_file_names_both_candidates(make_split):
    root = make_split()
    (root / "toy_precomp" / "train_caps.txt").unlink()
    with pytest.raises(DataNotFoundError, match=r"train_caps\.tsv") as err:
        locate_split(root, "toy_precomp", "train")
    assert "train_caps.txt" in str(err.value) and "TAB" in str(err.value)


def test_missing_features_names_npy_and_h5(make_split):
    root = make_split()
    (root / "toy_precomp" / "train_ims.npy").unlink()
    with pytest.raises(DataNotFoundError, match=r"train_ims\.h5"):
        locate_split(root, "toy_precomp", "train")


def test_ambiguous_and_unknown_split(make_split):
    root = make_split()
    (root / "toy_precomp" / "train_caps.tsv").write_text("0\tx\n")
    with pytest.raises(DataFormatError, match="ambiguous"):
        locate_split(root, "toy_precomp", "train")
    with pytest.raises(ValueError, match="unknown split"):
        locate_split(root, "toy_precomp", "val")


def test_txt_and_tsv_readers(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_text("one cap\ntwo cap\n")
    assert read_captions_txt(txt) == ["one cap", "two cap"]
    tsv = tmp_path / "a.tsv"
    tsv.write_text("12_3\tfirst caption\n13_4\tsecond\n")
    assert read_captions_tsv(tsv) == (["12_3", "13_4"], ["first caption", "second"])


def test_empty_caption_reports_line(tmp_path):
    txt = tmp_path / "a.txt"
    txt.write_text("one\n   \nthree\n")
    with pytest.raises(DataFormatError, match=r"a\.txt:2"):
        read_captions_txt(txt)
    tsv = tmp_path / "a.tsv"
    tsv.write_text("1\tok\n2\t\n")
    with pytest.raises(DataFormatError, match=r"a\.tsv:2"):
        read_captions_tsv(tsv)
    tsv.write_text("1\tok\nno tab here\n")
    with pytest.raises(DataFormatError, match="no tab"):
        read_captions_tsv(tsv)


def test_caption_count_check():
    check_caption_count(10, 2, 5)
    check_caption_count(3, 3, 1)
    with pytest.raises(DataFormatError, match=r"10 captions for 2 images.*captions_per_image=5"):
        check_caption_count(10, 2, 1)
    with pytest.raises(DataFormatError, match="no captions_per_image matches"):
        check_caption_count(11, 2, 5)
