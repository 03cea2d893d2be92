"""The feed spool: transcripts waiting to be fed, and who holds the palace to feed them.

Standard library only: `palazzo hook` (a short-lived process a harness starts on every session event)
writes here and must neither import Django nor open the palace. Layout under `<data dir>/spool/`:

- `<key>.json`: one job per transcript (key = hash of harness and path), written atomically, so any
  number of triggers for one session coalesce into one job; `final` (the session ended) only ever
  turns on. A feeder renames a job to `<key>.working` while it feeds it, so a trigger arriving
  meanwhile leaves a fresh `<key>.json` that is fed again afterwards (nothing is lost).
- `<key>.failed`: a job that could not be fed (palace unreachable, store refusing); queued again by
  the next trigger (any hook event, or a feeder starting), so it is retried then, not every second.
- `holder.json`: the process feeding this spool (`role` "server" for runmcp/serve, which hold the
  palace anyway, or "feeder" for a detached `palazzo feed --spool`), with its pid; it touches the file
  every poll, so a holder that died is recognised by a stale heartbeat even if its pid was reused.
- `feeder.lock`: flock'ed by a detached feeder, so at most one runs per data dir.
- `remote-error.txt`: why the last feed could not reach a remote palace (PALAZZO_URL), which the next
  hook says on stderr; removed once a feed gets through.
- `feeder.stop`: a server that finds the palace held by a detached feeder asks it to stop here; the
  feeder releases the palace between batches.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

SPOOL_DIR = "spool"
HOLDER_FILE = "holder.json"
LOCK_FILE = "feeder.lock"
STOP_FILE = "feeder.stop"
REMOTE_ERROR_FILE = "remote-error.txt"
FEEDER_LOG = "feeder.log"
JOB_SUFFIX = ".json"
WORKING_SUFFIX = ".working"
FAILED_SUFFIX = ".failed"
# A holder touches its file every poll (about 1 s) and between batches; one silent for this long is gone.
HEARTBEAT_STALE_SECONDS = 30.0
POLL_SECONDS = 1.0
# How long a detached feeder watches a live server that has queued work (the server normally feeds it at once).
SERVER_WATCH_SECONDS = 120.0


@dataclass(frozen=True)
class Job:
    """One transcript to feed."""

    harness: str
    path: str
    session_id: str | None = None
    cwd: str | None = None
    event: str | None = None
    final: bool = False  # the session ended: its incomplete last exchange is fed too
    queued_at: float = 0.0
    room: str | None = None  # `feed --room`: the room instead of the project's name

    @property
    def key(self) -> str:
        """The job's file stem: one per transcript."""
        return job_key(self.harness, self.path)


def spool_dir(data_dir: Path) -> Path:
    """The spool directory of a data dir."""
    return data_dir / SPOOL_DIR


def job_key(harness: str, path: str) -> str:
    """The stable name of a transcript's job."""
    return hashlib.sha256(f"{harness}\0{path}".encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _write_atomically(target: Path, content: str) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    staged = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns()}.tmp")
    with open(staged, "w", encoding="utf-8") as handle:
        handle.write(content)
    os.replace(staged, target)


def _read_job(path: Path) -> Job | None:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        fields = {key: raw[key] for key in Job.__dataclass_fields__ if key in raw}
        job = Job(**fields)
    except (OSError, ValueError, TypeError):
        return None
    if not isinstance(job.harness, str) or not isinstance(job.path, str):
        return None
    return job


def enqueue(data_dir: Path, job: Job) -> Path:
    """Write (or refresh) the transcript's job; a job already marked final stays final."""
    target = spool_dir(data_dir) / f"{job.key}{JOB_SUFFIX}"
    final = job.final
    if not final:
        for existing in (target, target.with_suffix(WORKING_SUFFIX), target.with_suffix(FAILED_SUFFIX)):
            previous = _read_job(existing) if existing.exists() else None
            final = final or bool(previous and previous.final)
    record = asdict(job) | {"final": final, "queued_at": job.queued_at or time.time()}
    _write_atomically(target, json.dumps(record, ensure_ascii=False))
    return target


def pending(data_dir: Path) -> list[Path]:
    """Job files waiting, oldest first."""
    try:
        entries = [entry for entry in spool_dir(data_dir).iterdir() if entry.name.endswith(JOB_SUFFIX)]
    except FileNotFoundError:
        return []
    entries = [entry for entry in entries if entry.name != HOLDER_FILE and not entry.name.startswith(".")]
    with_times = []
    for entry in entries:
        with contextlib.suppress(FileNotFoundError):
            with_times.append((entry.stat().st_mtime, entry))
    return [entry for _mtime, entry in sorted(with_times)]


def claim(job_file: Path) -> tuple[Job, Path] | None:
    """Take a job for feeding (rename it to .working); None when another feeder took it or it is unreadable."""
    working = job_file.with_suffix(WORKING_SUFFIX)
    try:
        os.replace(job_file, working)
    except FileNotFoundError:
        return None
    job = _read_job(working)
    if job is None:
        working.unlink(missing_ok=True)
        return None
    return job, working


def finish(working: Path) -> None:
    """A claimed job is done."""
    working.unlink(missing_ok=True)


def give_back(working: Path, *, failed: bool = False) -> None:
    """A claimed job was not fed: queue it again (failed: at the next trigger), merged with a newer trigger."""
    job = _read_job(working)
    fresh = working.with_suffix(JOB_SUFFIX)
    if job is not None and fresh.exists():
        newer = _read_job(fresh)
        if newer is not None and job.final and not newer.final:
            _write_atomically(fresh, json.dumps(asdict(newer) | {"final": True}, ensure_ascii=False))
        working.unlink(missing_ok=True)
        return
    with contextlib.suppress(FileNotFoundError):
        os.replace(working, working.with_suffix(FAILED_SUFFIX) if failed else fresh)


def requeue_failed(data_dir: Path) -> int:
    """Queue the failed jobs again (a new trigger came); returns how many."""
    requeued = 0
    with contextlib.suppress(FileNotFoundError):
        for failed in spool_dir(data_dir).glob(f"*{FAILED_SUFFIX}"):
            fresh = failed.with_suffix(JOB_SUFFIX)
            with contextlib.suppress(FileNotFoundError):
                if fresh.exists():
                    job = _read_job(failed)
                    if job is not None and job.final:
                        enqueue(data_dir, job)  # keeps the newer job, final turned on
                    failed.unlink()
                else:
                    os.replace(failed, fresh)
                requeued += 1
    return requeued


def recover(data_dir: Path) -> int:
    """Queue again the jobs a feeder that died left claimed; returns how many (call with the spool owned)."""
    recovered = 0
    with contextlib.suppress(FileNotFoundError):
        for working in spool_dir(data_dir).glob(f"*{WORKING_SUFFIX}"):
            give_back(working)
            recovered += 1
    return recovered


# Holder ------------------------------------------------------------------------------------------


def _pid_alive(pid: Any) -> bool:
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def live_holder(data_dir: Path) -> dict[str, Any] | None:
    """The process feeding this spool, when one is alive and beating; None otherwise."""
    path = spool_dir(data_dir) / HOLDER_FILE
    try:
        age = time.time() - path.stat().st_mtime
        holder = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(holder, dict) or age > HEARTBEAT_STALE_SECONDS or not _pid_alive(holder.get("pid")):
        return None
    return holder


def claim_holder(data_dir: Path, *, role: str) -> None:
    """Announce this process as the spool's holder."""
    record = {"pid": os.getpid(), "role": role, "command": " ".join(sys.argv[:3]), "since": time.time()}
    _write_atomically(spool_dir(data_dir) / HOLDER_FILE, json.dumps(record))


def beat(data_dir: Path) -> None:
    """Refresh this holder's heartbeat (re-announcing it if the file went missing)."""
    path = spool_dir(data_dir) / HOLDER_FILE
    try:
        holder = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        holder = None
    if not isinstance(holder, dict) or holder.get("pid") != os.getpid():
        return
    os.utime(path)


def release_holder(data_dir: Path) -> None:
    """Withdraw this process as holder (only if it still is)."""
    path = spool_dir(data_dir) / HOLDER_FILE
    with contextlib.suppress(OSError, ValueError):
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
            path.unlink()


def record_remote_error(data_dir: Path, error: str | None) -> None:
    """Remember why the last feed could not reach the remote palace (None: it could), for the next hook to say."""
    path = spool_dir(data_dir) / REMOTE_ERROR_FILE
    if error is None:
        path.unlink(missing_ok=True)
    else:
        _write_atomically(path, error.replace("\n", " ")[:500])


def remote_error(data_dir: Path) -> str | None:
    """Why the last feed could not reach the remote palace, if it could not."""
    try:
        return (spool_dir(data_dir) / REMOTE_ERROR_FILE).read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


# Detached feeder ---------------------------------------------------------------------------------


@contextlib.contextmanager
def feeder_lock(data_dir: Path, *, wait_seconds: float) -> Iterator[bool]:
    """Hold the one-feeder-per-data-dir lock; yields False when another feeder kept it for wait_seconds."""
    spool_dir(data_dir).mkdir(parents=True, exist_ok=True)
    handle: IO[bytes] = open(spool_dir(data_dir) / LOCK_FILE, "ab")  # noqa: SIM115 - held for the block
    try:
        deadline = time.monotonic() + wait_seconds
        while True:
            try:
                fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    yield False
                    return
                time.sleep(0.1)
        yield True
    finally:
        handle.close()


def feeder_active(data_dir: Path) -> bool:
    """Whether a detached feeder holds the feeder lock now (probed without waiting)."""
    from palace.engine.holder import lock_held  # imported here: the hook's start-up path stays as short

    return lock_held(spool_dir(data_dir) / LOCK_FILE)


def has_work(data_dir: Path) -> bool:
    """Whether any transcript waits to be fed or is being fed."""
    return bool(pending(data_dir)) or _claimed(data_dir)


def _claimed(data_dir: Path) -> bool:
    """Whether some job is being fed (renamed .working by whoever claimed it)."""
    return any(spool_dir(data_dir).glob(f"*{WORKING_SUFFIX}"))


def watch_server(data_dir: Path, *, seconds: float) -> bool:
    """Wait while a live server has work queued or in hand; False when it went away and left work behind."""
    deadline = time.monotonic() + seconds
    while (holder := live_holder(data_dir)) is not None and holder.get("role") == "server":
        if not (pending(data_dir) or _claimed(data_dir)) or time.monotonic() > deadline:
            return True
        time.sleep(POLL_SECONDS)
    return not pending(data_dir) and not _claimed(data_dir) and not any(spool_dir(data_dir).glob(f"*{FAILED_SUFFIX}"))


def request_stop(data_dir: Path) -> None:
    """Ask a detached feeder to release the palace at its next batch boundary."""
    _write_atomically(spool_dir(data_dir) / STOP_FILE, json.dumps({"pid": os.getpid(), "at": time.time()}))


def stop_requested(data_dir: Path) -> bool:
    """Whether a server asked the detached feeder to stop."""
    return (spool_dir(data_dir) / STOP_FILE).exists()


def stop_requester_alive(data_dir: Path) -> bool:
    """Whether the server that asked the feeder to stop still runs (it may die before taking over)."""
    try:
        request = json.loads((spool_dir(data_dir) / STOP_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(request, dict) and _pid_alive(request.get("pid"))


def clear_stop(data_dir: Path) -> None:
    """Forget a stop request (the server that made it holds the palace now)."""
    (spool_dir(data_dir) / STOP_FILE).unlink(missing_ok=True)


def spawn_feeder(data_dir: Path, *, environ: dict[str, str] | None = None) -> int:
    """Start a detached `palazzo feed --spool` (own session, output to the data dir's feeder.log); its pid."""
    spool_dir(data_dir).mkdir(parents=True, exist_ok=True)
    env = dict(environ if environ is not None else os.environ)
    env["PALAZZO_DATA_DIR"] = str(data_dir.expanduser().absolute())  # it starts in another folder
    with open(data_dir / FEEDER_LOG, "ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "palazzo_site.cli", "feed", "--spool"],
            # palazzo's own folder: `python -m` must not import a `palace` folder of the session's project.
            cwd=Path(__file__).resolve().parents[2],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
            close_fds=True,
            env=env,
        )
    return process.pid
