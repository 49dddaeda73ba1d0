"""Which saved batch ``load.py``'s ``make_inputs()`` and ``python load.py`` use: the typical one of the traffic.

The report's throughput is over the whole traffic; a plain process timing the loader on one batch times that
batch's shape. With sentences padded per batch, the first batch can be the longest (slower than the traffic) or
the shortest (faster): a DeBERTa's first batch ran 1.08-1.18x the traffic's rate in plain processes (session 43).
``_typical_key`` is run here as load.py runs it: the generated lines, executed with numpy alone.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from autotune.report.snippets import traffic_batch_lines


def _typical(tmp_path: Path, shapes: list[tuple[int, int]], inputs: tuple[str, ...] = ("ids", "mask")) -> str:
    arrays = {f"b{i}.{name}": np.zeros(shape, np.int64) for i, shape in enumerate(shapes) for name in inputs}
    np.savez(tmp_path / "traffic.npz", **arrays)
    ns: dict[str, Any] = {"INPUTS": list(inputs)}
    exec("\n".join(traffic_batch_lines()), ns)  # the loader's own text, as load.py holds it
    with np.load(tmp_path / "traffic.npz") as data:
        return str(ns["_typical_key"](data))


@pytest.mark.parametrize(("shapes", "expected", "why"), [
    # lengths 128, 90, 100: the mean 106 is nearest 100, the third
    ([(16, 128), (16, 90), (16, 100)], "b2", "the full batch nearest the mean length"),
    # one shape (an image model, a fixed-length tokenizer): every batch is typical, the first is taken
    ([(8, 64), (8, 64), (8, 64)], "b0", "one shape: the first"),
    # the partial last batch (4 rows of 40) counts in the mean (16*120 + 16*60 + 4*40) / 36 = 84.4, but it is not
    # a batch of the recommended size, so the full one nearest it is taken: 60, the second
    ([(16, 120), (16, 60), (4, 40)], "b1", "a partial batch counts in the mean but is never the pick"),
    # a tie in distance keeps the earlier batch
    ([(16, 80), (16, 120)], "b0", "a tie keeps the earlier"),
    # b10 comes after b2 (by number; as text it would come first): b2 and b10 both of 60, the mean 67.3 nearest them
    ([(16, 40), (16, 300), (16, 60)] + [(16, 40)] * 7 + [(16, 60)], "b2", "keys ordered by their number"),
])
def test_the_typical_batch_is_the_full_one_nearest_the_traffics_mean_size(
        tmp_path: Path, shapes: list[tuple[int, int]], expected: str, why: str) -> None:
    assert _typical(tmp_path, shapes) == expected, why


def test_the_mean_counts_every_input_of_a_batch(tmp_path: Path) -> None:
    """Inputs of different widths (ids by token, an image by pixel) all count: the batch with the most elements
    per row overall is the heavy one, whichever input makes it so."""
    arrays = {"b0.ids": np.zeros((4, 10)), "b0.pixels": np.zeros((4, 1000)),
              "b1.ids": np.zeros((4, 100)), "b1.pixels": np.zeros((4, 10)),
              "b2.ids": np.zeros((4, 10)), "b2.pixels": np.zeros((4, 400))}
    np.savez(tmp_path / "traffic.npz", **arrays)
    ns: dict[str, Any] = {"INPUTS": ["ids", "pixels"]}
    exec("\n".join(traffic_batch_lines()), ns)
    with np.load(tmp_path / "traffic.npz") as data:
        # per row 1010, 110, 410: the mean 510 is nearest 410
        assert ns["_typical_key"](data) == "b2"
