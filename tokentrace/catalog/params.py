"""Query parameters: declared types, validation of user values, rendering as SQL literals.

Perfetto's RPC has no bound parameters (``QueryArgs`` carries SQL text only), so values are
rendered by the tool: numbers through ``int``/``float`` (finite only), booleans as 1/0, strings
single-quoted with quotes doubled and NUL rejected. No user text reaches SQL any other way.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tokentrace.errors import QueryError

TYPES = ("INT", "FLOAT", "STRING", "BOOL", "DURATION_US")
_DURATION = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)?\s*$")
_UNIT_NS = {"ns": 1, "us": 1_000, "µs": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
_PARAM_LINE = re.compile(
    r"^@param\s+([A-Za-z_][A-Za-z0-9_]*)\s+(\w+)(?:>=(-?\d+))?\s+('(?:[^']|'')*'|\S+)\s*(.*)$")


@dataclass(frozen=True)
class Param:
    """A declared parameter. ``default`` is None when the parameter is required.

    ``DURATION_US`` values are given in µs (or with a unit: ``500ns``, ``2ms``, ``1s``) and
    rendered as integer nanoseconds. ``minimum`` (declared as ``TYPE>=N``, in the unit the user
    types: µs for durations) is the smallest accepted value, None for no bound.
    """

    name: str
    type: str
    default: object | None
    doc: str
    minimum: int | None = None

    def describe(self) -> str:
        """``name TYPE (default X): doc`` for error messages and listings."""
        default = "required" if self.default is None else f"default {self.default!r}"
        bound = "" if self.minimum is None else f", >= {self.minimum}"
        return f"{self.name} {self.type} ({default}{bound})"


def parse_param_line(line: str, where: str) -> Param:
    """Parses ``@param NAME TYPE[>=N] DEFAULT  doc`` (DEFAULT ``-`` = required; strings in
    quotes; ``>=N`` a lower bound for INT, FLOAT and DURATION_US)."""
    match = _PARAM_LINE.match(line)
    if not match or match.group(2).upper() not in TYPES:
        raise QueryError(f"{where}: bad @param line {line!r}; expected "
                         f"'@param NAME TYPE[>=N] DEFAULT  doc' with TYPE one of "
                         f"{', '.join(TYPES)}")
    name, type_name, minimum, default_text, doc = match.groups()
    param = Param(name, type_name.upper(), None, doc.strip(),
                  None if minimum is None else int(minimum))
    if default_text == "-":
        return param
    if default_text.startswith("'"):
        default_text = default_text[1:-1].replace("''", "'")
    return Param(param.name, param.type, convert(param, default_text), param.doc, param.minimum)


def convert(param: Param, value: object) -> object:
    """Validates ``value`` (text from the command line, or a Python value) for ``param``.

    Raises:
        QueryError: the value does not fit the type.
    """
    try:
        converted = _CONVERTERS[param.type](value)
    except (ValueError, TypeError, OverflowError):
        raise QueryError(f"parameter {param.name}: {value!r} is not a valid {param.type}"
                         + (" (µs, or with a unit: 500ns, 2ms, 1s)"
                            if param.type == "DURATION_US" else "")) from None
    scale = 1_000 if param.type == "DURATION_US" else 1  # durations are held in ns
    if param.minimum is not None and converted < param.minimum * scale:
        raise QueryError(f"parameter {param.name} must be >= {param.minimum} (got {value!r})")
    return converted


def _to_int(value: object) -> int:
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError
        return int(value)
    return int(str(value).strip(), 10) if isinstance(value, str) else int(value)


def _to_float(value: object) -> float:
    number = float(value)
    if not math.isfinite(number):
        raise ValueError
    return number


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in _TRUE | _FALSE:
        return text in _TRUE
    raise ValueError


def _to_string(value: object) -> str:
    text = str(value)
    if "\0" in text:
        raise ValueError
    return text


def _to_duration_ns(value: object) -> int:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return round(_to_float(value) * 1_000)
    match = _DURATION.match(str(value))
    if not match:
        raise ValueError
    return round(float(match.group(1)) * _UNIT_NS[match.group(2) or "us"])


_CONVERTERS = {"INT": _to_int, "FLOAT": _to_float, "BOOL": _to_bool, "STRING": _to_string,
               "DURATION_US": _to_duration_ns}


def render(param: Param, value: object) -> str:
    """The SQL literal for an already converted value."""
    if param.type == "STRING":
        return "'" + str(value).replace("'", "''") + "'"
    if param.type == "BOOL":
        return "1" if value else "0"
    if param.type == "FLOAT":
        return repr(float(value))
    return str(int(value))


def resolve_values(query: str, params: tuple[Param, ...], given: dict) -> dict[str, object]:
    """Defaults overlaid with the given values, all converted; unknown or missing -> QueryError
    listing the valid parameters."""
    declared = {p.name: p for p in params}
    valid = "; ".join(p.describe() for p in params) or "none"
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise QueryError(f"query {query} has no parameter {', '.join(unknown)}; "
                         f"valid parameters: {valid}")
    values = {}
    for name, param in declared.items():
        if name in given:
            values[name] = convert(param, given[name])
        elif param.default is None:
            raise QueryError(f"query {query} needs parameter {name}; valid parameters: {valid}")
        else:
            values[name] = param.default
    return values


def parse_assignments(items: list[str]) -> dict[str, str]:
    """``["k=v", ...]`` from the command line -> ``{"k": "v"}``; the value may contain ``=``."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise QueryError(f"--param {item!r}: expected NAME=VALUE")
        out[key.strip()] = value
    return out
