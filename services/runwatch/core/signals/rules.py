"""Hard rules: conditions that are wrong whatever the statistics say.

Size: the catalogue of hard rules; each is a short pure function returning a Finding.

Each rule is a pure function of plain values that returns a :class:`Finding`
when it fires and ``None`` otherwise. Findings are the common currency of the
processor: rules and detectors produce them, the cause classifier reads them
as evidence, and the alert lifecycle turns them into Alert records.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from runwatch.core.signals import imageref

Severity = Literal["info", "warning", "critical"]
Signal = Literal["data", "execution", "learning", "artifact", "infrastructure"]


@dataclass(frozen=True, slots=True)
class Finding:
    """One observation worth an alert or worth keeping as evidence.

    Attributes:
        detector: What produced it (``rule:<name>`` or a detector name).
        indicator: The indicator or rule subject (``loss``, ``loader_share``...).
        signal: The signal class the observation belongs to.
        severity: How bad it is on its own.
        observed: The value seen.
        expected: The value or bound expected.
        score: Strength in [0, 1] (1 for hard rules).
        at_ms: Event time of the observation.
        title: One-line human title.
        detail: Free text for the evidence list.
        alert: True when it should raise an alert; False for evidence only.
        subject: Extra key part for the dedup key (e.g. a dataset or GPU).
        labels: Extra labels.
        hard: A hard rule's finding (wrong whatever the statistics say): it
            alerts at once, never waiting for correlated evidence.

    """

    detector: str
    indicator: str
    signal: Signal
    severity: Severity
    observed: float
    expected: float
    score: float
    at_ms: int
    title: str
    detail: str = ""
    alert: bool = True
    subject: str = ""
    labels: dict[str, str] = field(default_factory=dict)
    hard: bool = False


def _hard(
    name: str, indicator: str, signal: Signal, observed: float, expected: float, at_ms: int,
    title: str, detail: str = "", subject: str = "", severity: Severity = "critical",
) -> Finding:
    return Finding(
        detector=f"rule:{name}", indicator=indicator, signal=signal, severity=severity,
        observed=observed, expected=expected, score=1.0, at_ms=at_ms, title=title,
        detail=detail, subject=subject, hard=True,
    )


def non_finite_validation(subject: str, value: float, at_ms: int) -> Finding:
    """Return the finding of a validation loss that is NaN or infinite (critical, learning).

    Args:
        subject: The metric (and its stream: slice, dataset).
        value: Its value.
        at_ms: Event time.
    """
    return _hard("non_finite", subject, "learning", value, 0.0, at_ms,
                 f"Non-finite validation {subject} ({value})", f"{subject}={value}",
                 subject=subject)


GRAD_OVERFLOW_STEPS = 8
"""Learning steps in a row with non-finite gradients (and a finite loss) before they page.

Mixed-precision training with a dynamic loss scaler (``torch.cuda.amp.GradScaler``)
overflows by design: the scaler skips the step and halves its scale, several times
in a row as a run starts (2^16 down to about 2^10) and now and then after it grows
the scale again; each such step paged a healthy fp16 run, critical. Eight in a
row is a scale fallen 128-fold (256-fold without hysteresis) without recovering, or
gradients that overflow in earnest; a non-finite loss or learning rate pages at once."""
START_OVERFLOW_STEPS = 34
"""The same count before the run's first step with finite gradients: the scaler is still
finding its scale. Megatron-LM starts at 2^32 with hysteresis 2 and skipped its first
17 steps on a healthy run, which paged critical at the 8th. Halving 2^32 (the largest
initial scale of Megatron-LM and DeepSpeed) down to 1, no scaling at all, takes 32
overflows, 33 with hysteresis 2: a run still overflowing after that does in earnest."""


def non_finite_learning(
    loss: float | None, grad_norm: float | None, nonfinite_count: int, at_ms: int,
    lr: float | None = None, overflows: int = GRAD_OVERFLOW_STEPS, *, scaled: bool = True,
) -> Finding | None:
    """Fire on a NaN/Inf loss or learning rate, or gradients non-finite for long enough.

    Args:
        loss: The reported loss, if any.
        grad_norm: The reported gradient norm, if any.
        nonfinite_count: Non-finite gradient/parameter values the SDK counted.
        at_ms: Event time.
        lr: The reported learning rate, if any (a scheduler that divides by zero).
        overflows: Learning steps in a row, this one included, whose gradients were
            non-finite (a non-finite norm or a positive count); they fire from
            :data:`GRAD_OVERFLOW_STEPS` on.
        scaled: Whether the run has had a step with finite gradients (its loss scaler
            found its scale); before one, overflows fire from :data:`START_OVERFLOW_STEPS`.

    Returns:
        A critical learning finding, or None.

    """
    for name, value in (("loss", loss), ("lr", lr)):
        if value is not None and not math.isfinite(value):
            return _hard(
                "non_finite", name, "learning", value, 0.0, at_ms,
                f"Non-finite {name} ({value})", f"{name}={value}",
            )
    if overflows < (GRAD_OVERFLOW_STEPS if scaled else START_OVERFLOW_STEPS):
        return None
    if grad_norm is not None and not math.isfinite(grad_norm):
        return _hard(
            "non_finite", "grad_norm", "learning", grad_norm, 0.0, at_ms,
            f"Non-finite grad_norm ({grad_norm}) in {overflows} steps in a row",
            f"grad_norm={grad_norm}, {overflows} steps in a row",
        )
    if nonfinite_count > 0:
        return _hard(
            "non_finite", "nonfinite_count", "learning", float(nonfinite_count), 0.0, at_ms,
            f"{nonfinite_count} non-finite gradient values ({overflows} steps in a row)",
            f"nonfinite_count={nonfinite_count}, {overflows} steps in a row",
        )
    return None


def missing_data_reports(
    datasets: Iterable[str], reported: Iterable[str], manifest_at_ms: int, now_ms: int,
    wait_ms: int, named_at: Mapping[str, int] | None = None,
) -> list[Finding]:
    """Fire for each manifest dataset with no data report after a bounded wait.

    Args:
        datasets: Dataset refs (``id@version``) the run's manifest declares.
        reported: Dataset refs that have a data-quality report.
        manifest_at_ms: Event time of the run's first manifest.
        now_ms: The processor's event-time horizon (see :mod:`runwatch.core.stream.horizon`).
        wait_ms: How long (event time) a report may take to arrive.
        named_at: Event time of the manifest that first named a ref, for refs a later
            manifest added (a resumed run reading a new version); the others wait from
            ``manifest_at_ms``.

    Returns:
        One data finding per missing report (empty while still waiting).

    """
    if now_ms - manifest_at_ms < wait_ms:
        return []
    since = named_at or {}
    seen = set(reported)
    return [
        _hard(
            "missing_data_report", "data_report", "data", 0.0, 1.0, now_ms,
            f"No data-quality report for {ref}",
            f"dataset {ref} in manifest, no report after {wait_ms} ms", subject=ref,
        )
        for ref in sorted(set(datasets))
        if ref not in seen and now_ms - since.get(ref, manifest_at_ms) >= wait_ms
    ]


def zero_rows(dataset_ref: str, rows: int, at_ms: int) -> Finding | None:
    """Fire when a data-quality report counts no rows.

    Args:
        dataset_ref: The dataset (``id@version``).
        rows: Row count in the report.
        at_ms: Event time.

    Returns:
        A critical data finding, or None.

    """
    if rows > 0:
        return None
    return _hard(
        "zero_rows", "rows", "data", float(rows), 1.0, at_ms,
        f"Dataset {dataset_ref} has no rows", f"rows={rows}", subject=dataset_ref,
    )


SCHEMA_FAIL_SHARE = 0.01
"""Share of a batch's rows that may fail its schema before ``rule:schema_failures`` fires.

A schema check is exact, not a sample statistic: every counted row really is
malformed, so the bound is a tolerance, not a noise margin. 1 % is the usual
tolerance of data-validation suites (an expectation's ``mostly=0.99``): a
pipeline that drops or mis-parses more than one row in a hundred changes what
the model trains on. ``RUNWATCH_PROCESSOR_SCHEMA_FAIL_SHARE`` sets it (0 fires
on any malformed row)."""


def report_problem(dataset_uri: str, rows: int, failures: int, duplicates: int) -> str | None:
    """Return why a data-quality report cannot be true, or None.

    A report needs its dataset, and counts no more failing or duplicate rows than it
    has rows: 500 schema failures in 100 rows paged "500.0 % of rows fail its schema".
    A negative count is named as such (a row_count of -3 read "schema_failures 0 above
    row_count -3").
    """
    if not dataset_uri.strip():
        return "a data-quality report without a dataset_uri"
    counts = (("row_count", rows), ("schema_failures", failures), ("duplicate_rows", duplicates))
    for name, n in counts:
        if n < 0:
            return f"negative {name} {n}: a report counts rows, 0 or more"
    for name, n in (("schema_failures", failures), ("duplicate_rows", duplicates)):
        if n > rows:
            return f"{name} {n} above row_count {rows}: a report counts its own rows"
    return None


def schema_failures(dataset_ref: str, failures: int, rows: int, tolerance: float,
                    at_ms: int) -> Finding | None:
    """Fire when more than ``tolerance`` of a batch's rows fail the dataset's schema.

    Args:
        dataset_ref: The dataset (``id@version``).
        failures: Rows failing schema conformance in the report.
        rows: Rows in the report.
        tolerance: Share of rows that may fail (:data:`SCHEMA_FAIL_SHARE` by default).
        at_ms: Event time.

    Returns:
        A data finding (warning), or None.

    """
    if rows <= 0 or failures <= 0:
        return None
    share = failures / rows
    if share <= tolerance:
        return None
    return _hard(
        "schema_failures", "schema_failure_share", "data", share, tolerance, at_ms,
        f"{share:.1%} of rows of {dataset_ref} fail its schema",
        f"schema_failures={failures} of rows={rows}; tolerance {tolerance:.1%}",
        subject=dataset_ref, severity="warning",
    )


ImageMissing = Literal["allow", "warn", "deny"]


def image_allowed(
    image: str, allow_list: Sequence[str], at_ms: int, missing: ImageMissing = "allow"
) -> Finding | None:
    """Fire when the run's image is outside the allow-list.

    An allow-list entry admits the image it names and every image under it
    (:func:`image_matches`). An empty allow-list disables the rule.

    A run that reports no image at all (a plain script outside a container)
    is not running an unapproved image; ``missing`` decides what it gets:
    ``allow`` nothing, ``warn`` a warning finding, ``deny`` a critical one
    (``rule:image_missing``).

    Args:
        image: Image reference or digest of the run (empty: none reported).
        allow_list: Allowed images or prefixes.
        at_ms: Event time.
        missing: Policy for runs without an image.

    Returns:
        An artifact finding, or None.

    """
    if not allow_list:
        return None
    if not image:
        if missing == "allow":
            return None
        return _hard(
            "image_missing", "image", "artifact", 0.0, 1.0, at_ms,
            "Run reports no container image (image allow-list in force)",
            f"no image digest; image policy for runs without an image: {missing}",
            severity="critical" if missing == "deny" else "warning",
        )
    if any(image_matches(image, a) for a in allow_list):
        return None
    return _hard(
        "image_allow_list", "image", "artifact", 0.0, 1.0, at_ms,
        f"Image {image} is not allowed", f"image={image}", subject=image,
    )


IMAGE_SEPARATORS = "/:@"
"""What may follow an allow-list entry in an image it admits: a path, a tag, a digest."""


def image_matches(image: str, entry: str) -> bool:
    """Return whether an allow-list ``entry`` admits ``image``.

    An entry admits the image it names and every image under it: a registry
    (``registry.corp.com``) its repositories, a repository (``registry.corp.com/ml``)
    its own images, tags and digests (``/``, ``:`` or ``@`` next). It does not admit
    a look-alike that merely starts with the same text: ``registry.corp.com.evil.io/x``,
    ``docker.io/pytorchx/y``, ``registry.corp.com/ml-sandbox/z`` (a plain prefix match
    admitted all three). An entry ending in a separator (``registry.prod/``) is a prefix,
    and so is one naming a tag (``docker.io/pytorch/pytorch:2`` admits ``:2.1``): within
    a repository the tags are the site's own.
    A bare digest (``sha256:...``) matches itself, and an entry or an image pinned by
    that digest. Registry hosts are case-insensitive and repository names lower-case,
    so the comparison ignores case. Both are judged in every spelling of the same
    image (:mod:`runwatch.core.signals.imageref`): Docker Hub's implicit ``docker.io/``
    and ``library/``, ``:latest`` for an image without a tag, a digest-pinned image
    without the tag beside its digest.
    """
    pinned, named = imageref.digest_of(image), imageref.digest_of(entry)
    if pinned and pinned == named and (imageref.is_digest(image) or imageref.is_digest(entry)):
        return True  # a bare digest, and a reference pinned by the same digest
    return any(_admits(i, e) for i in imageref.image_spellings(image)
               for e in imageref.entry_spellings(entry))


def _admits(image: str, entry: str) -> bool:
    """:func:`image_matches` of one spelling of each (lower-case)."""
    if not entry or not image.startswith(entry):
        return False
    last = entry.rsplit("/", 1)[-1]
    tagged = "/" in entry and ("@" in last or ":" in last)  # a tag (prefix) or a digest
    return (len(image) == len(entry) or tagged or entry[-1] in IMAGE_SEPARATORS
            or image[len(entry)] in IMAGE_SEPARATORS)


def failed_gate(gate: str, passed: bool, reason: str, at_ms: int) -> Finding | None:
    """Fire on a failed evaluation/release gate.

    Args:
        gate: Gate name.
        passed: Whether it passed.
        reason: Why, as the gate reported it.
        at_ms: Event time.

    Returns:
        A critical artifact finding, or None.

    """
    if passed:
        return None
    return _hard(
        "failed_gate", "gate", "artifact", 0.0, 1.0, at_ms,
        f"Gate {gate} failed", reason or f"gate {gate} failed", subject=gate,
    )


def normalize_sha256(value: str | None) -> str | None:
    """Return a checksum as hashlib writes it: lowercase hex, no prefix, no file name.

    Writers record checksums in several spellings: ``sha256:<hex>`` as OCI
    digests do, ``sha256=<hex>``, upper-case hex (PowerShell's ``Get-FileHash``),
    a ``sha256sum`` output line (``<hex>  model.pt``), base64 of the 32 bytes
    (S3's ``ChecksumSHA256``, Subresource Integrity's ``sha256-<base64>``), also
    URL-safe or without its ``=`` padding; a tagged line naming the file
    (``SHA256 (model.pt) = <hex>`` of BSD's and macOS's ``sha256`` and of
    ``sha256sum --tag``, ``SHA2-256(model.pt)= <hex>`` of ``openssl dgst``); the bytes
    in hex pairs separated by colons or spaces (``openssl dgst -c``, older Windows'
    ``certutil -hashfile``); a tool's whole output, the digest on a line of its own
    (``certutil``) or the one 64-digit hex word in it (``Get-FileHash``'s table); the
    value in quotes. Comparing them verbatim with the digest
    computed here reported every such healthy checkpoint as corrupt, critical.

    Args:
        value: A checksum as the caller gave it, or None.

    Returns:
        The normalized hex string (the text lower-cased when it is none of the
        spellings above), or None when empty.

    """
    if not value:
        return None
    lines = [line for line in value.splitlines() if line.strip()]
    if not lines:
        return None
    found = [_one_digest(line) for line in lines]
    # a tool's output around the digest: the line that is one (certutil's middle line), else
    # the one digest in it (Get-FileHash's table: "SHA256  3F7A...  C:\\ckpt\\model.pt")
    full = next((d for d in found if len(d) == 64 and _HEX.fullmatch(d)), None)
    if full is None:
        words = set(_DIGEST_WORD.findall(value.lower()))
        full = words.pop() if len(words) == 1 else None
    return full or found[0] or None


def _one_digest(line: str) -> str:
    """:func:`normalize_sha256` of one line."""
    text = line.strip().strip("\"'`").strip()
    tagged = _TAGGED.fullmatch(text)  # SHA256 (model.pt) = <hex>, SHA2-256(model.pt)= <hex>
    if tagged:
        text = tagged.group(1)
    if _HEX_PAIRS.fullmatch(text):  # ab:cd:..., ab cd ...
        return "".join(text.replace(":", " ").split()).lower()
    words = text.split()
    if not words:
        return ""
    text = _SHA_PREFIX.sub("", words[0])  # a sha256sum line: the digest, then the file
    low = text.lower()
    if _HEX.fullmatch(low):
        return low
    if len(text) in (43, 44):  # base64 of 32 bytes: standard or URL-safe, padded or not
        b64 = text.replace("-", "+").replace("_", "/")
        try:
            raw = base64.b64decode(b64 + "=" * (-len(b64) % 4), validate=True)
        except (binascii.Error, ValueError):
            raw = b""
        if len(raw) == 32:
            return raw.hex()
    return low


_SHA_PREFIX = re.compile(r"^sha-?256[:=-]", re.IGNORECASE)
_HEX = re.compile(r"[0-9a-f]+")
_TAGGED = re.compile(r"(?:sha2?-?256\s*)?\(.*\)\s*=\s*(\S+)", re.IGNORECASE)
_DIGEST_WORD = re.compile(r"(?<![0-9a-z])[0-9a-f]{64}(?![0-9a-z])")
_HEX_PAIRS = re.compile(r"[0-9a-f]{2}(?:(?::|\s+)[0-9a-f]{2}){31}", re.IGNORECASE)
SHORT_DIGEST = 12
"""Hex digits a shortened digest must keep to be compared as the start of a full one (as
container tools show image ids): a 12-digit prefix of another digest by chance is 1 in
2.8e14."""


def same_digest(a: str, b: str) -> bool:
    """Return whether two normalized digests are the same (a shortened one as a prefix)."""
    if a == b:
        return True
    short, full = sorted((a, b), key=len)
    return (len(short) >= SHORT_DIGEST and len(full) == 64 and full.startswith(short)
            and _HEX.fullmatch(full) is not None)


def digests_agree(expected_sha256: str, actual_sha256: str) -> bool | None:
    """Return whether two checksums, in any spelling :func:`normalize_sha256` reads, agree.

    None when either is missing: nothing to compare. The processor's checksum rule and
    ``runwatch investigate``'s trust answer judge a checkpoint by this one comparison.
    """
    expected, actual = normalize_sha256(expected_sha256), normalize_sha256(actual_sha256)
    return same_digest(expected, actual) if expected and actual else None


def checkpoint_integrity(
    expected_sha256: str, actual_sha256: str, serialization_ok: bool, at_ms: int,
    subject: str = "", *, corrupt: bool = False, what: str = "Checkpoint",
    timed_out: bool = False, step: int | None = None,
) -> Finding | None:
    """Fire on a checkpoint checksum mismatch, a reported corruption or failed serialization.

    A mismatch between the two checksums is the most specific evidence and
    wins: it raises ``rule:checkpoint_checksum`` whatever outcome the producer
    reported alongside it (the SDK reports a mismatch it finds as outcome
    ``corrupt``). A corruption reported without both checksums raises the same
    rule; only a failed write (``serialization_ok`` false) raises
    ``rule:checkpoint_serialization``.

    Args:
        expected_sha256: Checksum written by the trainer (empty if unknown).
        actual_sha256: Checksum found on read-back / upload (empty if unknown).
        serialization_ok: Whether serialization succeeded.
        at_ms: Event time.
        subject: Checkpoint identity (uri or step) for the dedup key.
        corrupt: The producer reported the checkpoint corrupt (outcome ``corrupt``).
        what: What was written, for the title (``Checkpoint``, ``Artifact model``).
        timed_out: The write timed out (outcome ``timeout``): no usable checkpoint
            either, paged as a failed serialization.
        step: The checkpoint's step, named with ``subject`` in the detail.

    Returns:
        A critical artifact finding, or None.

    """
    # the evidence names the checkpoint: a NaN after a resume from it carries this detail
    # as its cause's evidence, and "expected 9bdd2b102a4a got d9298a10d1b0" named none
    which = subject + (f" (step {step})" if step is not None else "")
    if digests_agree(expected_sha256, actual_sha256) is False:
        expected = normalize_sha256(expected_sha256) or ""
        actual = normalize_sha256(actual_sha256) or ""
        return _hard(
            "checkpoint_checksum", "checkpoint", "artifact", 0.0, 1.0, at_ms,
            "Checkpoint checksum mismatch",
            (f"{which}: " if which else "") + f"expected {expected[:12]} got {actual[:12]}",
            subject=subject,
        )
    if corrupt:
        return _hard(
            "checkpoint_checksum", "checkpoint", "artifact", 0.0, 1.0, at_ms,
            "Checkpoint reported corrupt", which, subject=subject,
        )
    if not serialization_ok or timed_out:
        return _hard(
            "checkpoint_serialization", "checkpoint", "artifact", 0.0, 1.0, at_ms,
            f"{what} write timed out" if timed_out else f"{what} serialization failed",
            which, subject=subject,
        )
    return None


def stalled(
    last_step_ms: int, median_step_ms: float, now_ms: int, k: float, min_stall_ms: int = 0
) -> Finding | None:
    """Fire when no step arrived for ``k`` times the median step time.

    Args:
        last_step_ms: Event time of the last step (0 = none yet).
        median_step_ms: The run's median step duration.
        now_ms: The processor's event-time horizon at the timer tick (see
            :mod:`runwatch.core.stream.horizon`): a backlog being read does not count as silence.
        k: Multiple of the median that counts as a stall.
        min_stall_ms: Floor on the stall bound.

    Returns:
        A critical execution finding, or None.

    """
    if last_step_ms <= 0 or not math.isfinite(median_step_ms) or median_step_ms <= 0:
        return None
    bound = max(k * median_step_ms, float(min_stall_ms))
    silent = float(now_ms - last_step_ms)
    if silent <= bound:
        return None
    return _hard(
        "stalled", "step_gap_ms", "execution", silent, bound, now_ms,
        f"Job stalled: no step for {silent / 1000:.1f} s",
        f"median step {median_step_ms:.0f} ms, k={k}",
    )


def stalled_after_restart(restarted_ms: int, now_ms: int, bound_ms: int) -> Finding | None:
    """Fire when a run that stepped before started again and has not stepped for ``bound_ms``.

    Args:
        restarted_ms: Event time of the ``running`` that started it again.
        now_ms: The processor's event-time horizon at the timer tick.
        bound_ms: How long its load may take (the caller's bound).

    Returns:
        A critical execution finding (the stall rule's), or None.

    """
    silent = float(now_ms - restarted_ms)
    if restarted_ms <= 0 or silent <= bound_ms:
        return None
    return _hard(
        "stalled", "step_gap_ms", "execution", silent, float(bound_ms), now_ms,
        f"Job stalled: no step for {silent / 1000:.1f} s since it started again",
        f"it stepped before its restart; a load may take {bound_ms / 1000:.0f} s",
    )


XID_CLEANUP = frozenset({45})
"""XIDs that report the driver cleaning up after a process, not a GPU fault: XID 45
("preemptive cleanup") is logged on every GPU of a job killed with SIGKILL (``scancel
--signal=KILL``, a pod deleted past its grace period) and after an earlier error, which
pages on its own XID. Kept as evidence (info); each one paged the user's own cancel as
eight critical infrastructure alerts."""


def gpu_errors(
    node: str, gpu_index: int, xid: int, ecc_uncorrected: int, at_ms: int
) -> Finding | None:
    """Fire on a GPU XID error or uncorrected ECC errors.

    Args:
        node: Node id.
        gpu_index: GPU index on the node.
        xid: Last XID error code (0 = none).
        ecc_uncorrected: Uncorrected ECC error count.
        at_ms: Event time.

    Returns:
        A critical infrastructure finding, or None.

    """
    subject = f"{node}/gpu{gpu_index}"
    if xid in XID_CLEANUP:
        return Finding(
            detector="rule:gpu_xid", indicator="xid_cleanup", signal="infrastructure",
            severity="info", observed=float(xid), expected=0.0, score=0.3, at_ms=at_ms,
            title=f"GPU XID {xid} (channels cleaned up) on {subject}", detail=f"xid={xid}",
            subject=subject, alert=False,
        )
    if xid > 0:
        return _hard(
            "gpu_xid", "xid", "infrastructure", float(xid), 0.0, at_ms,
            f"GPU XID {xid} on {subject}", f"xid={xid}", subject=subject,
        )
    if ecc_uncorrected > 0:
        return _hard(
            "gpu_ecc", "ecc_uncorrected", "infrastructure", float(ecc_uncorrected), 0.0, at_ms,
            f"Uncorrected ECC errors on {subject}", f"ecc={ecc_uncorrected}", subject=subject,
        )
    return None


def queue_deadline(
    queued_at_ms: int, started_at_ms: int | None, now_ms: int, deadline_ms: int
) -> Finding | None:
    """Fire when a job is still queued past its deadline, or started after it.

    ``deadline_ms`` follows the JobEvent schema: an absolute UTC epoch-ms time
    (not a duration). The queue delay counts against the time the job had
    between being queued and its deadline.

    Args:
        queued_at_ms: When it was queued (0 = unknown).
        started_at_ms: When it started, or None while still queued.
        now_ms: The processor's event-time horizon (used while still queued).
        deadline_ms: Epoch ms by which the job must have left the queue (0 disables).

    Returns:
        A warning execution finding, or None.

    """
    if queued_at_ms <= 0 or deadline_ms <= 0:
        return None
    left_at = started_at_ms if started_at_ms is not None else now_ms
    if left_at <= deadline_ms:
        return None
    # a job queued after its deadline, judged on a horizon behind its queued event: no
    # negative delay ("Queued -60 s, 3 s past the deadline")
    delay = max(left_at - queued_at_ms, 0)
    allowed = max(deadline_ms - queued_at_ms, 0)
    late = left_at - deadline_ms
    return _hard(
        "queue_deadline", "queue_delay_ms", "execution", float(delay), float(allowed),
        left_at, f"Queued {delay / 1000:.0f} s, {late / 1000:.0f} s past the deadline",
        severity="warning",
    )


SLOWDOWN_NAMES = ((0x8, "HW slowdown"), (0x20, "SW thermal slowdown"),
                  (0x40, "HW thermal slowdown"), (0x80, "HW power brake"))
"""NVML clocks-event reasons that are hardware protection, by name."""
SLOWDOWN_MASK = 0x8 | 0x20 | 0x40 | 0x80


def gpu_slowdown(
    node: str, held: Sequence[tuple[int, int, int, float | None, int | None]], for_ms: int,
    at_ms: int,
) -> Finding | None:
    """Fire when GPUs of a node have stayed in a hardware slowdown (thermal, power brake).

    NVML sets these reasons when the GPU protects itself (too hot, power
    excursion, an external slowdown signal); they are facts, not statistics,
    so no baseline is needed, only a duration: ``for_ms`` of event time, like
    Prometheus' ``for:``. A SW power cap is a busy GPU's normal operating point
    and does not count. One finding per node (subject: the node) names every
    GPU held that long.

    Args:
        node: The node.
        held: Per GPU in a slowdown: (index, reasons bitmask, how long it has
            held in ms of event time, temperature °C or None, SM clock MHz or None).
        for_ms: How long a slowdown must hold before firing.
        at_ms: Event time.

    Returns:
        A warning infrastructure finding, or None.

    """
    long = [h for h in held if h[1] & SLOWDOWN_MASK and h[2] >= for_ms]
    if not long:
        return None
    reasons = 0
    for h in long:
        reasons |= h[1]
    names = " + ".join(n for bit, n in SLOWDOWN_NAMES if reasons & bit)
    temps = [h[3] for h in long if h[3] is not None]
    clocks = [h[4] for h in long if h[4]]
    extra = ", ".join(x for x in (f"up to {max(temps):.0f} C" if temps else "",
                                  f"SM clock down to {min(clocks)} MHz" if clocks else "") if x)
    held_ms = max(h[2] for h in long)
    gpus = [h[0] for h in long]
    return _hard(
        "gpu_slowdown", "throttle_reasons", "infrastructure", float(held_ms), float(for_ms),
        at_ms, f"GPUs {gpus} on {node} in {names} for {held_ms / 1000:.0f} s"
        + (f" ({extra})" if extra else ""), f"throttle_reasons=0x{reasons:x}", subject=node,
        severity="warning",
    )


MEM_NEAR_FULL = 0.9
"""GPU memory used/total from which growth is judged (within 10 % of the card's capacity)."""
MEM_WINDOW_MIN = 5
MEM_WINDOWS = 3
MEM_MIN_STEP = 0.001
"""Least growth between windows that counts (~80 MB on an 80 GB card: allocator granularity)."""
MEM_HORIZON_MIN = 30.0
"""Projected time to a full card within which the rule fires (time to act before the OOM)."""
MEM_SCALES = (MEM_WINDOW_MIN, 15)
"""Window lengths (minutes) the creep is judged at, three windows each. A leak that grows
in steps (evaluation outputs kept on the GPU: 3 GiB every 10 minutes, flat between) has
flat 5-minute windows and never grew in three in a row; in 15-minute windows it does."""


def gpu_memory_pressure(
    buckets: Sequence[tuple[int, float]], at_ms: int, subject: str
) -> Finding | None:
    """Fire when a run's GPU memory creeps toward its capacity: an OOM on the way.

    The input is the run's peak used/total per minute (oldest first). The last
    ``MEM_WINDOWS`` × ``MEM_WINDOW_MIN`` minutes are cut into windows; it fires
    when the newest window's peak is at least :data:`MEM_NEAR_FULL`, every
    window's peak exceeds the one before by :data:`MEM_MIN_STEP` (a sustained
    creep: a framework that preallocates, an allocator cache that filled once
    at start-up, or one step up at the first evaluation stay flat afterwards
    and do not fire), a growth slowing window by window does not tend to a level
    below a full card (a cache filling ever more slowly after start-up), and the
    linear projection of the latest window's growth reaches a full card within
    :data:`MEM_HORIZON_MIN` minutes (Prometheus' ``predict_linear`` disk-full
    construction). Memory used/total near 1 is a physical limit, so the bound
    is absolute, not relative to a baseline.

    Args:
        buckets: (minute index, peak used/total that minute), oldest first.
        at_ms: Event time.
        subject: The node.

    Returns:
        A critical execution finding, or None.

    """
    for minutes in MEM_SCALES:
        f = _memory_creep(buckets, at_ms, subject, minutes)
        if f is not None:
            return f
    return None


def _memory_creep(buckets: Sequence[tuple[int, float]], at_ms: int, subject: str,
                  minutes: int) -> Finding | None:
    """:func:`gpu_memory_pressure` judged in windows of ``minutes``."""
    if not buckets:
        return None
    newest = buckets[-1][0]
    start = newest - MEM_WINDOWS * minutes + 1
    peaks: list[float] = []
    for w in range(MEM_WINDOWS):
        lo = start + w * minutes
        vals = [v for m, v in buckets if lo <= m < lo + minutes]
        if not vals:
            return None  # not enough history (or a gap): no trend to judge
        peaks.append(max(vals))
    last = peaks[-1]
    if last < MEM_NEAR_FULL or any(b - a < MEM_MIN_STEP
                                   for a, b in zip(peaks, peaks[1:], strict=False)):
        return None
    # a growth that slows down window by window (a cache filling at start-up, fast and
    # then ever slower) tends to a level: judged where it tends (the geometric series of
    # its growth); projected from the first window, its ramp filled a card it never did
    before, growth = peaks[-2] - peaks[-3], last - peaks[-2]
    if growth < before and last + growth * growth / (before - growth) < 1.0:
        return None
    per_min = growth / minutes
    to_full = max(1.0 - last, 0.0) / per_min
    if to_full > MEM_HORIZON_MIN:
        return None
    return _hard(
        "gpu_memory_pressure", "gpu_memory", "execution", last, 1.0, at_ms,
        f"GPU memory on {subject} at {last:.1%} and growing: full in ~{to_full:.0f} min",
        f"peak used/total per {minutes} min: "
        + " -> ".join(f"{p:.3f}" for p in peaks), subject=subject,
    )


EMPTY_SHA256 = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
"""SHA-256 of no bytes: an artifact with this checksum was read and is empty."""


def artifact_empty(uri: str, kind: str, size_bytes: int, sha256: str,
                   at_ms: int) -> Finding | None:
    """Fire when an artifact was read back and holds no bytes.

    Only a fact counts: the checksum of empty content (the SDK hashes local
    files). A remote artifact whose size is not known reports size 0 and no
    checksum, and does not fire.

    Args:
        uri: Artifact location.
        kind: Artifact kind.
        size_bytes: Reported size.
        sha256: Reported checksum (empty if unknown).
        at_ms: Event time.

    Returns:
        A critical artifact finding, or None.

    """
    if size_bytes > 0 or normalize_sha256(sha256) != EMPTY_SHA256:
        return None  # the digest in any spelling (an OCI digest, S3's base64) is compared
    return _hard(
        "artifact_empty", "size_bytes", "artifact", 0.0, 1.0, at_ms,
        f"Artifact {uri} ({kind}) is empty", f"size 0, sha256 of no bytes; uri={uri}",
        subject=uri,
    )


REGISTRY_FAILED = frozenset({"rejected", "failed", "failed_registration", "error", "invalid"})
"""Model-registry statuses that say the registration did not succeed (MLflow's
``FAILED_REGISTRATION`` among them; compared as :func:`status_word` makes them)."""


def registry_status(uri: str, status: str, at_ms: int) -> Finding | None:
    """Fire when the model registry refused or failed an artifact's registration.

    Args:
        uri: Artifact location.
        status: The registry status reported with it (empty: none).
        at_ms: Event time.

    Returns:
        A critical artifact finding, or None.

    """
    if status_word(status) not in REGISTRY_FAILED:
        return None
    return _hard(
        "registry_status", "registry_status", "artifact", 0.0, 1.0, at_ms,
        f"Registry status {status} for {uri}", f"registry_status={status}", subject=uri,
    )


REGISTERED = frozenset({"registered", "ready", "staged", "staging", "production", "promoted",
                        "deployed", "released", "approved"})
"""Registry statuses that put a model where it can be used (compared as :func:`status_word`
makes them; ``approved``: SageMaker's model approval status)."""


def status_word(status: str) -> str:
    """Return a registry status or artifact kind as compared: lower-case, words joined by ``_``.

    Registries and people spell them ``Production``, ``FAILED_REGISTRATION``,
    ``deployed `` (a trailing space from a template) or ``failed registration``.
    """
    return "_".join(status.lower().replace("-", " ").split())


def is_model(kind: str) -> bool:
    """Return whether an artifact kind names a model (``model``, ``Model``, `` MODEL``)."""
    return status_word(kind) == "model"


def missing_gates(uri: str, status: str, required: Sequence[str], decisions: dict[str, str],
                  at_ms: int) -> Finding | None:
    """Fire when a model is registered or promoted before its required gates passed.

    Safety tests and evaluations are gates (``GateDecision``); which ones a
    model needs is the processor's setting (``required_gates``, empty: rule
    off). A gate that has not reported, or reported anything but ``pass``,
    has not passed.

    Args:
        uri: The model artifact.
        status: Its registry status.
        required: Gates that must have passed.
        decisions: The run's gate decisions so far (gate → pass/fail/review).
        at_ms: Event time.

    Returns:
        A critical artifact finding, or None.

    """
    if status_word(status) not in REGISTERED:
        return None
    missing = [g for g in required if decisions.get(g) != "pass"]
    if not missing:
        return None
    said = ", ".join(f"{g}: {decisions.get(g, 'no decision')}" for g in missing)
    return _hard(
        "missing_gate", "gate", "artifact", float(len(missing)), 0.0, at_ms,
        f"Model {uri} {status} before gate(s) {', '.join(missing)} passed", said, subject=uri,
    )


LOSS_SMOOTH = 10
"""Steps averaged per loss level (a mini-batch loss is noisy step to step)."""
def successive_noise(values: Sequence[float]) -> float:
    """Return a robust estimate of a series' noise: its median second difference.

    ``median(|x[i+1] - 2 x[i] + x[i-1]|) / (0.6745 * sqrt 6)``: the standard deviation
    of independent noise, blind to a steady trend (training still improving, a metric
    declining evaluation by evaluation) and little moved by a single jump. First
    differences carry the trend: a validation loss rising 0.2 an evaluation read as
    noise of that size and was paged five evaluations late. 0 with fewer than five
    values (too few to tell noise from signal).
    """
    if len(values) < 5:
        return 0.0
    second = sorted(abs(c - 2 * b + a) for a, b, c in zip(values, values[1:], values[2:],
                                                          strict=False))
    mid = len(second) // 2
    med = second[mid] if len(second) % 2 else 0.5 * (second[mid - 1] + second[mid])
    return med / (0.6745 * math.sqrt(6.0))


SUCCESSIVE_NOISE_Q05 = (
    0.23, 0.32, 0.32, 0.38, 0.38, 0.43, 0.43, 0.47, 0.47, 0.50, 0.50, 0.52, 0.52, 0.54, 0.54,
    0.56, 0.56, 0.58, 0.58, 0.59, 0.59, 0.61, 0.61, 0.62, 0.62, 0.63, 0.63, 0.64, 0.64, 0.65,
    0.65, 0.66, 0.66, 0.66, 0.66, 0.67, 0.67, 0.68, 0.68, 0.68, 0.68, 0.69, 0.69, 0.70, 0.70,
    0.70,
)
"""The 5 % quantile of :func:`successive_noise` / σ for 5, 6, … 50 values of independent
Gaussian noise σ: the estimate is that far under the noise one time in twenty. Derived from
the estimator alone (400,000 simulated series per length, rounded down, made non-decreasing;
``tests/unit/test_noise_bound.py`` simulates it again), not from any run's data."""
def noise_upper(values: Sequence[float]) -> float:
    """Return a noise level a series' noise is under with 95 % confidence (0: too few values).

    A median of a few differences scatters widely: from 10 evaluations
    :func:`successive_noise` is under 0.44 of the noise one time in twenty, and a
    stationary validation loss, judged against 5 of such an estimate, paged healthy
    runs (2 seeds in 10 at their 10th or 15th evaluation, whatever the noise's size).
    The estimate is divided by its 5 % quantile for the number of values
    (:data:`SUCCESSIVE_NOISE_Q05`; 0.70 at 50). Fewer than 5 values give no estimate
    (0): first differences would read a metric still improving as noise, and a short
    run whose accuracy rose 0.50, 0.55, 0.60 and then fell to 0.34 was never paged.
    """
    n = len(values)
    if n < 5:
        return 0.0
    q = SUCCESSIVE_NOISE_Q05[min(n, 5 + len(SUCCESSIVE_NOISE_Q05) - 1) - 5]
    return successive_noise(values) / q


def loss_rising(points: Sequence[Sequence[float]]) -> bool:
    """Return whether the least-squares slope of (step, loss) points is positive."""
    n = len(points)
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    return sum((p[0] - mx) * (p[1] - my) for p in points) > 0


LOSS_NOISE_K = 8.0
"""A divergence must also rise this many standard deviations of a 10-step mean (the run's
step-to-step noise over the square root of 10) above the best: the best of the 10-step
means of 500 steps sits up to 3.5 of them under the level, and over a long run the mean
now reaches 3.5 above it too; 8 leaves a margin for the noise estimate's own error."""
LOSS_RISE = 1.5
"""A smoothed loss half again above its lowest smoothed level in the window has diverged:
mini-batch noise moves a 10-step mean by a few percent, a diverging run by multiples."""


def loss_divergence(
    points: Sequence[Sequence[float]], lr_raised_at_step: float | None, at_ms: int,
    earlier_best: float | None = None, noise: float | None = None, *, rising: bool = True,
    lr_jump: Sequence[float] | None = None,
) -> Finding | None:
    """Fire when the training loss has climbed well above its recent best (no convergence).

    Over the run's recent (step, loss) window, the loss's 10-step mean now is
    :data:`LOSS_RISE` times its lowest 10-step mean (in the window, or
    ``earlier_best`` if lower), and the least-squares slope is positive. A
    learning-rate increase inside the window (a warm restart, warm-up) raises
    the loss by design: nothing fires until the window has moved past it.
    Statistical (not a hard rule): the symptom waits for correlated causes (a
    data shift, restarts) like other learning symptoms.

    Args:
        points: (step, loss) of the run's recent steps, oldest first (finite losses).
        lr_raised_at_step: The step of the run's latest learning-rate increase, if any.
        at_ms: Event time.
        earlier_best: The lowest 10-step mean of the run's steps before the window
            (since its latest learning-rate increase), if kept: a steady rise of
            half a percent a step never reaches 1.5 × within 50 logged steps.
        noise: The loss's step-to-step noise (standard deviation) over the run's recent
            steps, if known; else the window's median second difference estimates it.
        rising: Also require the window's slope to be positive (:func:`loss_rising`);
            False judges the level alone.
        lr_jump: ``(step, rate before, rate after, ...)`` of a step change of the learning
            rate before the rise: named in the detail and labelled ``lr_raised_at_step``,
            the divergence's own mechanism (:func:`runwatch.core.signals.cause.symptom_kind`).

    Returns:
        A warning learning finding, or None.

    """
    if len(points) < 2 * LOSS_SMOOTH:
        return None
    if lr_raised_at_step is not None and lr_raised_at_step >= points[0][0]:
        return None
    losses = [p[1] for p in points]
    floor = min(losses) if earlier_best is None else min(min(losses), earlier_best)
    if sum(losses[-LOSS_SMOOTH:]) / LOSS_SMOOTH < LOSS_RISE * floor:
        return None  # cheap: no 10-step mean is below the lowest single loss
    means = [sum(losses[i:i + LOSS_SMOOTH]) / LOSS_SMOOTH
             for i in range(len(losses) - LOSS_SMOOTH + 1)]
    best, now = min(means), means[-1]
    if earlier_best is not None and earlier_best > 0:
        best = min(best, earlier_best)
    if best <= 0 or now < LOSS_RISE * best:
        return None
    # the best of many noisy 10-step means lies several of their sigmas under the run's
    # level: a GAN's or an RL policy's loss (25 % from step to step) reached 1.5 x it by
    # chance; a rise must also clear the run's own noise
    sigma = successive_noise(losses) if noise is None else noise
    if now - best < LOSS_NOISE_K * sigma / math.sqrt(LOSS_SMOOTH):
        return None
    n = len(points)
    if rising and not loss_rising(points):
        return None
    why, labels = "no learning-rate increase in the window", {}
    if lr_jump is not None:
        step, before, after = lr_jump[0], lr_jump[1], lr_jump[2]
        why = (f"after the learning rate rose x{after / before:.3g} ({before:.3g} -> "
               f"{after:.3g}) at step {step:.0f}")
        labels = {"lr_raised_at_step": f"{step:.0f}"}
    return Finding(
        detector="rule:loss_divergence", indicator="loss", signal="learning",
        severity="warning", observed=now, expected=best,
        score=min((now / best - 1.0) / (2 * (LOSS_RISE - 1.0)), 1.0), at_ms=at_ms,
        title=f"Training loss diverging: {now:.4g} from a best of {best:.4g}",
        detail=f"{LOSS_SMOOTH}-step mean loss, window of {n} steps and the lowest levels "
        f"before it; {why}", labels=labels,
    )
