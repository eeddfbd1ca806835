"""Set every config key to hostile values and count how each ends (``ugncl/run/config_fuzz.py``).

    python tools/fuzz_config.py                 # every key x 6 values, on a fresh tiny world
    python tools/fuzz_config.py --keys 20 --seed 1 --world /tmp/fuzz_world

Each probe loads the config with one ``--set KEY=VALUE`` (a wrong type, -1, 0, inf, nan, a huge
number) and runs a new run's pre-flight checks (nothing is written, nothing trains). Prints the
counts (keys x values, error lines, valid runs, tracebacks) and every traceback; exit code 1
when there is one.
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
from collections import Counter
from pathlib import Path

from precomputed.errors import DataNotFoundError, InvalidSettingError
from ugncl.run.cli import cli_main

MEMORY_LIMIT_BYTES = 24 * 2**30  # a huge size fails as an allocation error, not an OOM kill


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--world", type=Path, default=None,
                        help="a world written by a previous call (default: write one)")  # fmt: skip
    parser.add_argument("--keys", type=int, default=None, help="a seeded sample of N keys")
    parser.add_argument("--seed", type=int, default=0, help="seed of the key sample")
    parser.add_argument("--json", dest="json_out", default=None, help="write every outcome")
    return parser.parse_args(argv)


@cli_main
def main(argv: list[str] | None = None) -> int:
    from ugncl.run.cli import check_writable
    from ugncl.run.config_fuzz import make_world, sweep

    args = parse_args(argv)
    if args.keys is not None and args.keys < 1:
        raise InvalidSettingError(f"--keys must be >= 1, got {args.keys}")
    if args.json_out:
        check_writable(args.json_out, "--json file")
    if args.world is not None and not (args.world / "synthetic_clip").is_dir():
        raise DataNotFoundError(
            f"--world {args.world} holds no tiny world (no synthetic_clip/ folder); leave "
            "--world out to write one"
        )
    _soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if hard == resource.RLIM_INFINITY or hard > MEMORY_LIMIT_BYTES:
        resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, hard))
    with tempfile.TemporaryDirectory(prefix="fuzz_world_") as tmp:
        world = args.world or make_world(Path(tmp))
        outcomes = sweep(world, args.keys, args.seed)
    counts = Counter(o.kind for o in outcomes)
    keys = len({o.key for o in outcomes})
    print(f"{keys} keys x {len(outcomes) // max(1, keys)} values = {len(outcomes)} probes: "
          f"{counts['error']} error lines, {counts['valid']} valid runs, "
          f"{counts['traceback']} tracebacks")  # fmt: skip
    for o in outcomes:
        if o.kind == "traceback":
            print(f"traceback: {o.key}={o.value}: {o.message}")
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps([o.__dict__ for o in outcomes], indent=1), encoding="utf-8"
        )
    return 1 if counts["traceback"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
