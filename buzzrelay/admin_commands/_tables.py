"""Plain-text tables for buzz-admin output: aligned columns a person can read in a terminal or log.

Generic on purpose (every subcommand prints through it): cells are anything `str()` can render;
None prints as "-", booleans as "yes"/"no", and a cell holding newlines spans several lines.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterable, Sequence
from typing import Any, TextIO


def cell_text(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _lines(value: Any, wrap: int | None) -> list[str]:
    lines = cell_text(value).splitlines() or [""]
    if wrap is None:
        return lines
    return [part for line in lines for part in (textwrap.wrap(line, wrap) or [""])]


def format_table(
    headers: Sequence[str], rows: Iterable[Sequence[Any]], *, wrap: int | None = None
) -> str:
    """The table as text: a header line, a rule, then one or more lines per row.

    `wrap` folds cells longer than that many characters at spaces (long fixes, SQL).
    """
    body = [[_lines(value, wrap) for value in row] for row in rows]
    for row in body:
        if len(row) != len(headers):
            raise ValueError(f"row has {len(row)} cells, the table has {len(headers)} columns")
    widths = [len(header) for header in headers]
    for row in body:
        for column, lines in enumerate(row):
            widths[column] = max(widths[column], *(len(line) for line in lines))

    def line(cells: Sequence[str]) -> str:
        padded = (text.ljust(width) for text, width in zip(cells, widths, strict=True))
        return "  ".join(padded).rstrip()

    out = [line(headers), line(["-" * width for width in widths])]
    for row in body:
        height = max(len(lines) for lines in row)
        for index in range(height):
            out.append(line([lines[index] if index < len(lines) else "" for lines in row]))
    return "\n".join(out)


def print_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    title: str | None = None,
    wrap: int | None = None,
    file: TextIO | None = None,
) -> None:
    """Print `rows` under `headers` (and an optional title line) to `file` (default stdout)."""
    stream = file if file is not None else sys.stdout
    if title:
        stream.write(f"{title}\n")
    stream.write(format_table(headers, rows, wrap=wrap) + "\n")
    stream.flush()
