"""Planned runs: the native launcher behind `pagecast run --plan` and the Python pieces around it.

This package is on the start-up path of the program being launched, so ``binary`` and
``command`` import only ``os`` and ``sys``: nothing may delay the program's exec.
"""
