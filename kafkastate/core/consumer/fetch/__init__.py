"""The jobs of :class:`~kafkastate.core.consumer.fetcher.FetcherMachine`, one module each.

The machine itself (``core/consumer/fetcher.py``) keeps its commands and the orchestration;
what it orchestrates lives here:

* :mod:`.config` -- its settings (``FetcherConfig``, re-exported by ``fetcher``) and the
  reset policies' ListOffsets timestamps;
* :mod:`.events` -- the events it emits (re-exported by ``fetcher``);
* :mod:`.state` -- an assigned partition's position state, shared by every job;
* :mod:`.session` -- incremental fetch sessions (KIP-227);
* :mod:`.request` -- which partitions to fetch from which node, and the Fetch request;
* :mod:`.follower` -- fetching from the preferred read replica (KIP-392);
* :mod:`.decode` -- Fetch responses: per-partition errors, lazy decoding into records;
* :mod:`.aborted` -- read_committed: skipping aborted transactions (KIP-98);
* :mod:`.reset` -- the reset policy and leader-epoch validation (KIP-320);
* :mod:`.offsets` -- offset queries: ListOffsets, OffsetFetch, OffsetCommit, FindCoordinator;
* :mod:`.membership` -- the group member's coordinator and the metadata it needs.
"""
