"""Write ``configs/base.yaml`` from the config dataclasses: ``python tools/write_base_config.py``.

The dataclasses (``ugncl/run/config.py`` and each backbone's and method's section) hold
every default; ``configs/base.yaml`` is their written form for readers, with each key's comment
and its allowed values. Run this after changing a default, a field comment or a registry
(``--check`` exits 1 when the file is out of date, as the test suite does).
"""

from __future__ import annotations

import argparse

from ugncl.run.cli import cli_main
from ugncl.run.config import DEFAULT_BASE, defaults_yaml


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only compare; exit 1 if stale")
    args = parser.parse_args(argv)
    text = defaults_yaml()
    current = DEFAULT_BASE.read_text(encoding="utf-8") if DEFAULT_BASE.is_file() else ""
    if args.check:
        if current != text:
            print(f"{DEFAULT_BASE} is out of date; run python tools/write_base_config.py")
            return 1
        print(f"{DEFAULT_BASE} is up to date")
        return 0
    DEFAULT_BASE.write_text(text, encoding="utf-8")
    print(f"wrote {DEFAULT_BASE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
