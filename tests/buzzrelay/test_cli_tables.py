"""buzz-admin's table printer: aligned columns a person can read."""

from __future__ import annotations

import io

import pytest

from buzzrelay.admin_commands._tables import format_table, print_table


def test_columns_are_aligned_and_values_rendered_for_people() -> None:
    text = format_table(["name", "ok", "seconds"], [["alpha", True, 1.5], ["b", False, None]])
    assert text.splitlines() == [
        "name   ok   seconds",
        "-----  ---  -------",
        "alpha  yes  1.5",
        "b      no   -",
    ]


def test_multiline_and_wrapped_cells_span_several_lines() -> None:
    text = format_table(
        ["index", "fix"],
        [["idx", "DROP INDEX CONCURRENTLY idx;\nthen CREATE INDEX CONCURRENTLY idx ON t (a, b);"]],
        wrap=30,
    )
    assert text.splitlines() == [
        "index  fix",
        "-----  ------------------------------",
        "idx    DROP INDEX CONCURRENTLY idx;",
        "       then CREATE INDEX CONCURRENTLY",
        "       idx ON t (a, b);",
    ]


def test_a_row_of_the_wrong_width_is_an_error() -> None:
    with pytest.raises(ValueError, match="row has 1 cells, the table has 2 columns"):
        format_table(["a", "b"], [["only one"]])


def test_print_table_writes_a_title_and_the_table() -> None:
    out = io.StringIO()
    print_table(["a"], [["x"]], title="Title", file=out)
    assert out.getvalue() == "Title\na\n-\nx\n"
