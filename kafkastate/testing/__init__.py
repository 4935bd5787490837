"""Real Apache Kafka for tests: a local KRaft cluster harness and a pytest plugin.

Start a cluster from Python::

    from kafkastate.testing import KafkaCluster

    with KafkaCluster.start(sasl=True, ssl=True) as cluster:
        cluster.bootstrap        # "127.0.0.1:PORT"
        cluster.brokers[0].kill()

or from a shell (``python -m kafkastate.testing.broker up``), or through the pytest fixtures
``kafka_cluster`` / ``kafka_cluster3`` (plugin ``kafkastate.testing.pytest_plugin``, loaded
automatically once kafkastate is installed). See docs/harness.md.
"""

from __future__ import annotations

from ._cluster import Broker, ClusterKind, KafkaCluster, default_kafka_version, find_java
from ._config import (
    KerberosService,
    OAuthSpec,
    SaslCredentials,
    TlsFiles,
    new_cluster_id,
    unsecured_jwt,
)
from ._errors import BrokerStartError, HarnessError, PrerequisiteError
from ._kdc import KerberosRealm
from ._maven import DEFAULT_KAFKA_VERSION, cache_root, fetch_kafka_libs
from ._oidc import OIDCServer
from ._probe import MetadataInfo, ProbeError, api_versions, metadata
from ._tls import make_crl

__all__ = [
    "DEFAULT_KAFKA_VERSION",
    "Broker",
    "BrokerStartError",
    "ClusterKind",
    "HarnessError",
    "KafkaCluster",
    "KerberosRealm",
    "KerberosService",
    "MetadataInfo",
    "OAuthSpec",
    "OIDCServer",
    "PrerequisiteError",
    "ProbeError",
    "SaslCredentials",
    "TlsFiles",
    "api_versions",
    "cache_root",
    "default_kafka_version",
    "fetch_kafka_libs",
    "find_java",
    "make_crl",
    "metadata",
    "new_cluster_id",
    "unsecured_jwt",
]
