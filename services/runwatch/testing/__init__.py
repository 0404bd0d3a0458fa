"""Test doubles and harnesses, shared by tests, benchmarks and the simulator.

* :mod:`runwatch.testing.nvml_double` — NVML without a GPU (8 simulated GPUs).
* :mod:`runwatch.testing.harness` — processor workers as subprocesses against a broker.
* :mod:`runwatch.testing.synth` — synthetic telemetry for the sink.
* :mod:`runwatch.testing.scenarios` — scripted runs (records in emission order).

Nothing in the services imports this package; the CLI's ``agent --fake`` and
the simulator do.
"""
