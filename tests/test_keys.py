"""Canonical keys (RFC 8785)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.keys import canonical_json, canonical_key


def test_member_order_and_number_form() -> None:
    """Member order and 1 vs 1.0 do not change the canonical key."""
    assert canonical_key({"a": 1, "b": 2}) == canonical_key({"b": 2, "a": 1.0}) == b'{"a":1,"b":2}'


@pytest.mark.parametrize(
    ("value", "text"),
    [(1e21, "1e+21"), (1e-7, "1e-7"), (0.000001, "0.000001"), (-0.0, "0"), (123.456, "123.456"),
     (2**60, "1152921504606846976"), ("é\n", '"é\\n"'), ([1, "a", None, True], '[1,"a",null,true]')],
)
def test_rfc8785_forms(value: object, text: str) -> None:
    """Numbers and strings take the RFC 8785 (ECMAScript) forms."""
    assert canonical_json(value) == text


@pytest.mark.parametrize("bad", [{}, [], "k", 1, None])
def test_key_must_be_nonempty_object(bad: object) -> None:
    """Only a non-empty JSON object is a key."""
    with pytest.raises(ValueError):
        canonical_key(bad)


keys = st.dictionaries(
    st.text(max_size=5),
    st.recursive(st.none() | st.booleans() | st.integers(-10**15, 10**15)
                 | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5),
                 lambda inner: st.lists(inner, max_size=3)
                 | st.dictionaries(st.text(max_size=3), inner, max_size=3), max_leaves=6),
    min_size=1, max_size=5)


@given(keys)
def test_canonical_is_stable_json(key: dict) -> None:
    """The canonical text is valid JSON and canonicalises to itself, whatever the order."""
    text = canonical_key(key)
    reparsed = json.loads(text)
    assert canonical_key(reparsed) == text
    assert canonical_key(dict(reversed(list(key.items())))) == text


plain_keys = st.dictionaries(
    st.text(max_size=6),
    st.none() | st.booleans() | st.integers(-(2**60), 2**60) | st.text(max_size=6)
    | st.floats(allow_nan=False, allow_infinity=False),
    min_size=1, max_size=6)


@given(st.one_of(keys, plain_keys))
def test_fast_path_matches_reference(key: dict) -> None:
    """canonical_key (fast path for flat plain keys) equals the reference RFC 8785 text."""
    assert canonical_key(key) == canonical_json(key).encode()


@pytest.mark.parametrize("key", [{"b": 1, "a": "x"}, {"z": None, "B": True, "a": -5, "_": 'q"\\'}])
def test_flat_keys_sorted(key: dict) -> None:
    """Flat keys of plain values come out sorted and compact, as RFC 8785 writes them."""
    assert canonical_key(key) == canonical_json(key).encode()
    assert json.loads(canonical_key(key)) == key
