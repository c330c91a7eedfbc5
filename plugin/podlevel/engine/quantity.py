"""Kubernetes resource quantities (`500m`, `4`, `4Gi`, `2Mi`, `1e3`) as exact integers.

CPU is kept in millicores and memory in bytes, the units the kubelet's managers compare in; anything finer
than a millicore or a byte is rounded up, as `resource.Quantity.MilliValue()`/`Value()` do.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Final

from podlevel.engine.errors import InputError

_BINARY: Final = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL: Final = {
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": Fraction(1),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
}
_QUANTITY: Final = re.compile(
    r"^([+-]?[0-9]+(?:\.[0-9]*)?|[+-]?\.[0-9]+)(?:([eE][+-]?[0-9]+)|([A-Za-z]{0,2}))$"
)


def parse_quantity(text: str | int | float) -> Fraction:
    """Parse a quantity into its exact value. Raises InputError naming the quantity syntax rule."""
    if isinstance(text, bool):
        raise InputError("quantity", f"{text!r} is not a quantity")
    if isinstance(text, int):
        return Fraction(text)
    if isinstance(text, float):
        return Fraction(str(text))
    match = _QUANTITY.match(text.strip())
    if not match:
        raise InputError("quantity", f"{text!r} is not a Kubernetes quantity (e.g. 500m, 2, 4Gi, 1e3)")
    number, exponent, suffix = match.groups()
    value = Fraction(number)
    if exponent:
        value *= Fraction(10) ** int(exponent[1:])
    elif suffix in _BINARY:
        value *= _BINARY[suffix]
    elif suffix in _DECIMAL:
        value *= _DECIMAL[suffix]
    else:
        raise InputError("quantity", f"{text!r} has unknown suffix {suffix!r}")
    if value < 0:
        raise InputError("quantity", f"{text!r} is negative")
    return value


def _ceil(value: Fraction) -> int:
    return -((-value.numerator) // value.denominator)


def milli_cpu(text: str | int | float) -> int:
    """CPU quantity in millicores, rounded up."""
    return _ceil(parse_quantity(text) * 1000)


def bytes_of(text: str | int | float) -> int:
    """Memory or hugepages quantity in bytes, rounded up."""
    return _ceil(parse_quantity(text))


def format_bytes(value: int) -> str:
    """The shortest exact binary-suffixed form, as kubectl prints memory (4294967296 -> "4Gi")."""
    for suffix, factor in sorted(_BINARY.items(), key=lambda item: -item[1]):
        if value and value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)
