"""The trace: the one contract between sources and consumers (docs/trace-format.md).

A trace is one Parquet file: the accesses table (one row per event, ordered by t_ns),
the regions list and file metadata in the Parquet key-value metadata.
"""

from pagecast.trace.reader import Trace, open_trace
from pagecast.trace.regions import Region, RegionMap, match_regions, region_key
from pagecast.trace.schedule import Schedule, read_schedule, write_schedule
from pagecast.trace.schema import (
    ACCESS_SCHEMA,
    COLUMNS,
    FLAG_WRITE,
    FORMAT_VERSION,
    Kind,
)
from pagecast.trace.writer import TraceWriter, recover_partial

__all__ = [
    "ACCESS_SCHEMA",
    "COLUMNS",
    "FLAG_WRITE",
    "FORMAT_VERSION",
    "Kind",
    "Region",
    "RegionMap",
    "match_regions",
    "region_key",
    "TraceWriter",
    "recover_partial",
    "Trace",
    "open_trace",
    "Schedule",
    "read_schedule",
    "write_schedule",
]
