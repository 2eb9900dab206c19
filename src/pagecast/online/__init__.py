"""Live loop: stream a running program's faults, predict, and prefetch ahead of it (host pages, userfaultfd pager, CUDA)."""
