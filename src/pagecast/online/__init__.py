"""Live prefetching: daemons, injectors and the userfaultfd pager."""
