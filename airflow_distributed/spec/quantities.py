"""Resource quantities: Polyaxon plain numbers and Kubernetes quantity strings.

Polyaxon units: a plain number means cores for ``cpu``, MiB for ``memory`` and devices for ``gpu``/``tpu``.
Kubernetes quantity strings (``"500m"``, ``"2Gi"``) are kept as the user wrote them.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10) ** 3,
    "M": Decimal(10) ** 6,
    "G": Decimal(10) ** 9,
    "T": Decimal(10) ** 12,
    "P": Decimal(10) ** 15,
    "E": Decimal(10) ** 18,
    "Ki": Decimal(2) ** 10,
    "Mi": Decimal(2) ** 20,
    "Gi": Decimal(2) ** 30,
    "Ti": Decimal(2) ** 40,
    "Pi": Decimal(2) ** 50,
    "Ei": Decimal(2) ** 60,
}
# Same grammar as the API server's resource.Quantity: signed decimal, then a binary/decimal suffix or exponent.
_QUANTITY = re.compile(r"^\+?(?P<num>[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?P<suffix>[KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$")

MIB = Decimal(2) ** 20
# Kubernetes keeps a quantity in 64 bits: larger ones cannot be stored or scheduled.
MAX_AMOUNT = Decimal(2) ** 63 - 1
AMOUNT_RANGE = "at most 2^63-1 (about 9.2e18) cores, bytes or devices"
# Beyond this any non-zero amount is out of range (too large, or smaller than a nano-unit).
_MAX_EXPONENT = 40
QUANTITY_EXAMPLES = "'500m', '2', '1.5', '256Mi', '2Gi', '1e3'"


class QuantityError(ValueError):
    """A resource amount that is neither a non-negative number nor a Kubernetes quantity."""


def parse_quantity(value: str) -> Decimal:
    """Value of a Kubernetes quantity string in base units (cores, bytes, devices)."""
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"is not a Kubernetes quantity (examples: {QUANTITY_EXAMPLES})")
    suffix = match.group("suffix") or ""
    number = Decimal(match.group("num"))
    if suffix in _SUFFIX:
        return _bounded(number * _SUFFIX[suffix])
    exponent = int(suffix[1:]) if len(suffix) <= 8 else None  # 'e' and at most 6 digits after the sign
    if number and (exponent is None or abs(exponent) > _MAX_EXPONENT):
        raise QuantityError(f"is out of range: {AMOUNT_RANGE}")
    return _bounded(number.scaleb(exponent or 0) if number else number)


def amount_in_base_units(kind: str, value: int | float | str) -> Decimal:
    """Comparable value of an amount: cores for cpu, bytes for memory, devices for gpu/tpu."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise QuantityError(f"expected a number or a quantity string ({QUANTITY_EXAMPLES}), got "
                            f"{type(value).__name__}")
    if isinstance(value, str):
        return parse_quantity(value)
    if isinstance(value, float) and not math.isfinite(value):
        raise QuantityError("is not a finite number")
    if isinstance(value, int) and value.bit_length() > 64:
        raise QuantityError(f"is out of range: {AMOUNT_RANGE}")
    number = Decimal(str(value))
    if number < 0:
        raise QuantityError("is negative; an amount is a number >= 0")
    return _bounded(number * MIB if kind == "memory" else number)


def _bounded(amount: Decimal) -> Decimal:
    if amount > MAX_AMOUNT:
        raise QuantityError(f"is out of range: {AMOUNT_RANGE}")
    return amount


def to_kubernetes_quantity(kind: str, value: int | float | str) -> str:
    """A Polyaxon amount as a Kubernetes quantity string (strings pass through unchanged)."""
    if isinstance(value, str):
        return value.strip()
    number = Decimal(str(value))
    if kind == "memory":
        if number == number.to_integral_value():
            return f"{int(number)}Mi"
        return f"{int((number * 1024).to_integral_value())}Ki"
    if kind == "cpu" and number != number.to_integral_value():
        return f"{int((number * 1000).to_integral_value())}m"
    return str(int(number)) if number == number.to_integral_value() else str(number)
