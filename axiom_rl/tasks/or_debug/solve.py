"""Solving a LinearModel with HiGHS, and finding an irreducible infeasible subsystem (IIS).

These functions run in whichever process calls them: the problem generator calls them directly
(its models are its own), the verifier only inside a solver worker (worker.py), with time and
memory limits, because a repair written by a policy is hostile input.

The model is handed to HiGHS as numbers (columns, rows, coefficients), never as text.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from dataclasses import dataclass, replace

from .model import LinearModel

OPTIMAL = "optimal"
INFEASIBLE = "infeasible"
UNBOUNDED = "unbounded"
TIME_LIMIT = "time_limit"
OTHER = "other"
OBJECTIVE_TOLERANCE = 1e-6  # relative (and absolute below 1): the models' optima are exact
# HiGHS's "elastic LP" (2) and "find true IIS" (4) strategies: an irreducible set, not only a
# small one. See the option's description in `highs --options_file=""`.
_IIS_STRATEGY = 2 | 4


@dataclass(frozen=True)
class Solution:
    status: str  # one of the constants above
    objective: float | None = None  # when status is OPTIMAL
    detail: str = ""  # HiGHS's own word for an OTHER status


_FIRST_HIGHS = threading.Lock()
_BANNER_SILENCED = threading.Event()


def new_highs():
    """A silent Highs instance. HiGHS prints a banner on stdout when a process makes its first
    instance, before any option can be set: that one is made with stdout (fd 1) sent to
    /dev/null, where it would otherwise land in a user's output or a worker's replies."""
    import highspy

    with _FIRST_HIGHS:
        if _BANNER_SILENCED.is_set():
            h = highspy.Highs()
        else:
            sys.stdout.flush()
            saved = os.dup(1)
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, 1)
                h = highspy.Highs()
            finally:
                os.dup2(saved, 1)
                os.close(saved)
                os.close(devnull)
            _BANNER_SILENCED.set()
    h.setOptionValue("output_flag", False)
    return h


def _highs(model: LinearModel, time_limit: float):
    import highspy
    import numpy as np

    h = new_highs()
    h.setOptionValue("time_limit", float(time_limit))
    h.setOptionValue("mip_rel_gap", 0.0)  # small models: the true optimum, compared to a tolerance
    column = {v: i for i, v in enumerate(model.variables)}
    n = len(model.variables)
    inf = highspy.kHighsInf
    h.addVars(n, np.zeros(n), np.full(n, inf))
    costs = dict(model.objective)
    h.changeColsCost(n, np.arange(n, dtype=np.int32), np.array([costs.get(v, 0.0) for v in model.variables]))
    if model.sense == "maximize":
        h.changeObjectiveSense(highspy.ObjSense.kMaximize)
    for c in model.constraints:
        lower, upper = c.bounds()
        h.addRow(
            -inf if lower == -math.inf else lower,
            inf if upper == math.inf else upper,
            len(c.terms),
            np.array([column[v] for v, _ in c.terms], dtype=np.int32),
            np.array([a for _, a in c.terms], dtype=np.float64),
        )
    if model.integers:
        index = np.array([column[v] for v in model.variables if v in model.integers], dtype=np.int32)
        h.changeColsIntegrality(len(index), index, np.full(len(index), highspy.HighsVarType.kInteger))
    return h


def solve_model(model: LinearModel, time_limit: float = 5.0) -> Solution:
    import highspy

    h = _highs(model, time_limit)
    h.run()
    status = h.getModelStatus()
    S = highspy.HighsModelStatus
    if status == S.kOptimal:
        return Solution(OPTIMAL, float(h.getInfo().objective_function_value))
    if status == S.kInfeasible:
        return Solution(INFEASIBLE)
    if status in (S.kUnbounded, S.kUnboundedOrInfeasible):
        # HiGHS may not separate the two without a second solve; an unbounded repair is wrong either way.
        return Solution(UNBOUNDED)
    if status == S.kTimeLimit:
        return Solution(TIME_LIMIT)
    return Solution(OTHER, None, h.modelStatusToString(status))


def same_optimum(objective: float, intended: float) -> bool:
    """Whether a repaired model's optimum is the original model's, within OBJECTIVE_TOLERANCE."""
    return abs(objective - intended) <= OBJECTIVE_TOLERANCE * max(1.0, abs(intended))


def is_infeasible(model: LinearModel, time_limit: float = 5.0) -> bool:
    return solve_model(model, time_limit).status == INFEASIBLE


def deletion_filter(model: LinearModel, time_limit: float = 5.0) -> list[str]:
    """The names of an IIS over the constraints, by Chinneck's deletion filter: drop each
    constraint in turn and keep it dropped while the rest stays infeasible. What remains is
    infeasible, and dropping any one of it makes it feasible. Works for LPs and MIPs alike."""
    if not is_infeasible(model, time_limit):
        raise ValueError("the model is feasible: it has no IIS")
    kept = list(model.constraints)
    for c in list(kept):
        trial = [k for k in kept if k is not c]
        if trial and is_infeasible(replace(model, constraints=tuple(trial)), time_limit):
            kept = trial
    return sorted(c.name for c in kept)


def _highs_iis(model: LinearModel, time_limit: float) -> list[str] | None:
    """HiGHS's IIS of an LP (rows only; column bounds are x >= 0 and never in question), or None
    when HiGHS found none it could vouch for."""
    import highspy

    h = _highs(model, time_limit)
    h.setOptionValue("iis_strategy", _IIS_STRATEGY)
    h.run()
    status, iis = h.getIis()
    if status != highspy.HighsStatus.kOk or not iis.valid_ or not list(iis.row_index_):
        return None
    return sorted(model.constraints[i].name for i in iis.row_index_)


def find_iis(model: LinearModel, time_limit: float = 5.0) -> list[str]:
    """An IIS's constraint names: HiGHS's own for an LP. For a MIP (HiGHS computes IISs of LPs
    only), the deletion filter -- started, when the LP relaxation is itself infeasible, from the
    relaxation's IIS, which is infeasible for the MIP too and usually far smaller."""
    if not model.is_mip:
        return _highs_iis(model, time_limit) or deletion_filter(model, time_limit)
    relaxed = replace(model, integers=frozenset())
    if is_infeasible(relaxed, time_limit):
        rows = set(_highs_iis(relaxed, time_limit) or ())
        if rows:
            return deletion_filter(
                replace(model, constraints=tuple(c for c in model.constraints if c.name in rows)), time_limit
            )
    return deletion_filter(model, time_limit)
