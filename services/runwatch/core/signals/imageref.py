"""Container image references in the spellings that name the same image.

``docker pull`` reads ``python:3.11``, ``library/python:3.11``,
``docker.io/library/python:3.11`` and ``index.docker.io/library/python:3.11`` as one
image (docker/distribution's normalized names: a first path component without a ``.``,
a ``:`` or ``localhost`` is no registry, and Docker Hub's official images live under
``library/``); a reference without a tag or a digest is ``:latest``; a digest pins the
image and the tag beside it (``train:1.4@sha256:...``) is not what is pulled. The image
allow-list (:func:`runwatch.core.signals.rules.image_matches`) judges an image in each of
these spellings against each spelling of an entry: ``docker.io/pytorch/pytorch`` paged a
run of ``pytorch/pytorch:2.1``, ``python`` one of ``docker.io/library/python:3.11``, and
``train@sha256:D`` one of ``train:1.4@sha256:D``.
"""

from __future__ import annotations

import re
from typing import NamedTuple

HUB = "docker.io"
HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io",
                         "registry.hub.docker.com"})
"""Names of Docker Hub's registry that clients read as ``docker.io``."""

_BARE_DIGEST = re.compile(r"sha256:[0-9a-f]+")


class Ref(NamedTuple):
    """A parsed reference: registry, repository path, tag and digest ('' when absent)."""

    domain: str
    path: str
    tag: str
    digest: str


def is_host(part: str) -> bool:
    """Whether a reference's first path component names a registry (docker's rule)."""
    return "." in part or ":" in part or part == "localhost"


def parse(ref: str) -> Ref | None:
    """Return a reference's parts (lower-case), None for a bare digest or an empty one."""
    ref = ref.strip().lower()
    if not ref or _BARE_DIGEST.fullmatch(ref):
        return None
    name, _, digest = ref.partition("@")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = ""
    if colon > slash:
        name, tag = name[:colon], name[colon + 1:]
    first, sep, rest = name.partition("/")
    domain, path = (first, rest) if sep and is_host(first) else (HUB, name)
    if domain in HUB_ALIASES:
        domain = HUB
        if "/" not in path:
            path = "library/" + path
    return Ref(domain, path, tag, digest)


def image_spellings(image: str) -> list[str]:
    """Return the spellings an image is judged in (as given first).

    The canonical name with its tag (``:latest`` when it has neither tag nor digest),
    without the tag when a digest pins it, and Docker Hub's short form (``python:3.11``,
    ``pytorch/pytorch:2.1``), which entries written that way name.
    """
    given = image.strip().lower()
    out = [given]
    r = parse(given)
    if r is None:
        return out
    pin = f"@{r.digest}" if r.digest else ""
    tag = f":{r.tag}" if r.tag else ("" if r.digest else ":latest")
    out += [f"{r.domain}/{r.path}{tag}{pin}"]
    if r.digest:
        out.append(f"{r.domain}/{r.path}{pin}")
    short = r.path.removeprefix("library/")
    if r.domain == HUB and not is_host(short.split("/", 1)[0]):  # else it reads as a registry
        out += [f"{short}{tag}{pin}"] + ([f"{short}{pin}"] if r.digest else [])
    return list(dict.fromkeys(out))


def entry_spellings(entry: str) -> list[str]:
    """Return the spellings of an allow-list entry (as given first).

    An entry without a ``/`` that reads as a registry (``registry.corp.com``,
    ``localhost:5000``, ``localhost``) stays one, and ``name:digits`` is both a registry on
    a port and an image with that tag; an entry ending in ``/`` is a prefix (a
    registry or a Docker Hub namespace, ``pytorch/``); anything else is a repository,
    its tag or its digest, named canonically beside the spelling given. No ``:latest``
    is added: an entry without a tag admits every tag.
    """
    given = entry.strip().lower()
    out = [given]
    if not given or _BARE_DIGEST.fullmatch(given):
        return out
    if given.endswith("/"):
        first, _, rest = given.rstrip("/").partition("/")
        if not is_host(first):
            out.append(f"{HUB}/{given}")
        elif first in HUB_ALIASES:
            out.append(f"{HUB}/{rest}/" if rest else f"{HUB}/")
        return list(dict.fromkeys(out))
    if "/" not in given and ("." in given or given == "localhost"
                             or given.startswith("localhost:")):
        return out + ([HUB] if given in HUB_ALIASES else [])
    # ``name:digits`` names a registry on a port (``registry:5000``, a compose service) as
    # much as an image with a numeric tag (``redis:7``, which docker pulls): it admits both.
    # Read as a registry only, ``redis:7`` admitted no ``redis:7.2`` and no canonical name
    r = parse(given)
    if r is None:
        return out
    out.append(f"{r.domain}/{r.path}" + (f":{r.tag}" if r.tag else "")
               + (f"@{r.digest}" if r.digest else ""))
    return list(dict.fromkeys(out))


def is_digest(ref: str) -> bool:
    """Whether a reference is a bare digest (``sha256:...``), no repository named."""
    return _BARE_DIGEST.fullmatch(ref.strip().lower()) is not None


def digest_of(ref: str) -> str:
    """Return the digest a reference is pinned by (``sha256:...``), '' when none."""
    ref = ref.strip().lower()
    if _BARE_DIGEST.fullmatch(ref):
        return ref
    return ref.partition("@")[2]
