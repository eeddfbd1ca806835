"""One rank of a multi-process test run (started by ``test_distributed.py`` with torchrun's
environment variables): ``python distributed_worker.py [--meanpool] [--kill-epoch E]
-- TRAIN_ARGS``.

``--runs FILE`` trains every run of a JSON object ``{name: TRAIN_ARGS}`` in turn (one start
of the interpreter for several runs) and writes ``{name: exit code}`` to ``FILE.rc<RANK>.json``.
``--meanpool`` registers the test-only CLIP-like backbone (no BatchNorm, no dropout: its
2-process run is the 1-process run up to float rounding); ``--kill-epoch E`` makes the last
rank kill itself with SIGKILL when epoch E starts (a lost GPU, an OOM kill).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import torch

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]


def _load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def dump_divisions(folder: Path) -> None:
    """Save UGNCL's division after each epoch start as ``division_e{epoch}_r{rank}_w{world}``."""
    import numpy as np

    from ugncl.methods.ugncl.method import UGNCLMethod

    epoch_start = UGNCLMethod.on_epoch_start

    def dumped(self, ctx, epoch: int):
        fields = epoch_start(self, ctx, epoch)
        if self.division is not None:
            d = self.division
            rank, world = os.environ.get("RANK", "0"), os.environ.get("WORLD_SIZE", "1")
            np.savez(folder / f"division_e{epoch}_r{rank}_w{world}.npz", u=d.u, u_bar=d.u_bar,
                     soft_label=d.soft_label, sets=d.sets)  # fmt: skip
        return fields

    UGNCLMethod.on_epoch_start = dumped


def train_each(train: Any, runs: dict[str, list[str]]) -> dict[str, int]:
    """``{name: train(argv)}`` in turn, on one process group opened here for all of them
    (closing and reopening one per run races: a rank may dial the previous run's address)."""
    from ugncl.core.engine import distributed

    distributed.init_from_env("cpu")
    close, distributed.shutdown = distributed.shutdown, lambda: None
    try:
        return {name: train(argv) for name, argv in runs.items()}
    finally:
        distributed.shutdown = close
        close()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--meanpool", action="store_true")
    parser.add_argument("--kill-epoch", type=int, default=None)
    parser.add_argument("--dump-division", type=Path, default=None, help="folder for the "
                        "division of each epoch start, one file per rank")  # fmt: skip
    parser.add_argument("--runs", type=Path, default=None, help="JSON {name: train args}")
    parser.add_argument("train_args", nargs=argparse.REMAINDER)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.meanpool:
        from ugncl.run.build import BACKBONES

        BACKBONES["meanpool"] = _load(HERE.parent / "conftest.py", "ugncl_test_conftest").MEANPOOL
    if args.kill_epoch is not None and int(os.environ["RANK"]) == int(os.environ["WORLD_SIZE"]) - 1:
        from ugncl.core.engine.trainer import Trainer

        run_epoch = Trainer._run_epoch

        def killed(self, epoch: int) -> None:
            if epoch == args.kill_epoch:
                os.kill(os.getpid(), signal.SIGKILL)
            run_epoch(self, epoch)

        Trainer._run_epoch = killed
    if args.dump_division is not None:
        dump_divisions(args.dump_division)
    train = _load(REPO / "tools" / "train.py", "tools_train")
    if args.runs is not None:
        codes = train_each(train.main, json.loads(args.runs.read_text()))
        rank = os.environ.get("RANK", "0")
        args.runs.with_name(f"{args.runs.name}.rc{rank}.json").write_text(json.dumps(codes))
        return 0
    argv = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    return train.main(argv)


if __name__ == "__main__":
    raise SystemExit(main())
