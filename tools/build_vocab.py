"""Build a SCAN vocabulary JSON from a split's captions (min count 4, as SCAN).

Example: ``python tools/build_vocab.py --data-root data --name f30k_precomp --out vocab.json``
"""

from __future__ import annotations

import argparse

from precomputed.captions import read_captions
from precomputed.errors import DataFormatError
from precomputed.layout import locate_split
from precomputed.vocab import build_vocab
from ugncl.run.cli import check_new_file, cli_main


@cli_main
def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description="Build a SCAN vocabulary (word2idx, idx2word, idx; <pad>=0 <start>=1 "
        "<end>=2 <unk>=3) from the captions of one or more splits.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--data-root", required=True, help="folder holding <name>/")
    p.add_argument("--name", required=True, help="dataset folder, e.g. f30k_precomp")
    p.add_argument("--splits", nargs="+", default=["train"], help="splits whose captions count")
    p.add_argument("--min-count", type=int, default=4, help="keep words seen at least this often")
    p.add_argument("--out", required=True, help="output JSON path")
    p.add_argument("--force", action="store_true", help="replace an existing --out file")
    args = p.parse_args(argv)
    check_new_file(args.out, args.force, "vocabulary")
    captions: list[str] = []
    for split in args.splits:
        captions += read_captions(locate_split(args.data_root, args.name, split).captions)
    if not captions:
        raise DataFormatError(
            f"the {', '.join(args.splits)} caption file(s) of {args.data_root}/{args.name} hold "
            "no captions; a vocabulary needs the training captions"
        )
    vocab = build_vocab(captions, min_count=args.min_count)
    vocab.save(args.out)
    print(f"wrote {args.out}: {len(vocab)} words from {len(captions)} captions")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
