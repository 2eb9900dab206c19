"""distinct_followers against a plain Python reading of its definition."""

from __future__ import annotations

import numpy as np
import pytest

from pagecast.trace.followers import distinct_followers


def _reference(keys: list[int], look: int, most: int) -> list[tuple[int, int, int]]:
    out = []
    for i, k in enumerate(keys):
        if k < 0:
            continue
        seen: list[int] = []
        for j in range(i + 1, min(len(keys), i + 1 + look)):
            q = keys[j]
            if q >= 0 and q != k and q not in seen and len(seen) < most:
                seen.append(q)
                out.append((i, q, j - i))
    return out


@pytest.mark.parametrize("seed", range(6))
def test_followers_are_the_first_distinct_keys_ahead(seed: int) -> None:
    rng = np.random.default_rng(seed)
    keys = rng.integers(-1, 12, 400).astype(np.int64)
    for look, most in [(1, 1), (5, 2), (16, 16), (40, 3)]:
        pos, key, dist = distinct_followers(keys, look, most)
        assert list(zip(pos.tolist(), key.tolist(), dist.tolist())) == _reference(keys.tolist(), look, most)


def test_a_stream_with_nothing_ahead_has_no_followers() -> None:
    assert [len(a) for a in distinct_followers(np.array([7, 7, -1], np.int64), 4, 4)] == [0, 0, 0]
    assert [len(a) for a in distinct_followers(np.array([1, 2], np.int64), 0, 4)] == [0, 0, 0]
