"""The package's structure as an executable contract (DESIGN §2, §6).

* Layers: cli → commands → tools (sim, bench, recordgen, testing) → services →
  adapters → core. A layer imports only layers below it.
* Services (agent, client, pager, processor, sink, slo, stack, store) are
  independent of each other; adapters import no service; core imports only
  core (and the packaged-file reader ``runwatch.resources``).
* No import circle between modules (every import counts: at module level, in
  functions, under ``TYPE_CHECKING``). A submodule importing its own parent
  package is not a circle (the parent is always loaded first).
* No module above 400 lines without a ``Size:`` line at its top saying why.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "services" / "runwatch"
SERVICES = {"agent", "client", "pager", "processor", "sink", "slo", "stack", "store"}
TOOLS = {"sim", "bench", "recordgen", "testing", "chaos"}
UTILITIES = {"(root)", "_version", "errors", "resources", "extras"}
"""Top-level modules every layer may use (the version, packaged files, extras' messages)."""
LAYER = {
    "__main__": 7, "cli": 6, "commands": 5,
    **dict.fromkeys(TOOLS, 4), **dict.fromkeys(SERVICES, 3), "adapters": 2, "core": 1,
}
ALLOWED_ACROSS = {
    # the simulator drives services and test doubles; the test doubles drive services
    ("sim", "testing"), ("sim", "bench"),
}
MAX_LINES = 400


def _modules(root: Path = PACKAGE) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for p in root.rglob("*.py"):
        rel = p.relative_to(root.parent).with_suffix("")
        out[".".join(rel.parts).removesuffix(".__init__")] = p
    return out


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module → the package modules it imports (``from a import b`` counts a and a.b)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for mod, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            for name in names:
                if name in modules and name != mod and not mod.startswith(name + "."):
                    graph[mod].add(name)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for start in sorted(set(graph) | {m for ms in graph.values() for m in ms}):
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
    return found


def _top(mod: str) -> str:
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "(root)"


def layer_violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that breaks the layer contract, as ``a -> b: why``."""
    bad = []
    for a, targets in sorted(graph.items()):
        ta = _top(a)
        if ta == "(root)":  # runwatch.init loads the SDK lazily: the package's front door
            continue
        for b in sorted(targets):
            tb = _top(b)
            if ta == tb or tb in UTILITIES or (ta, tb) in ALLOWED_ACROSS:
                continue
            la, lb = LAYER.get(ta), LAYER.get(tb)
            if la is None or lb is None:
                bad.append(f"{a} -> {b}: {ta if la is None else tb} has no layer")
            elif lb >= la:
                bad.append(f"{a} -> {b}: {ta} may not import {tb} (same or higher layer)")
            elif ta == "core" and tb != "core":
                bad.append(f"{a} -> {b}: core imports only core")
    return bad


MODULES = _modules()
GRAPH = import_graph(MODULES)


def test_there_is_a_graph() -> None:
    assert len(MODULES) > 100 and sum(map(len, GRAPH.values())) > 300


def test_every_top_level_package_has_a_layer() -> None:
    tops = {_top(m) for m in MODULES} - UTILITIES
    assert tops <= set(LAYER), sorted(tops - set(LAYER))


def test_no_import_circle() -> None:
    assert cycles(GRAPH) == []


def test_layer_contract() -> None:
    assert layer_violations(GRAPH) == []


def test_only_tools_and_commands_import_the_test_doubles() -> None:
    users = {_top(a) for a, bs in GRAPH.items() for b in bs if _top(b) == "testing"}
    assert users <= {"testing", "commands", "sim"}, users


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_cycle_finder(graph, expected) -> None:
    assert cycles(graph) == expected


@pytest.mark.parametrize(("edge", "ok"), [
    (("runwatch.agent.service", "runwatch.client.publisher"), False),  # services independent
    (("runwatch.adapters.receivers", "runwatch.pager.payloads"), False),  # adapters → service
    (("runwatch.core.stream.join", "runwatch.adapters.kafka"), False),  # core → adapters
    (("runwatch.sink.service", "runwatch.testing.synth"), False),  # service → test doubles
    (("runwatch.processor.app", "runwatch.core.stream.join"), True),
    (("runwatch.commands.sink", "runwatch.sink.service"), True),
    (("runwatch.sim.drivers", "runwatch.testing.nvml_double"), True),
    (("runwatch.core.stream.join", "runwatch.resources"), True),
])
def test_layer_checker(edge, ok) -> None:
    a, b = edge
    assert (layer_violations({a: {b}}) == []) is ok


@pytest.mark.parametrize("path", sorted(MODULES.values()),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_modules_stay_small_or_say_why(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    if len(text.splitlines()) <= MAX_LINES:
        return
    head = "\n".join(text.splitlines()[:40])
    assert "\nSize:" in head or head.startswith("# Generated"), (
        f"{path.relative_to(PACKAGE)} has {len(text.splitlines())} lines: split it, or say "
        "why it is one module in a 'Size:' line of its docstring")

