"""What the run join watches.

Leading indicators, indicator watches, workload baselines, data-integrity
checks, hard rules and the probable cause drawn from correlated evidence.
"""
