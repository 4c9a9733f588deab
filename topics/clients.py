"""Client configuration shared by every Kafka client in streamgrpo (confluent-kafka and aiokafka).

One place turns :class:`~streamgrpo.config.KafkaSettings` into client settings: bootstrap
resolution (configured, else the running embedded broker), security, client ids and the topic
prefix. Secrets are passed to the clients, never logged. librdkafka's own log lines (``%6|...|BGQUEUE|...``)
go through Python logging (logger ``librdkafka``, WARNING and above shown by default), not raw to stderr.
"""

from __future__ import annotations

import logging
import ssl
from typing import Any

from streamgrpo.config import BrokerSettings, KafkaSettings, load

#: Where librdkafka's log lines go (its syslog levels mapped to logging's by confluent-kafka).
RDKAFKA_LOGGER = logging.getLogger("librdkafka")


def bootstrap(kafka: KafkaSettings) -> str:
    """The bootstrap servers in force (resolves the embedded broker when none is configured)."""
    if kafka.bootstrap:
        return kafka.bootstrap
    from streamgrpo.topics.broker import resolve_bootstrap

    return resolve_bootstrap(kafka, load(BrokerSettings, "broker"))


def topic_name(kafka: KafkaSettings, name: str) -> str:
    """Physical topic name: the catalog name with the configured prefix."""
    return f"{kafka.topic_prefix}{name}"


def logical_name(kafka: KafkaSettings, physical: str) -> str:
    """Catalog name of a physical topic (prefix removed)."""
    p = kafka.topic_prefix
    return physical[len(p):] if p and physical.startswith(p) else physical


def client_config(kafka: KafkaSettings, **extra: Any) -> dict[str, Any]:
    """librdkafka (confluent-kafka) configuration."""
    cfg: dict[str, Any] = {
        "bootstrap.servers": bootstrap(kafka),
        "client.id": kafka.client_id,
        "security.protocol": kafka.security_protocol,
        "logger": RDKAFKA_LOGGER,  # librdkafka's lines through logging, not printed raw by its default log_cb
    }
    if kafka.sasl_mechanism:
        cfg["sasl.mechanism"] = kafka.sasl_mechanism
    if kafka.sasl_username:
        cfg["sasl.username"] = kafka.sasl_username
    if kafka.sasl_password is not None:
        cfg["sasl.password"] = kafka.sasl_password.get_secret_value()
    cfg.update(extra)
    return cfg


def aiokafka_config(kafka: KafkaSettings) -> dict[str, Any]:
    """aiokafka keyword arguments (same settings, aiokafka spelling)."""
    cfg: dict[str, Any] = {
        "bootstrap_servers": bootstrap(kafka),
        "client_id": kafka.client_id,
        "security_protocol": kafka.security_protocol,
    }
    if kafka.security_protocol in ("SSL", "SASL_SSL"):
        cfg["ssl_context"] = ssl.create_default_context()
    if kafka.sasl_mechanism:
        cfg["sasl_mechanism"] = kafka.sasl_mechanism
        cfg["sasl_plain_username"] = kafka.sasl_username
        cfg["sasl_plain_password"] = kafka.sasl_password.get_secret_value() if kafka.sasl_password else None
    return cfg
