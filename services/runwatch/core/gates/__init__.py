"""Release gates: policies as code (``gates.yaml``), evidence, decisions, registry control.

Pure: :mod:`policy` parses and validates a policy file (errors name file, line
and key), :mod:`evaluate` turns a candidate's evidence into a decision with
every measurement and reason, :mod:`registry` says whether a run's gate
decisions allow a model into the registry, :mod:`lineage` links repeated runs
(seeds) of one lineage. The store queries live in ``adapters.gates``.
"""
