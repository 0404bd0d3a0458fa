"""A rich progress display for simulations (virtual time, records, injections, alerts)."""

from __future__ import annotations

from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from runwatch.sim.runner import Progress as Snapshot


class RichProgress:
    """Context manager rendering :class:`runwatch.sim.runner.Progress` snapshots live."""

    def __init__(self, duration_s: float, console: Console | None = None) -> None:
        """Create the display for a simulation of ``duration_s`` virtual seconds."""
        self.console = console or Console(stderr=True, highlight=False)
        self._bar = Progress(
            TextColumn("[bold]simulating"), BarColumn(),
            TextColumn("{task.fields[vt]}"), TimeElapsedColumn(),
            TextColumn("{task.fields[info]}"), console=self.console, transient=False,
        )
        self._task = self._bar.add_task("sim", total=duration_s, vt="", info="")
        self._seen: set[tuple[str, str]] = set()

    def __enter__(self) -> RichProgress:
        """Start rendering."""
        self._bar.start()
        return self

    def __exit__(self, et: type[BaseException] | None, ev: BaseException | None,
                 tb: TracebackType | None) -> None:
        """Stop rendering."""
        self._bar.stop()

    def update(self, p: Snapshot) -> None:
        """Show one snapshot; print each new alert once, above the bar."""
        firing = [a for a in p.alerts if a.status == "firing"]
        for a in firing:
            key = (a.run_id, a.detector)
            if key not in self._seen:
                self._seen.add(key)
                self._bar.console.print(f"  [red]alert[/red] {a.run_id}: {a.detector} "
                                        f"(cause {a.cause})", markup=True)
        info = (f"runs {p.runs_active} active / {p.runs_done} done  records {p.records}  "
                f"faults injected {len(p.injected)}  alerts {len(firing)}")
        self._bar.update(self._task, completed=min(p.virtual_s, p.duration_s),
                         vt=f"{p.virtual_s:5.0f}/{p.duration_s:.0f} virtual s", info=info)
