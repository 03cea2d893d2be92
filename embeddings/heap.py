"""Handing the C heap's free pages back to the system after the model's load."""

from __future__ import annotations

import ctypes
import ctypes.util
import sys


def release_free_memory() -> None:
    """Return the heap's free pages to the system (glibc's malloc_trim; a no-op elsewhere).

    Loading the model parses its file into buffers that are freed once the session holds the
    weights (~18 MiB here), but glibc keeps freed pages in its heap for reuse.
    """
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return
    trim = getattr(libc, "malloc_trim", None)  # glibc only: musl has none
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim(0)
