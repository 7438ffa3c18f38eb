"""Checks of what :mod:`otel_rl.stats` is given, made at the call, before anything is recorded.

Misuse raises with the key's full name and AReaL's exception type, so the
error points at the call that made it rather than at a later export.
"""

from __future__ import annotations

import sys
from typing import Any

from ._types import ReduceType, StatsTypeError


def scope_name(name: Any, where: str) -> str:
    """``name`` as a scope level (surrounding ``/`` dropped); a non-string raises :class:`StatsTypeError`."""
    if not isinstance(name, str):
        raise StatsTypeError(f"otel_rl.stats: {where}() takes a string name, got {type(name).__name__} "
                             f"{name!r}")
    return name.strip("/")


def require_torch(what: str, key: str) -> Any:
    """The torch module; without torch, an ``ImportError`` naming the call ``what`` and its ``key``."""
    try:
        import torch
    except ImportError:
        raise ImportError(f"otel_rl.stats: `{key}`: {what}() records torch tensors and needs torch "
                          "(pip install 'otel_rl[torch]'); scalar() works without it") from None
    return torch


def is_tensor(value: Any) -> bool:
    """Whether ``value`` is a torch tensor (never imports torch)."""
    # Without torch loaded nothing can be a tensor, and checking must not load it.
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(value, torch.Tensor)


def tensor_reduce_type(value: Any, where: str) -> ReduceType:
    """``value`` as a tensor reduce type (None: AVG_MIN_MAX; a member name is accepted too)."""
    if value is None:
        return ReduceType.AVG_MIN_MAX
    if isinstance(value, str) and value.upper() in ReduceType.__members__:
        value = ReduceType[value.upper()]
    if not isinstance(value, ReduceType):
        raise ValueError(f"otel_rl.stats: {where}: reduce_type must be a ReduceType enum, got {value!r}")
    if value is ReduceType.SCALAR:
        raise ValueError(f"otel_rl.stats: {where}: cannot use the scalar reduce type for a tensor "
                         "(ReduceType.SCALAR is for scalar())")
    if value is ReduceType.WEIGHTED_AVG:
        raise ValueError(f"otel_rl.stats: {where}: ReduceType.WEIGHTED_AVG needs a weight per value. "
                         "Use weighted_mean(key, value, weight)")
    return value


def readable_problem(torch: Any, tensor: Any) -> str | None:
    """Why export could not read ``tensor``'s values, or ``None`` when it can.

    Checked when a value is recorded: export reduces and copies every key of a
    tracker at once, so a tensor it cannot read would otherwise fail the whole
    export, long after the call that recorded it.
    """
    if tensor.layout != torch.strided:
        return f"a {tensor.layout} tensor (convert it with .to_dense())"
    if tensor.is_meta:
        return "a tensor on the meta device, which holds no values"
    if getattr(tensor, "is_nested", False):
        return "a nested tensor (record its parts one by one)"
    if tensor.is_quantized:
        return "a quantized tensor (convert it with .dequantize())"
    return None


def check_readable(torch: Any, what: str, full: str, tensor: Any, role: str = "value") -> None:
    """Raises ``ValueError`` when export could not read ``tensor`` (see :func:`readable_problem`)."""
    problem = readable_problem(torch, tensor)
    if problem is not None:
        raise ValueError(f"otel_rl.stats: `{full}`: {what}() {role} must be a dense tensor holding "
                         f"values, got {problem}")


def check_values(torch: Any, what: str, values: dict[str, Any], fulls: dict[str, str]) -> None:
    """Raises ``ValueError`` unless every value is a real, non-empty tensor export can read."""
    for key, value in values.items():
        full = fulls[key]
        if not isinstance(value, torch.Tensor):
            raise ValueError(f"otel_rl.stats: `{full}`: {what}() takes a torch tensor, got "
                             f"{type(value).__name__} (numbers go to scalar())")
        check_readable(torch, what, full, value)
        if value.is_complex():
            raise ValueError(f"otel_rl.stats: `{full}`: {what}() takes real values, got dtype {value.dtype}")
        if value.numel() == 0:
            raise ValueError(f"otel_rl.stats: `{full}`: {what}() value is empty")


def check_mask(torch: Any, what: str, full: str, mask: Any) -> None:
    """Raises ``ValueError`` unless ``mask`` is a non-empty ``torch.bool`` tensor export can read."""
    if not isinstance(mask, torch.Tensor):
        raise ValueError(f"otel_rl.stats: `{full}`: {what}() takes a torch.bool mask tensor, "
                         f"got {type(mask).__name__}")
    check_readable(torch, what, full, mask, "mask")
    if mask.dtype != torch.bool:
        raise ValueError(f"otel_rl.stats: `{full}`: {what}() takes a torch.bool mask tensor, "
                         f"got dtype {mask.dtype} (use mask.bool())")
    if mask.numel() == 0:
        raise ValueError(f"otel_rl.stats: `{full}`: {what}() mask is empty")


def positional_compat(key_sync_group: Any, reset: Any, gloo_group: Any) -> tuple[Any, bool, Any]:
    """Maps older AReaL's positional ``(..., reset, gloo_group)`` onto ``(..., key_sync_group, reset)``.

    A process group is never a bool, so a boolean where current AReaL has
    ``key_sync_group`` is older AReaL's ``reset``, and what follows it is
    older AReaL's ``gloo_group``.
    """
    if isinstance(key_sync_group, bool):
        old_reset = key_sync_group
        if not isinstance(reset, bool):
            gloo_group = reset
        return None, old_reset, gloo_group
    return key_sync_group, bool(reset), gloo_group
