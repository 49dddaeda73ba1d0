"""Writing the report files: report.json first, then the plots, report.md and report.html.

Every file is replaced atomically, so a reader (a browser reloading report.html, a CI job
collecting report.json) never sees half a file, even when ``autotune report DIR`` re-renders
into a directory that is being read.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from autotune.errors import InputError
from autotune.report.canonical import normalise_report, report_json
from autotune.report.html import html_page
from autotune.report.markdown import markdown_text
from autotune.report.plots import PLOT_FILES, plot_pngs
from autotune.report.schema import REPORT_FILES

#: The plots are written to ``PLOTS_DIR/<name>.png`` next to report.md, which links them.
PLOTS_DIR = "plots"


def _atomic_write(path: Path, data: bytes) -> None:
    """Write via a temporary file in the same directory and ``os.replace``: a reader (or a crash)
    sees the old file or the new one, never half of one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp makes 0600; reports are ordinary shareable files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_report_json(doc: Mapping[str, Any], out_dir: Path | str) -> Path:
    """Validate ``doc`` and write report.json alone (atomically): the cheap write of a run in progress
    (:class:`autotune.report.assemble.RunDocument`); report.md and report.html follow at the phase's end."""
    plain = normalise_report(doc)
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / REPORT_FILES[0]
    _atomic_write(path, report_json(plain).encode("utf-8"))
    return path


def write_reports(doc: Mapping[str, Any], out_dir: Path | str) -> dict[str, Path | list[Path]]:
    """Validate ``doc`` and write report.json, report.md, report.html and ``plots/*.png``.

    report.json is written first, so the measurements survive a rendering failure and
    ``autotune report DIR`` can try again. Plots left over from an earlier rendering in the same
    directory are removed when this document has no data for them. Returns
    ``{"json": path, "md": path, "html": path, "plots": [paths]}``.
    """
    plain = normalise_report(doc)
    directory = Path(out_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise InputError(
            f"{directory}: cannot create the report directory ({error.strerror or error})"
        ) from None
    json_path, md_path, html_path = (directory / name for name in REPORT_FILES)
    _atomic_write(json_path, report_json(plain).encode("utf-8"))

    plots = plot_pngs(plain)
    plot_dir = directory / PLOTS_DIR
    plot_paths: list[Path] = []
    if plots:
        plot_dir.mkdir(exist_ok=True)
    for name in PLOT_FILES:
        target = plot_dir / f"{name}.png"
        if name in plots:
            _atomic_write(target, plots[name])
            plot_paths.append(target)
        else:
            target.unlink(missing_ok=True)
    relative = {name: f"{PLOTS_DIR}/{name}.png" for name in plots}
    _atomic_write(md_path, markdown_text(plain, relative).encode("utf-8"))
    _atomic_write(html_path, html_page(plain, plots).encode("utf-8"))
    return {"json": json_path, "md": md_path, "html": html_path, "plots": plot_paths}
