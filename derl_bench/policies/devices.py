"""Where a model runs and in what precision: the names a setting may give, and whether this
machine has them.

The names are checked wherever a config is made (:func:`device_problem`,
:func:`dtype_problem`); whether this machine has the device is checked apart
(:func:`device_missing`), by the code that runs here, since a recipe may be written on one
machine for another (a Ray cluster's GPUs)::

    >>> device_problem("cuda:1") is None, dtype_problem("bfloat16") is None
    (True, True)
    >>> print(device_problem("gpu"))
    device must be cpu, cuda or cuda:N (N a GPU's index), got 'gpu'
"""

from __future__ import annotations

import re
from typing import Any

DTYPES = ("auto", "float32", "bfloat16", "float16")
"""The dtypes a model loads in (empty: float32; ``auto``: the one its folder was saved in)."""

_DEVICE = re.compile(r"cpu|cuda(:[0-9]+)?")


def device_problem(device: Any) -> str | None:
    """Why ``device`` is not a device name the models can be placed on, else None."""
    if isinstance(device, str) and _DEVICE.fullmatch(device):
        return None
    return f"device must be cpu, cuda or cuda:N (N a GPU's index), got {device!r}"


def dtype_problem(dtype: Any) -> str | None:
    """Why ``dtype`` is not a dtype a model loads in (``None`` is: float32), else None."""
    if dtype is None or dtype in DTYPES:
        return None
    return f"dtype must be one of {', '.join(DTYPES)} (or empty: float32), got {dtype!r}"


def device_missing(device: str) -> str | None:
    """Why this machine cannot run a model on ``device`` (a valid name), else None."""
    if not device.startswith("cuda"):
        return None
    import torch

    if not torch.cuda.is_available():
        return (f"device {device!r}: this machine has no CUDA GPU that torch can use "
                f"(torch {torch.__version__}, torch.cuda.is_available() is False); use "
                "device: cpu")
    index = int(device.partition(":")[2] or 0)
    count = torch.cuda.device_count()
    if index >= count:
        names = "cuda:0" if count == 1 else f"cuda:0 to cuda:{count - 1}"
        return f"device {device!r}: this machine's CUDA GPUs are {names}"
    return None


__all__ = ["DTYPES", "device_missing", "device_problem", "dtype_problem"]
