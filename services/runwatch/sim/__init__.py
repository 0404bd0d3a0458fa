"""Cluster simulator: a modelled GPU cluster publishing telemetry through the real producers.

``model`` plans each run's telemetry from a seed (pure), ``scenarios`` declares
the injectable failure modes, ``drivers`` turns planned actions into SDK,
agent and scheduler-hook calls, ``runner`` paces it against a virtual clock,
``replay`` hands what was published to the processor's worker in memory
(``--offline``) and ``scoreboard`` scores the alerts that come back.
"""
