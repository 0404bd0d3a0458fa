"""The SLO evaluator service (``runwatch slo``): see :mod:`runwatch.slo.service`."""
