"""Query parameters: declared types, validation of user values, rendering as SQL literals.

Perfetto's RPC has no bound parameters (``QueryArgs`` carries SQL text only), so values are
rendered by the tool: numbers through ``int``/``float`` (finite only), booleans as 1/0, strings
single-quoted with quotes doubled and NUL rejected. No user text reaches SQL any other way.

Units are named truly. A ``DURATION_US`` parameter is named ``*_us`` and holds microseconds
wherever a person sees it (the listing, errors, effective values, Parquet metadata); the SQL
gets the value as integer nanoseconds in the function argument named ``*_ns`` (:func:`sql_name`).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

from tokentrace.catalog.functions import constant_value
from tokentrace.errors import QueryError

_DURATION = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*(ns|us|µs|ms|s)?\s*$")
_UNIT_US = {"ns": Decimal("0.001"), "us": Decimal(1), "µs": Decimal(1), "ms": Decimal(1_000),
            "s": Decimal(1_000_000)}
_INT64_MAX = 2**63 - 1
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
_MINIMUM = re.compile(r">=\s*(-?\d+)")
_ARG_TYPES = {"LONG": "INT", "INT": "INT", "TIMESTAMP": "INT", "DOUBLE": "FLOAT",
              "FLOAT": "FLOAT", "BOOL": "BOOL", "STRING": "STRING", "DURATION": "DURATION_US"}


@dataclass(frozen=True)
class Param:
    """A declared parameter. ``default`` is None when the parameter is required.

    ``DURATION_US`` parameters are named ``*_us``; their values are µs (given as a number, or
    text with a unit: ``500ns``, ``2ms``, ``1s``) and the SQL receives integer nanoseconds in
    the function argument ``*_ns``. ``minimum`` (a ``>= N`` in the argument's comment, in the
    parameter's unit: µs for durations) is the smallest accepted value, None for no bound.
    """

    name: str
    type: str
    default: object | None
    doc: str
    minimum: int | None = None

    @property
    def unit(self) -> str:
        """The unit of the values a person gives and sees: ``µs`` for durations, else ``""``."""
        return "µs" if self.type == "DURATION_US" else ""

    @property
    def sql_name(self) -> str:
        """The function argument's name: ``x_ns`` for a duration ``x_us``, else the name."""
        return sql_name(self)

    def describe(self) -> str:
        """``name TYPE (default X, >= N)`` for error messages and listings; durations say
        their unit first: ``min_gap_us DURATION_US (µs, default 100, >= 0)``."""
        unit = f"{self.unit}, " if self.unit else ""
        default = "required" if self.default is None else f"default {display(self.default)}"
        bound = "" if self.minimum is None else f", >= {self.minimum}"
        return f"{self.name} {self.type} ({unit}{default}{bound})"


def display(value: object) -> str:
    """A converted value as a person would type it: ``false``, ``'a b'``, ``100``, ``0.5``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value)


def sql_name(param: Param) -> str:
    """The name of the function argument of ``param``: ``min_gap_ns`` for the duration
    ``min_gap_us`` (the SQL receives nanoseconds), the parameter's own name otherwise."""
    if param.type == "DURATION_US":
        return param.name[: -len("_us")] + "_ns"
    return param.name


def param_from_arg(arg, default_text: str, sources: list[str], where: str) -> Param:
    """The parameter of a function argument (:class:`tokentrace.catalog.functions.Field`),
    with ``default_text`` (the call's argument: a literal or a constant-function call) as its
    default and a ``>= N`` in its comment as its lower bound.

    ``DURATION`` arguments are named ``*_ns`` and become the parameters ``*_us`` (µs);
    ``LONG``/``INT``/``TIMESTAMP`` -> INT, ``DOUBLE`` -> FLOAT, ``BOOL``, ``STRING``.

    Raises:
        QueryError: an argument type the command line cannot give, a duration not named
            ``*_ns``, or a default that does not fit the type.
    """
    type_name = _ARG_TYPES.get(arg.type)
    if type_name is None:
        raise QueryError(f"{where}: argument {arg.name} is {arg.type}; a query's arguments are "
                         "LONG, DOUBLE, BOOL, STRING or DURATION")
    name = arg.name
    if type_name == "DURATION_US":
        if not name.endswith("_ns"):
            raise QueryError(f"{where}: DURATION argument {name!r} must be named '*_ns' (the "
                             "SQL receives ns; people give it as '*_us' in µs)")
        name = name[: -len("_ns")] + "_us"
    bound = _MINIMUM.search(arg.doc)
    param = Param(name, type_name, None, arg.doc, int(bound.group(1)) if bound else None)
    literal = _constant(default_text, sources, where)
    try:
        default = _from_literal(param, literal)
    except (ValueError, QueryError):
        raise QueryError(f"{where}: default {default_text} of {arg.name} is not a "
                         f"{arg.type} literal") from None
    return Param(param.name, param.type, default, param.doc, param.minimum)


def _constant(text: str, sources: list[str], where: str) -> str:
    """``text``, or the literal of the constant function ``text`` calls."""
    call = re.fullmatch(r"(\w+)\s*\(\s*\)", text)
    if call is None:
        return text
    value = constant_value(call.group(1), sources)
    if value is None:
        raise QueryError(f"{where}: {call.group(1)}() is not a constant function (no arguments, "
                         "body SELECT literal) of the file or the bundled modules")
    return value


def _from_literal(param: Param, literal: str) -> object:
    """The value of an SQL literal, in the parameter's unit (µs for durations)."""
    if literal.startswith("'"):
        if param.type != "STRING":
            raise ValueError
        return literal[1:-1].replace("''", "'")
    if param.type == "STRING":
        raise ValueError
    if param.type == "BOOL" and literal.upper() in ("TRUE", "FALSE"):
        return literal.upper() == "TRUE"
    if param.type == "DURATION_US":
        return convert(param, f"{Decimal(literal)}ns")
    return convert(param, literal)


def convert(param: Param, value: object) -> object:
    """Validates ``value`` (text from the command line, or a Python value) for ``param``.

    Returns:
        The value in the parameter's own unit: µs for ``DURATION_US`` (an ``int`` when whole,
        e.g. ``"2ms"`` -> ``2000``, else a ``float``: ``"500ns"`` -> ``0.5``).

    Raises:
        QueryError: the value does not fit the type, or is below the declared minimum.
    """
    try:
        converted = _CONVERTERS[param.type](value)
    except (ValueError, TypeError, OverflowError, ArithmeticError):
        raise QueryError(f"parameter {param.name}: {value!r} is not a valid {param.type}"
                         + (" (µs, or with a unit: 500ns, 2ms, 1s)"
                            if param.type == "DURATION_US" else "")) from None
    if param.minimum is not None and converted < param.minimum:
        unit = f" {param.unit}" if param.unit else ""
        raise QueryError(f"parameter {param.name} must be >= {param.minimum}{unit} "
                         f"(got {value!r})")
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


def _to_duration_us(value: object) -> int | float:
    """µs from a number (µs) or text with an optional unit; whole values become ``int``."""
    if isinstance(value, bool):
        raise ValueError
    if isinstance(value, int):
        micros = Decimal(value)
    elif isinstance(value, float):
        micros = Decimal(repr(_to_float(value)))
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError
        micros = Decimal(match.group(1)) * _UNIT_US[match.group(2) or "us"]
    if abs(micros) * 1_000 > _INT64_MAX:
        raise OverflowError  # no SQL integer holds it
    return int(micros) if micros == micros.to_integral_value() else float(micros)


def duration_ns(micros: int | float) -> int:
    """Integer nanoseconds of a converted ``DURATION_US`` value (half-ns rounds to even)."""
    if isinstance(micros, int):
        return micros * 1_000
    exact = Decimal(repr(float(micros))) * 1_000
    return int(exact.quantize(Decimal(1), rounding=ROUND_HALF_EVEN))


_CONVERTERS = {"INT": _to_int, "FLOAT": _to_float, "BOOL": _to_bool, "STRING": _to_string,
               "DURATION_US": _to_duration_us}


def render(param: Param, value: object) -> str:
    """The SQL literal for an already converted value (durations: integer ns)."""
    if param.type == "STRING":
        return "'" + str(value).replace("'", "''") + "'"
    if param.type == "BOOL":
        return "1" if value else "0"
    if param.type == "FLOAT":
        return repr(float(value))
    if param.type == "DURATION_US":
        return str(duration_ns(value))
    return str(int(value))


def resolve_values(query: str, params: tuple[Param, ...], given: dict) -> dict[str, object]:
    """Defaults overlaid with the given values, all converted (durations in µs).

    Raises:
        QueryError: an unknown or missing parameter (the message lists the valid ones), or an
            ill-typed value.
    """
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
