"""Random step graphs and their networkx longest-path oracle, shared by the simulator and the
timeline tests (importable: pytest puts this folder on sys.path).

Oracle graph, per step: for every node v and DP rank d a start vertex S(v,d) and an end vertex
E(v,d); E(u,d) -> S(v,d) for each dependency, weighted by v's launch delay; a local op S -> E
weighted by its duration; a group gets a join vertex J (one per DP rank, or one for all DP ranks
when DP-synchronised) with S -> J weighted 0 and J -> E weighted by the member's transfer time. A
source feeds every S without dependencies (weighted by its launch delay) and every E feeds a sink:
the longest source-sink path is the step time.
"""

from __future__ import annotations

from collections.abc import Sequence

import networkx as nx
import numpy as np


def random_graph(
    rng: np.random.Generator,
    n_super: int,
    sizes: Sequence[int] = (1, 1, 2, 3),
    singleton_group_p: float | None = None,
) -> tuple[list[list[int]], list[list[int]], list[bool]]:
    """Super-nodes in a random topological order, of a size drawn from ``sizes``; every super-node
    of 2-3 members is a group, a single one too with probability ``singleton_group_p`` (None: never,
    and no draw is made). Dependencies only point from earlier super-nodes to later ones, so the
    contracted graph is acyclic. The draws are made in a fixed order: a seed gives one graph."""
    members_of: list[list[int]] = []
    nxt = 0
    for _ in range(n_super):
        size = int(rng.choice(list(sizes)))
        members_of.append(list(range(nxt, nxt + size)))
        nxt += size
    deps: list[list[int]] = [[] for _ in range(nxt)]
    for i, members in enumerate(members_of):
        earlier = [v for m in members_of[:i] for v in m]
        for v in members:
            if earlier:
                k = int(rng.integers(0, min(3, len(earlier)) + 1))
                deps[v] = sorted({int(x) for x in rng.choice(earlier, size=k, replace=False)})
    groups = [
        m
        for m in members_of
        if len(m) > 1 or (singleton_group_p is not None and rng.random() < singleton_group_p)
    ]
    dp_sync = [bool(rng.random() < 0.5) for _ in groups]
    return deps, groups, dp_sync


def oracle_graph(
    deps: list[list[int]],
    groups: list[list[int]],
    dp_sync: list[bool],
    dur: np.ndarray,
    launch: np.ndarray | None = None,
) -> nx.DiGraph:
    """The oracle graph of one step (module docstring); ``dur`` and ``launch`` are (n_nodes, dp),
    no launch delays when ``launch`` is None. Edge weights are in the attribute ``w``."""
    n, dp = dur.shape
    if launch is None:
        launch = np.zeros_like(dur)
    gid = {v: g for g, ms in enumerate(groups) for v in ms}
    graph = nx.DiGraph()
    for d in range(dp):
        for v in range(n):
            graph.add_edge(("E", v, d), "sink", w=0.0)
            if not deps[v]:
                graph.add_edge("src", ("S", v, d), w=float(launch[v, d]))
            for u in deps[v]:
                graph.add_edge(("E", u, d), ("S", v, d), w=float(launch[v, d]))
            if v in gid:
                g = gid[v]
                join = ("J", g) if dp_sync[g] else ("J", g, d)
                graph.add_edge(("S", v, d), join, w=0.0)
                graph.add_edge(join, ("E", v, d), w=float(dur[v, d]))
            else:
                graph.add_edge(("S", v, d), ("E", v, d), w=float(dur[v, d]))
    return graph
