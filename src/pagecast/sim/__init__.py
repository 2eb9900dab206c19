"""Trace-driven tiered-memory simulator (docs/simulator.md), UVM driver model and metrics."""

from pagecast.sim.config import SimConfig, SimResult, UvmParams, parse_capacity
from pagecast.sim.simulate import parse_prefetcher, simulate

__all__ = ["SimConfig", "SimResult", "UvmParams", "parse_capacity", "parse_prefetcher", "simulate"]
