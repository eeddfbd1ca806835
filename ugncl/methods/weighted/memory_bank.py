"""NPC/SDD memory bank: a clean key set and the nearest clean training pair of every query.

Everything is indexed by dataset sample index (caption position in the split) or image index,
never by loader order: per-sample arrays are filled by scattering batches into
:class:`EmbeddingTable`, so the releases' bug of indexing loader-ordered features with
dataset ids (NPC get_memorybank.py:61-73, SDD :37-45) cannot happen.

Bank entries are sample indices of clean training pairs: the bank pair of sample ``k`` on the
image side is ``image_bank[k]`` (nearest clean pair to ``k``'s image), on the text side
``text_bank[k]`` (nearest clean pair to caption ``k``). A bank pair ``c`` is the training
pair (image ``image_index[c]``, caption ``c``).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from precomputed.errors import InvalidSettingError
from ugncl.methods.weighted.weights import gmm_posterior

__all__ = [
    "BankPlan",
    "EmbeddingTable",
    "MemoryBank",
    "build_memory_bank",
    "gmm_clean_set",
    "index_digest",
    "nearest_clean",
    "plan_bank_pairs",
]

NO_NEIGHBOUR = -1
IMAGE_NEIGHBOURS = ("image_itself", "other_image")


class EmbeddingTable:
    """Per-row float32 store filled from batches by index (rows never visited stay NaN).

    Args:
        num_rows: table length (samples or images).
        dim: feature size, fixed by the first ``add`` when None.
    """

    def __init__(self, num_rows: int, dim: int | None = None) -> None:
        self.num_rows = num_rows
        self.values: np.ndarray | None = None
        self.visited = np.zeros(num_rows, dtype=bool)
        if dim is not None:
            self._alloc(dim)

    def _alloc(self, dim: int) -> None:
        self.values = np.full((self.num_rows, dim), np.nan, dtype=np.float32)

    def ensure_width(self, dim: int) -> None:
        """Allocate the (all-NaN) table with ``dim`` columns if no ``add`` has yet."""
        if self.values is None:
            self._alloc(dim)

    def add(self, index: Tensor | np.ndarray, rows: Tensor | np.ndarray) -> None:
        """Scatter ``rows`` ``(K, D)`` (or ``(K,)``) into positions ``index`` ``(K,)``."""
        idx = np.asarray(index.detach().cpu() if isinstance(index, Tensor) else index)
        idx = idx.astype(np.int64).reshape(-1)
        r = rows.detach().float().cpu().numpy() if isinstance(rows, Tensor) else np.asarray(rows)
        r = r.reshape(len(idx), -1).astype(np.float32)
        if idx.size and (idx.min() < 0 or idx.max() >= self.num_rows):
            raise ValueError(f"index out of range [0, {self.num_rows}): {idx.min()}..{idx.max()}")
        if self.values is None:
            self._alloc(r.shape[1])
        self.values[idx] = r
        self.visited[idx] = True

    def column(self) -> np.ndarray:
        """The table as ``(N,)`` for scalar rows."""
        if self.values is None:
            return np.full(self.num_rows, np.nan, dtype=np.float32)
        return self.values[:, 0].copy()


def gmm_clean_set(
    losses: np.ndarray,
    threshold: float = 0.99,
    *,
    max_iter: int = 100,
    tol: float = 1e-2,
    reg_covar: float = 5e-4,
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """NPC's strict clean set: posterior of the lower-mean loss component > ``threshold``.

    Paper 0.99, release 0.9 (get_memorybank.py:59); losses are not normalised (as released).

    Args:
        losses: ``(N,)`` per-sample loss of the starting model (NaN = not visited).

    Returns:
        ``(clean (N,) bool, posterior (N,) float32)``.
    """
    p = gmm_posterior(losses, "low", max_iter=max_iter, tol=tol, reg_covar=reg_covar, seed=seed)
    return p > threshold, p.astype(np.float32)


def _as_float(x: np.ndarray | Tensor, device: torch.device | str | None) -> Tensor:
    if isinstance(x, Tensor):
        return x.detach().float().to(device if device is not None else x.device)
    return torch.as_tensor(np.asarray(x, dtype=np.float32), device=device)


def _normalise(x: Tensor) -> Tensor:
    return x / x.norm(dim=-1, keepdim=True).clamp_min(1e-12)


def nearest_clean(
    queries: Tensor,
    keys: Tensor,
    key_ids: Tensor,
    query_ids: Tensor,
    *,
    query_block: int = 4096,
    key_block: int = 16384,
) -> Tensor:
    """Top-1 key of every query by cosine, the query's own entry excluded, in blocks.

    Both sides are L2-normalised (the release keeps raw keys, biasing top-1 toward large-norm
    keys). Memory is ``query_block x key_block`` scores at a time, so a 150k x
    150k problem never materialises. Ties go to the lowest key position.

    Args:
        queries: ``(Q, D)`` query embeddings.
        keys: ``(M, D)`` key embeddings.
        key_ids: ``(M,)`` long, the id each key is excluded by (e.g. its sample or image index).
        query_ids: ``(Q,)`` long; key ``m`` is skipped for query ``q`` when
            ``key_ids[m] == query_ids[q]`` (the query itself is never its own neighbour).
        query_block, key_block: block sizes.

    Returns:
        ``(Q,)`` long: position in ``keys`` of the nearest allowed key, -1 if none.
    """
    if keys.shape[0] != key_ids.shape[0] or queries.shape[0] != query_ids.shape[0]:
        raise ValueError("keys/key_ids and queries/query_ids must have matching lengths")
    device = queries.device
    Q, M = queries.shape[0], keys.shape[0]
    best = torch.full((Q,), NO_NEIGHBOUR, dtype=torch.long, device=device)
    if M == 0 or Q == 0:
        return best
    keys = _normalise(keys.float().to(device))
    key_ids = key_ids.to(device)
    query_ids = query_ids.to(device)
    for q0 in range(0, Q, query_block):
        q = _normalise(queries[q0 : q0 + query_block].float())
        qid = query_ids[q0 : q0 + query_block]
        top = torch.full((q.shape[0],), -float("inf"), device=device)
        arg = torch.full((q.shape[0],), NO_NEIGHBOUR, dtype=torch.long, device=device)
        for k0 in range(0, M, key_block):
            s = q @ keys[k0 : k0 + key_block].T
            s = s.masked_fill(qid[:, None] == key_ids[None, k0 : k0 + key_block], -float("inf"))
            val, pos = s.max(dim=1)
            better = val > top  # strict: an earlier block keeps ties
            top = torch.where(better, val, top)
            arg = torch.where(better, pos + k0, arg)
        best[q0 : q0 + query_block] = arg
    return best


def index_digest(image_index: np.ndarray) -> str:
    """sha256 of the caption -> image index (int64 bytes) the bank was built on."""
    return hashlib.sha256(np.ascontiguousarray(image_index, dtype=np.int64).tobytes()).hexdigest()


@dataclass
class MemoryBank:
    """Clean set and nearest clean pair of every sample's image and caption (integer arrays).

    Attributes:
        clean: ``(N,)`` bool, the key set (samples whose pairs may be returned).
        image_bank: ``(N,)`` int64 sample index of the nearest clean pair of each sample's
            image (see ``image_neighbour``).
        text_bank: ``(N,)`` int64 sample index of the nearest clean pair of each caption.
        image_index: ``(N,)`` int64 the caption -> image index the bank was built on.
        score: ``(N,)`` float32 what the clean set was selected on (NPC: clean posterior,
            SDD: diagonal similarity).
    """

    clean: np.ndarray
    image_bank: np.ndarray
    text_bank: np.ndarray
    image_index: np.ndarray
    score: np.ndarray
    image_neighbour: str = "image_itself"
    exclude_own_pair: bool = True

    def __post_init__(self) -> None:
        self.check()

    @property
    def num_samples(self) -> int:
        return len(self.text_bank)

    def check(self, image_index: np.ndarray | None = None) -> None:
        """Raise ``ValueError`` unless the arrays are consistent (and built on ``image_index``)."""
        n = len(self.text_bank)
        if not (len(self.clean) == len(self.image_index) == len(self.score) == n):
            raise ValueError("memory bank arrays have different lengths; the file is corrupt")
        if image_index is not None and index_digest(image_index) != index_digest(self.image_index):
            raise ValueError(
                "memory bank was built on a different caption->image index (other noise file or "
                "split); delete it to rebuild, or point the run at the matching noise index"
            )
        for name, bank in (("image_bank", self.image_bank), ("text_bank", self.text_bank)):
            used = bank[bank >= 0]
            if used.size and (used.max() >= n or not self.clean[used].all()):
                raise ValueError(f"memory bank {name} points outside the clean set; file corrupt")
        if len(self.image_bank) != n:
            raise ValueError(
                "memory bank image_bank is not one entry per sample (a bank file of an older "
                "version keeps one per image); delete it to rebuild"
            )
        if self.image_neighbour not in IMAGE_NEIGHBOURS:
            raise ValueError(
                f"memory bank image_neighbour {self.image_neighbour!r} is not one of "
                f"{IMAGE_NEIGHBOURS} (a file of an older version has none); delete it to rebuild"
            )

    def lookup(self, index: Tensor, image_index: Tensor) -> tuple[Tensor, Tensor]:
        """Bank sample indices of a batch, on ``index``'s device.

        Args:
            index: ``(K,)`` dataset sample indices (``PairBatch.index``, never the position in a
                possibly self-dropped subset: that is SDD's text-bank bug, data.py:376).
            image_index: ``(K,)`` the image each caption is paired with for training (unused:
                the bank is per sample; kept so callers need not change).

        Returns:
            ``(image_side (K,), text_side (K,))`` long sample indices of clean pairs.
        """
        idx = index.detach().cpu().numpy().astype(np.int64)
        img_side, txt_side = self.image_bank[idx], self.text_bank[idx]
        if (img_side < 0).any() or (txt_side < 0).any():
            raise InvalidSettingError(
                "memory bank has no clean neighbour for some batch samples (its clean set holds "
                "too few images); lower method.npc.clean_threshold or method.sdd.beta / "
                "method.sdd.auto_beta_std"
            )
        return (
            torch.as_tensor(img_side, device=index.device),
            torch.as_tensor(txt_side, device=index.device),
        )

    def save(self, path: str | os.PathLike) -> None:
        """Atomic ``.npz`` write (plain integer/bool/float arrays, no pickle)."""
        path = Path(path)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(
            tmp, clean=self.clean, image_bank=self.image_bank, text_bank=self.text_bank,
            image_index=self.image_index, score=self.score,
            image_neighbour=np.str_(self.image_neighbour),
            exclude_own_pair=np.bool_(self.exclude_own_pair),
        )  # fmt: skip
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike, image_index: np.ndarray | None = None) -> MemoryBank:
        """Read a bank written by :meth:`save`; checks it against ``image_index`` when given."""
        with np.load(path, allow_pickle=False) as f:
            missing = {"clean", "image_bank", "text_bank", "image_index", "score"} - set(f.files)
            if missing:
                raise ValueError(f"{path}: not a memory bank file (missing {sorted(missing)})")
            bank = cls(
                clean=f["clean"].astype(bool),
                image_bank=f["image_bank"].astype(np.int64),
                text_bank=f["text_bank"].astype(np.int64),
                image_index=f["image_index"].astype(np.int64),
                score=f["score"].astype(np.float32),
                image_neighbour=str(f["image_neighbour"]) if "image_neighbour" in f.files else "",
                # files written before the switch always excluded the own pair
                exclude_own_pair=bool(f["exclude_own_pair"]) if "exclude_own_pair" in f.files
                else True,
            )  # fmt: skip
        bank.check(image_index)
        return bank


def build_memory_bank(
    clean: np.ndarray,
    image_emb: np.ndarray | Tensor,
    caption_emb: np.ndarray | Tensor,
    image_index: np.ndarray,
    score: np.ndarray,
    *,
    device: torch.device | str | None = None,
    query_block: int = 4096,
    key_block: int = 16384,
    image_neighbour: str = "image_itself",
    exclude_own_pair: bool = True,
) -> MemoryBank:
    """Nearest clean training pair of every sample's image and of every caption.

    Image queries (one per sample: its training image) search the clean pairs' image
    embeddings. ``image_neighbour``:

    * ``"image_itself"`` (default; NPC section 3.2: "the nearest clean sample"): at most the
      sample's own pair is excluded (``exclude_own_pair``), so an image with a clean sibling
      caption finds itself (cosine 1) through that sibling. For a noisy caption of the image
      that is the most informative entry: a step towards the wrong caption raises the loss of
      the image's right one.
    * ``"other_image"``: every pair of the query's image is excluded (its own and its sibling
      captions), the nearest clean pair is always another image.

    Caption queries search the clean captions, excluding the caption itself.

    ``exclude_own_pair=False`` (the papers' and the releases' search: every clean key, the
    query included) lets a clean sample find its own pair (cosine 1) on both sides; its bank
    losses then measure the step's effect on the sample itself. ``other_image`` excludes the
    own pair with the rest of its image either way.

    Args:
        clean: ``(N,)`` bool key set.
        image_emb: ``(N, D)`` embedding of each sample's (training) image, per sample index.
        caption_emb: ``(N, D)`` embedding per sample index.
        image_index: ``(N,)`` caption -> image index used for training.
        score: ``(N,)`` the selection score kept for the record.
        device: where to run the blocked search (default: CPU).
        image_neighbour: ``"image_itself"`` or ``"other_image"`` (above).
        exclude_own_pair: skip the query's own pair (above).

    Returns:
        The :class:`MemoryBank`.
    """
    if image_neighbour not in IMAGE_NEIGHBOURS:
        raise ValueError(
            f"image_neighbour must be one of {IMAGE_NEIGHBOURS}, got {image_neighbour!r}"
        )
    clean = np.asarray(clean, dtype=bool)
    image_index = np.asarray(image_index, dtype=np.int64)
    n = len(image_index)
    if len(clean) != n or len(caption_emb) != n:
        raise ValueError(f"clean {len(clean)}, captions {len(caption_emb)} and index {n} differ")
    keys = np.flatnonzero(clean)
    n_key_images = len(np.unique(image_index[keys]))
    if n_key_images < 2:
        # Every query's neighbour is a clean pair of another sample (and, for images, of
        # another image): with clean pairs of fewer than two images some query has none.
        raise InvalidSettingError(
            f"memory bank clean set is empty or too small ({keys.size} clean pairs, "
            f"{n_key_images} images; need pairs of at least 2 images): "
            "lower method.npc.clean_threshold, or method.sdd.beta (thresholds: fixed) / "
            "method.sdd.auto_beta_std (thresholds: auto), or start from a better model"
        )
    img_t = _as_float(image_emb, device)
    cap_t = _as_float(caption_emb, device)
    if len(img_t) != n:
        raise ValueError(f"image_emb has {len(img_t)} rows, expected one per sample ({n})")
    keys_t = torch.as_tensor(keys, device=img_t.device)
    samples_t = torch.arange(n, device=img_t.device)
    blocks = dict(query_block=query_block, key_block=key_block)
    # A query id no key carries (ids are >= 0): nothing is excluded.
    own = samples_t if exclude_own_pair else torch.full_like(samples_t, NO_NEIGHBOUR)
    if image_neighbour == "image_itself":  # exclude the sample's own pair (or nothing)
        key_ids, query_ids = keys_t, own
    else:  # exclude every pair of the query's image
        key_ids = torch.as_tensor(image_index[keys], device=img_t.device)
        query_ids = torch.as_tensor(image_index, device=img_t.device)
    pos_i = nearest_clean(img_t, img_t[keys_t], key_ids, query_ids, **blocks)
    pos_t = nearest_clean(cap_t, cap_t[keys_t], keys_t, own, **blocks)
    pos_i, pos_t = pos_i.cpu().numpy(), pos_t.cpu().numpy()
    image_bank = np.where(pos_i >= 0, keys[np.maximum(pos_i, 0)], NO_NEIGHBOUR).astype(np.int64)
    text_bank = np.where(pos_t >= 0, keys[np.maximum(pos_t, 0)], NO_NEIGHBOUR).astype(np.int64)
    return MemoryBank(
        clean=clean, image_bank=image_bank, text_bank=text_bank, image_index=image_index,
        score=np.asarray(score, dtype=np.float32), image_neighbour=image_neighbour,
        exclude_own_pair=exclude_own_pair,
    )  # fmt: skip


@dataclass
class BankPlan:
    """Where the encodes of a batch's bank pairs come from, each image and caption once.

    Rows index ``[batch rows (K); new rows]``: captions ``[batch captions; extra captions]``,
    images ``[batch images; images of extra_samples[extra_image_rows]]``.

    Attributes:
        bank_ids: ``(S, K)`` int64 sample index of each bank pair (S sides: image, text).
        extra_samples: ``(M,)`` int64 bank samples that are not in the batch (to fetch), sorted.
        extra_image_rows: ``(P,)`` int64 positions in ``extra_samples`` whose image is in
            neither the batch nor an earlier extra sample.
        cap_rows: ``(S, K)`` int64 caption row of each bank pair.
        img_rows: ``(S, K)`` int64 image row of each bank pair.
    """

    bank_ids: np.ndarray
    extra_samples: np.ndarray
    extra_image_rows: np.ndarray
    cap_rows: np.ndarray
    img_rows: np.ndarray


def plan_bank_pairs(
    bank_ids: np.ndarray,
    batch_index: np.ndarray,
    batch_image_index: np.ndarray,
    image_index: np.ndarray,
) -> BankPlan:
    """Deduplicate the bank pairs of a batch against the batch and among themselves.

    A bank pair ``c`` is (image ``image_index[c]``, caption ``c``). The two sides of a batch
    (``2 K`` pairs) often repeat a pair, a sibling caption's image or a sample of the batch
    itself; encoders are per sample, so each distinct image and caption is encoded once and
    the pairs gather their rows (the scores are those of encoding every pair separately).

    Args:
        bank_ids: ``(S, K)`` sample indices of the bank pairs (``MemoryBank.lookup``).
        batch_index: ``(K,)`` the batch's sample indices.
        batch_image_index: ``(K,)`` the image of each batch sample.
        image_index: ``(N,)`` caption -> image index of the training pairs.

    Returns:
        The :class:`BankPlan`.
    """
    bank_ids = np.asarray(bank_ids, dtype=np.int64)
    k = len(batch_index)
    cap_row: dict[int, int] = {}
    img_row: dict[int, int] = {}
    for i, (s, m) in enumerate(zip(np.asarray(batch_index), np.asarray(batch_image_index))):
        cap_row.setdefault(int(s), i)
        img_row.setdefault(int(m), i)
    extra = np.unique([c for c in bank_ids.ravel().tolist() if c not in cap_row])
    extra = extra.astype(np.int64)
    new_images: list[int] = []
    for j, c in enumerate(extra.tolist()):
        cap_row[c] = k + j
        m = int(image_index[c])
        if m not in img_row:
            img_row[m] = k + len(new_images)
            new_images.append(j)
    rows = np.vectorize(cap_row.__getitem__, otypes=[np.int64])
    img_rows = np.vectorize(img_row.__getitem__, otypes=[np.int64])
    return BankPlan(
        bank_ids=bank_ids, extra_samples=extra,
        extra_image_rows=np.asarray(new_images, dtype=np.int64),
        cap_rows=rows(bank_ids).reshape(bank_ids.shape),
        img_rows=img_rows(np.asarray(image_index)[bank_ids]).reshape(bank_ids.shape),
    )  # fmt: skip
