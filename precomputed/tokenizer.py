"""Caption tokeniser compatible with ``nltk.word_tokenize`` on captions, with no downloaded data.

SCAN/NCR tokenise with ``nltk.tokenize.word_tokenize(caption.lower())`` (their
data.py). That call needs nltk's ``punkt_tab`` model, which must be downloaded at run time. This
module reimplements both stages:

1. sentence split: a Punkt approximation (:func:`split_sentences`) whose decisions are exact
   for *lower-cased* text given the English model's abbreviation list (the only Punkt
   parameter that matters once every next word is lower case, see below);
2. word split: a regex port of nltk's ``NLTKWordTokenizer`` (the improved Treebank rules).

Why the Punkt approximation is enough for lower-cased captions: Punkt marks ``word.`` as a
sentence break unless ``word`` is a known abbreviation, an ellipsis, an initial (one letter) or
a number. Abbreviations and ellipses only become breaks again when the next word *starts upper
case* (orthographic heuristic), which never happens after ``.lower()``. Initials and numbers
lose their break when the next word starts lower case. The English model's collocations all
start with an initial or a number, so they are covered by that rule. Remaining differences
(documented, not seen in the CC152K test captions): a ``.`` followed directly by punctuation
other than closing quotes/brackets inside one whitespace-separated chunk (``end.(next``), and
next words that Punkt saw only sentence-initially in lower case.
"""

from __future__ import annotations

import itertools
import re

__all__ = ["split_sentences", "tokenize_caption", "treebank_tokenize", "word_tokenize"]

# Abbreviation types of nltk's English Punkt model (punkt_tab/english/abbrev_types.txt,
# Kiss & Strunk, redistributed by NLTK under Apache-2.0). A period after one of these does not
# end a sentence in lower-cased text.
_ABBREVIATIONS = frozenset(
    """
    a.a a.c a.d a.g a.h a.m a.m.e a.s a.t adm ala ariz aug ave b.f b.v bros c c.i.t c.o.m.b c.v
    calif chg cie co col colo conn corp cos ct d d.c d.h d.w dec dr e e.f e.h e.l e.m f f.g f.j
    feb fla fri ft g g.d g.f g.k ga gen h h.c h.f h.m i.m.s ill inc j.b j.c j.j j.k j.p j.r jan
    jr k kan ky l l.a l.f l.p lt ltd m m.b.a m.d.c m.j maj messrs mg mich minn mr mrs ms n n.c
    n.d n.h n.j n.m n.v n.y nev nov oct ok okla ore p p.a.m p.m pa ph.d prof r r.a r.h r.i r.j
    r.k r.t rep reps s s.a s.a.y s.c s.g s.p.a s.s sen sep sept sr st sw t t.j tenn tues u.k u.n
    u.s u.s.a u.s.s.r v va vs vt w w.c w.r w.va w.w wash wed wis yr
    """.split()  # noqa: SIM905 (a word list reads better as text)
)

# Punkt's "non-word" characters: a token boundary and never the start of a word.
_NON_WORD_START = "\"');}]*:@({[!?"
# Closing characters that Punkt's boundary realignment moves onto the previous sentence.
_CLOSERS = "\"')]}"
_NUMBER = re.compile(r"^-?[\.,]?\d[\d,\.-]*\.?$")
_INITIAL = re.compile(r"^[^\W\d]\.$")
_CHUNK = re.compile(r"\S+")


def _ends_sentence(chunk: str, next_chunk: str) -> bool:
    """Whether Punkt would break a lower-cased text after ``chunk`` (followed by ``next_chunk``)."""
    core = chunk.rstrip(_CLOSERS)
    if not core or core[-1] not in ".?!":
        return False
    if core[-1] in "?!":
        return True
    word = core.lstrip(_NON_WORD_START)
    if word.endswith(".."):  # ellipsis: only an upper-case next word could make it a break
        return False
    stem = word[:-1].lower()
    if stem in _ABBREVIATIONS or stem.split("-")[-1] in _ABBREVIATIONS:
        return False
    if _INITIAL.match(word) or _NUMBER.match(word.lower()):
        # Orthographic heuristic: a next word starting lower case is no sentence starter.
        # With closing punctuation in between, Punkt's next token is that punctuation.
        next_token_lower = core == chunk and next_chunk[:1].islower()
        return not next_token_lower
    return True


def split_sentences(text: str) -> list[str]:
    """Split lower-cased ``text`` into sentences as nltk's English Punkt model would.

    Args:
        text: a caption, already lower-cased.

    Returns:
        The sentences, in order; their concatenation keeps every non-space character.
    """
    chunks = list(_CHUNK.finditer(text))
    sentences: list[str] = []
    start = 0
    for current, following in itertools.pairwise(chunks):
        if _ends_sentence(current.group(), following.group()):
            sentences.append(text[start : current.end()])
            start = following.start()
    sentences.append(text[start : len(text.rstrip())])
    return [s for s in sentences if s]


# ---- NLTKWordTokenizer rules (improved Treebank), applied in nltk's order. -------------------
_STARTING_QUOTES = [
    (re.compile("([«“‘„]|[`]+)"), r" \1 "),
    (re.compile(r"^\""), r"``"),
    (re.compile(r"(``)"), r" \1 "),
    (re.compile(r"([ \(\[{<])(\"|\'{2})"), r"\1 `` "),
    (re.compile(r"(?i)(?<!\w)(\')(?!(?:re|ve|ll|m|t|s|d|n)\b)(?=\w)"), r"\1 "),
]
_PUNCTUATION = [
    (re.compile(r'([^\.])(\.)([\]\)}>"\'»”’ ]*)\s*$'), r"\1 \2 \3 "),
    (re.compile(r"([:,])([^\d])"), r" \1 \2"),
    (re.compile(r"([:,])$"), r" \1 "),
    (re.compile(r"\.{2,}"), r" \g<0> "),
    (re.compile(r"[;@#$%&]"), r" \g<0> "),
    (re.compile(r"[\u2012-\u2015]"), r" \g<0> "),
    (re.compile(r'([^\.])(\.)([\]\)}>"\']*)\s*$'), r"\1 \2\3 "),
    (re.compile(r"[?!]"), r" \g<0> "),
    (re.compile(r"([^'])' "), r"\1 ' "),
    (re.compile(r"[*]"), r" \g<0> "),
]
_PARENS_BRACKETS = (re.compile(r"[\]\[\(\)\{\}\<\>]"), r" \g<0> ")
_DOUBLE_DASHES = (re.compile(r"--"), r" -- ")
_ENDING_QUOTES = [
    (re.compile("([»”’])"), r" \1 "),
    (re.compile(r"''"), " '' "),
    (re.compile(r'"'), " '' "),
    (re.compile(r"\s+"), " "),
    (re.compile(r"([^' ])('[sS]|'[mM]|'[dD]|') "), r"\1 \2 "),
    (re.compile(r"([^' ])('ll|'LL|'re|'RE|'ve|'VE|n't|N'T) "), r"\1 \2 "),
]
# MacIntyre contractions (CONTRACTIONS4 is unused by nltk as well).
_CONTRACTIONS = [
    re.compile(p)
    for p in (
        r"(?i)\b(can)(not)\b",
        r"(?i)\b(d)('ye)\b",
        r"(?i)\b(gim)(me)\b",
        r"(?i)\b(gon)(na)\b",
        r"(?i)\b(got)(ta)\b",
        r"(?i)\b(lem)(me)\b",
        r"(?i)\b(more)('n)\b",
        r"(?i)\b(wan)(na)(?=\s)",
        r"(?i) ('t)(is)\b",
        r"(?i) ('t)(was)\b",
    )
]


def treebank_tokenize(sentence: str) -> list[str]:
    """Split one sentence into tokens with the rules of nltk's ``NLTKWordTokenizer``.

    Args:
        sentence: one sentence (the final period is split off only at the end of the string).

    Returns:
        The tokens.
    """
    text = sentence
    for pattern, repl in _STARTING_QUOTES:
        text = pattern.sub(repl, text)
    for pattern, repl in _PUNCTUATION:
        text = pattern.sub(repl, text)
    text = _PARENS_BRACKETS[0].sub(_PARENS_BRACKETS[1], text)
    text = _DOUBLE_DASHES[0].sub(_DOUBLE_DASHES[1], text)
    text = " " + text + " "
    for pattern, repl in _ENDING_QUOTES:
        text = pattern.sub(repl, text)
    for pattern in _CONTRACTIONS:
        text = pattern.sub(r" \1 \2 ", text)
    return text.split()


def word_tokenize(text: str) -> list[str]:
    """Tokenise like ``nltk.word_tokenize`` (Punkt sentences, then Treebank words).

    The caller lower-cases first (SCAN/NCR tokenise ``caption.lower()``); see
    :func:`tokenize_caption`.

    Args:
        text: lower-cased text.

    Returns:
        The tokens.
    """
    return [tok for sentence in split_sentences(text) for tok in treebank_tokenize(sentence)]


def tokenize_caption(text: str) -> list[str]:
    """SCAN/NCR caption tokenisation: ``word_tokenize(text.lower())``."""
    return word_tokenize(text.lower())
