"""Cost model of the synthetic generator: how long each call takes before waiting.

Units are seconds. Defaults are sized after the study artifact's ST trace (about 7.5 ms of forward
per transformer layer per microbatch, backward ≈ 2× forward, DP all-gather ≈ 20 ms and
reduce-scatter ≈ 40-50 ms for a 9-layer stage) so generated traces look like real ones.

- Compute: ``layers × layer_fwd`` (× ``bwd_ratio`` for backward) per microbatch, split evenly over
  a stage's model chunks, plus an embedding cost on the first stage's first chunk and a head
  (loss/logits) cost on the last stage's last chunk. Healthy partitions pay for both with whole
  layers (Llama 3 style); the stage-imbalance scenarios change the partition and the head.
- Noise: a persistent per-worker speed factor (``worker_sigma``), per-op log-normal noise
  (``op_sigma``) and rare heavy-tailed slow ops (``tail_prob``, Pareto tail ``tail_alpha`` scaled by
  ``tail_scale``).
- Transfers: ``latency + bytes / bandwidth``; P2P activations, ring all-gather / reduce-scatter of
  the stage's parameters / gradients over the DP group, a small embedding and clip all-reduce; each
  link and each member has a persistent speed factor (``link_sigma``).
- CPU: a launch gap before every call (``gap_base`` + exponential ``gap_mean``, with rare hiccups of
  ``hiccup_ms``), and per-host clock skew (``skew_sigma``) applied to recorded timestamps.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class CostModel(BaseModel):
    """Tunable constants of the generator (seconds, bytes, bytes/s)."""

    model_config = ConfigDict(extra="forbid")

    layers_per_middle_stage: int = Field(default=8, ge=2)
    layer_fwd: float = 7.5e-3
    bwd_ratio: float = 2.0
    # Healthy embedding / head cost in layer equivalents (paid for by one layer fewer each).
    embedding_layers: float = 1.0
    head_layers: float = 1.0
    # The study's heavy head: backward of the extra logits cost relative to its forward (ST: ~0.85).
    heavy_head_bwd_ratio: float = 0.85
    worker_sigma: float = 0.003
    op_sigma: float = 0.012
    tail_prob: float = 2e-4
    tail_alpha: float = 3.0
    tail_scale: float = 0.15
    # Step-to-step compute noise between identical ranks (CPU contention on a shared host): a
    # log-normal factor per (step, worker) on its compute and optimizer; 0 = none (the default, so
    # existing jobs draw the same numbers).
    step_sigma: float = Field(default=0.0, ge=0.0)
    # One healthy GPU a little slower than its peers (every fleet's spread of GPU speeds, not a
    # fault, so not labelled): worker (dp_rank, pp_rank) runs its compute ``mild_factor`` times
    # slower. Applied after every draw, so jobs without it draw exactly what they drew before; left
    # out of a dump while unset, so a cost model without it dumps as it did before it existed.
    mild_worker: tuple[int, int] | None = Field(default=None, exclude_if=lambda v: v is None)
    mild_factor: float = Field(default=1.0, ge=1.0, le=1.1, exclude_if=lambda v: v == 1.0)
    # Step bursts: a (step, worker) pair is hit with chance ``step_burst_prob`` and its compute and
    # optimizer run ``1 + U(step_burst)`` times longer in that step (a process that lost its cores
    # for one step on a busy host: heavy, few-step noise, not a slow machine, so not labelled).
    # Drawn after everything else and left out of a dump while unset, like ``mild_worker``.
    step_burst_prob: float = Field(default=0.0, ge=0.0, le=1.0, exclude_if=lambda v: v == 0.0)
    step_burst: tuple[float, float] = Field(default=(0.3, 0.8), exclude_if=lambda v: v == (0.3, 0.8))
    # Transfers.
    p2p_bytes: float = 32e6
    p2p_bandwidth: float = 40e9
    p2p_latency: float = 25e-6
    layer_param_bytes: float = 50e6
    dp_bandwidth: float = 20e9
    coll_latency: float = 60e-6
    embedding_bytes: float = 100e6
    clip_time: float = 1.5e-3
    layernorm_time: float = 4e-5
    optimizer_per_layer: float = 5e-3
    link_sigma: float = 0.03
    transfer_sigma: float = 0.03
    # CPU launch gaps and clocks.
    gap_base: float = 1.5e-5
    gap_mean: float = 2.5e-5
    hiccup_prob: float = 2e-3
    hiccup_ms: tuple[float, float] = (0.5, 3.0)
    step_start_jitter: float = 2e-4
    skew_sigma: float = 2e-5
    # Sequence-length model: microbatches pack max_len tokens; attention share at ref_len. Tuned so
    # per-microbatch forward quantiles match the artifact's SE trace (p90 ≈ 1.5×, max ≈ 2.1× the median).
    seq_median_len: float = 4096.0
    seq_sigma: float = 1.4
    seq_ref_len: float = 4096.0
    attention_share: float = 0.16
    # GC: chance that a worker pauses in a given step (at least ~1.5 pauses per step in small jobs).
    gc_rate: float = 0.05

    def healthy_partition(self, pp: int) -> list[int]:
        """Layers per stage with the embedding and head paid for by fewer layers (balanced)."""
        n = self.layers_per_middle_stage
        if pp == 1:
            return [n]
        layers = [n] * pp
        layers[0] = max(1, round(n - self.embedding_layers))
        layers[-1] = max(1, round(n - self.head_layers))
        return layers

    def p2p_time(self) -> float:
        return self.p2p_latency + self.p2p_bytes / self.p2p_bandwidth

    def dp_time(self, layers: float, group: int, grads: bool) -> float:
        """Ring all-gather (params, bf16) or reduce-scatter (grads, fp32) over ``group`` ranks."""
        if group <= 1:
            return 0.0
        nbytes = layers * self.layer_param_bytes * (2.0 if grads else 1.0)
        return self.coll_latency + nbytes * (group - 1) / group / self.dp_bandwidth

    def embedding_time(self) -> float:
        return self.coll_latency + 2.0 * self.embedding_bytes / self.dp_bandwidth
