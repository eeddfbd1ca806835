"""One rank of the shared-bank test (started by ``test_distributed.py`` with torchrun's
environment variables): ``python bank_worker.py OUT_DIR``. Every rank holds the same pass
results (as after ``merge_rows``) and asks for NPC's memory bank through
``shared_npc_bank``; the GMM fits and nearest-neighbour searches each rank ran, and the bank
it got, are saved as ``bank_r{rank}.npz``."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np

from ugncl.core.engine import distributed
from ugncl.methods.weighted import memory_bank, npc

N, D = 60, 8
GMM = {"max_iter": 100, "tol": 1e-2, "reg_covar": 5e-4}


def scan() -> SimpleNamespace:
    """Pass results with a planted clean set: low loss on the first two thirds."""
    rng = np.random.default_rng(0)
    loss = np.where(np.arange(N) < 40, 0.2, 3.0) + 0.05 * rng.standard_normal(N)
    return SimpleNamespace(
        loss=loss.astype(np.float32),
        image_emb=rng.standard_normal((N, D)).astype(np.float32),
        caption_emb=rng.standard_normal((N, D)).astype(np.float32),
        image_index=(np.arange(N) // 2).astype(np.int64),
    )


def bank() -> tuple[memory_bank.MemoryBank, dict[str, int]]:
    """The shared bank and the GMM fits / searches this process ran for it."""
    calls = {"gmm": 0, "search": 0}
    fit, search = npc.gmm_clean_set, memory_bank.nearest_clean

    def counted_fit(*a, **k):
        calls["gmm"] += 1
        return fit(*a, **k)

    def counted_search(*a, **k):
        calls["search"] += 1
        return search(*a, **k)

    npc.gmm_clean_set, memory_bank.nearest_clean = counted_fit, counted_search
    try:
        result = npc.shared_npc_bank(
            scan(), 0.5, seed=0, gmm=GMM, device="cpu", image_neighbour="image_itself"
        )
    finally:
        npc.gmm_clean_set, memory_bank.nearest_clean = fit, search
    return result, calls


def main(out: Path) -> int:
    env, _ = distributed.init_from_env("cpu")
    got, calls = bank()
    np.savez(out / f"bank_r{env.rank}.npz", clean=got.clean, image_bank=got.image_bank,
             text_bank=got.text_bank, score=got.score, **calls)  # fmt: skip
    distributed.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
