"""orch-mdp's solve (orchestrator/policy/mdp_solve.py) against its plain form, bit for bit, and its table cache.

``plain_solve`` is the solve as first written (mdp.py before the step loop was rewritten for numpy's per-call
cost): every choice's cost as a whole (states, modes, slack) block, the Safety Net and the outage states by
boolean masks. The fast solve must give the same table, cell for cell, on hand-made and random chains, at
overheads below, at and above the step (fractional launches, whole ones, several overhead steps), with and
without a hop rate and a wait tax, and on chains whose outage states are not one run. Fixed seeds: the same
cases every run.
"""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from orchestrator.policy import mdp_solve
from orchestrator.policy.mdp import step_for
from orchestrator.policy.mdp_model import AvailabilityChain, chain
from orchestrator.policy.mdp_solve import solve
from orchestrator.policy.model import ZoneStats

_EPS, _BIG = 1e-9, 1e6
A_SPOT, A_WAIT = 2, 0


def plain_solve(
    model: AvailabilityChain,
    step_h: float,
    overhead_h: float,
    spot_price: float,
    time_left_h: float,
    slack_h: float,
    gap_h: float,
    hop: float = 0.0,
    wait_tax: tuple[float, float] = (0.0, 0.0),
) -> np.ndarray:
    """The table of the first orch-mdp's solve, as it was written (the reference)."""
    d, k = overhead_h, spot_price
    n_ov = 0 if d <= step_h + _EPS else round(d / step_h) - 1
    frac = d / step_h if n_ov == 0 else 1.0
    od0, sp0 = 1, 2 + n_ov
    n_modes = 2 * (n_ov + 1) + 1
    up = model.up
    n_a = len(up)
    t_max = max(math.ceil(time_left_h / step_h - _EPS), 1)
    n_j = max(math.floor(slack_h / step_h + _EPS) + 2, 2)
    jj = np.arange(n_j)
    net_idle = jj * step_h <= 2 * d + gap_h + _EPS
    net_spot = jj * step_h <= d + gap_h + _EPS
    acts = np.zeros((t_max + 1, n_a, sp0, n_j), dtype=np.int8)
    value = np.zeros((n_a, n_modes, n_j))
    spot_modes = slice(sp0, n_modes)
    down = ~up

    def back(x: np.ndarray) -> np.ndarray:
        out = np.full_like(x, _BIG)
        out[..., 1:] = x[..., :-1]
        return out

    def launched(x: np.ndarray) -> np.ndarray:
        return back(x) if frac >= 1.0 - _EPS else frac * back(x) + (1 - frac) * x

    for t in range(1, t_max + 1):
        eff = value.copy()
        eff[down, spot_modes] = value[down, 0][:, None, :]
        exp_v = (model.trans @ eff.reshape(n_a, -1)).reshape(n_a, n_modes, n_j)
        wait = back(exp_v[:, 0]) + np.where(up, wait_tax[0], wait_tax[1])[:, None] * step_h
        od_launch = step_h + launched(exp_v[:, od0 + n_ov] if n_ov else exp_v[:, od0])
        sp_launch = k * step_h + launched(exp_v[:, sp0 + n_ov] if n_ov else exp_v[:, sp0])
        sp_launch[down] = _BIG
        c_wait = np.repeat(wait[:, None, :], n_modes, axis=1)
        c_od = np.repeat(od_launch[:, None, :], n_modes, axis=1)
        c_sp = np.repeat(sp_launch[:, None, :], n_modes, axis=1)
        c_od[:, od0] = step_h + exp_v[:, od0]
        c_sp[:, sp0] = (1 - hop) * (k * step_h + exp_v[:, sp0]) + hop * sp_launch
        for i in range(1, n_ov + 1):
            c_od[:, od0 + i] = step_h + back(exp_v[:, od0 + i - 1])
            c_sp[:, sp0 + i] = k * step_h + back(exp_v[:, sp0 + i - 1])
        c_sp[down, sp0:] = _BIG
        c_wait[:, :sp0, net_idle] = _BIG
        c_sp[:, :sp0, net_idle] = _BIG
        c_wait[:, sp0:, net_spot] = _BIG
        c_od[:, sp0, net_spot] = _BIG
        c_sp[:, sp0 + 1 :, net_spot] = _BIG
        low = np.minimum(c_wait, c_od)
        value = np.minimum(low, c_sp)
        act = (c_od[:, :sp0] < c_wait[:, :sp0]).astype(np.int8)
        act[c_sp[:, :sp0] < low[:, :sp0]] = A_SPOT
        act[..., t:] = A_WAIT
        acts[t] = act
        value[..., t:] = 0.0
    return acts


def learned(rng: random.Random, step_h: float) -> AvailabilityChain:
    """orch-mdp's chain from a random history: runs of random length (some long), ending up or down."""
    stats = ZoneStats()
    gap = rng.choice([1 / 120, 1 / 6, 0.25, 0.5])
    for _ in range(rng.randint(0, 40)):
        up = rng.random() < 0.5
        for _ in range(max(1, int(rng.expovariate(1 / rng.choice([0.5, 2.0, 8.0])) / gap))):
            stats.observe(up, gap)
    return chain(stats, step_h)


def hand_made(rng: random.Random, n_a: int, runs: bool) -> AvailabilityChain:
    """A random stochastic matrix over n_a states; availability either one run of states or scattered."""
    trans = np.array([[rng.random() * (rng.random() < 0.6) for _ in range(n_a)] for _ in range(n_a)])
    trans[np.arange(n_a), np.arange(n_a)] += 0.05
    trans /= trans.sum(axis=1, keepdims=True)
    if runs:
        up = np.arange(n_a) < rng.randint(1, n_a - 1)
    else:
        up = np.array([rng.random() < 0.5 for _ in range(n_a)])
        up[0], up[-1] = True, False
    empty = np.zeros(1)
    return AvailabilityChain(up, trans, empty, empty, empty)


def check(model: AvailabilityChain, step: float, d: float, k: float, time_left: float, slack: float, gap: float,
          hop: float, tax: tuple[float, float]) -> None:
    mdp_solve._SOLVED.clear()
    fast = solve(model, step, d, k, time_left, slack, gap, hop, tax).acts
    plain = plain_solve(model, step, d, k, time_left, slack, gap, hop, tax)
    assert fast.shape == plain.shape
    assert np.array_equal(fast, plain)


def test_the_solve_equals_its_plain_form_on_a_hand_worked_chain() -> None:
    # Two states (spot / none), each kept with odds 0.9: a 6 h job with 2 h of slack, d = 0.2 h; then the same
    # at d = 0.5 h (two overhead steps) with a hop rate and the wait tax; the plain form's table both times.
    empty = np.zeros(1)
    model = AvailabilityChain(np.array([True, False]), np.array([[0.9, 0.1], [0.1, 0.9]]), empty, empty, empty)
    check(model, 0.25, 0.2, 0.3, 6.0, 2.0, 0.25, 0.0, (0.0, 0.0))
    check(model, 0.25, 0.5, 0.3, 6.0, 2.0, 0.25, 0.05, (0.1, 0.0))
    # And the table says something: spot at once with slack and spot available, on-demand at the net.
    acts = solve(model, 0.25, 0.2, 0.3, 6.0, 2.0, 0.25).acts
    assert acts[24, 0, 0, 8] == A_SPOT and acts[24, 1, 0, 0] == 1


@pytest.mark.parametrize("seed_", [1, 2, 3])
def test_the_solve_equals_its_plain_form_on_learned_chains(seed_: int) -> None:
    rng = random.Random(seed_)
    for _ in range(6):
        d = rng.choice([0.0, 0.05, 0.2, 0.25, 0.5, 0.75, 0.6])
        step = step_for(d)
        time_left = rng.uniform(0.5, 10.0)
        slack = rng.uniform(0.0, min(time_left, 4.0))
        hop = rng.choice([0.0, 0.0, rng.uniform(0.0, 0.3)])
        tax = rng.choice([(0.0, 0.0), (0.1, 0.0), (0.2, 0.05)])
        check(learned(rng, step), step, d, rng.choice([0.3, 0.15, 0.6]), time_left, slack,
              rng.choice([1 / 120, 0.25, 0.5]), hop, tax)


@seed(20261207)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n_a=st.integers(2, 7),
    runs=st.booleans(),
    d=st.sampled_from([0.0, 0.1, 0.25, 0.3, 0.5, 1.0]),
    time_left=st.floats(0.1, 6.0),
    slack_share=st.floats(0.0, 1.0),
    gap=st.sampled_from([1 / 60, 0.25, 0.4]),
    hop=st.sampled_from([0.0, 0.02, 0.5]),
    tax=st.sampled_from([(0.0, 0.0), (0.1, 0.0), (0.3, 0.2)]),
    k=st.sampled_from([0.3, 0.9]),
    which=st.integers(0, 2**31),
)
def test_the_solve_equals_its_plain_form_on_random_chains(
    n_a: int, runs: bool, d: float, time_left: float, slack_share: float, gap: float, hop: float,
    tax: tuple[float, float], k: float, which: int,
) -> None:
    # Small random chains, the outage states one run or scattered (the fast solve's index path).
    model = hand_made(random.Random(which), n_a, runs)
    check(model, step_for(d), d, k, time_left, slack_share * time_left, gap, hop, tax)


def test_the_table_cache_keys_every_input() -> None:
    rng = random.Random(7)
    model = learned(rng, 0.25)
    base = (model, 0.25, 0.2, 0.3, 8.0, 3.0, 0.25, 0.0, (0.1, 0.0))
    mdp_solve._SOLVED.clear()
    first = solve(*base).acts
    # The same inputs: the same table, not solved again.
    assert np.shares_memory(solve(*base).acts, first) and len(mdp_solve._SOLVED) == 1
    # The same chain's numbers in a new object: still the same inputs.
    twin = AvailabilityChain(model.up.copy(), model.trans.copy(), model.edges, model.up_end, model.down_end)
    assert np.shares_memory(solve(twin, *base[1:]).acts, first)
    # A trans matrix differing in one cell by one ulp is another chain.
    nudged = model.trans.copy()
    nudged[0, 0] = np.nextafter(nudged[0, 0], 2.0)
    near = AvailabilityChain(model.up, nudged, model.edges, model.up_end, model.down_end)
    assert not np.shares_memory(solve(near, *base[1:]).acts, first) and len(mdp_solve._SOLVED) == 2
    mdp_solve._SOLVED.clear()
    first = solve(*base).acts
    # Any input changed: a table of its own, equal to the plain form's for those inputs.
    other = learned(random.Random(8), 0.25)
    changes = [
        (other, *base[1:]),
        (model, 0.25, 0.25, *base[3:]),
        (*base[:3], 0.35, *base[4:]),
        (*base[:4], 7.75, *base[5:]),
        (*base[:5], 2.75, *base[6:]),
        (*base[:6], 0.5, *base[7:]),
        (*base[:7], 0.01, base[8]),
        (*base[:8], (0.0, 0.0)),
    ]
    for args in changes:
        table = solve(*args).acts
        assert not np.shares_memory(table, first)
        assert np.array_equal(table, plain_solve(*args))
    assert len(mdp_solve._SOLVED) == min(1 + len(changes), mdp_solve._KEPT)
