"""Live CUDA prefetching: the injector that issues cuMemPrefetchAsync inside a running program (recorders are in pagecast.collect)."""
