"""``orch simulate``'s ADRS score and per-scenario breakdown, and a user's own policy: --policy-file and the
orch.policies entry point."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from orchestrator.policy import registry
from orchestrator.policy.evaluate import scenario_of, summarize
from orchestrator.policy.model import ProblemSpec
from orchestrator.policy.registry import PolicyFileError, load_policy_file, make_policy
from orchestrator.policy.simulator import simulate
from tests.policy._helpers import zones
from tests.policy.test_traces_cli import _trace_dir, orch

MINE = '''
from orchestrator.policy.model import ON_DEMAND, WAIT


class AlwaysOnDemand:
    name = "always-od"

    def reset(self, spec, zones):
        pass

    def decide(self, obs):
        return WAIT if obs.remaining_h <= 0 else ON_DEMAND


POLICY = AlwaysOnDemand
'''


def test_score_is_mean_plus_a_quarter_std() -> None:
    spec = ProblemSpec(work_h=2, deadline_h=10, overhead_h=0.5, spot_price=0.5)
    runs = [simulate(spec, zones(trace), make_policy("greedy")) for trace in ("1" * 10, "0" * 3 + "1" * 7)]
    s = summarize("greedy", runs)
    # 1st: 2.5 h of spot x 0.5 = 1.25 -> 0.5; 2nd: waits 3 ticks, then the same: 0.5 too.
    costs = [r.normalized_cost for r in runs]
    assert s.score == pytest.approx(statistics.fmean(costs) + 0.25 * statistics.pstdev(costs))


def test_scenarios_are_directories_split_single_and_multi() -> None:
    assert scenario_of("availability/1-node/aws-02-15-2023/us-east-1a_v100_1", 1) == \
        "availability/1-node/aws-02-15-2023 (single)"
    assert scenario_of("availability/1-node/aws-02-15-2023/*", 9) == "availability/1-node/aws-02-15-2023 (multi)"
    assert scenario_of("z0", 1) == "files (single)"


def test_simulate_runs_a_policy_file_and_reports_score_and_scenarios(tmp_path: Path) -> None:
    mine = tmp_path / "mine.py"
    mine.write_text(MINE)
    out = orch("simulate", "--traces", str(_trace_dir(tmp_path)), "--work", "10h", "--deadline", "15h",
               "--starts", "2", "--policy", "up", "--policy-file", str(mine), "--json", "--workers", "2")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    summary = {row["policy"]: row for row in doc["summary"]}
    assert list(summary) == ["uniform-progress", "always-od", "optimum"]
    assert summary["always-od"]["mean_cost"] == pytest.approx(1.0) and summary["always-od"]["score"] == \
        pytest.approx(1.0)
    up = summary["uniform-progress"]
    assert up["score"] == pytest.approx(up["mean_cost"] + 0.25 * up["std_cost"])
    assert [s["scenario"] for s in doc["scenarios"]] == ["set (single)", "set (multi)"]
    assert [s["runs"] for s in doc["scenarios"]] == [4, 2]
    table = orch("simulate", "--traces", str(_trace_dir(tmp_path)), "--work", "10h", "--deadline", "15h",
                 "--starts", "2", "--policy-file", str(mine))
    assert table.returncode == 0, table.stderr
    assert "always-od" in table.stdout and "per scenario" in table.stdout and "score" in table.stdout


@pytest.mark.parametrize(("text", "message"), [
    ("x = 1\n", "defines no POLICY"),
    ("def broken(:\n", "SyntaxError"),
    ("POLICY = object\n", "must return an object with"),
    ("class P:\n    name = 'orch'\n    def reset(self, s, z): pass\n    def decide(self, o): pass\nPOLICY = P\n",
     "a built-in policy's name"),
])
def test_a_bad_policy_file_is_one_line_and_exit_2(tmp_path: Path, text: str, message: str) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text(text)
    with pytest.raises(PolicyFileError, match=message):
        load_policy_file(bad)
    out = orch("simulate", "--traces", str(_trace_dir(tmp_path)), "--policy-file", str(bad))
    assert out.returncode == 2 and message in out.stderr and "Traceback" not in out.stderr


def test_an_entry_point_policy_is_found_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    class FakeEntryPoint:
        name = "Plugged"

        def load(self) -> type:
            return make_policy("greedy").__class__

    def entry_points(group: str) -> list[FakeEntryPoint]:
        return [FakeEntryPoint()] if group == "orch.policies" else []

    monkeypatch.setattr("importlib.metadata.entry_points", entry_points)
    assert make_policy("plugged").name == "greedy"
    with pytest.raises(registry.UnknownPolicyError, match=r"orch\.policies"):
        make_policy("nowhere")
