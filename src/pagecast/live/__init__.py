"""Live loop: stream a running program's faults, predict, and prefetch ahead of it into the page cache (and anonymous memory through the in-process shim)."""
