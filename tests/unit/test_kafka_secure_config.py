"""The secured broker's pure parts: ACL table per role, server.properties, files, client env."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from runwatch.adapters.settings import KafkaSettings
from runwatch.core.topics import load_topics
from runwatch.stack.secure import (
    ALERTS,
    DLQ,
    ROLES,
    TELEMETRY,
    AclRule,
    SecureFiles,
    acl_table,
    role_env,
    scram_args,
    writers_of,
)
from runwatch.stack.services import kafka_properties, service_env
from runwatch.stack.settings import StackSettings

PRODUCER_KINDS = {"sdk", "agent", "hook", "cli"}  # cli: runwatch gate check/approve


def _of(role: str) -> list[AclRule]:
    return [r for r in acl_table() if r.principal == f"User:{role}"]


def test_producers_may_only_write_telemetry() -> None:
    rules = _of("producer")
    assert {(r.resource, r.name, r.pattern, r.operation) for r in rules} == {
        ("topic", t, "literal", "write") for t in TELEMETRY}


def test_telemetry_is_what_the_topic_map_says_producers_write() -> None:
    specs = load_topics()
    from_map = {name for name, spec in specs.items()
                if not spec.internal and set(spec.writer) and set(spec.writer) <= PRODUCER_KINDS}
    assert from_map == set(TELEMETRY)


def test_nobody_but_the_processor_and_the_slo_evaluator_writes_alerts() -> None:
    assert writers_of(ALERTS, acl_table()) == {"User:processor", "User:slo"}
    assert writers_of(DLQ, acl_table()) == {"User:processor", "User:pager"}
    for topic in TELEMETRY:
        assert writers_of(topic, acl_table()) == {"User:producer"}


def test_readers_match_the_topic_map() -> None:
    reads = {(r.principal.removeprefix("User:"), r.name) for r in acl_table()
             if r.resource == "topic" and r.operation == "read" and r.pattern == "literal"}
    for name, spec in load_topics().items():
        if spec.internal:
            continue
        for reader in spec.readers:
            assert (reader, name) in reads, (reader, name)


def test_processor_owns_its_internal_topics_and_group() -> None:
    prefixed = {(r.resource, r.name, r.operation) for r in _of("processor")
                if r.pattern == "prefixed"}
    for op in ("read", "write", "create"):
        assert ("topic", "rw.internal.", op) in prefixed
        assert ("topic", "runwatch-processor", op) in prefixed
    assert ("group", "runwatch-processor", "read") in prefixed
    assert not [r for r in _of("processor") if r.resource == "cluster"]


def test_consumers_read_with_their_groups_and_write_nothing_else() -> None:
    assert {(r.resource, r.name) for r in _of("sink") if r.operation != "read"} == set()
    assert ("group", "runwatch-sink") in {(r.resource, r.name) for r in _of("sink")}
    pager = {(r.resource, r.name, r.operation) for r in _of("pager")}
    assert pager == {("topic", ALERTS, "read"), ("topic", DLQ, "write"),
                     ("group", "runwatch-pager", "read"), ("group", "runwatch-tail-", "read")}
    assert not _of("admin")  # a super user


@pytest.fixture
def secured(tmp_path: Path) -> StackSettings:
    return StackSettings(state_dir=tmp_path / "state", secure=True, kafka_port=19092,
                         controller_port=19093)


def test_server_properties_have_no_plaintext_listener(secured: StackSettings) -> None:
    SecureFiles(secured.secure_dir).ensure(secured.host)
    props = dict(line.split("=", 1) for line in kafka_properties(secured).splitlines()
                 if line and not line.startswith("#"))
    assert props["listeners"] == "SASL_SSL://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["listener.security.protocol.map"] == "SASL_SSL:SASL_SSL,CONTROLLER:SSL"
    assert props["listener.name.controller.ssl.client.auth"] == "required"
    assert props["authorizer.class.name"] == (
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    assert props["allow.everyone.if.no.acl.found"] == "false"
    assert props["super.users"] == "User:admin;User:CN=runwatch-broker"
    assert props["sasl.enabled.mechanisms"] == "SCRAM-SHA-512"
    assert "PLAINTEXT" not in props["listeners"]
    plain = kafka_properties(secured.model_copy(update={"secure": False}))
    assert "PLAINTEXT://127.0.0.1:19092" in plain and "authorizer" not in plain


def test_secrets_are_generated_once_and_private(secured: StackSettings) -> None:
    files = SecureFiles(secured.secure_dir)
    first = files.ensure(secured.host)
    assert set(first) == set(ROLES) and len(set(first.values())) == len(ROLES)
    assert files.ensure(secured.host) == first
    for path in [files.password_file(r) for r in ROLES] + [files.tls.ca_key, files.tls.broker_pem]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    assert stat.S_IMODE(files.root.stat().st_mode) == 0o700
    assert files.rotate("sink") != first["sink"]


def test_the_broker_certificate_names_the_host_and_chains_to_the_ca(
        secured: StackSettings) -> None:
    from cryptography import x509

    files = SecureFiles(secured.secure_dir)
    files.ensure(secured.host)
    ca = x509.load_pem_x509_certificate(files.tls.ca_cert.read_bytes())
    leaf = x509.load_pem_x509_certificates(files.tls.broker_pem.read_bytes())[0]
    leaf.verify_directly_issued_by(ca)
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "localhost" in sans.get_values_for_type(x509.DNSName)
    assert [str(ip) for ip in sans.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]


def test_role_env_configures_every_client(secured: StackSettings) -> None:
    files = SecureFiles(secured.secure_dir)
    env = role_env(files, secured.bootstrap_servers, "processor")
    assert "KAFKA_SASL_PASSWORD" not in env  # the password stays in its file
    kafka = KafkaSettings.model_validate({k.removeprefix("KAFKA_").lower(): v
                                          for k, v in env.items()})
    conf = kafka.client_config()
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.mechanism"] == "SCRAM-SHA-512"
    assert conf["sasl.username"] == "processor"
    assert conf["sasl.password"] == files.password("processor")
    assert conf["ssl.ca.location"] == str(files.tls.ca_cert)
    files.ensure(secured.host)
    assert kafka.ssl_context() is not None
    assert KafkaSettings(security_protocol="PLAINTEXT").ssl_context() is None


def test_each_optional_service_runs_as_its_role(secured: StackSettings) -> None:
    for name in ("processor", "sink", "pager"):
        env = service_env(secured, name)
        assert env["KAFKA_SASL_USERNAME"] == name
        assert env["KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert "KAFKA_SASL_USERNAME" not in service_env(secured.model_copy(update={"secure": False}),
                                                    "sink")


def test_scram_args_add_one_user_per_role() -> None:
    args = scram_args({"admin": "a", "sink": "s"})
    assert args == ["--add-scram", "SCRAM-SHA-512=[name=admin,password=a]",
                    "--add-scram", "SCRAM-SHA-512=[name=sink,password=s]"]


def test_a_state_directory_is_formatted_for_one_kind_of_broker(secured: StackSettings) -> None:
    from runwatch.stack.services import StackError, prepare_kafka

    data = secured.state / "kafka" / "data"
    data.mkdir(parents=True)
    (data / "meta.properties").write_text("node.id=1\n")  # formatted plaintext earlier
    with pytest.raises(StackError, match="formatted for a plaintext broker"):
        prepare_kafka(secured, lambda _line: None)
    (secured.state / "kafka" / "secure.marker").write_text("secured\n")
    assert prepare_kafka(secured, lambda _line: None).is_file()
    with pytest.raises(StackError, match="formatted for a secured broker"):
        prepare_kafka(secured.model_copy(update={"secure": False}), lambda _line: None)


def test_stack_env_prints_a_role_or_refuses_a_plaintext_broker(
        secured: StackSettings, capsys: pytest.CaptureFixture[str]) -> None:
    from runwatch.cli import main

    state = str(secured.state)
    assert main(["stack", "--state-dir", state, "env", "--role", "sink"]) == 2
    assert "is not secured" in capsys.readouterr().err
    (secured.state / "kafka").mkdir(parents=True)
    (secured.state / "kafka" / "secure.marker").write_text("secured\n")
    assert main(["stack", "--state-dir", state, "env", "--role", "sink"]) == 0
    out = capsys.readouterr().out
    assert "export KAFKA_SASL_USERNAME=sink\n" in out
    assert "export KAFKA_SECURITY_PROTOCOL=SASL_SSL\n" in out
    assert "KAFKA_SASL_PASSWORD=" not in out
