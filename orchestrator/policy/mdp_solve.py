"""orch-mdp's backward induction (``solve``) and its table (``Plan``); the rules it applies are mdp.py's docstring.

The solve is the policy's dearest part (a single-zone job solves about eight times, each over up to 300 time
steps), so each step is written for numpy's per-call cost and its fast loops, which need contiguous operands:
every operation on a whole (states, modes, slack) block where it can be, three choices' costs built by one
broadcast copy, the Safety Net's cells set through three strided views, the outage states as a slice. Every value is the
same arithmetic on the same operands, in the same order, as the plain form (tests/policy/test_mdp_solve.py
keeps that plain form and compares the tables cell for cell), so the decisions are unchanged.

Solved tables are kept (``_SOLVED``, a few) by the solve's exact inputs: a second job with the same history,
problem and start (e.g. the same zone set replayed twice, or a start at the trace's first tick, where every
trace's history is empty) reuses the first's table.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

import numpy as np

from orchestrator.policy.mdp_model import AvailabilityChain
from orchestrator.policy.model import Mode

_EPS = 1e-9
#: The cost of a state that misses the deadline (in on-demand hours; far above any job's cost).
_BIG = 1e6
#: The action codes of the table.
A_WAIT, A_OD, A_SPOT = 0, 1, 2
#: How many solved tables are kept for reuse (each about 2 MB at a 72 h job's 0.25 h step, 6 MB at 96 h with 48 h
#: of slack): few, as a daemon keeps them for its life.
_KEPT = 4


@dataclass(frozen=True, slots=True)
class Plan:
    """A solved MDP: ``acts[t, a, m, j]`` the best action with t steps left, availability state a, instance m
    (0 idle, 1 + i on-demand with i overhead steps still to pay after this one; the solver's spot states
    2 + n_ov + i are not kept: a live spot instance is kept) and slack j steps."""

    acts: np.ndarray
    step_h: float
    n_ov: int
    chain: AvailabilityChain

    def mode_index(self, mode: Mode, overhead_left_h: float) -> int:
        """The table's instance index: idle (also a spot instance decided afresh) or on-demand."""
        if mode is not Mode.ON_DEMAND:
            return 0
        i = 0
        if self.n_ov and overhead_left_h > _EPS:
            i = min(self.n_ov, max(0, math.ceil(overhead_left_h / self.step_h - _EPS) - 1))
        return 1 + i

    def action(self, time_left_h: float, slack_h: float, state: int, mode: int, nearest: bool = True) -> int:
        """The table's action at the nearest time step and, with ``nearest``, the nearest slack step (else the
        slack rounded down: the plan then sees up to a step less slack than the job has; docs/policy.md v3.5)."""
        t = min(max(round(time_left_h / self.step_h), 0), self.acts.shape[0] - 1)
        j = round(slack_h / self.step_h) if nearest else math.floor(slack_h / self.step_h + 1e-6)
        j = min(max(j, 0), self.acts.shape[3] - 1)
        return int(self.acts[t, state, mode, j])


_SOLVED: OrderedDict[tuple[object, ...], np.ndarray] = OrderedDict()


def solve(
    model: AvailabilityChain,
    step_h: float,
    overhead_h: float,
    spot_price: float,
    time_left_h: float,
    slack_h: float,
    gap_h: float,
    hop: float = 0.0,
    wait_tax: tuple[float, float] = (0.0, 0.0),
) -> Plan:
    """Backward induction from 0 to ``time_left_h`` over slack 0..``slack_h`` (the slack never grows).

    ``hop``: the probability per step that a spot instance's zone is lost while the set keeps spot (one more
    overhead). ``wait_tax``: what an hour of waiting costs while spot is (first) or is not (second) available.
    Costs are in on-demand hours; each step bills its whole length (a job finishing part-way through its last
    step is billed the step: the grid's rounding). The table returned may be shared with other plans: read it,
    never write it."""
    d = overhead_h
    n_ov = 0 if d <= step_h + _EPS else round(d / step_h) - 1
    t_max = max(math.ceil(time_left_h / step_h - _EPS), 1)
    n_j = max(math.floor(slack_h / step_h + _EPS) + 2, 2)
    key = (
        model.trans.tobytes(), model.up.tobytes(), step_h, d, spot_price, gap_h, hop, tuple(wait_tax), t_max, n_j
    )
    acts = _SOLVED.get(key)
    if acts is None:
        acts = _backward(model, step_h, d, spot_price, t_max, n_j, gap_h, hop, wait_tax)
        _SOLVED[key] = acts
        if len(_SOLVED) > _KEPT:
            _SOLVED.popitem(last=False)
    else:
        _SOLVED.move_to_end(key)
    return Plan(acts[:, :, : 2 + n_ov], step_h, n_ov, model)  # idle's and on-demand's modes


def _rows(mask: np.ndarray) -> slice | np.ndarray:
    """The rows where ``mask`` holds: a slice when they are one run (the chain's outage states are), else
    their indices."""
    idx = np.flatnonzero(mask)
    if len(idx) and idx[-1] - idx[0] + 1 == len(idx):
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


def _backward(
    model: AvailabilityChain,
    step_h: float,
    d: float,
    k: float,
    t_max: int,
    n_j: int,
    gap_h: float,
    hop: float,
    wait_tax: tuple[float, float],
) -> np.ndarray:
    """The table ``acts[t, a, m, j]`` of ``solve`` (see Plan; here every mode's, spot's too), by backward
    induction over t = 1..``t_max``.

    Every operation is on a whole contiguous block where it can be (numpy's fast loops need contiguous
    operands: an operation on a block costs about what one on a third of it does). Modes: 0 idle, ``od0 + i``
    on-demand and ``sp0 + i`` spot with i overhead steps paid. ``cost[c, a, m, j]``: the cost of choice c
    (wait, on-demand, spot) in state (a, m, j); the cells that are a miss at every step (the Safety Net's
    states, spot in an outage) are set after each step's writes. Each cost is the plain form's arithmetic on
    the same operands, in the same order, so every value is the same to the last bit."""
    n_ov = 0 if d <= step_h + _EPS else round(d / step_h) - 1
    frac = d / step_h if n_ov == 0 else 1.0  # a launch's slack spent, in steps (fractional: one step)
    whole = frac >= 1.0 - _EPS
    od0, sp0 = 1, 2 + n_ov
    n_modes = 2 * (n_ov + 1) + 1
    up = model.up
    n_a = len(up)
    dn = _rows(~up)
    jj = np.arange(n_j)
    # The Safety Net's states are a prefix of the slack (jj * step grows), j = 0 always among them: idle or
    # on-demand below ``wi`` -> on-demand; on spot below ``ws`` the instance is kept only if its overhead is
    # paid.
    wi = int(np.count_nonzero(jj * step_h <= 2 * d + gap_h + _EPS))
    ws = int(np.count_nonzero(jj * step_h <= d + gap_h + _EPS))
    ks = k * step_h
    shape = (n_a, n_modes, n_j)
    # ``base[:, b]`` for b = 0, 1, 2 (modes 0, od0 + n_ov, sp0 + n_ov: every (n_ov + 1)-th) is what every mode
    # pays to wait, or to start an on-demand or a spot instance: lower x f + value x g + shift, with (f, g, shift)
    # = (1, 0, tax) for waiting (the value a step of slack lower, exactly), and for a launch (frac, 1 - frac,
    # its first step's price), or (1, 0, price) when it spends a whole step.
    f, g, shift = np.zeros(shape), np.zeros(shape), np.zeros(shape)
    launch = 1.0 if whole else frac
    f[:, 0], f[:, od0 + n_ov], f[:, sp0 + n_ov] = 1.0, launch, launch
    g[:, od0 + n_ov], g[:, sp0 + n_ov] = 1 - launch, 1 - launch
    shift[:, 0] = np.where(up, wait_tax[0], wait_tax[1])[:, None] * step_h
    shift[:, od0 + n_ov], shift[:, sp0 + n_ov] = step_h, ks
    acts = np.zeros((t_max + 1, *shape), dtype=np.int8)
    value = np.zeros(shape)  # spot in an outage state holds idle's value: the instance is gone
    flat = value.reshape(n_a, -1)
    trans = model.trans
    exp_v, lower, base, low = (np.empty(shape) for _ in range(4))
    exp_flat, lower_flat = exp_v.reshape(n_a, -1), lower.reshape(-1)
    cost = np.empty((3, *shape))
    wait, od, sp = cost
    # Every mode's three costs start as base's (one copy), then the kept and paying modes get their own.
    spread = cost.transpose(1, 0, 2, 3)
    bases = base[:, :: n_ov + 1, None, :]
    # The costs of keeping an instance (on-demand mode od0, spot mode sp0): one strided view of both, written
    # from a whole block (a copy into a strided view is cheap, arithmetic there is not).
    c_s, a_s, m_s, j_s = cost.strides
    kept = np.lib.stride_tricks.as_strided(cost[1, :, od0], (n_a, 2, n_j), (a_s, c_s + (sp0 - od0) * m_s, j_s))
    kept_add = np.zeros(shape)
    kept_add[:, od0], kept_add[:, sp0] = step_h, ks
    # The Safety Net's cells (a miss at every step), as three strided views of ``cost`` (filling them costs
    # less than a ``put`` by index): waiting's and spot's from idle and on-demand below ``wi``, waiting's and
    # on-demand's from the kept spot mode below ``ws``, waiting's and spot's from the paying spot modes below
    # ``ws`` (none when the overhead fits in a step). Spot in an outage is ``sp[dn]``.
    miss_views = [cost[0::2, :, :sp0, :wi], cost[0:2, :, sp0, :ws], cost[0::2, :, sp0 + 1 :, :ws]]
    miss_views = [v for v in miss_views if v.size]
    chose_sp, spot_code = np.empty(shape, dtype=np.bool_), np.empty(shape, dtype=np.int8)
    # The loop's views, made once (a view costs about what a small operation does).
    exp_head, lower_tail, lower_first = exp_v.reshape(-1)[:-1], lower_flat[1:], lower[:, :, 0]
    kept_from = low[:, od0 : sp0 + 1 : sp0 - od0]
    chose_od = acts.view(np.bool_)
    outage = isinstance(dn, slice)
    gone, idle_value = (value[dn, sp0:], value[dn, 0:1]) if outage else (value, value)
    sp_out = sp[dn] if outage else sp
    add, mul, minimum, maximum, less = np.add, np.multiply, np.minimum, np.maximum, np.less
    chose_sp_code = chose_sp.view(np.int8)

    for t in range(1, t_max + 1):
        np.matmul(trans, flat, out=exp_flat)
        # The value one step of slack lower (a miss below slack 0): the whole block moved by one cell.
        lower_tail[...] = exp_head
        lower_first[...] = _BIG
        mul(lower, f, out=base)
        mul(exp_v, g, out=low)
        base += low
        base += shift
        spread[...] = bases
        add(exp_v, kept_add, out=low)
        kept[...] = kept_from
        if hop != 0.0:  # a kept spot instance's zone may go while the set keeps spot: a new one
            sp[:, sp0] = (1 - hop) * sp[:, sp0] + hop * base[:, sp0 + n_ov]
        for i in range(1, n_ov + 1):  # still paying the overhead: a step of slack lower, and the price
            add(lower[:, od0 + i - 1], step_h, out=od[:, od0 + i])
            add(lower[:, sp0 + i - 1], ks, out=sp[:, sp0 + i])
        for v in miss_views:
            v[...] = _BIG
        if outage:
            sp_out[...] = _BIG
        else:
            sp[dn] = _BIG
        # The cheapest choice (an equal on-demand or spot cost does not displace waiting, nor spot on-demand).
        minimum(wait, od, out=low)
        minimum(low, sp, out=value)
        act = acts[t]
        less(od, wait, out=chose_od[t])  # A_OD where on-demand is cheaper than waiting, else A_WAIT
        less(sp, low, out=chose_sp)
        add(chose_sp_code, chose_sp_code, out=spot_code)  # A_SPOT where spot is cheaper than both, else 0
        maximum(act, spot_code, out=act)
        if t < n_j:  # slack j >= t steps with t steps left: no work left, done
            act[:, :, t:] = A_WAIT
            value[:, :, t:] = 0.0
        if outage:
            gone[...] = idle_value
        else:
            value[dn, sp0:] = value[dn, 0:1]
    return acts
