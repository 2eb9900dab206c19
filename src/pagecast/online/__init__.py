"""Live prefetching: stream a running program's faults, predict, prefetch ahead of it."""
