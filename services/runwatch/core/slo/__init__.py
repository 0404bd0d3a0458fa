"""Service-level objectives on training outcomes (pure).

The file format, the indicator kinds, windows and cutoffs, burn-rate maths,
status and alert decisions (see docs/slo.md).
"""
