"""Importers: other tools' traces → pagecast traces (or schedules). One module per format."""

from __future__ import annotations

# format name → (module, what it reads, what it produces)
FORMATS: dict[str, tuple[str, str, str]] = {
    "ai4mem": ("pagecast.importers.ai4mem", "AI4Mem collector CSV (UVM faults, migrations, kernels)", "trace"),
    "ai4mem-predictions": (
        "pagecast.importers.ai4mem_predictions",
        "AI4Mem predictions CSV (both header variants)",
        "schedule",
    ),
    "lackey": ("pagecast.importers.lackey", "valgrind --tool=lackey --trace-mem=yes output", "trace"),
    "champsim": (
        "pagecast.importers.champsim",
        "ML-DPC / ChampSim load trace (instr_id, cycle, addr, pc, llc_hit)",
        "trace",
    ),
    "champsim-prefetch": ("pagecast.importers.champsim", "ML-DPC prefetch file (instr_id hex_addr)", "schedule"),
    "memai": ("pagecast.importers.memai", "MemAI PEBS feather (Timestamp, Vaddr, Phase, Instrs)", "trace"),
    "gem5": (
        "pagecast.importers.gem5_run",
        "gem5 packet trace (.trc[.gz]), GPU debug trace, or stats.txt (--stats-only)",
        "trace",
    ),
    "damo": ("pagecast.importers.damo", "damo record file (json or zlib-compressed json)", "trace"),
}
