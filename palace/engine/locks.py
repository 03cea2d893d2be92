"""The lock every mutation of the palace takes in this process."""

from __future__ import annotations

import threading

# Serialises the check-then-write of every mutation in this process, so two concurrent stores of
# one text cannot both pass the duplicate check (the embedded store has one writer process anyway).
write_lock = threading.RLock()
