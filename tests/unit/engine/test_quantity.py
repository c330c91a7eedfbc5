"""Kubernetes quantities in exact integer units."""

from __future__ import annotations

import math
import re
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from podlevel.engine.errors import InputError
from podlevel.engine.limits import MAX_QUANTITY
from podlevel.engine.quantity import bytes_of, format_bytes, milli_cpu


@pytest.mark.parametrize(
    ("text", "millis"),
    [("500m", 500), ("1", 1000), ("2.5", 2500), ("0.1", 100), (3, 3000), ("1e3", 1_000_000),
     ("100u", 1), ("1k", 1_000_000), (".5", 500), ("0", 0)],
    ids=lambda v: str(v),
)
def test_cpu_in_millicores_rounded_up(text: str | int, millis: int) -> None:
    assert milli_cpu(text) == millis


@pytest.mark.parametrize(
    ("text", "value"),
    [("4Gi", 4 * 2**30), ("2Mi", 2 * 2**20), ("128974848", 128974848), ("129M", 129_000_000),
     ("1Ki", 1024), ("1.5Gi", 3 * 2**29), ("100m", 1)],
    ids=lambda v: str(v),
)
def test_memory_in_bytes(text: str, value: int) -> None:
    assert bytes_of(text) == value


@pytest.mark.parametrize("text", ["", "4GB", "abc", "1.2.3", "-1", "Gi", True, "1 Gi"])
def test_bad_quantities_name_the_rule(text: object) -> None:
    with pytest.raises(InputError) as err:
        milli_cpu(text)  # type: ignore[arg-type]
    assert err.value.rule == "quantity"


@pytest.mark.parametrize(
    ("value", "text"),
    [(4 * 2**30, "4Gi"), (2 * 2**20, "2Mi"), (3072, "3Ki"), (1536, "1536"), (1000, "1000"), (0, "0")],
)
def test_format_bytes(value: int, text: str) -> None:
    assert format_bytes(value) == text


def _reference(text: str, unit: int) -> int:
    """The exact value with Fractions (fine for short texts)."""
    match = re.fullmatch(r"([0-9]*\.?[0-9]*)(?:[eE]([+-]?[0-9]+)|([KMGTPE]i|[numkMGTPE]?))", text)
    assert match is not None
    value = Fraction(match[1]) * 10**unit
    if match[2] is not None:
        value *= Fraction(10) ** int(match[2])
    elif match[3] in BINARY:
        value *= 2 ** BINARY[match[3]]
    else:
        value *= Fraction(10) ** DECIMAL[match[3]]
    return math.ceil(value)


BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}


@given(
    st.text("0123456789", min_size=1, max_size=30),
    st.text("0123456789", max_size=30),
    st.sampled_from([*BINARY, *DECIMAL, *(f"e{n}" for n in range(-40, 40))]),
)
def test_rounding_is_exact_whatever_the_digits(before: str, after: str, suffix: str) -> None:
    """Only the digits that can change the result are converted; the result is the exact ceiling."""
    text = f"{before}.{after}{suffix}" if after else f"{before}{suffix}"
    for unit, parse in ((3, milli_cpu), (0, bytes_of)):
        want = _reference(text, unit)
        if want > MAX_QUANTITY:
            with pytest.raises(InputError, match="above the maximum"):
                parse(text)
        else:
            assert parse(text) == want, text


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("1e10000000", "above the maximum quantity 9223372036854775807"),
        ("9223372036854775808", "above the maximum"),
        ("8Ei", "above the maximum"),
        ("1e2147483648", "beyond an int32"),
        ("1e" + "9" * 100_000, "beyond an int32"),
        ("9" * 300_000, "truncated"),
        (".nan", "is not a Kubernetes quantity"),
        ("NaN", "is not a Kubernetes quantity"),
        ("Infinity", "is not a Kubernetes quantity"),
        (math.nan, "not a finite number"),
        (math.inf, "not a finite number"),
        (2**70, "above"),
        ("-1", "negative"),
        (-1, "negative"),
        ("1e", "is not a Kubernetes quantity"),
        (".", "is not a Kubernetes quantity"),
    ],
    ids=lambda v: str(v)[:20],
)
def test_out_of_range_and_non_numbers_are_refused(text: str | float, fragment: str) -> None:
    with pytest.raises(InputError) as caught:
        milli_cpu(text)
    assert caught.value.rule == "quantity" and fragment in caught.value.message
    assert len(caught.value.message) < 400


@pytest.mark.parametrize(
    ("text", "millis"),
    [("1e-10000000", 1), ("0." + "0" * 200_000 + "1", 1), ("1." + "0" * 200_000, 1000), ("-0", 0),
     ("1.", 1000), ("+2", 2000), ("1E3", 1_000_000), ("9223372036854775.807", MAX_QUANTITY)],
    ids=lambda v: str(v)[:20],
)
def test_long_and_extreme_but_valid_quantities_are_read_exactly(text: str, millis: int) -> None:
    assert milli_cpu(text) == millis


def test_a_number_is_read_by_its_text() -> None:
    """As the API server reads a quantity given as a JSON number: `-1` and `"-1"` meet one rule."""
    assert milli_cpu(1.5) == milli_cpu("1.5") == 1500
    assert bytes_of(10**18) == 10**18
