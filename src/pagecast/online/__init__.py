"""Live loop: apply prefetch decisions to running programs (host pages, userfaultfd, CUDA)."""
