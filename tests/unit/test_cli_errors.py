"""The CLI reports a FatalError as one line and exit status 2."""

from __future__ import annotations


def test_a_fatal_error_is_one_line_and_exit_2(monkeypatch, capsys) -> None:
    """A service refused at start (credentials, ACLs, topics) prints its reason, no traceback."""
    import argparse

    from runwatch import cli
    from runwatch.adapters.kafka_security import KafkaAuthError
    from runwatch.adapters.topics import TopicProvisionError
    from runwatch.errors import FatalError

    assert issubclass(KafkaAuthError, FatalError) and issubclass(TopicProvisionError, FatalError)

    def refuse(_args: argparse.Namespace) -> int:
        msg = "broker refused user 'sink': SASL authentication failed"
        raise KafkaAuthError(msg)

    parser = argparse.ArgumentParser()
    parser.add_argument("--log-level", default="INFO")
    parser.set_defaults(func=refuse, command="sink")
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "error: broker refused user 'sink': SASL authentication failed"
