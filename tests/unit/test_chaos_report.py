"""The chaos suite's pure parts: the ledger, the comparison, the alerts check, the table."""

from __future__ import annotations

import uuid
from pathlib import Path

from runwatch.adapters.publisher import CaptureTransport, Publisher
from runwatch.chaos.faults import FAULTS
from runwatch.chaos.ledger import Entry, Ledger, LedgerTransport
from runwatch.chaos.report import (
    HEADER,
    AlertCheck,
    Counts,
    Row,
    compare,
    condition,
    paged_twice,
    render_table,
)
from runwatch.chaos.webhook import routes_yaml
from runwatch.core.records import JobEvent


def _e(phase: str, n: int) -> list[Entry]:
    return [Entry(str(uuid.uuid4()), "LearningStep", "sdk:nan", phase) for _ in range(n)]


def test_compare_counts_lost_and_duplicated_per_phase() -> None:
    base, fault = _e("none", 4), _e("kill", 3)
    rows = {base[0].event_id: 1, base[1].event_id: 1, base[2].event_id: 1, base[3].event_id: 2,
            fault[0].event_id: 1, fault[1].event_id: 3, "stranger": 1}
    out = compare(base + fault, rows)
    assert list(out) == ["none", "kill"]
    assert out["none"] == Counts(4, 4, 0, 1)
    assert out["kill"].published == 3 and out["kill"].stored == 2 and out["kill"].lost == 1
    assert out["kill"].duplicated == 1 and out["kill"].missing == (fault[2].event_id,)


def test_alerts_compare_by_role_not_run_id() -> None:
    a = {"chaos-x-none-nan": "nan", "chaos-x-none-healthy-1": "healthy-1"}
    b = {"chaos-x-kill-nan": "nan"}
    one = condition("chaos-x-none-nan", "rule:non_finite", "loss", a)
    assert one == condition("chaos-x-kill-nan", "rule:non_finite", "loss", b)
    assert one == "<nan> rule:non_finite/loss"
    assert condition("chaos-x-none-healthy-1", "rule:non_finite", "loss", a) != one
    same = AlertCheck(frozenset({one}), frozenset({one}))
    assert same.equal
    assert not AlertCheck(frozenset({one}), frozenset()).equal


def test_paged_twice_counts_accepted_deliveries_per_status() -> None:
    pages = [("w", "k1", "firing"), ("w", "k1", "resolved"), ("w", "k2", "firing"),
             ("w", "k2", "firing"), ("am", "k2", "firing")]
    assert paged_twice(pages) == ["w:k2:firing"]
    assert paged_twice([]) == []


def test_row_ok_and_the_table() -> None:
    check = AlertCheck(frozenset({"<nan>|r"}), frozenset({"<nan>|r"}))
    good = Row("kill -9 sink", Counts(100, 100, 0, 3), check, 4.25)
    spool = Row("producer spool limit filled", Counts(100, 90, 10, 0), check, 30.0, evicted=10)
    bad = Row("kill -9 pager mid-retry", Counts(10, 9, 1, 0),
              AlertCheck(check.expected, check.raised, ("w:k:firing",)), None)
    assert good.ok and spool.ok and spool.unaccounted == 0
    assert not bad.ok and bad.unaccounted == 1
    table = render_table([good, spool, bad]).splitlines()
    assert len(table) == 5
    assert [c.strip() for c in table[0].strip("|").split("|")] == list(HEADER)
    assert set(table[1]) <= {"|", "-"}
    cells = [c.strip() for c in table[2].strip("|").split("|")]
    assert cells == ["kill -9 sink", "100", "100", "0", "0", "3", "1/1", "0", "4.2 s", "yes"]
    last = [c.strip() for c in table[4].strip("|").split("|")]
    assert last[-3:] == ["1", "-", "NO"]
    assert len({len(line) for line in table}) == 1  # aligned


def test_ledger_transport_records_every_event_id(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    ledger.phase = "none"
    inner = CaptureTransport()
    pub = Publisher(LedgerTransport(inner, ledger, "sdk:nan"), kind="sdk")
    pub.publish([JobEvent(run_id="r1", state="running", **pub.meta()) for _ in range(3)])
    ledger.close()
    ids = [e.event_id for e in ledger.entries()]
    assert len(ids) == 3 == len(inner.messages) == len(set(ids))
    assert [e.event_id for e in Ledger.read(tmp_path / "ledger.jsonl")] == ids
    assert {e.record for e in ledger.entries()} == {"runwatch.v1.JobEvent"}
    assert ledger.count("none") == 3 and ledger.count("other") == 0


def test_faults_start_with_the_reference_and_routes_mirror_to_the_webhook() -> None:
    assert FAULTS[0].probe == "none"
    assert len(FAULTS) == 7
    text = routes_yaml("W_URL", "W_SECRET", "AM_URL")
    assert "url_env: W_URL" in text and "secret_env: W_SECRET" in text
    assert "url_env: AM_URL" in text and "continue: true" in text


def test_a_foreign_state_directory_is_never_wiped(tmp_path: Path) -> None:
    import pytest

    from runwatch.chaos.runner import ChaosSettings, run

    state = tmp_path / "state"
    state.mkdir()
    (state / "stack.json").write_text("{}")
    with pytest.raises(RuntimeError, match="refusing to wipe"):
        run(ChaosSettings(state_dir=state), lambda _line: None)
    assert (state / "stack.json").is_file()
