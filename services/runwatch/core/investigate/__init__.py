"""Incident investigation: the pure logic behind ``runwatch investigate``.

* :mod:`.lineage`: a run's lineage as stored, its diff against another run's
  (what changed, intentional or not), and the repeat key (lineage without seed);
* :mod:`.answers`: the answers (what changed, affected runs, deterministic,
  trustworthy artifacts, resume point, release, owner) from the evidence rows
  an adapter read, as the versioned JSON shape of ``docs/investigation.md``;
* :mod:`.html`: the self-contained page (inline styles, plots as inline SVG).

Nothing here does I/O or reads the clock: ``now_ms`` is passed in.
"""
