"""What the collector's native fast path (native/live/fastpath.c, ``--fast``) reports:
the pages whose reads it issued, the files it numbered, and its counters at the end."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pagecast.collect.frames import (
    FASTSTAT_FIELDS,
    FILE_FRAME_DTYPE,
    FR_FASTSTAT,
    FR_FILE,
    FR_ISSUED,
    ISSUED_DTYPE,
)


@dataclass
class FastPathLog:
    issued: list[np.ndarray] = field(default_factory=list)  # ISSUED_DTYPE records, as sent
    files: dict[int, tuple[int, str]] = field(default_factory=dict)  # index -> (schedule region id or -1, path)
    stats: dict[str, int] | None = None  # FASTSTAT_FIELDS (replay_cursor -1: none), once it stopped

    def take(self, ftype: int, payload: bytes) -> bool:
        """Keep a fast-path frame; False for a frame of another kind."""
        if ftype == FR_ISSUED:
            self.issued.append(np.frombuffer(payload, dtype=ISSUED_DTYPE))
        elif ftype == FR_FILE:
            ff = np.frombuffer(payload[: FILE_FRAME_DTYPE.itemsize], dtype=FILE_FRAME_DTYPE)[0]
            path = payload[FILE_FRAME_DTYPE.itemsize :].decode("utf-8", "surrogateescape")
            self.files[int(ff["index"])] = (int(ff["tag"]), path)
        elif ftype == FR_FASTSTAT:
            self.stats = dict(zip(FASTSTAT_FIELDS, np.frombuffer(payload, dtype="<i8").tolist()))
        else:
            return False
        return True
