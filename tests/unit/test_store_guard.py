"""The store's query guard and profiles, on canned engine output (no engine, no services)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from runwatch.store.errors import StoreError
from runwatch.store.guard import (
    check_text,
    check_tree,
    parse_ast,
    tokens_at,
    values_split,
    within,
)
from runwatch.store.policy import Grants, parse_grants, parse_profile, parse_profiles, users_xml

DANGEROUS = frozenset({"file", "url", "s3", "remote", "mysql", "filesystem", "distributed"})
NONE = Grants()

# EXPLAIN AST output (TabSeparated) as chDB 4.4 prints it.
FILE_IN_CTE = r"""SelectWithUnionQuery (children 1)
 ExpressionList (children 1)
  SelectQuery (children 3)
   ExpressionList (children 1)
    WithElement (children 1)
     Subquery (children 1)
      SelectWithUnionQuery (children 1)
       ExpressionList (children 1)
        SelectQuery (children 2)
         ExpressionList (children 1)
          Asterisk
         TablesInSelectQuery (children 1)
          TablesInSelectQueryElement (children 1)
           TableExpression (children 1)
            Function FiLe (children 1)
             ExpressionList (children 2)
              Literal \'/etc/passwd\'
              Literal \'LineAsString\'
   ExpressionList (children 1)
    Asterisk
"""
URL_IN_IN = r"""SelectWithUnionQuery (children 1)
 ExpressionList (children 1)
  SelectQuery (children 1)
   ExpressionList (children 1)
    Function in (children 1)
     ExpressionList (children 2)
      Literal UInt64_1
      Function url (children 1)
       ExpressionList (children 1)
        Literal \'http://x\'
"""
MERGETREE = r"""CreateQuery t (children 3)
 Identifier t
 Columns definition (children 1)
  ExpressionList (children 1)
   ColumnDeclaration x (children 1)
    DataType UInt64
 Storage definition (children 3)
  Function ReplacingMergeTree
  Function tuple (children 1)
   ExpressionList (children 1)
    Identifier x
  Set
"""
FILE_ENGINE = r"""CreateQuery t (children 2)
 Identifier t
 Storage definition (children 1)
  Function File (children 1)
   ExpressionList (children 2)
    Identifier LineAsString
    Literal \'{path}\'
"""
OUTFILE = r"""SelectWithUnionQuery (children 2)
 ExpressionList (children 1)
  SelectQuery (children 1)
   ExpressionList (children 1)
    Literal UInt64_1
 Literal \'/tmp/x\'
"""
DICT_FILE = r"""CreateQuery dd (children 3)
 Identifier dd
 Dictionary definition (children 2)
  ExpressionList (children 1)
   Identifier k
  FunctionWithKeyValueArguments  file (children 1)
   ExpressionList (children 1)
    pair (children 1)
     Literal \'/etc/passwd\'
"""
NUMBERS = r"""SelectWithUnionQuery (children 2)
 ExpressionList (children 1)
  SelectQuery (children 2)
   ExpressionList (children 1)
    Function count
   TablesInSelectQuery (children 1)
    TablesInSelectQueryElement (children 1)
     TableExpression (children 1)
      Function numbers (children 1)
       ExpressionList (children 1)
        Literal UInt64_3
 Identifier JSON
"""


def refused(dump: str, grants: Grants = NONE) -> str:
    with pytest.raises(StoreError) as info:
        check_tree("u", grants, parse_ast(dump), DANGEROUS)
    assert info.value.code == 497
    assert info.value.status == 403
    return info.value.message


def test_parse_ast_rebuilds_the_tree() -> None:
    root = parse_ast(FILE_IN_CTE)
    func = next(n for n in root.walk() if n.kind == "Function")
    assert (func.name, func.parent.kind if func.parent else "") == ("FiLe", "TableExpression")
    assert [c.kind for c in root.children] == ["SelectWithUnionQuery"]


@pytest.mark.parametrize(
    ("dump", "expected"),
    [
        (FILE_IN_CTE, "table function FiLe is refused: it reads or writes the host's files"),
        (URL_IN_IN, "function url is refused: it reaches the host or network"),
        (FILE_ENGINE.format(path="/etc/passwd"), "engine File is refused"),
        (OUTFILE, "INTO OUTFILE is refused"),
        (DICT_FILE, "dictionary source file is refused"),
        ("SYSTEM query\n", "statement SYSTEM is refused"),
        ("KillQueryQuery Literal_UInt64_1 ASYNC (children 1)\n Literal UInt64_1\n", "KillQuery"),
    ],
)
def test_refusals_name_what_and_why(dump: str, expected: str) -> None:
    message = refused(dump)
    assert expected in message
    assert "grants: [" in message


def test_safe_statements_pass() -> None:
    for dump in (NUMBERS, MERGETREE, "Set\n", "SelectWithUnionQuery (children 1)\n"):
        check_tree("u", NONE, parse_ast(dump), DANGEROUS)


def test_a_grant_allows_its_name_only() -> None:
    check_tree("u", parse_grants("u", ["url"]), parse_ast(URL_IN_IN), DANGEROUS)
    refused(FILE_IN_CTE, parse_grants("u", ["url"]))
    refused("SYSTEM query\n", parse_grants("u", ["url"]))


def test_file_grant_checks_the_path(tmp_path: Path) -> None:
    inside = tmp_path / "files"
    inside.mkdir()
    grants = parse_grants("u", [{"file": str(inside)}])
    check_tree("u", grants, parse_ast(FILE_ENGINE.format(path=f"{inside}/a.csv")), DANGEROUS)
    assert "allows only absolute paths under" in refused(FILE_IN_CTE, grants)


def test_within(tmp_path: Path) -> None:
    base = tmp_path / "d"
    (base / "sub").mkdir(parents=True)
    (tmp_path / "secret").write_text("x")
    assert within(f"{base}/a.csv", str(base))
    assert within(f"{base}/sub/*.csv", str(base))
    assert not within(f"{base}/../secret", str(base))
    assert not within(f"{base}/{{..,x}}/secret", str(base))
    assert not within("a.csv", str(base))  # relative: the engine resolves it from its cwd
    assert not within("/etc/passwd", str(base))
    os.symlink(tmp_path / "secret", base / "sub" / "link")
    assert not within(f"{base}/sub/link", str(base))
    assert not within(f"{base}/*/*", str(base))  # a glob would follow the link out


@pytest.mark.parametrize(
    ("canonical", "expected"),
    [
        ("SELECT 1\nINTO OUTFILE 'x'", "INTO OUTFILE"),
        ("INSERT INTO t FROM INFILE '/etc/passwd' FORMAT CSV", "FROM INFILE"),
        ("CREATE TABLE t (`x` UInt8) ENGINE = MergeTree ORDER BY x "
         "SETTINGS disk = disk(type = local, path = '/x/')", "setting disk"),
        ("CREATE TABLE t (`x` UInt8) ENGINE = MergeTree ORDER BY x "
         "SETTINGS index_granularity = 1, storage_policy = 'p'", "setting storage_policy"),
        ("CREATE DICTIONARY d (`k` UInt64) PRIMARY KEY k SOURCE(CLICKHOUSE(QUERY 'q' HOST 'h')) "
         "LIFETIME(MIN 0 MAX 0) LAYOUT(FLAT())", "CLICKHOUSE(HOST"),
    ],
)  # fmt: skip
def test_check_text_refusals(canonical: str, expected: str) -> None:
    with pytest.raises(StoreError, match="ACCESS_DENIED") as info:
        check_text("u", NONE, canonical)
    assert expected in info.value.message


def test_check_text_passes_look_alikes_in_strings() -> None:
    check_text("u", NONE, "SELECT 'INTO OUTFILE', 'SETTINGS disk = 1' FROM t WHERE disk = 1")
    source = "SOURCE(CLICKHOUSE(QUERY 'SELECT host FROM t'))"
    check_text("u", NONE, f"CREATE DICTIONARY d (`k` UInt64) PRIMARY KEY k {source} LAYOUT(FLAT())")


def test_tokens_and_values_split() -> None:
    toks = [t for t, _, _ in tokens_at("SELECT /* c */ 'a;b' -- x\n, `q`")]
    assert toks == ["SELECT", "'a;b'", ",", "`q`"]
    sql = "INSERT INTO t (a, b) /* VALUES */ VALUES (1, 'x'), (2, 'y')"
    head, offset = values_split(sql) or ("", 0)
    assert head.strip().endswith("/* VALUES */")
    assert sql[offset:].strip() == "(1, 'x'), (2, 'y')"
    assert values_split("INSERT INTO t SELECT * FROM s") is None
    assert values_split("SELECT 'VALUES'") is None


def test_profile_defaults_and_constraints() -> None:
    profile = parse_profile(
        "p",
        {"settings": {"max_execution_time": 5, "priority": 3},
         "constraints": {"max_execution_time": {"max": 10}}},
    )  # fmt: skip
    assert profile.constraints["max_execution_time"].min == "1"  # 0 would mean unlimited
    assert profile.constraints["priority"].const  # set by the profile, no constraint: const
    assert profile.constraints["dialect"].const
    assert profile.settings["allow_introspection_functions"] == "0"
    xml = users_xml({"p": profile}, {"p": 1})
    assert "<rw_p><constraints><readonly><min>1</min><max>2</max></readonly>" in xml
    assert "<max_execution_time><min>1</min><max>10</max></max_execution_time>" in xml
    assert "<dialect><const/></dialect>" in xml


def test_builtin_profiles_and_bad_entries() -> None:
    profiles = parse_profiles({})
    assert profiles["analyst"].max_concurrent_queries == 4
    assert profiles["analyst"].settings["max_threads"] == "1"
    with pytest.raises(ValueError, match="unknown keys"):
        parse_profile("x", {"limits": {}})
    with pytest.raises(ValueError, match="absolute directory"):
        parse_grants("u", [{"file": "relative"}])
    with pytest.raises(ValueError, match="grants must be a list"):
        parse_grants("u", "url")
