"""What each method's ``paper`` / ``release`` / ``package`` reading sets, computed from the
resolved configs: ``python tools/readings.py``.

For every method with readings (or those named by ``--methods``), the config named by
``--cfg`` (default ``<method>_synthetic``, else ``clean_synthetic``) is resolved at each
reading and every key whose value differs is printed with its three values. A key the config
states itself is the same in every reading and not listed (resolve ``clean_synthetic`` to see
a reading over the bare track defaults). ``--json`` prints one object.

Examples::

    python tools/readings.py
    python tools/readings.py --methods ugncl --cfg ugncl_flickr
"""

from __future__ import annotations

import argparse
import json

from ugncl.core.errors import ConfigError
from ugncl.methods.readings import READING_NAMES
from ugncl.run.cli import cli_main
from ugncl.run.config import resolve_config_path
from ugncl.run.readings_table import ReadingDiff, methods_with_readings, reading_diff


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--methods", nargs="+", default=None, help="default: every method with readings"
    )
    parser.add_argument(
        "--cfg", default=None, help="config to resolve (default: <method>_synthetic)"
    )
    parser.add_argument(
        "--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
        help="override config keys before the readings are applied",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    return parser.parse_args(argv)


def default_config(method: str) -> str:
    """``<method>_synthetic`` where it exists, else the SGRAF track's plain config."""
    try:
        resolve_config_path(f"{method}_synthetic")
    except ConfigError:
        return "clean_synthetic"
    return f"{method}_synthetic"


def markdown(diff: ReadingDiff) -> str:
    header = "| key | " + " | ".join(READING_NAMES) + " |"
    lines = [
        f"### {diff.method} (`{diff.config}`)",
        "",
        header,
        "|---|" + "---|" * len(READING_NAMES),
    ]
    for key, values in diff.rows:
        lines.append(f"| `{key}` | " + " | ".join(f"`{values[r]}`" for r in READING_NAMES) + " |")
    if not diff.rows:
        lines.append("| (no key differs) |" + " |" * len(READING_NAMES))
    if diff.notes:
        lines += ["", "Inside the method, beyond the keys:"]
        lines += [f"- `{r}`: {diff.notes[r]}" for r in READING_NAMES if r in diff.notes]
    return "\n".join(lines)


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    known = methods_with_readings()
    methods = args.methods or known
    unknown = [m for m in methods if m not in known]
    if unknown:
        raise ConfigError(
            f"--methods {' '.join(unknown)}: no readings; methods with readings: {', '.join(known)}"
        )
    diffs = [reading_diff(m, args.cfg or default_config(m), tuple(args.set)) for m in methods]
    if args.json:
        print(json.dumps({d.method: {"config": d.config, "keys": dict(d.rows), "notes": d.notes}
                          for d in diffs},
                         default=str, indent=1))  # fmt: skip
    else:
        print("\n\n".join(markdown(d) for d in diffs))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
