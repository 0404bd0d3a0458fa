"""SQL the services fill with client-side parameters keeps its placeholders out of comments.

clickhouse-connect substitutes ``%(name)s`` everywhere in the text, comments
included; a value with a newline (a hostile run id) then ends the comment and
the rest of the value is parsed as SQL, so the statement is refused.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = sorted((ROOT / "schemas" / "clickhouse").rglob("*.sql"))
PLACEHOLDER = re.compile(r"%\(\w+\)s|\{\w+:[^}]+\}")


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_placeholder_in_a_comment(path: Path) -> None:
    bad = [f"{path.name}:{n}" for n, line in enumerate(path.read_text().splitlines(), 1)
           if "--" in line and PLACEHOLDER.search(line.split("--", 1)[1])]
    assert bad == []


def test_the_check_sees_a_placeholder_in_a_comment(tmp_path: Path) -> None:
    line = "-- the runs in %(runs)s"
    assert PLACEHOLDER.search(line.split("--", 1)[1])
