"""ACLs made by the admin client, witnessed by a client they let in or keep out: a broker
with Kafka's StandardAuthorizer, whose PLAINTEXT listener (ANONYMOUS) is a super user and
whose SASL user ``alice`` may do nothing until an ACL says so. The blocking face
(``KafkaAdminClient``) and ``open_admin`` on asyncio and trio, on one broker for the module."""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import anyio
import pytest

from kafkastate.anyio import open_admin, open_producer
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
from kafkastate.testing import KafkaCluster, PrerequisiteError
from kafkastate.testing.pytest_plugin import unavailable

pytestmark = pytest.mark.integration

EVERY_RESOURCE = ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY)

AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}


def _acls_of(
    user: str,
    resources: ResourcePatternFilter = EVERY_RESOURCE,
    permission: ACLPermissionType = ACLPermissionType.ANY,
) -> ACLFilter:
    """A filter for ``user``'s ACLs (any operation, any host)."""
    return ACLFilter(user, None, ACLOperation.ANY, permission, resources)


def _op(acl: ACL) -> int:
    return int(acl.operation)


def _until(check: Callable[[], bool]) -> None:
    """Wait for ``check``: the broker's authorizer follows the controller's metadata log
    a moment after an ACL change was committed."""
    deadline = time.monotonic() + 15
    while not check():
        assert time.monotonic() < deadline, "the broker never showed the ACL change"
        time.sleep(0.05)


@pytest.fixture(scope="module")
def cluster() -> Iterator[KafkaCluster]:
    """A broker of its own: the ACLs need an authorizer, which the shared one has not."""
    try:
        started = KafkaCluster.start(sasl=True, config_overrides=AUTHORIZER)
    except PrerequisiteError as exc:
        unavailable(exc)
    with started:
        yield started


def _alice(cluster: KafkaCluster) -> dict[str, Any]:
    """A producer's options to log in as ``alice`` on the SASL listener."""
    assert cluster.sasl is not None
    return {
        "bootstrap_servers": cluster.sasl_bootstrap,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": cluster.sasl.username,
        "sasl_plain_password": cluster.sasl.password,
        "enable_idempotence": False,
        "max_block_ms": 5000,
    }


def _send_as_alice(cluster: KafkaCluster, topic: str) -> Any:
    with KafkaProducer(**_alice(cluster)) as producer:
        return producer.send(topic, b"hello", partition=0).get(timeout=15)


def test_an_acl_lets_a_user_in_and_deleting_it_keeps_the_user_out(cluster: KafkaCluster) -> None:
    topic = f"adm-acl-{uuid.uuid4().hex[:8]}"
    assert cluster.sasl is not None
    user = f"User:{cluster.sasl.username}"
    pattern = ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)
    allow = [
        ACL(user, "*", operation, ACLPermissionType.ALLOW, pattern)
        for operation in (ACLOperation.WRITE, ACLOperation.DESCRIBE)
    ]
    users_acls = _acls_of(user)
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


async def _eventually(check: Callable[[], Awaitable[bool]], what: str) -> None:
    """Poll ``check`` until true (the authorizer follows the metadata log a moment later)."""
    with anyio.fail_after(15):
        while not await check():
            await anyio.sleep(0.1)


async def _alice_writes(cluster: KafkaCluster, topic: str) -> bool:
    """Whether the SASL listener lets ``alice``'s (async) producer write to ``topic``."""
    try:
        async with open_producer(**_alice(cluster), request_timeout_ms=5000) as producer:
            await producer.send(topic, b"hello", partition=0)
            return True
    except KafkaError:
        return False


@pytest.mark.anyio
async def test_acls_made_by_open_admin_let_a_sasl_user_in_and_keep_it_out(
    cluster: KafkaCluster,
) -> None:
    """A prefixed ALLOW lets alice write; a literal DENY on the topic beats it; deleting
    the DENY lets her in again, deleting the ALLOWs (by a MATCH filter) keeps her out."""
    assert cluster.sasl is not None
    user = f"User:{cluster.sasl.username}"
    prefix = f"adm-aclp-{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}-orders"
    prefixed = ResourcePattern(ResourceType.TOPIC, prefix, ACLResourcePatternType.PREFIXED)
    literal = ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)
    allow = [
        ACL(user, "*", operation, ACLPermissionType.ALLOW, prefixed)
        for operation in (ACLOperation.WRITE, ACLOperation.DESCRIBE)
    ]
    deny = ACL(user, "*", ACLOperation.WRITE, ACLPermissionType.DENY, literal)
    the_topic = ResourcePatternFilter(ResourceType.TOPIC, topic, ACLResourcePatternType.MATCH)
    matching = _acls_of(user, the_topic)
    async with open_admin(cluster.bootstrap, request_timeout_ms=15000) as admin:
        await admin.create_topics([NewTopic(topic, 1, 1)])
        await admin.wait_for_topics([topic], timeout=15)
        assert not await _alice_writes(cluster, topic)  # no ACL: refused
        assert await admin.describe_acls(matching) == []

        assert await admin.create_acls(allow) == dict.fromkeys(allow)

        async def described(wanted: list[ACL]) -> bool:
            return sorted(await admin.describe_acls(matching), key=repr) == sorted(wanted, key=repr)

        await _eventually(lambda: described(allow), "the ALLOW ACLs described")

        async def let_in() -> bool:
            return await _alice_writes(cluster, topic)

        await _eventually(let_in, "alice let in by the prefixed ACL")

        assert await admin.create_acls([deny]) == {deny: None}
        await _eventually(lambda: described([*allow, deny]), "the DENY ACL described")

        async def kept_out() -> bool:
            return not await _alice_writes(cluster, topic)

        await _eventually(kept_out, "alice kept out by the DENY ACL")

        # deleting the DENY alone lets alice in again; deleting the rest keeps her out
        denies = _acls_of(user, the_topic, ACLPermissionType.DENY)
        assert await admin.delete_acls([denies]) == {denies: [deny]}
        await _eventually(lambda: described(allow), "the DENY ACL deleted")
        await _eventually(let_in, "alice let in again")
        deleted = await admin.delete_acls([matching])
        assert sorted(deleted[matching], key=repr) == sorted(allow, key=repr)
        await _eventually(lambda: described([]), "every ACL deleted")
        await _eventually(kept_out, "alice kept out without an ACL")
        await admin.delete_topics([topic])
