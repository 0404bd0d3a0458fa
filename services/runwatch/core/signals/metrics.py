"""Which way a metric improves, read from its name, and which validation metric to follow.

Metric names come from every framework and from hand-written dictionaries:
``val_acc``, ``valLoss``, ``val/acc@1``, ``val_acc_epoch``, ``eval_wer``,
``val_ppl``, ``val/err_top1``, ``val_loss/dataloader_idx_0`` (Lightning, with two
validation loaders). A name is read as words (split at anything but letters and
digits, and at a lower-to-upper case change), not by its last letters: matched by
suffix, an error rate ending in ``top1`` was an accuracy and its improvement
paged as a decline, and perplexities, word error rates and every metric with a
``_epoch`` or ``/dataloader_idx_0`` tail were never judged.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

LOWER_BETTER = frozenset({
    "loss", "logloss", "nll", "xent", "crossentropy", "ce", "kl", "err", "error", "errors",
    "wer", "cer", "ter", "ppl", "perplexity", "mse", "mae", "rmse", "rmsle", "mape", "smape",
    "fid", "eer", "brier", "bpd", "bpb", "bpc",
})
"""Words that make a metric lower-is-better (an error of any kind, a divergence, a loss)."""
HIGHER_BETTER = frozenset({
    "accuracy", "acc", "top1", "top5", "f1", "fscore", "auc", "auroc", "auprc", "roc", "map",
    "ap", "bleu", "rouge", "rouge1", "rouge2", "rougel", "rougelsum", "meteor", "chrf",
    "precision", "recall", "iou", "miou", "dice", "r2", "ndcg", "mrr", "hits", "em", "exact",
    "kappa", "mcc", "psnr", "ssim", "reward", "return", "success", "winrate",
})
"""Words that make a metric higher-is-better (a rate of being right, an overlap, a reward)."""
HELD_OUT = frozenset({"val", "valid", "validation", "eval", "evaluation", "dev", "holdout",
                      "test"})
"""Words that mark a metric as measured on held-out data (``val_accuracy`` beside the
training ``accuracy`` in a Keras epoch's logs)."""

_CASE = re.compile(r"([a-z0-9])([A-Z])")
_SPLIT = re.compile(r"[^a-z0-9]+")


def words(name: str) -> list[str]:
    """Return a metric name's words, lower-case (``valAcc@1`` -> ``val``, ``acc``, ``1``)."""
    return [w for w in _SPLIT.split(_CASE.sub(r"\1 \2", name).lower()) if w]


ERROR_RATES = frozenset({"err", "error", "errors", "wer", "cer", "ter", "eer"})
"""Lower-is-better words that name a rate (a share of samples wrong), not a loss."""


def on_loss_scale(name: str) -> bool:
    """Return whether a lower-is-better metric is a loss (no unit) rather than an error rate.

    An absolute margin in rate points (0.02: two points of accuracy or of word error
    rate) means something for a share of samples; a loss, a squared error, a divergence
    or a perplexity has the scale of its data and reduction, so a validation MSE of
    normalised targets at 0.002 had to rise 11-fold before 0.02 passed.
    """
    if higher_is_better(name) is not False:
        return False
    return not ERROR_RATES.intersection(words(name))


def higher_is_better(name: str) -> bool | None:
    """Return True when the name says higher is better, False when lower is, else None.

    An error word wins over an accuracy word (``err_top1`` is an error rate). A
    name that is one run-together word is read by its end, as before
    (``valloss``, ``trainacc``).
    """
    ws = words(name)
    if LOWER_BETTER.intersection(ws):
        return False
    if HIGHER_BETTER.intersection(ws):
        return True
    low = name.lower()
    if low.endswith("loss"):
        return False
    if any(low.endswith(h) for h in ("accuracy", "acc", "top1", "f1", "auc", "map", "bleu",
                                     "rouge")):
        return True
    return None


def primary(names: Iterable[str]) -> tuple[str, bool] | None:
    """Return the metric a validation decline follows, and whether higher is better.

    Among held-out metrics when any is given (a Keras epoch's logs hold the training
    ``accuracy`` first by name, and its ``val_accuracy`` falling from 0.7 to 0.1
    was never judged), the first by name that is higher-is-better, else the first
    that is lower-is-better; None when no name says which way it goes.
    """
    names = sorted(names)
    held = [n for n in names if HELD_OUT.intersection(words(n))]
    for pool in (held, names):
        judged = [(n, h) for n in pool if (h := higher_is_better(n)) is not None]
        for n, h in judged:
            if h:
                return n, True
        if judged:
            return judged[0]
    return None
