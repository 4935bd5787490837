"""ACLs made by the admin client, witnessed by a client they let in or keep out: a broker
with Kafka's StandardAuthorizer, whose PLAINTEXT listener (ANONYMOUS) is a super user and
whose SASL user ``alice`` may do nothing until an ACL says so."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest

from kafkastate.errors import KafkaError
from kafkastate.sync import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    KafkaProducer,
    NewTopic,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafkastate.testing import KafkaCluster

pytestmark = pytest.mark.integration

AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}


def _op(acl: ACL) -> int:
    return int(acl.operation)


def _until(check: Callable[[], bool]) -> None:
    """Wait for ``check``: the broker's authorizer follows the controller's metadata log
    a moment after an ACL change was committed."""
    deadline = time.monotonic() + 15
    while not check():
        assert time.monotonic() < deadline, "the broker never showed the ACL change"
        time.sleep(0.05)


def _send_as_alice(cluster: KafkaCluster, topic: str) -> Any:
    assert cluster.sasl is not None
    with KafkaProducer(
        bootstrap_servers=cluster.sasl_bootstrap,
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="PLAIN",
        sasl_plain_username=cluster.sasl.username,
        sasl_plain_password=cluster.sasl.password,
        enable_idempotence=False,
        max_block_ms=5000,
    ) as producer:
        return producer.send(topic, b"hello", partition=0).get(timeout=15)


def test_an_acl_lets_a_user_in_and_deleting_it_keeps_the_user_out() -> None:
    topic = f"adm-acl-{uuid.uuid4().hex[:8]}"
    with KafkaCluster.start(sasl=True, config_overrides=AUTHORIZER) as cluster:
        assert cluster.sasl is not None
        user = f"User:{cluster.sasl.username}"
        pattern = ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)
        allow = [
            ACL(user, "*", operation, ACLPermissionType.ALLOW, pattern)
            for operation in (ACLOperation.WRITE, ACLOperation.DESCRIBE)
        ]
        users_acls = ACLFilter(
            user,
            None,
            ACLOperation.ANY,
            ACLPermissionType.ANY,
            ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
        )
        with KafkaAdminClient(bootstrap_servers=cluster.bootstrap) as admin:
            admin.create_topics([NewTopic(topic, 1, 1)])
            with pytest.raises(KafkaError):  # no ACL: refused
                _send_as_alice(cluster, topic)

            assert admin.create_acls(allow) == {"succeeded": allow, "failed": []}
            _until(lambda: sorted(admin.describe_acls(users_acls)[0], key=_op) == allow)
            assert _send_as_alice(cluster, topic).offset == 0  # let in

            ((wanted, deleted, error),) = admin.delete_acls([users_acls])
            assert wanted == users_acls and error is None
            assert sorted((acl for acl, _ in deleted), key=_op) == allow
            _until(lambda: admin.describe_acls(users_acls) == ([], None))
            deadline = time.monotonic() + 15
            while True:  # the broker's authorizer follows the metadata log a moment later
                try:
                    _send_as_alice(cluster, topic)
                except KafkaError:
                    break  # kept out again
                assert time.monotonic() < deadline, "alice still writes without an ACL"
