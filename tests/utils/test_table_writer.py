"""The one markdown table writer."""

import pytest

from attntemp.utils.tables import markdown_table


def test_a_table_is_a_header_a_rule_and_one_line_per_row():
    assert markdown_table(("a", "b"), [(1, "x"), (2.5, None)]) == "| a | b |\n|---|---|\n| 1 | x |\n| 2.5 | None |"


def test_no_rows_leaves_the_header_and_the_rule():
    assert markdown_table(["only"], []) == "| only |\n|---|"


def test_alignment_per_column():
    assert markdown_table("abcd", [], align="-lcr").splitlines()[1] == "|---|:---|:---:|---:|"


@pytest.mark.parametrize(("align", "rows"), [("r", []), ("-x", []), (None, [(1,)]), (None, [(1, 2, 3)])])
def test_a_misshapen_table_is_refused(align, rows):
    with pytest.raises(ValueError, match=r"align=|row 0"):
        markdown_table(("a", "b"), rows, align=align)
