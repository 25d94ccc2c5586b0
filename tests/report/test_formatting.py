"""The one duration display (tokentrace.units.format_ms), as the report, the terminal summary
and the plots' labels use it."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from tokentrace.units import format_ms


@pytest.mark.parametrize("value, text", [
    (32_472_666, "32.47"), (811_816, "0.81"), (0, "0.00"), (np.int64(193_740_000), "193.74"),
    (5_000_000.0, "5.00"), (-1_500_000, "-1.50"),
])
def test_ns_are_shown_as_ms_with_two_decimals(value, text):
    assert format_ms(value) == text


@pytest.mark.parametrize("missing", [None, math.nan, pd.NA, np.nan])
def test_missing_values_are_a_dash(missing):
    assert format_ms(missing) == "-"
    assert format_ms(missing, missing="") == ""


def test_digits_and_series():
    assert format_ms(9_405_715, digits=1) == "9.4"
    series = pd.Series([1_000_000, None], dtype="Int64")
    assert series.map(format_ms).tolist() == ["1.00", "-"]
