"""Resource quantities: Polyaxon plain numbers and Kubernetes quantity strings.

Polyaxon units: a plain number means cores for ``cpu``, MiB for ``memory`` and devices for ``gpu``/``tpu``.
Kubernetes quantity strings (``"500m"``, ``"2Gi"``) are kept as the user wrote them.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

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


class QuantityError(ValueError):
    """A resource amount that is neither a non-negative number nor a Kubernetes quantity."""


def parse_quantity(value: str) -> Decimal:
    """Value of a Kubernetes quantity string in base units (cores, bytes, devices)."""
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(
            f"{value!r} is not a Kubernetes quantity (examples: '500m', '2', '1.5', '256Mi', '2Gi', '1e3')"
        )
    suffix = match.group("suffix") or ""
    if suffix[:1] in ("e", "E"):
        return Decimal(match.group("num")) * (Decimal(10) ** int(suffix[1:]))
    return Decimal(match.group("num")) * _SUFFIX[suffix]


def amount_in_base_units(kind: str, value: int | float | str) -> Decimal:
    """Comparable value of an amount: cores for cpu, bytes for memory, devices for gpu/tpu."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a resource amount (a number or a quantity string)")
    if isinstance(value, str):
        return parse_quantity(value)
    try:
        number = Decimal(str(value))
    except InvalidOperation as err:  # pragma: no cover - ints and floats always convert
        raise QuantityError(f"{value!r} is not a number") from err
    if not number.is_finite():
        raise QuantityError(f"{value!r} is not a finite number")
    if number < 0:
        raise QuantityError(f"{value!r} is negative")
    return number * MIB if kind == "memory" else number


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
