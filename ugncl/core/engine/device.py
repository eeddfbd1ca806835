"""Device and mixed-precision selection: the trainer's job, never the models'."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

from precomputed.errors import InvalidSettingError


@dataclass(frozen=True)
class Precision:
    """How forward passes run: autocast dtype (None = full fp32) and whether to scale grads."""

    autocast_dtype: torch.dtype | None
    use_grad_scaler: bool

    def autocast(self, device: torch.device) -> contextlib.AbstractContextManager:
        if self.autocast_dtype is None:
            return contextlib.nullcontext()
        return torch.autocast(device_type=device.type, dtype=self.autocast_dtype)


def cpu_kernels() -> str:
    """The CPU kernels this process runs: torch's vectorised capability (``AVX2``,
    ``AVX512``, ...; ``ATEN_CPU_CAPABILITY`` pins it) and MKL's code path where
    ``MKL_CBWR`` pins it. Two CPU runs of one seed and thread count print the same numbers
    when these agree (docs/reproducibility.md)."""
    label = str(torch.backends.cpu.get_cpu_capability())
    mkl = os.environ.get("MKL_CBWR")
    return f"{label}, MKL_CBWR={mkl}" if mkl else label


def select_device(name: str = "auto") -> torch.device:
    """``auto`` -> CUDA when present, else CPU. An explicit CUDA request without CUDA fails."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:  # "Invalid device string"
        raise InvalidSettingError(
            f"train.device={name!r} is not a device; use auto, cpu, cuda or cuda:N"
        ) from err
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InvalidSettingError(
            f"train.device={name!r} but CUDA is not available here; use train.device=auto or cpu"
        )
    return device


def select_precision(mode: str, device: torch.device) -> Precision:
    """AMP on CUDA only (bf16 where supported, else fp16 with a GradScaler); fp32 on CPU."""
    if mode == "off" or device.type != "cuda":
        return Precision(None, False)
    if mode == "auto":
        mode = "bf16" if torch.cuda.is_bf16_supported() else "fp16"
    if mode == "bf16":
        return Precision(torch.bfloat16, False)
    if mode == "fp16":
        return Precision(torch.float16, True)
    raise InvalidSettingError(f"unknown amp mode {mode!r}; use auto, off, bf16 or fp16")
