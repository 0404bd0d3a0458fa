"""The local stack: genuine Kafka (KRaft), the ClickHouse store and Alertmanager.

``runwatch stack up|down|status`` starts, stops and reports these processes;
tests use :class:`runwatch.stack.manager.Stack` through their session fixtures.
"""
