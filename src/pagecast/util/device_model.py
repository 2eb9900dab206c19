"""A storage device's cost model, measured on this machine (``pagecast calibrate``).

Stored as JSON in the user's cache directory, one file per block device (the file system
the measurement ran on), and read by the simulator (``--device-model``) to take its link
latency and bandwidth from the real device instead of the defaults.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pagecast.errors import PagecastError
from pagecast.util.atomic import atomic_write_text

MODEL_VERSION = 1
DEFAULT_READ_AHEAD_KB = 128  # the kernel's default for a device without its own setting


@dataclass
class RandomRead:
    queue_depth: int
    iops: float
    latency_ns_p50: int  # per read, as its issuer waited for it
    latency_ns_p99: int


@dataclass
class FillCost:
    """Cost of bringing one 4 KiB page of a cold file into the page cache."""

    how: str  # "fault", "fadvise", "pager"
    ns_p50: int  # one page at a time: from asking to the page being usable
    ns_p99: int
    ns_per_page_batched: int | None = None  # many pages asked at once (fadvise), per page
    note: str = ""


@dataclass
class DeviceModel:
    device: str  # "MAJ:MIN" of the measured file system
    path: str  # directory the test file was in
    measured_unix: float
    file_mib: int
    direct_io: bool  # O_DIRECT reads (the device) rather than buffered ones
    seq_read_bytes_per_s: float
    random_reads: list[RandomRead] = field(default_factory=list)
    fills: list[FillCost] = field(default_factory=list)
    host: dict[str, str] = field(default_factory=dict)
    version: int = MODEL_VERSION

    @property
    def read_latency_ns(self) -> int:
        """Latency of one random 4 KiB read at queue depth 1."""
        qd1 = [r for r in self.random_reads if r.queue_depth == 1]
        if not qd1:
            raise PagecastError("device model has no queue-depth-1 random read measurement")
        return int(qd1[0].latency_ns_p50)

    def fill(self, how: str) -> FillCost | None:
        return next((f for f in self.fills if f.how == how), None)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DeviceModel":
        d = dict(d)
        d["random_reads"] = [RandomRead(**r) for r in d.get("random_reads", [])]
        d["fills"] = [FillCost(**f) for f in d.get("fills", [])]
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in d.items() if k in known})


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "pagecast"


def read_ahead_kb_of(dev: int) -> int:
    """The read-ahead setting of the device ``dev`` (an ``st_dev``), read from sysfs, never written."""
    try:
        with open(f"/sys/class/bdi/{os.major(dev)}:{os.minor(dev)}/read_ahead_kb") as f:
            return int(f.read())
    except (OSError, ValueError):
        return DEFAULT_READ_AHEAD_KB


def read_ahead_bytes_of(path: str | Path) -> int:
    """The read-around window of the device ``path`` lies on, in bytes (the default where
    the file or its device setting cannot be read)."""
    try:
        return read_ahead_kb_of(os.stat(path).st_dev) << 10
    except OSError:
        return DEFAULT_READ_AHEAD_KB << 10


def max_sectors_kb_of(dev: int) -> int | None:
    """The largest single request the block device ``dev`` takes (its queue's max_sectors_kb;
    a partition's is its disk's), or None when it has no block queue (tmpfs, network)."""
    base = Path(f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    for q in (base / "queue", base / ".." / "queue"):
        try:
            return int((q / "max_sectors_kb").read_text())
        except (OSError, ValueError):
            continue
    return None


def willneed_window_kb(dev: int) -> int:
    """How much one ``posix_fadvise(fd, off, 0, WILLNEED)`` reads from ``off`` on device ``dev``.

    The kernel clamps a forced read-ahead (force_page_cache_ra) to the larger of the
    device's read-ahead window and its largest request, so WILLNEED of a whole file reads
    its first read_ahead_kb (8 MiB on a disk set to 8192), not the file."""
    return max(read_ahead_kb_of(dev), max_sectors_kb_of(dev) or 0)


def device_of(path: str | Path) -> str:
    st = os.stat(path)
    return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"


def model_path(directory: str | Path) -> Path:
    """Where the model of the device holding ``directory`` is stored."""
    return cache_dir() / f"device-{device_of(directory).replace(':', '_')}.json"


def save_model(model: DeviceModel, path: str | Path) -> Path:
    atomic_write_text(path, json.dumps(model.to_dict(), indent=2) + "\n")
    return Path(path)


def load_model(path: str | Path) -> DeviceModel:
    try:
        d = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise PagecastError("no device model here (run `pagecast calibrate` first)", path=path) from None
    except (OSError, ValueError) as e:
        raise PagecastError(f"unreadable device model: {e}", path=path) from None
    if not isinstance(d, dict) or d.get("version") != MODEL_VERSION or "seq_read_bytes_per_s" not in d:
        raise PagecastError(f"not a pagecast device model (version {MODEL_VERSION})", path=path)
    try:
        return DeviceModel.from_dict(d)
    except TypeError as e:
        raise PagecastError(f"malformed device model: {e}", path=path) from None


def find_model(spec: str) -> DeviceModel:
    """``spec``: a model file, or a directory whose device was calibrated."""
    p = Path(spec)
    if p.is_dir():
        return load_model(model_path(p))
    return load_model(p)
