"""Idempotent topic creation and verification through ``confluent_kafka.admin``.

``ensure`` creates every missing catalog topic and reports drift on existing ones (partition count
and the catalog-managed configs: cleanup.policy, retention.ms). It never deletes or shrinks
anything: drift is reported for a human to act on (partitions can be raised with ``--fix``
where the broker supports it).

What is not covered: replication changes and ACLs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from streamgrpo.config import KafkaSettings
from streamgrpo.topics.catalog import TOPICS, TopicSpec
from streamgrpo.topics.clients import client_config, topic_name
from streamgrpo.topics.errors import TopicsError

log = logging.getLogger(__name__)


@dataclass
class EnsureReport:
    """What ``ensure`` did: created topics, topics already right, and drift per topic."""

    created: list[str] = field(default_factory=list)
    ok: list[str] = field(default_factory=list)
    drift: dict[str, list[str]] = field(default_factory=dict)


def _admin(kafka: KafkaSettings) -> AdminClient:
    return AdminClient(client_config(kafka))


def existing_topics(kafka: KafkaSettings, timeout_s: float = 10.0) -> dict[str, int]:
    """Topic name -> partition count, as the broker reports it."""
    try:
        md = _admin(kafka).list_topics(timeout=timeout_s)
    except KafkaException as exc:
        raise TopicsError(f"cannot list topics on {kafka.bootstrap}: {exc}") from exc
    return {name: len(t.partitions) for name, t in md.topics.items() if not name.startswith("__")}


def _drift(spec: TopicSpec, partitions: int, configs: dict[str, str] | None) -> list[str]:
    problems = []
    if partitions != spec.partitions:
        problems.append(f"partitions: broker has {partitions}, catalog wants {spec.partitions}")
    for key, want in spec.config().items():
        have = (configs or {}).get(key)
        if have is not None and have != want:
            problems.append(f"{key}: broker has {have}, catalog wants {want}")
    return problems


def _describe(admin: AdminClient, names: Iterable[str], timeout_s: float) -> dict[str, dict[str, str]]:
    resources = [ConfigResource(ConfigResource.Type.TOPIC, n) for n in names]
    if not resources:
        return {}
    out: dict[str, dict[str, str]] = {}
    for res, fut in admin.describe_configs(resources, request_timeout=timeout_s).items():
        try:
            entries = fut.result(timeout=timeout_s)
        except KafkaException as exc:  # a broker without DescribeConfigs: drift on partitions only
            log.debug("describe_configs(%s) failed: %s", res.name, exc)
            continue
        out[res.name] = {k: v.value for k, v in entries.items() if v.value is not None}
    return out


def ensure(kafka: KafkaSettings, specs: Iterable[TopicSpec] = TOPICS, timeout_s: float = 15.0) -> EnsureReport:
    """Create missing topics; report drift of existing ones. Safe to run any number of times."""
    specs = list(specs)
    admin = _admin(kafka)
    have = existing_topics(kafka, timeout_s)
    report = EnsureReport()
    missing = [s for s in specs if topic_name(kafka, s.name) not in have]
    if missing:
        new = [
            NewTopic(topic_name(kafka, s.name), num_partitions=s.partitions, replication_factor=s.replication,
                     config=s.config())
            for s in missing
        ]
        for name, fut in admin.create_topics(new, request_timeout=timeout_s).items():
            try:
                fut.result(timeout=timeout_s)
                report.created.append(name)
            except KafkaException as exc:
                if exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS:  # raced with another ensure
                    report.ok.append(name)
                    continue
                raise TopicsError(f"could not create topic {name}: {exc}") from exc
    present = [s for s in specs if topic_name(kafka, s.name) in have]
    configs = _describe(admin, [topic_name(kafka, s.name) for s in present], timeout_s)
    for s in present:
        name = topic_name(kafka, s.name)
        problems = _drift(s, have[name], configs.get(name))
        if problems:
            report.drift[name] = problems
        else:
            report.ok.append(name)
    return report


@dataclass(frozen=True)
class TopicInfo:
    name: str
    partitions: int
    messages: int  # high watermark - low watermark, summed over partitions


def describe_topics(kafka: KafkaSettings, timeout_s: float = 10.0) -> list[TopicInfo]:
    """Every non-internal topic with its partition count and message count (true log ends)."""
    from streamgrpo.topics.follow import log_bounds

    have = existing_topics(kafka, timeout_s)
    bounds = log_bounds(kafka, sorted(have))
    return [TopicInfo(name, have[name], sum(max(0, end - start) for (t, _), (start, end) in bounds.items() if t == name))
            for name in sorted(have)]
