"""A small Dockerfile reader for the image tests (no Docker engine here).

Understands what infra/Dockerfile uses: comments and parser directives, line
continuations, JSON (exec) and shell forms, ``FROM image AS name``, ``ARG``,
``COPY [--from=stage] src... dest``. It refuses anything it does not know, so a
new instruction is reviewed here rather than silently ignored.
"""

from __future__ import annotations

import fnmatch
import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path

KNOWN = {
    "FROM", "ARG", "ENV", "WORKDIR", "COPY", "RUN", "USER", "ENTRYPOINT", "CMD",
    "LABEL", "EXPOSE", "HEALTHCHECK", "VOLUME", "STOPSIGNAL", "SHELL",
}


class DockerfileError(ValueError):
    """The Dockerfile does not parse."""


@dataclass
class Instruction:
    """One instruction: its keyword, the raw argument text and its line number."""

    keyword: str
    args: str
    line: int

    def exec_form(self) -> list[str] | None:
        """The JSON-array (exec) form's argv, or None for the shell form."""
        text = self.args.strip()
        if not text.startswith("["):
            return None
        try:
            value = json.loads(text)
        except json.JSONDecodeError as exc:
            msg = f"line {self.line}: {self.keyword} is not a valid JSON array ({exc})"
            raise DockerfileError(msg) from exc
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            msg = f"line {self.line}: {self.keyword} must be a JSON array of strings"
            raise DockerfileError(msg)
        return value


@dataclass
class Stage:
    """A build stage: its base image, optional name, and instructions."""

    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]

    def last(self, keyword: str) -> Instruction | None:
        found = self.all(keyword)
        return found[-1] if found else None


@dataclass
class Copy:
    """A COPY/ADD: the stage it copies from (None = build context), sources, destination."""

    from_stage: str | None
    sources: list[str]
    dest: str
    line: int


def parse(text: str) -> tuple[list[Instruction], list[Stage]]:
    """Parse a Dockerfile into global (pre-FROM) instructions and stages."""
    logical: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for number, raw in enumerate(text.splitlines(), start=1):
        stripped = raw.strip()
        if stripped.startswith("#") or (not stripped and not buf):
            continue
        if not buf:
            start = number
        if stripped.endswith("\\"):
            buf.append(stripped[:-1].strip())
            continue
        buf.append(stripped)
        logical.append((start, " ".join(p for p in buf if p)))
        buf = []
    if buf:
        msg = f"line {start}: a line continuation runs off the end of the file"
        raise DockerfileError(msg)
    prelude: list[Instruction] = []
    stages: list[Stage] = []
    for line, content in logical:
        keyword, _, args = content.partition(" ")
        keyword = keyword.upper()
        if keyword not in KNOWN:
            msg = f"line {line}: unknown or unreviewed instruction {keyword}"
            raise DockerfileError(msg)
        ins = Instruction(keyword, args.strip(), line)
        if keyword == "FROM":
            words = args.split()
            words = [w for w in words if not w.startswith("--platform")]
            if len(words) == 3 and words[1].upper() == "AS":
                stages.append(Stage(words[0], words[2], [ins]))
            elif len(words) == 1:
                stages.append(Stage(words[0], None, [ins]))
            else:
                msg = f"line {line}: FROM takes `image [AS name]`, got {args!r}"
                raise DockerfileError(msg)
        elif not stages:
            if keyword != "ARG":
                msg = f"line {line}: only ARG may come before the first FROM"
                raise DockerfileError(msg)
            prelude.append(ins)
        else:
            stages[-1].instructions.append(ins)
    if not stages:
        msg = "no FROM instruction"
        raise DockerfileError(msg)
    return prelude, stages


def copies(stage: Stage) -> list[Copy]:
    """The stage's COPY instructions, with their flags read."""
    out: list[Copy] = []
    for ins in stage.all("COPY"):
        words = ins.exec_form() or shlex.split(ins.args)
        from_stage = None
        rest: list[str] = []
        for w in words:
            if w.startswith("--from="):
                from_stage = w.split("=", 1)[1]
            elif w.startswith("--"):
                continue
            else:
                rest.append(w)
        if len(rest) < 2:
            msg = f"line {ins.line}: COPY needs a source and a destination"
            raise DockerfileError(msg)
        out.append(Copy(from_stage, rest[:-1], rest[-1], ins.line))
    return out


def ignored(path: str, patterns: list[str]) -> bool:
    """Whether a context path is excluded by .dockerignore patterns (last match wins).

    A pattern excludes a path when it matches the path or one of its parent
    folders; a leading ``**/`` matches at any depth.
    """
    parts = Path(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    result = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = (pattern[1:] if negate else pattern).strip("/")
        if pat.startswith("**/"):
            tail = pat.removeprefix("**/")
            hit = any(fnmatch.fnmatchcase(Path(p).name, tail) for p in prefixes)
        else:
            hit = any(fnmatch.fnmatchcase(p, pat) for p in prefixes)
        if hit:
            result = not negate
    return result


def read_ignore(path: Path) -> list[str]:
    """The patterns of a .dockerignore file (comments and blank lines dropped)."""
    if not path.is_file():
        return []
    return [line.strip() for line in path.read_text().splitlines()
            if line.strip() and not line.strip().startswith("#")]
