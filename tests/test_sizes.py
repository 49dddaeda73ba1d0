from __future__ import annotations

import random

import pytest

from autotune.core.sizes import format_size, parse_size
from autotune.errors import InputError

KIB, MIB, GIB, TIB = 1024, 1024**2, 1024**3, 1024**4


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("4GiB", 4 * GIB),
        ("512MiB", 512 * MIB),
        ("1.5GB", 1_500_000_000),
        ("1024", 1024),
        (1024, 1024),
        ("2 kib", 2 * KIB),
        (" 3 TiB ", 3 * TIB),
        ("10MB", 10 * 1000**2),
        ("7KB", 7000),
        ("100B", 100),
        (".5KiB", KIB // 2),
        ("1.1GiB", int(1.1 * GIB)),  # truncated to whole bytes
        (4e9, 4_000_000_000),  # TOML gives floats for 4e9
    ],
)
def test_parse_size_accepts_documented_spellings(text: str | int | float, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize(
    "text", ["", "abc", "-1", "0", "0B", "1.2.3", "4 G iB", "GiB", "5XB", "1e9", "0.1B", 1.5, -3, True, None]
)
def test_parse_size_rejects_with_field_and_allowed_forms(text: object) -> None:
    with pytest.raises(InputError) as excinfo:
        parse_size(text, field="memory_budget")  # type: ignore[arg-type]
    message = str(excinfo.value)
    assert message.startswith("memory_budget: ")
    assert "GiB" in message and "GB" in message


@pytest.mark.parametrize("unit", ["K", "M", "G", "T", "g"])
def test_parse_size_refuses_ambiguous_single_letter_units(unit: str) -> None:
    with pytest.raises(InputError, match="ambiguous") as excinfo:
        parse_size(f"4{unit}", field="budget")
    assert f"{unit.upper()}iB" in str(excinfo.value) and f"{unit.upper()}B" in str(excinfo.value)


def test_format_size_picks_binary_units() -> None:
    assert format_size(512) == "512 B"
    assert format_size(1536) == "1.50 KiB"
    assert format_size(1.5 * GIB) == "1.50 GiB"
    assert format_size(MIB - 1) == "1.00 MiB"  # not "1024.00 KiB"
    assert format_size(-2 * KIB) == "-2.00 KiB"


def test_format_then_parse_round_trips_within_rounding() -> None:
    rng = random.Random(0)
    for _ in range(500):
        n = int(2 ** rng.uniform(0, 45))
        parsed = parse_size(format_size(n))
        assert abs(parsed - n) <= max(1, 0.005 * n)
