"""Alerts after the join: lifecycle, routing rules, delivery decisions, payloads and signing.

Pure: the pager service (:mod:`runwatch.pager`) and the receivers adapter
(:mod:`runwatch.adapters.receivers`) do the I/O.
"""
