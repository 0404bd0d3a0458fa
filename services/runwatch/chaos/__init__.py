"""The chaos suite: faults injected one after another into a 3-broker stack under load.

``runwatch chaos`` (and ``make chaos``) starts its own replicated stack
(:mod:`runwatch.stack.cluster`), runs the processor, sink and pager on it,
drives a steady SDK, agent and data-report load through the public entry
points, injects each fault of :data:`runwatch.chaos.faults.FAULTS` in turn,
then reads ClickHouse and the receivers back and prints one row per fault:
published, stored, lost, duplicated before dedup, alerts expected/raised,
double pages and recovery time. See docs/chaos.md.
"""
