"""Returning freed heap memory to the operating system after large passes."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import lru_cache


@lru_cache(maxsize=1)
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc (musl, macOS): their allocators return memory themselves
        return None


def release_freed_memory() -> bool:
    """Ask glibc to hand freed heap pages back to the OS; False where the C library cannot."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True
