"""Kubernetes resource quantities (`500m`, `4`, `4Gi`, `2Mi`, `1e3`) as exact integers.

CPU is kept in millicores and memory in bytes, the units the kubelet's managers compare in; anything finer
than a millicore or a byte is rounded up, as `resource.Quantity.MilliValue()`/`Value()` do.

The grammar is the API server's: an optional sign, digits with an optional fraction (`1`, `1.5`, `1.`,
`.5`), then a decimal exponent (`e3`, `E-2`, an int32) or one SI suffix (binary `Ki`..`Ei`, decimal
`n u m k M G T P E`). Values above `limits.MAX_QUANTITY` and negative ones are refused. Parsing takes time
linear in the text whatever its digits or exponent: the value is never expanded digit by digit, only the
digits that can change the rounded result are converted (see `_ceil_scaled`).
"""

from __future__ import annotations

import math
import re
from typing import Final

from podlevel.engine.errors import InputError
from podlevel.engine.limits import MAX_QUANTITY, MAX_QUANTITY_EXPONENT, quote
from podlevel.engine.pod import CPU

_BINARY: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
"""Binary suffix -> power of two."""
_DECIMAL: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
"""Decimal suffix -> power of ten."""
# Possessive quantifiers: no backtracking, so a long run of digits costs one pass.
_QUANTITY: Final = re.compile(
    r"(?P<sign>[+-]?)(?:(?P<int>[0-9]++)(?:\.(?P<frac>[0-9]*+))?|\.(?P<dfrac>[0-9]++))"
    r"(?:[eE](?P<exp>[+-]?[0-9]++)|(?P<suffix>[KMGTPE]i|[numkMGTPE]?))"
)
_RULE: Final = "quantity"
_SYNTAX: Final = "is not a Kubernetes quantity (e.g. 500m, 2, 4Gi, 1e3)"


def milli_cpu(text: str | int | float) -> int:
    """CPU quantity in millicores, rounded up."""
    return _parse(text, 3)


def bytes_of(text: str | int | float) -> int:
    """Memory or hugepages quantity in bytes, rounded up."""
    return _parse(text, 0)


def _parse(value: str | int | float, unit_exponent: int) -> int:
    """The quantity times 10**unit_exponent, rounded up. Raises InputError naming the quantity rule.

    A YAML or JSON number is read as the API server reads it, by its text: `-1` is refused as `"-1"` is.
    """
    if isinstance(value, bool):
        raise InputError(_RULE, f"{value!r} is not a quantity")
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(_RULE, f"{value!r} is not a finite number")
    if isinstance(value, int) and value.bit_length() > 64:
        raise InputError(_RULE, f"an integer of {value.bit_length()} bits is above {MAX_QUANTITY}")
    text = value.strip() if isinstance(value, str) else repr(value)
    match = _QUANTITY.fullmatch(text)
    if match is None:
        raise InputError(_RULE, f"{quote(text)} {_SYNTAX}")
    digits_before = match["int"] if match["int"] is not None else ""
    fraction = match["frac"] or match["dfrac"] or ""
    exponent, binary = 0, 0
    if match["exp"] is not None:
        exponent_text = match["exp"].lstrip("+-").lstrip("0")
        if len(exponent_text) > 10 or int(exponent_text or "0") > MAX_QUANTITY_EXPONENT:
            raise InputError(_RULE, f"{quote(text)}: the exponent is beyond an int32, which the API server "
                                    "refuses")
        exponent = -int(exponent_text or "0") if match["exp"].startswith("-") else int(exponent_text or "0")
    elif match["suffix"] in _BINARY:
        binary = _BINARY[match["suffix"]]
    else:
        exponent = _DECIMAL[match["suffix"]]
    amount = _ceil_scaled(digits_before, fraction, exponent + unit_exponent, binary)
    if amount is None or amount > MAX_QUANTITY:
        raise InputError(_RULE, f"{quote(text)} is above the maximum quantity {MAX_QUANTITY}")
    if amount and match["sign"] == "-":
        raise InputError(_RULE, f"{quote(text)} is negative")
    return amount


def _ceil_scaled(before: str, after: str, exponent: int, binary: int) -> int | None:
    """ceil(`before`.`after` * 10**exponent * 2**binary) of a non-negative decimal, None when it is surely
    above `MAX_QUANTITY`.

    Only the significant digits up to `binary` places past the point of `value * 10**exponent` are
    converted; any non-zero digit beyond them is accounted as half a unit of the last kept place. That is
    exact: every point where the ceiling steps, n / 2**binary, has a decimal expansion of at most `binary`
    places, so the value and the kept digits plus the half unit lie on the same side of each.
    """
    digits = before + after
    significant = digits.lstrip("0")
    if not significant:
        return 0
    # The value is 0.<significant> * 10**point.
    point = len(before) - (len(digits) - len(significant)) + exponent
    if point > 39:  # at least 10**39: above 2**63 whatever the binary suffix
        return None
    keep = point + binary
    if keep <= 0:  # below 10**-binary: times 2**binary still below 1
        return 1
    kept, rest = significant[:keep], significant[keep:]
    # value = (int(kept) + sticky) * 10**(point - len(kept)), sticky in [0, 1), 0 only when rest is zero
    numerator = int(kept or "0") * 2 + (1 if rest.strip("0") else 0)
    shift = point - len(kept)
    scaled = numerator << binary
    power: int = 10 ** abs(shift)
    if shift >= 0:
        return -(-(scaled * power) // 2)
    return -(-scaled // (2 * power))


def format_bytes(value: int) -> str:
    """The shortest exact binary-suffixed form, as kubectl prints memory (4294967296 -> "4Gi")."""
    for suffix, power in sorted(_BINARY.items(), key=lambda item: -item[1]):
        if value and value % (1 << power) == 0:
            return f"{value // (1 << power)}{suffix}"
    return str(value)


def format_amount(resource: str, amount: int) -> str:
    """The exact quantity as an operator writes it: whole CPUs or millicores; binary-suffixed bytes."""
    if resource == CPU:
        return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
    return format_bytes(amount)
