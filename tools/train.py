"""Train a method: ``python tools/train.py --cfg ugncl_flickr.yaml`` (or ``clip_synthetic``).

A bare config name is looked up in ``configs/``; ``--set a.b=value`` overrides any key;
``--resume RUN_DIR`` continues a run from its ``checkpoints/last.pt`` with its saved config
(``--set`` may then change only how long and how it runs, e.g. ``train.epochs``). A run
whose ``last.pt`` is gone but which keeps ``best.pt`` or a test record is not trained again
unless ``--restart`` says so; a run folder is used by one process at a time (``run.lock``).

Several processes (DistributedDataParallel, docs/distributed.md)::

    torchrun --nproc_per_node 4 tools/train.py --cfg ugncl_coco
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ugncl.run.cli import cli_main
from ugncl.run.config import config_yaml, load_config
from ugncl.run.training import load_resume_config, train


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cfg", help="config file or bare name in configs/ (e.g. ugncl_flickr)")
    parser.add_argument(
        "--set", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
        help="override config keys, e.g. --set train.epochs=1 model.sgraf.head=saf",
    )  # fmt: skip
    parser.add_argument("--resume", metavar="RUN_DIR", help="continue the run in RUN_DIR")
    parser.add_argument(
        "--print-config", action="store_true",
        help="print the resolved config (bases, reading, --set applied) as YAML and exit",
    )  # fmt: skip
    parser.add_argument(
        "--restart", action="store_true",
        help="with --resume: train the run again from epoch 0, replacing its checkpoints "
        "(best.pt included) and its test record",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if (args.cfg is None) == (args.resume is None):
        parser.error("pass exactly one of --cfg (a new run) or --resume RUN_DIR")
    if args.restart and args.resume is None:
        parser.error("--restart goes with --resume RUN_DIR (a new run starts from epoch 0)")
    return args


@cli_main
def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.print_config:
        if args.resume is not None:
            config = load_resume_config(args.resume, args.set)
        else:
            config, _ = load_config(args.cfg, args.set)
        print(config_yaml(config), end="")
        return 0
    if args.resume is not None:
        config = load_resume_config(args.resume, args.set)
        result = train(
            config, config_name=Path(args.resume).name, resume_dir=args.resume,
            restart=args.restart,
        )  # fmt: skip
    else:
        config, path = load_config(args.cfg, args.set)
        result = train(config, config_name=path.stem)
    if int(os.environ.get("RANK", "0")) != 0:  # torchrun: rank 0 speaks for the job
        return 0
    if result.finished_before:
        print(f"run {result.run_dir} is already finished and tested; nothing to do")
        return 0
    if result.epochs_done == 0:  # train.stop_after_epochs=0: set up, nothing trained yet
        print(f"run directory: {result.run_dir} (set up; no epoch trained yet: "
              f"python tools/train.py --resume {result.run_dir} trains it)")  # fmt: skip
        return 0
    print(f"run directory: {result.run_dir} (best dev rsum {result.best_rsum:.2f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
