"""Benchmark harnesses behind `pagecast bench` / `pagecast demo` and benchmarks/real_programs.py, and the builders of the workloads they run."""
