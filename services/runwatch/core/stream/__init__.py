"""The run join and re-keying.

Run state, the join's handlers (``step``/``tick``), held events, the input
event-time horizon, and re-keying of node samples and data reports to runs.
"""
