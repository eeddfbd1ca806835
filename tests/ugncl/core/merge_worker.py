"""One rank of the merge test (started by ``test_distributed.py`` with torchrun's environment
variables): ``python merge_worker.py OUT_DIR``. Each rank fills its shard of a few per-sample
tables (float32 rows, int8 codes, a float64 column) and merges them with ``merge_rows``; the
result and the payload each rank sent are saved as ``merged_r{rank}.npz``; a table that two
ranks filled must raise."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from ugncl.core.engine import distributed

N = 40


def tables(rank: int, world: int) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """This rank's tables: rows ``i % world == rank`` filled, except every 7th (unvisited)."""
    rng = np.random.default_rng(0)  # the same full tables on every rank
    full = {
        "rows": rng.standard_normal((N, 3)).astype(np.float32),
        "codes": rng.integers(0, 4, N).astype(np.int8),
        "u": rng.random(N),
    }
    visited = (np.arange(N) % world == rank) & (np.arange(N) % 7 != 0)
    fill = {"rows": np.nan, "codes": -1, "u": np.nan}
    local = {k: np.where(visited.reshape((N,) + (1,) * (v.ndim - 1)), v, fill[k]).astype(v.dtype)
             for k, v in full.items()}  # fmt: skip
    return local, visited


def main(out: Path) -> int:
    env, _ = distributed.init_from_env("cpu")
    local, visited = tables(env.rank, env.world)
    merged = {k: distributed.merge_rows(v, visited) for k, v in local.items()}
    sent = sum(sum(a.nbytes for a in distributed.owned_rows(v, visited)) for v in local.values())
    try:
        distributed.merge_rows(local["u"], np.ones(N, dtype=bool))
        raised = False
    except RuntimeError:
        raised = True
    np.savez(out / f"merged_r{env.rank}.npz", **merged, sent=sent, raised=raised)
    distributed.shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(Path(sys.argv[1])))
