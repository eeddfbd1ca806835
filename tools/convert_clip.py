"""Convert a TorchScript CLIP archive (OpenAI's ``ViT-B-32.pt``) once into a plain weights file.

``python tools/convert_clip.py ViT-B-32.pt ViT-B-32-weights.pt``

The archive's loader runs TorchScript code stored in the file, so training never opens it:
run this once on a file you trust, then point ``model.clip.pretrained`` at the output (a dict of
tensors, ``torch.load(weights_only=True)``-loadable). The output keeps OpenAI's
``input_resolution``/``context_length``/``vocab_size`` entries, so loading it picks QuickGELU.
"""

from __future__ import annotations

import argparse
import json

from ugncl.backbones.clip.loading import convert_torchscript
from ugncl.run.cli import check_writable, cli_main


@cli_main
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("src", help="TorchScript archive (e.g. OpenAI's ViT-B-32.pt)")
    parser.add_argument("dst", help="output weights file (.pt)")
    args = parser.parse_args(argv)
    check_writable(args.dst, "output weights file")
    weights = convert_torchscript(args.src, args.dst)
    print(json.dumps({"wrote": args.dst, "tensors": len(weights.state_dict),
                      "quick_gelu": weights.quick_gelu, "evidence": weights.evidence}))  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
