"""Result blocks that cannot go stale: README and docs tables written from run records.

A block lives between two marker comments in a markdown file::

    <!-- results:NAME:begin sha256=<hash of the body> -->
    ...body written by tools/write_results.py...
    <!-- results:NAME:end -->

The writer renders the body from run records (``tools/demo.py``'s ``demo_summary.json``, a
comparison folder's ``compare.json`` and ``compare.md``), stamps it with the commit and the
machine's reference step time, and replaces the block. The begin marker carries the sha256 of
the body it wrote, so a hand edit between the markers is detected (:func:`edited_blocks`)
and overwritten by the next write.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "BlockError",
    "compare_body",
    "demo_body",
    "edited_blocks",
    "replace_block",
    "stamp",
]

_BEGIN = "<!-- results:{name}:begin sha256={sha} -->"
_END = "<!-- results:{name}:end -->"
_PATTERN = re.compile(
    r"<!-- results:(?P<name>[\w-]+):begin sha256=(?P<sha>[0-9a-f]*) -->\n"
    r"(?P<body>.*?)"
    r"<!-- results:(?P=name):end -->",
    re.DOTALL,
)


class BlockError(ValueError):
    """A file without the markers of the block to write."""


def _sha(body: str) -> str:
    return hashlib.sha256(body.encode("utf-8")).hexdigest()


def replace_block(text: str, name: str, body: str) -> str:
    """``text`` with block ``name``'s body replaced by ``body`` (and its hash updated).

    Raises:
        BlockError: ``text`` holds no block ``name``.
    """
    body = body.rstrip("\n") + "\n"
    for match in _PATTERN.finditer(text):
        if match.group("name") == name:
            block = _BEGIN.format(name=name, sha=_sha(body)) + "\n" + body + _END.format(name=name)
            return text[: match.start()] + block + text[match.end() :]
    raise BlockError(
        f"no block '{name}' (the line {_BEGIN.format(name=name, sha='')} and, below it, "
        f"{_END.format(name=name)}): add the two markers where the block belongs"
    )


def edited_blocks(text: str) -> list[str]:
    """The blocks of ``text`` whose body differs from what the writer wrote (hand edits); a
    block never written (no hash, no body) is not one."""
    return [
        m.group("name")
        for m in _PATTERN.finditer(text)
        if (m["sha"] or m["body"]) and _sha(m["body"]) != m["sha"]
    ]


def stamp(commit: str, step_seconds: float | None, what: str) -> str:
    """The provenance line of a block."""
    step = (
        f"{step_seconds:.3f} CPU s"
        if step_seconds is not None
        else "not measured (pass --step-seconds)"
    )
    return (
        f"_Written by `python tools/write_results.py` from {what} at commit `{commit}`; this "
        f"machine's reference step (`python tools/bench.py method-steps --methods ugncl "
        f"--steps 30 --threads 1`): {step}. Do not edit by hand: the next write replaces it._"
    )


def _f(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def demo_body(summary: Mapping[str, Any], commit: str, step_seconds: float | None) -> str:
    """The README's demo block from ``demo_summary.json``: one row per run, the ratios."""
    rows: Sequence[Mapping[str, Any]] = summary.get("rows", [])
    ratio = float(summary.get("noise_ratio", 0.0))
    lines = [
        "| run | test rSum | i2t R@1 | t2i R@1 | noise F1 | min |",
        "|---|--:|--:|--:|--:|--:|",
    ]
    for row in rows:
        name = row["method"] + (f" {ratio:.0%} noise" if row.get("noisy") else "")
        lines.append(
            f"| {name} | {row['rsum']:.1f} | {row['i2t/R@1']:.1f} | {row['t2i/R@1']:.1f} | "
            f"{_f(row.get('noisy_f1'), '.3f')} | {row['minutes']:.1f} |"
        )
    ratios = ", ".join(f"{k} {v:.2f}" for k, v in (summary.get("ratios") or {}).items())
    setting = (
        f"`python tools/demo.py` with seed {summary.get('seed')}, {summary.get('threads')} "
        f"thread(s) a run, {summary.get('jobs')} job(s), the {summary.get('schedule')} "
        f"schedule, world `{summary.get('world_root')}`; total "
        f"{float(summary.get('total_minutes', 0.0)):.1f} min."
    )
    return "\n".join(
        [
            stamp(commit, step_seconds, "`demo_summary.json`"),
            "",
            setting,
            "",
            *lines,
            "",
            f"Test rSum ratios: {ratios}." if ratios else "",
        ]
    )


#: The report's note on the CPU kernels the cells ran, and the heading of its list of cells
#: that did not finish (tools/compare.py writes both; a block copies them).
KERNELS = "CPU kernels:"
FAILED_CELLS = "Cells that did not finish:"


def compare_body(
    compare_json: Mapping[str, Any],
    compare_md: str,
    commit: str,
    step_seconds: float | None,
    *,
    sections: Sequence[str] = ("Mean over seeds",),
) -> str:
    """A comparison block: the report's ``sections`` of ``compare.md`` as written (its
    tables and computed sentences), under the stamp and the run count of ``compare.json``."""
    runs = compare_json.get("runs", [])
    parts = [stamp(commit, step_seconds, "the comparison's `compare.json` and `compare.md`"), ""]
    command = next((line for line in compare_md.splitlines() if line.startswith("`python ")), "")
    parts.append(f"{len(runs)} finished runs of {command}." if command else f"{len(runs)} "
                 "finished runs.")  # fmt: skip
    kernels = next((line for line in compare_md.splitlines() if line.startswith(KERNELS)), None)
    if kernels:  # whether another machine can compute the same numbers (docs/reproducibility.md)
        parts.append(kernels)
    failed = _failed_cells(compare_md)
    if failed:  # a row refused or crashed on every seed would otherwise vanish unsaid
        parts += ["", FAILED_CELLS, "", *failed]
    found = _sections(compare_md)
    for title in sections:
        if title in found:
            parts += ["", f"**{title}**", "", found[title].strip()]
    return "\n".join(parts)


def _failed_cells(markdown: str) -> list[str]:
    """The ``- cell: why`` lines under the report's "Cells that did not finish:" note, cells
    that stopped for the same reason on one line (a row refused on every seed)."""
    lines = markdown.splitlines()
    if FAILED_CELLS not in lines:
        return []
    after = lines[lines.index(FAILED_CELLS) + 1 :]
    reasons: dict[str, list[str]] = {}
    for line in itertools.takewhile(lambda line: line.startswith("- "), after):
        name, _, why = line[2:].partition(": ")
        reasons.setdefault(why.replace(f", see {name}.log", ""), []).append(name)
    return [f"- {', '.join(names)}: {why}" for why, names in reasons.items()]


def _sections(markdown: str) -> dict[str, str]:
    """``{title: text}`` of the ``## title`` sections of a markdown document."""
    out: dict[str, str] = {}
    title = None
    for line in markdown.splitlines():
        if line.startswith("## "):
            title = line[3:].strip()
            out[title] = ""
        elif title is not None:
            out[title] += line + "\n"
    return out
