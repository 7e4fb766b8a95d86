"""Query vocabulary: phrases users type, mapped to the library's cause ids, tags and topics.

A phrase found in a query (token by token, typo-tolerant for longer words) becomes a *concept*: a
case matches the concept when it carries one of the concept's targets (``cause:<id>``,
``tag:<tag>``, ``topic:<name>``). So "garbage collection" finds every ``gc-pause`` case even when
its text only says "GC", and "pipeline bubble" or "last stage" find ``stage-imbalance`` cases.
"""

from __future__ import annotations

from diagnosers.vocab import CauseId

# phrase -> targets. Phrases are matched on normalised tokens (see incidents.index.tokenize).
SYNONYMS: dict[str, tuple[str, ...]] = {}


def _add(targets: tuple[str, ...], *phrases: str) -> None:
    for phrase in phrases:
        SYNONYMS[phrase] = tuple(dict.fromkeys((*SYNONYMS.get(phrase, ()), *targets)))


_add(
    (f"cause:{CauseId.GC_PAUSE.value}", "topic:python-gc"),
    "garbage collection", "garbage collector", "gc", "gc pause", "gc pauses", "python gc", "planned gc",
    "scheduled gc", "gc collect", "가비지 컬렉션", "가비지 컬렉터",
)
_add(
    (f"cause:{CauseId.STAGE_IMBALANCE.value}",),
    "pipeline bubble", "pipeline bubbles", "last stage", "last pipeline stage", "stage imbalance",
    "pipeline imbalance", "unbalanced pipeline", "uneven stages", "loss layer", "logits layer",
    "heavy last stage", "stage partitioning",
)
_add(
    (f"cause:{CauseId.SEQUENCE_LENGTH_IMBALANCE.value}",),
    "sequence length", "sequence lengths", "seq len", "seqlen", "long context", "variable length",
    "document length", "document packing", "sequence imbalance", "sequence length imbalance",
)
_add(
    (f"cause:{CauseId.FAULTY_MACHINE.value}",),
    "bad node", "slow node", "faulty node", "bad gpu", "slow gpu", "faulty gpu", "faulty machine",
    "bad machine", "bad host", "slow host", "lemon node", "gray failure", "degraded gpu", "broken gpu",
    "hardware fault", "hardware failure",
)
_add(
    (f"cause:{CauseId.SLOW_COMMUNICATION.value}",),
    "slow network", "network congestion", "congestion", "slow allreduce", "slow all reduce",
    "slow collective", "slow collectives", "slow communication", "ecmp", "hash collision",
    "link flap", "link flapping", "flapping", "bad nic", "bad link", "flaky link",
)
_add(
    (f"cause:{CauseId.DATALOADER_STALL.value}",),
    "data loader", "dataloader", "input pipeline", "data loading", "preprocessing", "io bottleneck",
    "storage bottleneck", "gpu idle", "low gpu utilization", "low utilisation", "low utilization",
)
_add(
    (f"cause:{CauseId.CUDA_FALSE_DEPENDENCY.value}",),
    "false dependency", "hardware queue", "cuda device max connections", "stream serialization",
    "stream serialisation", "no overlap", "comm compute overlap",
)
_add(
    (f"cause:{CauseId.MEMORY_FRAGMENTATION.value}",),
    "fragmentation", "memory fragmentation", "caching allocator", "allocator", "empty cache",
    "alloc retries", "cache flush", "cache flushes",
)
_add(
    (f"cause:{CauseId.MOE_LOAD_IMBALANCE.value}", "topic:moe"),
    "expert imbalance", "hot expert", "hot experts", "popular experts", "router imbalance",
    "load balancing loss", "expert load", "moe imbalance", "expert parallelism", "mixture of experts",
)
_add(("topic:silent-data-corruption",), "sdc", "silent data corruption", "silent corruption", "wrong results")
_add(("topic:hangs",), "hang", "hangs", "hung", "stuck", "deadlock", "freeze", "frozen", "watchdog")
_add(("topic:checkpointing",), "checkpoint", "checkpoints", "checkpointing", "checkpoint stall")
_add(("topic:network-fabric",), "infiniband", "ib", "roce", "rdma", "network fabric")
_add(
    ("topic:stragglers",),
    "straggler", "stragglers", "fail slow", "fail slows", "slowdown", "slow rank", "스트래글러", "느려졌고",
)
_add(("topic:power-and-thermal",), "power", "temperature", "thermal", "heat", "throttling", "dvfs")
_add(("topic:fleet-reliability",), "mttf", "ettr", "goodput", "interruptions", "failure rate")
_add(("topic:configuration-errors",), "misconfiguration", "config error", "configuration error", "bug")
