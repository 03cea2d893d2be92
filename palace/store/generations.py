"""The embedded shard's generations: a symlink names the live copy, so an index build can swap in a new one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path


def _generation_number(directory: Path) -> int:
    suffix = directory.name.rsplit(".g", 1)[-1]
    return int(suffix) if suffix.isdigit() else -1


class ShardGenerations:
    """The shard's directories: `<name>` is a symlink to the live generation `.<name>.g<N>` beside it.

    A background index build fills the next generation and swaps the link atomically, so after a
    crash the link names either the old complete generation or the new complete one.
    """

    def __init__(self, link: Path) -> None:
        self.link = link

    def all(self) -> list[Path]:
        """Every generation directory on disk, oldest first."""
        return sorted(self.link.parent.glob(f".{self.link.name}.g*"), key=_generation_number)

    def live(self) -> Path:
        """The live generation, migrating a plain shard directory and repairing an interrupted migration."""
        if self.link.is_symlink():
            return self.link.parent / os.readlink(self.link)
        first = self.link.parent / f".{self.link.name}.g0"
        if self.link.is_dir():  # a shard from before generations becomes generation 0
            shutil.rmtree(first, ignore_errors=True)
            self.link.rename(first)
        elif not first.is_dir():  # a new shard
            first = self.link.parent / f".{self.link.name}.g1"
            shutil.rmtree(first, ignore_errors=True)
        self.point_at(first)
        return first

    def next(self) -> Path:
        """A fresh directory name for the next generation."""
        numbers = [_generation_number(directory) for directory in self.all()] or [0]
        return self.link.parent / f".{self.link.name}.g{max(numbers) + 1}"

    def point_at(self, generation: Path) -> None:
        """Make generation the live one, atomically and durably."""
        self.link.parent.mkdir(parents=True, exist_ok=True)
        staged = self.link.with_name(f"{self.link.name}.swap")
        staged.unlink(missing_ok=True)
        staged.symlink_to(generation.name)
        os.replace(staged, self.link)
        descriptor = os.open(self.link.parent, os.O_RDONLY)
        try:
            os.fsync(descriptor)
        finally:
            os.close(descriptor)

    def remove_stale(self, live: Path) -> None:
        """Delete generations a crash or a failed build left behind."""
        for directory in self.all():
            if directory != live:
                shutil.rmtree(directory, ignore_errors=True)
        self.link.with_name(f"{self.link.name}.swap").unlink(missing_ok=True)
