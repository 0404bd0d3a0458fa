"""costs.yaml: validation errors name file, line and key; lookup by effective date and match."""

from __future__ import annotations

import datetime as dt

import pytest

from runwatch.core.cost.prices import NO_PRICE, UNKNOWN_MODEL, PricesError, parse_prices
from runwatch.resources import costs_file


def ms(day: str) -> int:
    d = dt.date.fromisoformat(day)
    return int(dt.datetime(d.year, d.month, d.day, tzinfo=dt.UTC).timestamp() * 1000)


TEXT = """\
currency: EUR
prices:
  - gpu_model: H100
    per_gpu_hour: 4.0
    effective_from: 2026-01-01
  - gpu_model: H100
    per_gpu_hour: 3.0
    effective_from: 2026-07-01
  - gpu_model: H100
    per_gpu_hour: 2.0
    effective_from: 2026-01-01
    match: {tenancy: reserved}
  - gpu_model: A100
    per_gpu_hour: 1.5
    effective_from: 2026-03-01
    effective_to: 2026-09-01
"""


@pytest.mark.parametrize(
    ("model", "day", "attrs", "price", "reason"),
    [
        ("H100", "2026-02-01", {}, 4.0, ""),
        ("H100", "2026-08-01", {}, 3.0, ""),  # the later rule takes over
        ("H100", "2026-08-01", {"tenancy": "reserved"}, 2.0, ""),  # more specific wins
        ("H100", "2026-08-01", {"tenancy": "on_demand"}, 3.0, ""),
        ("H100", "2025-12-31", {}, None, NO_PRICE),
        ("A100", "2026-09-01", {}, None, NO_PRICE),  # effective_to is exclusive
        ("A100", "2026-08-31", {}, 1.5, ""),
        ("Z9", "2026-08-01", {}, None, UNKNOWN_MODEL),
    ],
)
def test_lookup(model: str, day: str, attrs: dict[str, str], price: float | None,
                reason: str) -> None:
    q = parse_prices(TEXT, "c.yaml").quote(model, ms(day), attrs)
    assert (q.per_gpu_hour, q.reason) == (price, reason)


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("prices:\n  - gpu_model: H100\n    per_gpu_hour: cheap\n    effective_from: 2026-01-01\n",
         "c.yaml:3", "'per_gpu_hour'"),
        ("prices:\n  - gpu_model: H100\n    per_gpu_hour: 1\n    effective_from: soon\n",
         "c.yaml:4", "'effective_from'"),
        ("prices:\n  - gpu_model: H100\n    per_gpu_hour: 1\n    effective_from: 2026-01-01\n"
         "    colour: red\n", "c.yaml:5", "'colour'"),
        ("prices:\n  - gpu_model: H100\n    per_gpu_hour: 1\n", "c.yaml:2", "'effective_from'"),
        ("prices:\n  - gpu_model: H100\n    per_gpu_hour: 1\n    effective_from: 2026-01-01\n"
         "    match: {zone: eu}\n", "c.yaml:5", "'zone'"),
        ("prices:\n  - gpu_model: H100\n    per_gpu_hour: -2\n    effective_from: 2026-01-01\n",
         "c.yaml:3", ">= 0"),
        ("prices:\n  - gpu_model: H100\n    per_gpu_hour: 1\n    effective_from: 2026-01-01\n"
         "    effective_to: 2025-01-01\n", "c.yaml:5", "'effective_to'"),
        ("prices:\n  - gpu_model: H100\n    per_gpu_hour: 1\n    effective_from: 2026-01-01\n"
         "  - gpu_model: H100\n    per_gpu_hour: 2\n    effective_from: 2026-01-01\n",
         "c.yaml:5", "line 2"),
        ("currency: USD\n", "c.yaml:1", "'prices'"),
        ("prices: [\n", "c.yaml", "invalid YAML"),
    ],
)
def test_errors_name_file_line_and_key(text: str, where: str, words: str) -> None:
    with pytest.raises(PricesError) as err:
        parse_prices(text, "c.yaml")
    assert str(err.value).startswith(where) and words in str(err.value), str(err.value)


def test_shipped_example_is_valid() -> None:
    prices = parse_prices(costs_file().read_text(), str(costs_file()))
    assert {"H100", "A100"} <= prices.models
    assert prices.quote("H100", ms("2026-12-01")).per_gpu_hour == 4.0


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["cost", "--prices", "{bad}"], ":3: 'per_gpu_hour' in prices[0]"),
        (["capacity", "--prices", "{bad}"], ":3: 'per_gpu_hour' in prices[0]"),
        (["cost", "--prices", "{missing}"], "cannot read prices file"),
        (["cost", "--since", "a week"], "--since 'a week'"),
        (["cost", "--since", "99999999999999d"], "before 1970"),
        (["capacity", "--since", "99999999999999d"], "before 1970"),
        (["cost"], "does not answer"),
        (["capacity"], "does not answer"),
    ],
)
def test_cli_names_the_bad_prices_file_line_and_key(tmp_path, args: list[str],
                                                    words: str) -> None:
    import subprocess
    import sys

    bad = tmp_path / "costs.yaml"
    bad.write_text("prices:\n  - gpu_model: H100\n    per_gpu_hour: cheap\n"
                   "    effective_from: 2026-01-01\n")
    argv = [a.format(bad=bad, missing=tmp_path / "nope.yaml") for a in args]
    out = subprocess.run([sys.executable, "-m", "runwatch", *argv, "--json"],
                         capture_output=True, text=True, timeout=60,
                         env={"PATH": "/usr/bin:/bin", "CLICKHOUSE_URL": "http://127.0.0.1:9"})
    assert out.returncode == 2, out.stderr
    last = out.stderr.strip().splitlines()[-1]  # after the HTTP client's own warnings
    assert last.startswith("error: ") and words in last, out.stderr
    assert "Traceback" not in out.stderr
    if "{bad}" in args:
        assert str(bad) in out.stderr
