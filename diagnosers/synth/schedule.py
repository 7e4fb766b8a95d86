"""Per-stage programs of a pipeline-parallel training step: the calls each worker makes, in order.

Every DP rank of a stage runs the same program (only durations differ), so a program is built once
per stage. Three schedules, posted the way Megatron-LM posts them:

- ``1f1b`` (non-interleaved): ``pp - s - 1`` warm-up forwards, then one-forward-one-backward with
  the steady-state P2P batched (``send_forward_recv_backward`` / ``send_backward_recv_forward``),
  then cool-down backwards. The first stage records no forward-recv / backward-send and the last
  stage no forward-send / backward-recv, as in the artifact's traces.
- ``interleaved`` (VPP): Megatron's interleaved 1F1B over ``v`` model chunks; microbatches go in
  groups of ``pp``; each compute is followed by one batched call that sends its output and posts
  the receive for the next compute of each direction. Every compute has one record per P2P
  direction even when nothing moves (model boundary: "no-op" records, as NDTimeline emits them).
- ``gpipe``: all forwards, then all backwards, unbatched.

Batched calls are recorded as directional rows with identical timing. The step tail is the
artifact's: ``gc`` (zero length) → ``layernorm-grads-all-reduce`` → ``embedding-grads-all-reduce``
(first and last stage) → ``grads-reduce-scatter`` per chunk → ``optimizer-clip-main-grad`` (global)
→ ``optimizer``; ``params-all-gather`` per chunk opens the step. DP collectives exist only when
``dp * cp > 1``, the embedding all-reduce only when ``pp > 1``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from diagnosers.model import OPTYPE_CODE
from diagnosers.synth.spec import Schedule


class Kind(Enum):
    COMPUTE = 0
    P2P = 1
    DP_COLL = 2  # params-all-gather / grads-reduce-scatter over the stage's DP ranks
    EMB_COLL = 3  # embedding all-reduce between stage 0 and stage pp-1 of one DP replica
    CLIP_COLL = 4  # global grad-norm all-reduce: every stage, every DP rank
    LOCAL = 5  # gc, layernorm all-reduce (TP collapsed), optimizer


# A P2P channel: (direction, sending stage). 'F' goes to (src + 1) % pp, 'B' to (src - 1) % pp.
Channel = tuple[str, int]


@dataclass(frozen=True)
class P2POp:
    """One real send or receive: ``k`` is its position in the channel's FIFO order."""

    channel: Channel
    role: str  # "send" | "recv"
    k: int


@dataclass(frozen=True)
class Row:
    """One recorded trace row: (optype code, mc, mb_id, gmc); seq_id is assigned by the executor."""

    optype: int
    mc: int = -1
    mb_id: int = -1
    gmc: int = -1


@dataclass
class Call:
    """One call of a worker's program, recorded as ``rows`` (all with the call's timing)."""

    kind: Kind
    rows: list[Row]
    ops: list[P2POp] = field(default_factory=list)  # P2P only
    compute: int = -1  # index into the stage's compute-duration array
    name: str = ""  # DP_COLL/LOCAL: optype name; coll key for EMB/CLIP
    first_forward: bool = False  # the step's first forward on this stage (dataloader stall goes here)


@dataclass(frozen=True)
class ComputeSlot:
    """A compute call: direction, microbatch, chunk."""

    forward: bool
    mb: int
    chunk: int


@dataclass
class StageProgram:
    stage: int
    calls: list[Call]
    computes: list[ComputeSlot]


F_COMP = OPTYPE_CODE["forward-compute"]
B_COMP = OPTYPE_CODE["backward-compute"]
F_SEND = OPTYPE_CODE["forward-send"]
F_RECV = OPTYPE_CODE["forward-recv"]
B_SEND = OPTYPE_CODE["backward-send"]
B_RECV = OPTYPE_CODE["backward-recv"]


class _Builder:
    """Builds one stage's program, numbering channel positions as calls are appended."""

    def __init__(self, stage: int, pp: int, vpp: int) -> None:
        self.s, self.pp, self.vpp = stage, pp, vpp
        self.calls: list[Call] = []
        self.computes: list[ComputeSlot] = []
        self.counters: dict[tuple[Channel, str], int] = {}
        self.seen_forward = False

    def _op(self, channel: Channel, role: str) -> P2POp:
        key = (channel, role)
        k = self.counters.get(key, 0)
        self.counters[key] = k + 1
        return P2POp(channel, role, k)

    def compute(self, forward: bool, mb: int, chunk: int) -> None:
        gmc = chunk * self.pp + self.s
        first = forward and not self.seen_forward
        self.seen_forward |= forward
        self.calls.append(
            Call(Kind.COMPUTE, [Row(F_COMP if forward else B_COMP, chunk, mb, gmc)],
                 compute=len(self.computes), first_forward=first)
        )
        self.computes.append(ComputeSlot(forward, mb, chunk))

    def p2p(self, parts: list[tuple[int, bool]]) -> None:
        """A (batched) P2P call: ``parts`` = (optype code, real?) in record order."""
        rows, ops = [], []
        nxt, prv = (self.s + 1) % self.pp, (self.s - 1) % self.pp
        for code, real in parts:
            rows.append(Row(code))
            if not real:
                continue
            if code == F_SEND:
                ops.append(self._op(("F", self.s), "send"))
            elif code == F_RECV:
                ops.append(self._op(("F", prv), "recv"))
            elif code == B_SEND:
                ops.append(self._op(("B", self.s), "send"))
            elif code == B_RECV:
                ops.append(self._op(("B", nxt), "recv"))
        if rows:
            self.calls.append(Call(Kind.P2P, rows, ops=ops))

    def program(self) -> StageProgram:
        return StageProgram(self.s, self.calls, self.computes)


def _one_f_one_b(b: _Builder, m: int) -> None:
    s, pp = b.s, b.pp
    first, last = s == 0, s == pp - 1
    warmup = min(pp - s - 1, m)
    steady = m - warmup
    fwd_i = bwd_i = 0
    for _ in range(warmup):
        if not first:
            b.p2p([(F_RECV, True)])
        b.compute(True, fwd_i, 0)
        fwd_i += 1
        if not last:
            b.p2p([(F_SEND, True)])
    if steady > 0 and not first:
        b.p2p([(F_RECV, True)])
    for i in range(steady):
        b.compute(True, fwd_i, 0)
        fwd_i += 1
        if not last:  # send_forward_recv_backward
            b.p2p([(F_SEND, True), (B_RECV, True)])
        b.compute(False, bwd_i, 0)
        bwd_i += 1
        if i == steady - 1:
            if not first:
                b.p2p([(B_SEND, True)])
        elif not first:  # send_backward_recv_forward
            b.p2p([(B_SEND, True), (F_RECV, True)])
    for _ in range(warmup):
        if not last:
            b.p2p([(B_RECV, True)])
        b.compute(False, bwd_i, 0)
        bwd_i += 1
        if not first:
            b.p2p([(B_SEND, True)])


def _gpipe(b: _Builder, m: int) -> None:
    first, last = b.s == 0, b.s == b.pp - 1
    for i in range(m):
        if not first:
            b.p2p([(F_RECV, True)])
        b.compute(True, i, 0)
        if not last:
            b.p2p([(F_SEND, True)])
    for i in range(m):
        if not last:
            b.p2p([(B_RECV, True)])
        b.compute(False, i, 0)
        if not first:
            b.p2p([(B_SEND, True)])


def interleaved_order(k: int, pp: int, vpp: int, m: int, forward: bool) -> tuple[int, int]:
    """(microbatch, chunk) of the k-th forward (or backward) of a stage in Megatron's interleaving."""
    group = pp * vpp
    chunk = (k % group) // pp
    if not forward:
        chunk = vpp - 1 - chunk
    mb = (k // group) * pp + k % pp
    return mb, chunk


def _interleaved(b: _Builder, m: int) -> None:
    s, pp, v = b.s, b.pp, b.vpp
    total = m * v
    all_warmup = m == pp
    warmup = total if all_warmup else min((pp - s - 1) * 2 + (v - 1) * pp, total)
    steady = total - warmup

    def f_info(k: int) -> tuple[int, int]:
        return interleaved_order(k, pp, v, m, True)

    def b_info(k: int) -> tuple[int, int]:
        return interleaved_order(k, pp, v, m, False)

    # A send/recv is real unless it crosses the model's boundary (first chunk of stage 0 receives no
    # activation; the last chunk of the last stage sends none; mirrored for gradients).
    def f_send_real(chunk: int) -> bool:
        return not (s == pp - 1 and chunk == v - 1)

    def f_recv_real(chunk: int) -> bool:
        return not (s == 0 and chunk == 0)

    def b_send_real(chunk: int) -> bool:
        return not (s == 0 and chunk == 0)

    def b_recv_real(chunk: int) -> bool:
        return not (s == pp - 1 and chunk == v - 1)

    b.p2p([(F_RECV, f_recv_real(f_info(0)[1]))])
    for k in range(warmup):
        mb, chunk = f_info(k)
        b.compute(True, mb, chunk)
        parts = [(F_SEND, f_send_real(chunk))]
        if k + 1 < total:
            parts.append((F_RECV, f_recv_real(f_info(k + 1)[1])))
        if k == warmup - 1 and not all_warmup:
            parts.append((B_RECV, b_recv_real(b_info(0)[1])))
        b.p2p(parts)
    for i in range(steady):
        fk, bk = i + warmup, i
        mb, chunk = f_info(fk)
        b.compute(True, mb, chunk)
        bmb, bchunk = b_info(bk)
        b.compute(False, bmb, bchunk)
        parts = [(F_SEND, f_send_real(chunk)), (B_SEND, b_send_real(bchunk))]
        if fk + 1 < total:
            parts.append((F_RECV, f_recv_real(f_info(fk + 1)[1])))
        parts.append((B_RECV, b_recv_real(b_info(bk + 1)[1])))
        b.p2p(parts)
    if all_warmup:
        b.p2p([(B_RECV, b_recv_real(b_info(0)[1]))])
    for bk in range(steady, total):
        bmb, bchunk = b_info(bk)
        b.compute(False, bmb, bchunk)
        parts = [(B_SEND, b_send_real(bchunk))]
        if bk + 1 < total:
            parts.append((B_RECV, b_recv_real(b_info(bk + 1)[1])))
        b.p2p(parts)


def build_programs(
    pp: int, vpp: int, microbatches: int, schedule: Schedule, dp_comm: bool
) -> list[StageProgram]:
    """One program per PP stage for one training step (see the module docstring)."""
    programs = []
    for s in range(pp):
        b = _Builder(s, pp, vpp)
        chunks = vpp if schedule is Schedule.INTERLEAVED else 1
        if dp_comm:
            for c in range(chunks):
                b.calls.append(Call(Kind.DP_COLL, [Row(OPTYPE_CODE["params-all-gather"], c)],
                                    name="params-all-gather"))
        if pp == 1:
            for i in range(microbatches):
                b.compute(True, i, 0)
            for i in range(microbatches):
                b.compute(False, i, 0)
        elif schedule is Schedule.ONE_F_ONE_B:
            _one_f_one_b(b, microbatches)
        elif schedule is Schedule.GPIPE:
            _gpipe(b, microbatches)
        else:
            _interleaved(b, microbatches)
        # Tail (METHOD.md A2.7). The artifact records gc with mb_id 0.
        b.calls.append(Call(Kind.LOCAL, [Row(OPTYPE_CODE["gc"], -1, 0, -1)], name="gc"))
        b.calls.append(Call(Kind.LOCAL, [Row(OPTYPE_CODE["layernorm-grads-all-reduce"])],
                            name="layernorm-grads-all-reduce"))
        if pp > 1 and s in (0, pp - 1):
            b.calls.append(Call(Kind.EMB_COLL, [Row(OPTYPE_CODE["embedding-grads-all-reduce"])],
                                name="embedding-grads-all-reduce"))
        if dp_comm:
            for c in range(chunks):
                b.calls.append(Call(Kind.DP_COLL, [Row(OPTYPE_CODE["grads-reduce-scatter"], c)],
                                    name="grads-reduce-scatter"))
        b.calls.append(Call(Kind.CLIP_COLL, [Row(OPTYPE_CODE["optimizer-clip-main-grad"])],
                            name="optimizer-clip-main-grad"))
        b.calls.append(Call(Kind.LOCAL, [Row(OPTYPE_CODE["optimizer"])], name="optimizer"))
        programs.append(b.program())
    return programs
