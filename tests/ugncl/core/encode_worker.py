"""One rank of the split encoding test (started by ``test_distributed.py`` with torchrun's
environment variables): ``python encode_worker.py OUT_DIR``. Each rank encodes the split
``write_split(OUT_DIR)`` wrote with a token-level model (SGRAF: packed words) and a
sentence-level one, counting the images and captions it encoded, and saves the joined
embeddings and the counts as ``encoded_r{rank}.npz``."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from precomputed.dataset import open_split
from precomputed.vocab import build_vocab
from sgraf.model import SGRAF
from ugncl.core.engine import distributed
from ugncl.core.evaluation import encode_split

N_IMG, CPI, R, D = 7, 3, 4, 12  # 21 captions: 7 batches of 3
WORDS = ["a", "dog", "cat", "runs", "red", "blue", "ball", "on", "the", "grass", "sits"]


def write_split(root: Path) -> None:
    folder = root / "tiny_precomp"
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    np.save(folder / "test_ims.npy", rng.standard_normal((N_IMG, R, D)).astype(np.float32))
    texts = [" ".join(rng.choice(WORDS, size=rng.integers(2, 8))) for _ in range(N_IMG * CPI)]
    (folder / "test_caps.txt").write_text("\n".join(texts) + "\n")


def open_tiny(root: Path):
    texts = (root / "tiny_precomp" / "test_caps.txt").read_text().split("\n")[:-1]
    vocab = build_vocab(texts, min_count=1)
    return open_split(root, "tiny_precomp", "test", vocab, captions_per_image=CPI), len(vocab)


class SentenceModel(nn.Module):
    """A sentence-level model: mean word embedding per caption, mean region per image."""

    image_axis = 0

    def __init__(self, vocab: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.words = nn.Embedding(vocab, 6)
        self.regions = nn.Linear(D, 6)

    def encode_images(self, images: Tensor) -> Tensor:
        return self.regions(images).mean(1)

    def encode_captions(self, captions: Tensor, lengths: Tensor) -> Tensor:
        mask = (torch.arange(captions.shape[1]) < lengths[:, None]).unsqueeze(-1)
        return (self.words(captions) * mask).sum(1) / lengths[:, None]


def encode(root: Path) -> dict[str, np.ndarray]:
    """Both models' caption embeddings of the split and the captions each encoded here."""
    split, vocab = open_tiny(root)
    torch.manual_seed(0)
    models = {"sgraf": SGRAF(vocab, word_dim=8, img_dim=D, embed_dim=16, sim_dim=8,
                             num_regions=R, num_views=2, sgr_steps=2),
              "sentence": SentenceModel(vocab)}  # fmt: skip
    out: dict[str, np.ndarray] = {}
    for name, model in models.items():
        seen: list[int] = []
        seen_images: list[int] = []
        encode_captions, encode_images = model.encode_captions, model.encode_images

        def counted(captions: Tensor, lengths: Tensor, _f=encode_captions, _seen=seen) -> Tensor:
            _seen.append(int(captions.shape[0]))
            return _f(captions, lengths)

        def counted_images(images: Tensor, _f=encode_images, _seen=seen_images) -> Tensor:
            _seen.append(int(images.shape[0]))
            return _f(images)

        model.encode_captions, model.encode_images = counted, counted_images
        enc = encode_split(model, split, batch_size=3, device="cpu")
        cap = enc.cap_emb
        out[name] = (cap.data if hasattr(cap, "data") and not isinstance(cap, Tensor)
                     else cap).numpy()  # fmt: skip
        out[f"{name}_encoded"] = np.asarray(sum(seen))
        out[f"{name}_images"] = enc.img_emb.numpy()
        out[f"{name}_images_encoded"] = np.asarray(sum(seen_images))
    return out


def main(out: Path) -> int:
    env, _ = distributed.init_from_env("cpu")
    torch.set_num_threads(1)
    np.savez(out / f"encoded_r{env.rank}.npz", **encode(out))
    distributed.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
