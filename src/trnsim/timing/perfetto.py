"""Timelines as Chrome trace-event JSON, which ui.perfetto.dev and chrome://tracing open.

One process per (kernel, target) and one thread (track) per engine and per DMA queue; each
instruction is a complete event ("ph": "X") with its start and duration in microseconds, its
opcode as the name and its kernel line in `args`.

    >>> write_chrome_trace({"trn1": timeline}, "kernel.json")
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from trnsim.errors import ConfigError
from trnsim.timing.schedule import Timeline

_US_PER_S = 1e6


def _metadata(pid: int, tid: int | None, name: str, value: str) -> dict:
    event = {"name": name, "ph": "M", "pid": pid, "args": {"name": value}}
    if tid is not None:
        event["tid"] = tid
    return event


def operands_text(ins) -> str:
    """Outputs <- inputs as dtype[partitions x free] memory, and the bytes a DMA moves."""
    def region(r) -> str:
        return f"{r.dtype}[{r.partition_count}x{r.elements_per_partition}] {r.memory.value}"
    text = ", ".join(map(region, ins.outputs)) + " <- " + ", ".join(map(region, ins.inputs))
    moved = max((r.bytes for r in ins.outputs + ins.inputs), default=0)
    return f"{text}; {moved:,} B" if ins.engine.value == "dma" else text


def trace_events(timeline: Timeline, pid: int, label: str) -> list[dict]:
    """The events of one timeline: track names first, then one "X" event per instruction."""
    events = [_metadata(pid, None, "process_name", label)]
    for tid, (lane, rank) in enumerate(zip(timeline.lanes, timeline.lane_rank(), strict=True)):
        events.append(_metadata(pid, tid, "thread_name", lane))
        events.append({"name": "thread_sort_index", "ph": "M", "pid": pid, "tid": tid,
                       "args": {"sort_index": rank}})
    starts = (timeline.start_s * _US_PER_S).tolist()
    durations = (timeline.duration_s * _US_PER_S).tolist()
    lanes, engines = timeline.lane.tolist(), timeline.engine_names()
    for index, ins in enumerate(timeline.trace):
        events.append({"name": ins.opcode.value, "cat": engines[index], "ph": "X",
                       "ts": starts[index], "dur": durations[index], "pid": pid,
                       "tid": lanes[index],
                       "args": {"index": index, "engine": engines[index], "operands": operands_text(ins),
                                "where": str(ins.where) if ins.where else ""}})
    return events


def chrome_trace(timelines: Mapping[str, Timeline]) -> dict:
    """A trace-event document with one process per labelled timeline."""
    events: list[dict] = []
    for pid, (label, timeline) in enumerate(timelines.items(), start=1):
        events.extend(trace_events(timeline, pid, label))
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, content: str | bytes) -> Path:
    """Write `content` (text as UTF-8) to `path` all at once: never a half-written file."""
    return write_all({path: content})[0]


def write_all(contents: Mapping[str | Path, str | bytes]) -> list[Path]:
    """Write every file or none: each to a temporary file beside it, then all renamed into place;
    if a rename fails, the files already renamed get their old contents back (or go, if new).
    A file system error becomes a ConfigError naming the file (its parents are created first)."""
    paths = [Path(path) for path in contents]
    temporaries: list[str] = []
    moved: list[Path] = []
    backups: dict[Path, str] = {}  # files that existed: a hard link to their old contents
    path = paths[0] if paths else None
    try:
        for path, content in zip(paths, contents.values(), strict=True):
            if path.is_dir():
                raise IsADirectoryError(errno.EISDIR, "it is a directory")
            path.parent.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
            temporaries.append(temporary)
            with os.fdopen(handle, "wb") as stream:
                stream.write(content.encode() if isinstance(content, str) else content)
            os.chmod(temporary, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
        for path, temporary in zip(paths, temporaries, strict=True):
            if path.exists():
                backups[path] = f"{temporary}.old"
                try:
                    os.link(path, backups[path])
                except OSError:  # a file system without hard links
                    shutil.copy2(path, backups[path])
            os.replace(temporary, path)
            moved.append(path)
    except BaseException as error:
        for done in moved:
            if done in backups:
                os.replace(backups.pop(done), done)
            else:
                done.unlink(missing_ok=True)
        for leftover in [*temporaries, *backups.values()]:
            Path(leftover).unlink(missing_ok=True)
        if isinstance(error, OSError):
            raise ConfigError(f"cannot write {str(path)!r}: {error.strerror or error}") from None
        raise
    for backup in backups.values():
        Path(backup).unlink(missing_ok=True)
    return paths


def chrome_trace_json(timelines: Mapping[str, Timeline]) -> str:
    return json.dumps(chrome_trace(timelines), separators=(",", ":"))


def write_chrome_trace(timelines: Mapping[str, Timeline], path: str | Path) -> Path:
    """Write the trace-event JSON of `timelines` (label -> timeline) to `path`."""
    return write_atomic(path, chrome_trace_json(timelines))
