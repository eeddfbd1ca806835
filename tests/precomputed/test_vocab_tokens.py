import json
from pathlib import Path

import numpy as np
import pytest

from precomputed.errors import DataFormatError, DataNotFoundError
from precomputed.tokens import TokenizedCaptions
from precomputed.vocab import SPECIALS, Vocabulary, build_vocab, load_vocab

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # tests/fixtures, see README there


@pytest.mark.parametrize("name,size", [("f30k", 8481), ("coco", 11353)])
def test_real_vocab_fixtures_load(name, size):
    vocab = load_vocab(FIXTURES / f"{name}_precomp_vocab.json")
    assert len(vocab) == size
    assert vocab.idx2word[:4] == list(SPECIALS)
    assert vocab.word2idx["dog"] == vocab.idx2word.index("dog")


def test_ids_map_oov_to_unk():
    vocab = Vocabulary([*SPECIALS, "a", "dog"])
    assert vocab.ids(["a", "zebra", "dog"]) == [4, 3, 5]


def test_build_vocab_scan_rules():
    caps = ["A dog runs.", "a dog sits", "a dog", "a dog", "the cat"]
    vocab = build_vocab(caps, min_count=4)
    assert vocab.idx2word == [*SPECIALS, "a", "dog"]  # first-occurrence order, count >= 4
    assert len(build_vocab(caps, min_count=1)) == 4 + 7  # a dog runs . sits the cat


def test_save_load_roundtrip(tmp_path):
    vocab = build_vocab(["a dog runs", "a cat"], min_count=1)
    vocab.save(tmp_path / "v.json")
    data = json.loads((tmp_path / "v.json").read_text())
    assert set(data) == {"word2idx", "idx2word", "idx"} and data["idx2word"]["4"] == "a"
    assert load_vocab(tmp_path / "v.json").idx2word == vocab.idx2word


def _write(tmp_path, data):
    path = tmp_path / "v.json"
    path.write_text(json.dumps(data))
    return path


def test_bad_vocab_files(tmp_path):
    with pytest.raises(DataNotFoundError):
        load_vocab(tmp_path / "none.json")
    words = ["<pad>", "<start>", "<unk>", "<end>", "dog"]  # <unk>/<end> swapped
    data = {
        "word2idx": {w: i for i, w in enumerate(words)},
        "idx2word": {str(i): w for i, w in enumerate(words)},
        "idx": 5,
    }
    with pytest.raises(DataFormatError, match=r"<end>=2.*'<end>' is 3"):
        load_vocab(_write(tmp_path, data))
    with pytest.raises(DataFormatError, match="lacks key"):
        load_vocab(_write(tmp_path, {"word2idx": {}}))
    good = build_vocab(["dog"], min_count=1).to_json()
    good["idx"] = 7
    with pytest.raises(DataFormatError, match="idx=7"):
        load_vocab(_write(tmp_path, good))


def test_tokenized_captions_are_flat():
    vocab = build_vocab(["a dog", "a cat runs ."], min_count=1)
    tok = TokenizedCaptions.from_texts(["a dog", "A cat runs.", "a zebra"], vocab)
    assert tok.ids.dtype == np.int32 and tok.offsets.dtype == np.int64
    assert len(tok) == 3 and tok.lengths.tolist() == [4, 6, 4]
    assert tok[1].tolist() == [1, *vocab.ids(["a", "cat", "runs", "."]), 2]  # <start> .. <end>
    assert tok[2].tolist()[2] == 3  # <unk>


@pytest.mark.parametrize(
    "content,fragment",
    [
        (b"\xff\xfe not utf-8", "is not valid UTF-8 JSON"),
        (b'{"word2idx": [1, 2], "idx2word": {}, "idx": 2}', "is not in the SCAN format"),
        (b'{"word2idx": {"a": "x"}, "idx2word": {}, "idx": 1}', "is not in the SCAN format"),
    ],
)
def test_malformed_vocab_names_the_file_and_the_fix(tmp_path, content, fragment):
    path = tmp_path / "v.json"
    path.write_bytes(content)
    with pytest.raises(DataFormatError, match=rf"vocabulary .*v\.json .*{fragment}"):
        load_vocab(path)


def test_duplicate_vocab_words_name_the_file(tmp_path):
    words = [*SPECIALS, "dog", "dog"]
    data = {"word2idx": {"<pad>": 0, "<start>": 1, "<end>": 2, "<unk>": 3, "dog": 4, "cat": 5},
            "idx2word": {str(i): w for i, w in enumerate(words)}, "idx": 6}  # fmt: skip
    path = tmp_path / "v.json"
    path.write_text(json.dumps(data))
    with pytest.raises(DataFormatError, match=r"v\.json.*(duplicate|disagree).*build_vocab"):
        load_vocab(path)


def test_non_utf8_captions_name_file_and_line(tmp_path):
    from precomputed.captions import read_captions

    path = tmp_path / "train_caps.txt"
    path.write_bytes("a dog .\na caf\xe9 .\n".encode("latin1"))
    with pytest.raises(DataFormatError, match=r"train_caps\.txt is not UTF-8 text \(line 2"):
        read_captions(path)
