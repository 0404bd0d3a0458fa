"""The one YAML config reader: compose errors and typed accessors naming file, line and key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runwatch.core.yamlconf import Reader, compose, compose_all


class Bad(ValueError):
    """The loader's own error class."""


R = Reader("f.yaml", Bad)


def _node(text: str) -> Any:
    """Return the value node of ``v: <text>`` (line 2 of its file: a comment comes first)."""
    root = compose(f"# head\nv: {text}\n", "f.yaml", Bad)
    return R.mapping(root)["v"][1]


@pytest.mark.parametrize(
    ("read", "text", "want"),
    [
        (R.string, "abc", "abc"),
        (R.string, "123", "123"),
        (R.string, "'null'", "null"),
        (R.number, "0.25", 0.25),
        (R.number, "-3", -3.0),
        (R.share, "1", 1.0),
        (R.share, "0", 0.0),
        (R.whole, "0", 0),
        (R.positive_int, "12", 12),
        (R.boolean, "True", True),
        (R.boolean, "false", False),
        (R.duration, "90s", 90_000),
        (R.duration, "2h", 7_200_000),
        (R.timezone, "Europe/Berlin", "Europe/Berlin"),
        (R.strings, "[a, b]", ("a", "b")),
    ],
)
def test_accessors_read_good_values(read: Callable[[Any, str], Any], text: str,
                                    want: object) -> None:
    assert read(_node(text), "v") == want


@pytest.mark.parametrize(
    ("read", "text", "message"),
    [
        (R.string, "''", "f.yaml:2: v: must be a non-empty string"),
        (R.string, "[a]", "f.yaml:2: v: must be a non-empty string"),
        (R.string, "~", "f.yaml:2: v: must be a non-empty string"),
        (R.string, "null", "f.yaml:2: v: must be a non-empty string"),
        (R.number, "high", "f.yaml:2: v: must be a finite number, got 'high'"),
        (R.number, ".nan", "f.yaml:2: v: must be a finite number, got '.nan'"),
        (R.number, "true", "f.yaml:2: v: must be a finite number, got 'true'"),
        (R.share, "1.5", "f.yaml:2: v: must be between 0 and 1, got '1.5'"),
        (R.whole, "-1", "f.yaml:2: v: must be a whole number >= 0, got '-1'"),
        (R.whole, "1.5", "f.yaml:2: v: must be a whole number >= 0, got '1.5'"),
        (R.positive_int, "0", "f.yaml:2: v: must be a positive integer, got '0'"),
        (R.boolean, "yes", "f.yaml:2: v: must be true or false, got 'yes'"),
        (R.duration, "soon", "f.yaml:2: v: bad duration 'soon' (use e.g. 30s, 15m, 2h, 1d)"),
        (R.duration, "0s", "f.yaml:2: v: must be a positive duration, got '0s'"),
        (R.timezone, "Mars/Base", "f.yaml:2: v: unknown time zone 'Mars/Base'"),
        (R.strings, "[]", "f.yaml:2: v: must be a non-empty list of strings"),
        (R.strings, "[a, '']", "f.yaml:2: v[1]: must be a non-empty string"),
        (R.sequence, "x", "f.yaml:2: v: must be a list"),
    ],
)
def test_accessors_name_file_line_and_key(read: Callable[[Any, str], Any], text: str,
                                          message: str) -> None:
    with pytest.raises(Bad) as err:
        read(_node(text), "v")
    assert str(err.value).startswith(message), str(err.value)


def test_number_bound_and_optional_empty_lists() -> None:
    with pytest.raises(Bad, match=r"^f\.yaml:2: v: must be a finite number >= 0, got '-1'$"):
        R.number(_node("-1"), "v", minimum=0)
    assert R.strings(_node("[]"), "v", non_empty=False) == ()
    with pytest.raises(Bad, match=r"^f\.yaml:2: v: must be a non-empty list$"):
        R.sequence(_node("[]"), "v", non_empty=True)


@pytest.mark.parametrize(
    ("text", "kwargs", "message"),
    [
        ("[1]", {"key": "top"}, "f.yaml:1: top: expected a mapping"),
        ("{a: 1, a: 2}", {"key": "top"}, "f.yaml:1: top.a: duplicate key"),
        ("{a: 1, b: 2}", {"key": "top", "allowed": {"a"}},
         "f.yaml:1: top.b: unknown key (expected one of: a)"),
        ("{[x]: 1}", {"key": "top"}, "f.yaml:1: top: keys must be plain strings"),
        ("{a: 1, b: 2}", {"allowed": {"a"}}, "f.yaml:1: b: unknown key (expected one of: a)"),
        ("[1]", {"where": "a rule"}, "f.yaml:1: a rule must be a mapping"),
        ("{a: 1, a: 2}", {"where": "a rule"}, "f.yaml:1: duplicate key 'a' in a rule"),
        ("{a: 1, b: 2}", {"where": "a rule", "allowed": {"a", "c"}},
         "f.yaml:1: unknown key 'b' in a rule (known: a, c)"),
    ],
)
def test_mappings_check_their_keys(text: str, kwargs: dict[str, Any], message: str) -> None:
    root = compose(text, "f.yaml", Bad)
    assert root is not None
    with pytest.raises(Bad) as err:
        R.mapping(root, **kwargs)
    assert str(err.value) == message


def test_mapping_entries_keep_their_nodes_and_need_names_the_parent() -> None:
    root = compose("a: 1\nb:\n  c: x\n", "f.yaml", Bad)
    assert root is not None
    items = R.mapping(root, "top", {"a", "b"})
    assert list(items) == ["a", "b"]
    assert R.line(items["b"][0]) == 2 and R.at(items["b"][1]) == "f.yaml:3"
    inner = R.mapping(R.need(items, "b", root, "top"), "top.b")
    assert R.string(inner["c"][1], "top.b.c") == "x"
    with pytest.raises(Bad, match=r"^f\.yaml:1: top\.z: missing \(required\)$"):
        R.need(items, "z", root, "top")
    with pytest.raises(Bad, match=r"^f\.yaml:3: plain words$"):
        raise R.err(items["b"][1], "", "plain words")


def test_parsed_turns_a_value_error_into_the_loaders_error() -> None:
    assert R.parsed(_node("7"), "v", int) == 7
    with pytest.raises(Bad, match=r"^f\.yaml:2: v: invalid literal"):
        R.parsed(_node("seven"), "v", int)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a: [\n", "f.yaml:2: invalid YAML: expected the node content"),
        ("a: 1\n---\nb: 2\n",
         "f.yaml:2: invalid YAML: expected a single document in the stream, but found another"),
        ("a: *nope\n", "f.yaml:1: invalid YAML: found undefined alias 'nope'"),
    ],
)
def test_invalid_yaml_names_file_and_line_in_the_loaders_class(text: str, message: str) -> None:
    with pytest.raises(Bad) as err:
        compose(text, "f.yaml", Bad)
    assert str(err.value).startswith(message), str(err.value)


def test_compose_all_reads_every_document_and_names_the_bad_line() -> None:
    docs = compose_all("a: 1\n---\nb: 2\n", "f.yaml", Bad)
    assert [R.line(d) for d in docs] == [1, 3]
    assert compose("", "f.yaml", Bad) is None
    with pytest.raises(Bad, match=r"^f\.yaml:5: invalid YAML"):
        compose_all("a: 1\n---\nb: 2\nc: [\n", "f.yaml", Bad)
