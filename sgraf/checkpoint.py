"""This package's model file, and loading of the released SGRAF / NCR / UGNCL checkpoints.

Model file (also the core of trainer checkpoints): a plain dict
``{"version": 1, "model": state_dict, "model_config": SGRAF kwargs, **extra}`` that loads
with ``torch.load(weights_only=True)``.

Released containers (NCR, DECL/UGNCL and SGRAF checkpoints), each holding
lists ``[img_enc, txt_enc, sim_enc]`` of state dicts and a pickled ``argparse.Namespace``
``opt``:

* SGRAF ``{epoch, model, best_rsum, opt, Eiters}``, image projection ``fc``;
* NCR ``{epoch, model_A, model_B, best_rsum, opt}`` (two co-trained networks);
* UGNCL ``{opt, epoch, best_rsum, model}`` with two image projections ``fc1``/``fc2``,
  which become views 0 and 1.
* DECL ``{epoch, model, best_rsum, opt, step}`` (one network; ``step`` is the global step of
  its hinge schedule): its score is the evidence ``exp(tanh(raw) / opt.tau)``.

They are read with ``weights_only=True`` and an allow-list (``argparse.Namespace`` and numpy
scalar types), never with a blanket ``weights_only=False``. The architecture is inferred from
the tensor shapes; key mismatches are listed in the error. SGRAF and NCR apply a sigmoid to
the score in their own code; this package returns the raw score (same ranking).
"""

from __future__ import annotations

import argparse
import os
import pickle
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from precomputed.errors import CheckpointError, CheckpointNotFoundError
from sgraf.model import SGRAF

FORMAT_VERSION = 1
_SIM_RENAMES = (("SGR_module.", "sgr.steps."), ("SAF_module.", "saf."))
_IMG_KEY = re.compile(r"^fc(\d*)\.(weight|bias)$")


# The package's one error hierarchy (precomputed.errors, a leaf module): the trainer's
# checkpoints and the tools raise and catch the same classes.
__all__ = [
    "CheckpointError",
    "CheckpointNotFoundError",
    "build_model_from_config",
    "load_model",
    "load_model_file",
    "load_released_checkpoint",
    "read_torch_file",
    "save_model_file",
]

# torch.save writes a zip archive since 1.6; older files (the released SGRAF/NCR ones) are a
# pickle stream starting with PROTO 2 and torch's magic number 0x1950a86a20f9469cfc6c (LONG1).
_ZIP_MAGIC = b"PK\x03\x04"
_LEGACY_MAGIC = b"\x80\x02\x8a\x0a" + (0x1950A86A20F9469CFC6C).to_bytes(10, "little")


def _safe_globals() -> list:
    allowed: list = [argparse.Namespace, np.dtype]
    core = getattr(np, "_core", None) or np.core
    allowed.append(core.multiarray.scalar)
    allowed.extend(
        type(np.dtype(name)) for name in ("float64", "float32", "int64", "int32", "bool")
    )
    return allowed


def read_torch_file(
    path: str | os.PathLike,
    *,
    allowed_globals: Sequence[Any] = (),
    map_location: str | torch.device = "cpu",
) -> Any:
    """``torch.load(weights_only=True)`` with errors that say what is wrong with the file.

    Both torch formats are read: the zip archive (torch >= 1.6) and the legacy pickle stream
    (torch <= 1.5, the released SGRAF/NCR checkpoints). Either way torch's weights-only
    unpickler runs: only tensors, storages, plain containers and ``allowed_globals`` are
    built, no code from the file is executed.

    Raises:
        CheckpointNotFoundError: nothing at ``path``.
        CheckpointError: a directory, an empty file, bytes that are no torch file, a truncated
            file, or objects outside the allow-list (named in the message).
    """
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(
            f"{path} is a directory, not a checkpoint file; pass the file inside it, e.g. "
            f"{path / 'checkpoints' / 'best.pt'} or a released model_best.pth.tar"
        )
    if not path.is_file():
        raise CheckpointNotFoundError(f"checkpoint {path} does not exist; check the path")
    size = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(len(_LEGACY_MAGIC))
    if size == 0:
        raise CheckpointError(
            f"checkpoint {path} is empty (0 bytes): its write was interrupted; use another "
            "checkpoint (checkpoints/last.pt or best.pt) or copy the file again"
        )
    if not (head.startswith(_ZIP_MAGIC) or head == _LEGACY_MAGIC):
        raise CheckpointError(
            f"{path} ({size} bytes, starts with {head[:8]!r}) is not a PyTorch checkpoint: "
            "neither a torch zip archive nor a legacy torch file; it is corrupt or another "
            "kind of file, copy or download it again"
        )
    try:
        with torch.serialization.safe_globals(list(allowed_globals)):
            return torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError as err:
        raise CheckpointError(_unsafe_message(path, err, allowed_globals)) from err
    except AttributeError as err:
        if head != _LEGACY_MAGIC or "UntypedStorage" not in str(err):
            raise
        # torch's legacy reader needs a typed storage class (torch.FloatStorage, as torch <= 1.5
        # and the SGRAF/NCR releases wrote); only torch >= 2.0 can write a bare UntypedStorage
        # into the legacy format, and torch itself cannot read that back, weights-only or not.
        raise CheckpointError(
            f"{path} is in the legacy (pre-1.6) torch format but holds an untyped storage, "
            "which only torch >= 2.0 writes and no torch version reads back; it is not a "
            "released SGRAF/NCR file. Re-save it from where it was made with the default "
            "format: torch.save(obj, path) without _use_new_zipfile_serialization=False"
        ) from err
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile, ValueError) as err:
        raise CheckpointError(
            f"checkpoint {path} ({size} bytes) is truncated or corrupt and cannot be read "
            f"({type(err).__name__}: {_first_line(err)}); use another checkpoint "
            "(checkpoints/last.pt or best.pt) or copy the file again"
        ) from err


def _first_line(err: BaseException) -> str:
    return str(err).strip().splitlines()[0] if str(err).strip() else ""


def _unpickler_reason(err: BaseException) -> str:
    """The weights-only unpickler's own reason, without torch's advice to load unsafely."""
    text = str(err)
    marker = "WeightsUnpickler error:"
    if marker in text:
        text = text.split(marker, 1)[1]
    reason = text.strip().split(". ")[0].splitlines()[0] if text.strip() else ""
    return re.sub(r"\x1b\[[0-9;]*m", "", reason)


def _unsafe_message(path: Path, err: BaseException, allowed: Sequence[Any]) -> str:
    reason = _unpickler_reason(err)
    try:
        unsafe = torch.serialization.get_unsafe_globals_in_checkpoint(str(path))
    except Exception:  # the legacy format is not supported by this helper
        unsafe = re.findall(r"GLOBAL (\S+)", reason)
    names = [getattr(a, "__qualname__", str(a)) for a in allowed]
    message = (
        f"{path} holds objects that a weights-only load does not build, so it was not loaded "
        f"(no code from the file was run): {reason}; allowed besides tensors and containers: "
        f"{names or 'nothing'}; globals outside that list: {unsafe or 'unknown'}."
    )
    if any("argparse" in name for name in unsafe):
        message += (
            " Released SGRAF/NCR/UGNCL checkpoints (they hold an argparse.Namespace) are "
            f"converted with: python tools/convert_checkpoint.py {path} OUT.pt"
        )
    else:
        message += " Only if you trust the file, re-save its tensors as a plain dict."
    return message


def _torch_load(path: Path) -> Any:
    return read_torch_file(path, allowed_globals=_safe_globals())


def _plain(value: Any) -> Any:
    """Convert to JSON-like plain types (for opt and info)."""
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, argparse.Namespace):
        return _plain(vars(value))
    return str(value)


# ----------------------------------------------------------------------------------------
# This package's model file
# ----------------------------------------------------------------------------------------
def build_model_from_config(model_config: dict) -> SGRAF:
    """Build an ``SGRAF`` from its stored constructor kwargs; unknown keys are an error."""
    import inspect

    params = inspect.signature(SGRAF.__init__).parameters
    known = set(params) - {"self"}
    unknown = sorted(set(model_config) - known)
    if unknown:
        raise CheckpointError(
            f"model_config has unknown keys {unknown}; known keys: {sorted(known)}"
        )
    if "vocab_size" not in model_config:
        raise CheckpointError("model_config lacks the required key 'vocab_size'")
    return SGRAF(**model_config)


def save_model_file(
    path: str | os.PathLike, state_dict: dict[str, Tensor], model_config: dict, **extra: Any
) -> None:
    """Write ``{"version": 1, "model", "model_config", **extra}`` atomically.

    The file is written next to ``path`` and moved into place with ``os.replace``, so a
    crash never leaves a truncated checkpoint. ``extra`` must hold plain types/tensors.
    """
    clash = sorted({"version", "model", "model_config"} & set(extra))
    if clash:
        raise ValueError(f"extra keys {clash} are reserved by the model file format")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "version": FORMAT_VERSION,
        "model": {k: v.detach().to("cpu") for k, v in state_dict.items()},
        "model_config": dict(model_config),
        **extra,
    }
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    try:
        torch.save(payload, tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_model_file(path: str | os.PathLike) -> dict:
    """Read a model file written by ``save_model_file`` (or a trainer checkpoint)."""
    path = Path(path)
    payload = _torch_load(path)
    if not isinstance(payload, dict) or "model_config" not in payload or "model" not in payload:
        raise CheckpointError(
            f"{path} is not a model file of this package (expected a dict with 'version', "
            "'model', 'model_config'); for released SGRAF/NCR/UGNCL files use "
            "load_released_checkpoint or tools/convert_checkpoint.py"
        )
    if payload.get("version") != FORMAT_VERSION:
        raise CheckpointError(
            f"{path} has model-file version {payload.get('version')!r}; this package reads "
            f"version {FORMAT_VERSION}"
        )
    return payload


def load_model(path: str | os.PathLike, *, which: str | None = None) -> SGRAF:
    """Build and load a model from this package's file or any released container."""
    state, config, _ = load_released_checkpoint(path, which=which)
    model = build_model_from_config(config)
    model.load_state_dict(state)
    return model


# ----------------------------------------------------------------------------------------
# Released containers
# ----------------------------------------------------------------------------------------
def load_released_checkpoint(
    path: str | os.PathLike, *, which: str | None = None
) -> tuple[dict[str, Tensor], dict, dict]:
    """Load a released SGRAF, NCR or UGNCL checkpoint (or this package's model file).

    Args:
        path: the ``.pth.tar`` file.
        which: NCR only: ``"model_A"`` (default) or ``"model_B"``, the two co-trained
            networks; NCR's own evaluation averages their scores.

    Returns:
        ``(state_dict, model_config, info)``: the state dict in this package's keys, the
        ``SGRAF`` kwargs inferred from tensor shapes, and plain-typed info (``format``,
        ``which``, ``epoch``, ``best_rsum``, ``Eiters``, ``opt`` as a dict,
        ``released_score``: "sigmoid" or "raw").

    Raises:
        CheckpointNotFoundError (a FileNotFoundError): no such file.
        CheckpointError: unreadable file, unknown container, or keys/shapes that do not
            form an SGRAF model (the error lists missing and unexpected keys).
    """
    path = Path(path)
    ckpt = _torch_load(path)
    if not isinstance(ckpt, dict):
        raise CheckpointError(f"{path}: expected a dict container, got {type(ckpt).__name__}")
    if "model_config" in ckpt and isinstance(ckpt.get("model"), dict):
        if which is not None:
            raise CheckpointError(f"{path}: which={which!r} applies to NCR containers only")
        payload = load_model_file(path)
        _check_against_model(path, payload["model"], payload["model_config"], {})
        info = {k: _plain(v) for k, v in payload.items() if k not in ("model", "model_config")}
        info["format"] = "sgraf-package"
        return payload["model"], dict(payload["model_config"]), info
    if "model_A" in ckpt or "model_B" in ckpt:
        fmt = "ncr"
        which = which or "model_A"
        if which not in ("model_A", "model_B"):
            raise CheckpointError(f"{path}: which must be 'model_A' or 'model_B', got {which!r}")
        if which not in ckpt:
            raise CheckpointError(f"{path}: NCR container has no {which!r}; keys {sorted(ckpt)}")
        parts = ckpt[which]
    elif "model" in ckpt:
        if which is not None:
            raise CheckpointError(f"{path}: which={which!r} applies to NCR containers only")
        parts = ckpt["model"]
        fmt = None
    else:
        raise CheckpointError(
            f"{path}: unknown container with top-level keys {sorted(map(str, ckpt))}; expected "
            "SGRAF {epoch, model, best_rsum, opt, Eiters}, NCR {epoch, model_A, model_B, "
            "best_rsum, opt} or UGNCL {opt, epoch, best_rsum, model}"
        )
    if not (isinstance(parts, (list, tuple)) and len(parts) == 3):
        raise CheckpointError(
            f"{path}: expected a list of 3 state dicts [img_enc, txt_enc, sim_enc], got "
            f"{type(parts).__name__} of length {len(parts) if hasattr(parts, '__len__') else '?'}"
        )
    _check_norm_flags(path, ckpt.get("opt"))
    state, origin = _convert_parts(path, parts)
    if fmt is None and "step" in ckpt:
        fmt = "decl"  # only DECL's container keeps its global step
    if fmt is None:
        fmt = "ugncl" if any(k.startswith("fc1.") for k in parts[0]) else "sgraf"
    config = _infer_config(path, state)
    _check_against_model(path, state, config, origin)
    info = {
        "format": fmt,
        "source": str(path),
        "which": which if fmt == "ncr" else None,
        "epoch": _plain(ckpt.get("epoch")),
        "best_rsum": _plain(ckpt.get("best_rsum")),
        "Eiters": _plain(ckpt.get("Eiters")),
        "opt": _plain(ckpt.get("opt")),
        "released_score": {"ugncl": "raw", "decl": "evidence"}.get(fmt, "sigmoid"),
    }
    return state, config, info


# Released training flags that change the forward pass but not the tensor shapes: with them
# the released encoders skip the l2 normalisation of the region / word embeddings, which this
# package always applies, so the weights would load cleanly and score differently.
_UNSUPPORTED_FLAGS = {
    "no_imgnorm": "image embeddings are not l2-normalised",
    "no_txtnorm": "word embeddings are not l2-normalised",
}


def _check_norm_flags(path: Path, opt: Any) -> None:
    """Refuse by name a released model trained with ``opt.no_imgnorm``/``opt.no_txtnorm``."""
    values = vars(opt) if isinstance(opt, argparse.Namespace) else opt
    if not isinstance(values, dict):
        return
    used = [
        f"opt.{flag}=True ({why})" for flag, why in _UNSUPPORTED_FLAGS.items() if values.get(flag)
    ]
    if used:
        raise CheckpointError(
            f"{path} was trained with {', '.join(used)}; this package's encoders always "
            "l2-normalise both embeddings, so these weights would score differently. Not "
            "supported: use a checkpoint trained without these flags (the released defaults)"
        )


def _convert_parts(path: Path, parts) -> tuple[dict[str, Tensor], dict[str, str]]:
    """Rename released keys; returns the state dict and new-key -> released-key labels."""
    names = ("img_enc", "txt_enc", "sim_enc")
    state: dict[str, Tensor] = {}
    origin: dict[str, str] = {}
    img_style = {m.group(1) for k in parts[0] if (m := _IMG_KEY.match(k))}
    if "" in img_style and len(img_style) > 1:
        raise CheckpointError(
            f"{path}: image encoder has both 'fc.*' and numbered 'fcN.*' projections: "
            f"{sorted(parts[0])}"
        )
    for part, name in zip(parts, names):
        if not isinstance(part, dict):
            raise CheckpointError(f"{path}: {name} entry is a {type(part).__name__}, not a dict")
        for key, value in part.items():
            label = f"{name}[{key}]"
            new = key
            if name == "img_enc" and (m := _IMG_KEY.match(key)):
                view = int(m.group(1)) - 1 if m.group(1) else 0
                new = f"fc.{view}.{m.group(2)}"
            elif name == "sim_enc":
                for old, repl in _SIM_RENAMES:
                    if key.startswith(old):
                        new = repl + key[len(old) :]
            state[f"{name}.{new}"] = value
            origin[f"{name}.{new}"] = label
    return state, origin


def _infer_config(path: Path, state: dict[str, Tensor]) -> dict:
    required = {
        "txt_enc.embed.weight": "txt_enc[embed.weight]",
        "txt_enc.cap_rnn.weight_hh_l0": "txt_enc[cap_rnn.weight_hh_l0]",
        "img_enc.fc.0.weight": "img_enc[fc.weight] or img_enc[fc1.weight]",
        "sim_enc.sim_tranloc_w.weight": "sim_enc[sim_tranloc_w.weight]",
        "sim_enc.v_global_w.embedding_local.1.weight": (
            "sim_enc[v_global_w.embedding_local.1.weight]"
        ),
    }
    missing = [label for key, label in required.items() if key not in state]
    steps = {int(k.split(".")[3]) for k in state if k.startswith("sim_enc.sgr.steps.")}
    has_saf = any(k.startswith("sim_enc.saf.") for k in state)
    if steps and has_saf:
        raise CheckpointError(f"{path}: sim_enc holds both SGR_module and SAF_module keys")
    if not steps and not has_saf:
        missing.append("sim_enc[SGR_module.*] or sim_enc[SAF_module.*]")
    if missing:
        raise _key_error(path, missing, [])
    vocab, word_dim = state["txt_enc.embed.weight"].shape
    views = {int(k.split(".")[2]) for k in state if k.startswith("img_enc.fc.")}
    return {
        "vocab_size": int(vocab),
        "word_dim": int(word_dim),
        "img_dim": int(state["img_enc.fc.0.weight"].shape[1]),
        "embed_dim": int(state["txt_enc.cap_rnn.weight_hh_l0"].shape[1]),
        "sim_dim": int(state["sim_enc.sim_tranloc_w.weight"].shape[0]),
        "num_regions": int(state["sim_enc.v_global_w.embedding_local.1.weight"].shape[0]),
        "num_views": max(views) + 1,
        "head": "sgr" if steps else "saf",
        "sgr_steps": max(steps) + 1 if steps else 3,
        "bi_gru": "txt_enc.cap_rnn.weight_hh_l0_reverse" in state,
    }


def _key_error(path: Path, missing: list[str], unexpected: list[str], shapes=()) -> CheckpointError:
    lines = [f"{path}: the state dicts do not form an SGRAF model."]
    if missing:
        lines.append(f"missing keys ({len(missing)}): {missing}")
    if unexpected:
        lines.append(f"unexpected keys ({len(unexpected)}): {unexpected}")
    if shapes:
        lines.append(f"shape mismatches: {list(shapes)}")
    lines.append("Keys are listed as part[released key]; check the file is an SGRAF-family model.")
    return CheckpointError(" ".join(lines))


def _check_against_model(
    path: Path, state: dict[str, Tensor], config: dict, origin: dict[str, str]
) -> None:
    """Strict comparison with a model built from ``config``. Released files from torch
    0.4.0 lack BatchNorm ``num_batches_tracked``; those (only) are filled with 0."""
    reference = build_model_from_config(config).state_dict()
    for key in reference:
        if key.endswith("num_batches_tracked") and key not in state:
            state[key] = torch.zeros((), dtype=torch.long)
    missing = [k for k in reference if k not in state]
    unexpected = [origin.get(k, k) for k in state if k not in reference]
    shapes = [
        f"{origin.get(k, k)}: {tuple(state[k].shape)} vs expected {tuple(v.shape)}"
        for k, v in reference.items()
        if k in state and tuple(state[k].shape) != tuple(v.shape)
    ]
    if missing or unexpected or shapes:
        raise _key_error(path, [_released_name(k) for k in missing], unexpected, shapes)


def _released_name(key: str) -> str:
    """Best-effort released label for one of this package's keys (for error messages)."""
    part, _, rest = key.partition(".")
    if part == "img_enc" and (m := re.match(r"fc\.(\d+)\.(.*)", rest)):
        return f"img_enc[fc{int(m.group(1)) + 1}.{m.group(2)} or fc.{m.group(2)}]"
    for old, new in _SIM_RENAMES:
        if rest.startswith(new):
            rest = old + rest[len(new) :]
    return f"{part}[{rest}]"
