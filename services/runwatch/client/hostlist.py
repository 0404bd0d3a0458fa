"""Slurm hostlist expressions (``SLURM_JOB_NODELIST``) expanded into node names.

``runwatch emit job-state --nodes`` takes one, so a hook that runs on every node of a
job (a Slurm prolog) names the whole allocation from each; ``--gpus`` takes the
numbers and ranges of one bracket (``0-3,6``).
"""

from __future__ import annotations

MAX_HOSTS = 100_000
"""Most node names one hostlist expression may expand to (a typo like ``n[1-999999999]``)."""


def expand_hostlist(expr: str) -> list[str]:
    """Expand a Slurm hostlist expression (``SLURM_JOB_NODELIST``) into node names.

    ``gpu-[01-03,07],login1`` gives ``gpu-01, gpu-02, gpu-03, gpu-07, login1``:
    names separated by commas outside brackets, each bracket a comma-separated
    list of numbers and ranges (``lo-hi``, the width of ``lo`` kept, as
    ``01-03``); several brackets in one name give every combination. A plain
    comma-separated list of names is its own expansion. Duplicates are dropped,
    order kept.

    Raises:
        ValueError: An unbalanced bracket, a range that is not two numbers
            ``lo <= hi``, or more than :data:`MAX_HOSTS` names.

    """
    names: list[str] = []
    for item in _split_outside_brackets(expr):
        parts = [""]
        rest = item
        while rest:
            open_at = rest.find("[")
            if open_at < 0:
                parts = [p + rest for p in parts]
                break
            close_at = rest.find("]", open_at)  # balanced, not nested: checked by the split
            prefix, body, rest = rest[:open_at], rest[open_at + 1:close_at], rest[close_at + 1:]
            parts = [p + prefix + n for p in parts for n in _bracket(body, expr)]
            if len(parts) > MAX_HOSTS:
                break
        names += parts
        if len(names) > MAX_HOSTS:
            msg = f"hostlist {expr!r} names more than {MAX_HOSTS} nodes"
            raise ValueError(msg)
    return list(dict.fromkeys(n for n in names if n))


def expand_indices(expr: str) -> list[int]:
    """Expand comma-separated numbers and ranges (``0-3,6``, a hostlist bracket) into integers.

    Duplicates are dropped, order kept; blank items are skipped.

    Raises:
        ValueError: An item that is not a number or a range ``lo-hi`` with ``lo <= hi``.

    """
    pieces = ",".join(p for p in expr.split(",") if p.strip())
    if not pieces:
        return []
    return list(dict.fromkeys(int(n) for n in _bracket(pieces, expr, "indices")))


def _split_outside_brackets(expr: str) -> list[str]:
    items: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in expr.strip():
        if ch == "[":
            depth += 1
            if depth > 1:
                msg = f"hostlist {expr!r}: nested brackets"
                raise ValueError(msg)
        elif ch == "]":
            depth -= 1
            if depth < 0:
                msg = f"hostlist {expr!r}: unbalanced bracket"
                raise ValueError(msg)
        if ch == "," and depth == 0:
            items.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if depth:
        msg = f"hostlist {expr!r}: unbalanced bracket"
        raise ValueError(msg)
    items.append("".join(cur).strip())
    return [i for i in items if i]


def _bracket(body: str, expr: str, what: str = "hostlist") -> list[str]:
    out: list[str] = []
    for piece in body.split(","):
        lo, sep, hi = piece.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            msg = f"{what} {expr!r}: {piece.strip()!r} is not a number or a range lo-hi"
            raise ValueError(msg)
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            msg = f"{what} {expr!r}: range {piece.strip()!r} runs backwards"
            raise ValueError(msg)
        if b - a >= MAX_HOSTS:
            noun = "nodes" if what == "hostlist" else "numbers"
            msg = f"{what} {expr!r} names more than {MAX_HOSTS} {noun}"
            raise ValueError(msg)
        out += [str(i).zfill(len(lo)) for i in range(a, b + 1)]
    return out
