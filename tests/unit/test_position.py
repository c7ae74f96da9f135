from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dblog_worker.position import Position

u64 = st.integers(min_value=0, max_value=2**64 - 1)


@given(st.tuples(u64, u64, u64), st.tuples(u64, u64, u64))
def test_encoded_positions_sort_like_numbers(a: tuple[int, int, int],
                                             b: tuple[int, int, int]) -> None:
    pa, pb = Position(*a), Position(*b)
    assert (pa < pb) == (pa.encode() < pb.encode())
    assert Position.decode(pa.encode()) == pa


def test_numbers_not_strings() -> None:
    # file 10 after file 9: compared as numbers, never as zero-free strings
    assert Position(9, 500) < Position(10, 4)
    assert Position(9, 500).encode() < Position(10, 4).encode()


def test_dump_rows_sit_between_the_high_watermark_and_the_next_event() -> None:
    high = Position(100, 0)
    rows = [high.dump_row(i) for i in range(3)]
    assert high < rows[0] < rows[1] < rows[2] < Position(100, 1) < Position(101, 0)


@pytest.mark.parametrize("text", ["", "xyz", "0" * 47, "g" * 48])
def test_decode_rejects_junk(text: str) -> None:
    with pytest.raises(ValueError, match="48 hex digits"):
        Position.decode(text)


def test_checked_parts_are_unsigned_64_bit() -> None:
    assert Position.of(2**64 - 1, 0) == Position(2**64 - 1, 0, 0)
    with pytest.raises(ValueError):
        Position.of(-1, 0)
    with pytest.raises(ValueError):
        Position.of(2**64, 0)
