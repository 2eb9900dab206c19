"""Sources that record real programs: page faults (perf), full access traces (valgrind), GPU (CUDA)."""
