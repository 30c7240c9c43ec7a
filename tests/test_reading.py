"""`binloop.core.reading.has_bom` against the plain three-byte search it replaces."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from binloop.core.reading import BOM, has_bom

_PIECES = st.lists(st.sampled_from([b"a", b"\xef", b"\xbb", b"\xbf", BOM, b"\xef\xbb",
                                    b"\n", "é".encode(), "\uf8ff".encode()]), max_size=40)


@given(_PIECES)
def test_has_bom_is_the_three_byte_search(pieces: list[bytes]) -> None:
    data = b"".join(pieces)
    assert has_bom(data) == (BOM in data)


def test_has_bom_after_other_lead_bytes() -> None:
    assert not has_bom(b"{}\n\xef\xbb{}\xef")
    assert has_bom(b"{}\n\xef\xbb{}\n" + BOM + b"{}")
    assert has_bom(BOM) and not has_bom(b"")
