"""The LD_PRELOAD list pagecast gives a program it starts with a shim."""

from pathlib import Path

from pagecast.util.preload import preload_list


def test_alone_when_nothing_is_preloaded():
    assert preload_list("", Path("/x/shim.so"), first=True) == "/x/shim.so"
    assert preload_list("", Path("/x/shim.so"), first=False) == "/x/shim.so"


def test_first_or_last_beside_the_users_own():
    assert preload_list("/lib/a.so:/lib/b.so", "/x/shim.so", first=True) == "/x/shim.so:/lib/a.so:/lib/b.so"
    assert preload_list("/lib/a.so:/lib/b.so", "/x/shim.so", first=False) == "/lib/a.so:/lib/b.so:/x/shim.so"
