"""Convert a released SGRAF / NCR / UGNCL checkpoint into this package's model file.

``python tools/convert_checkpoint.py SRC DST [--which model_A|model_B|both]``

The output is ``{"version": 1, "model", "model_config", "source": info}`` (see
``sgraf.checkpoint``), loadable with ``torch.load(weights_only=True)``. For NCR files the
default is ``model_A``; ``--which both`` writes the co-trained pair as this package's NCR
method holds it (``model`` = network A, ``method_state`` = network B), so that ``tools/eval.py
DST`` averages the two networks' sigmoid scores as NCR's evaluation does. Both torch formats
are read (zip, and the legacy pre-1.6 format of the released files) with torch's weights-only
unpickler; a problem with the file is one ``error: ...`` line and exit code 2.

DECL's container ``{epoch, model, best_rsum, opt, step}`` converts the same way and keeps its
``opt`` (``tau``) in ``source``: ``tools/eval.py`` ranks the file by DECL's evidence, and a
converted SAF and SGR pair by their averaged evidence (DECL-SGRAF).
"""

from __future__ import annotations

import argparse
import json

from sgraf.checkpoint import CheckpointError, load_released_checkpoint, save_model_file
from ugncl.methods.ncr.method import ncr_pair_fields
from ugncl.run.cli import check_writable, cli_main


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", help="released .pth.tar file")
    parser.add_argument("dst", help="output model file (.pt)")
    parser.add_argument(
        "--which", choices=["model_A", "model_B", "both"], default=None,
        help="NCR network (default A); both: the pair, evaluated as NCR averages it",
    )  # fmt: skip
    args = parser.parse_args(argv)
    check_writable(args.dst, "output model file")
    if args.which == "both":
        state, config, info = load_released_checkpoint(args.src, which="model_A")
        peer, peer_config, _ = load_released_checkpoint(args.src, which="model_B")
        if peer_config != config:
            raise CheckpointError(f"{args.src}: model_A and model_B differ in architecture "
                                  f"({config} vs {peer_config})")  # fmt: skip
        info["which"] = "both"
        save_model_file(args.dst, state, config, source=info, **ncr_pair_fields(peer))
    else:
        state, config, info = load_released_checkpoint(args.src, which=args.which)
        save_model_file(args.dst, state, config, source=info)
    print(json.dumps({"wrote": args.dst, "format": info["format"], "model_config": config}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
