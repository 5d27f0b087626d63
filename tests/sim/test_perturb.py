"""Perturbations without a server: the pure decision function (rates, schedules, determinism across processes),
spec validation with file:line, presets and the --preset flag."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from argparse import Namespace
from pathlib import Path

import pytest

from aw_mcp.load.world import load_world, load_world_text
from aw_mcp.sim.fault_apply import error_body, fill_template
from aw_mcp.sim.fault_planner import Planner, breaker_state, decide, uniform
from aw_mcp.sim.world_setup import apply_overrides, preset_from_flag
from aw_mcp.spec.faults import LatencyFault, Perturbation
from aw_mcp.spec.issues import WorldSpecError
from tests.conftest import REPO

N = 400


def perturbation(fault: dict, schedule: dict, name: str = "p", tool: str = "*") -> Perturbation:
    return Perturbation.model_validate(
        {"name": name, "match": {"tool": tool}, "fault": fault, "schedule": schedule}
    )


ERROR = {"kind": "error", "status": 503}


def fires(p: Perturbation, n_calls: int = N, seed: int = 7, outcomes: list[bool] | None = None) -> list[bool]:
    return [
        decide(seed, p, n, "get_order", {"order_id": f"ORD-{n % 5}"}, outcomes or []) is not None
        for n in range(1, n_calls + 1)
    ]


def within_binomial(count: int, n: int, p: float, sigmas: float = 5.0) -> bool:
    """A bound that fails by chance about once in 3 million runs."""
    sd = math.sqrt(n * p * (1 - p))
    return abs(count - n * p) <= sigmas * sd


@pytest.mark.parametrize("probability", [0.05, 0.3, 0.7])
def test_random_rate_within_binomial_bounds(probability: float) -> None:
    p = perturbation(ERROR, {"mode": "random", "probability": probability})
    assert within_binomial(sum(fires(p)), N, probability)


def test_random_extremes_are_exact() -> None:
    assert not any(fires(perturbation(ERROR, {"mode": "random", "probability": 0.0})))
    assert all(fires(perturbation(ERROR, {"mode": "random", "probability": 1.0})))


def test_uniform_draws_look_uniform_and_depend_on_every_input() -> None:
    draws = [uniform(1, "p", n, "t", {}) for n in range(1, 2001)]
    assert all(0.0 <= d < 1.0 for d in draws)
    assert abs(sum(draws) / len(draws) - 0.5) < 0.03
    base = uniform(1, "p", 1, "t", {"a": 1})
    assert len({base, uniform(2, "p", 1, "t", {"a": 1}), uniform(1, "q", 1, "t", {"a": 1})}) == 3
    assert len({base, uniform(1, "p", 2, "t", {"a": 1}), uniform(1, "p", 1, "u", {"a": 1})}) == 3
    assert base != uniform(1, "p", 1, "t", {"a": 2})


def test_index_schedules_fire_on_the_documented_calls() -> None:
    def fired_calls(schedule: dict, n: int = 12) -> list[int]:
        p = perturbation(ERROR, schedule)
        return [i for i, hit in enumerate(fires(p, n), 1) if hit]

    assert fired_calls({"mode": "always"}, 4) == [1, 2, 3, 4]
    assert fired_calls({"mode": "every", "every": 5}) == [5, 10]
    assert fired_calls({"mode": "every", "every": 4, "length": 2}) == [3, 4, 7, 8, 11, 12]
    assert fired_calls({"mode": "first", "calls": 3}) == [1, 2, 3]
    assert fired_calls({"mode": "after", "calls": 9}) == [10, 11, 12]
    assert fired_calls({"mode": "window", "start": 4, "end": 6}) == [4, 5, 6]
    assert fired_calls({"mode": "window", "start": 11}) == [11, 12]


def test_index_schedule_with_probability_thins_its_phase() -> None:
    p = perturbation(ERROR, {"mode": "after", "calls": 100, "probability": 0.5})
    hits = fires(p)
    assert not any(hits[:100])
    assert within_binomial(sum(hits[100:]), N - 100, 0.5)


def test_degrade_rate_grows_with_the_call_count() -> None:
    p = perturbation(ERROR, {"mode": "degrade", "start": 0.0, "step": 0.0025, "max": 0.8})
    hits = fires(p)
    first, last = sum(hits[:100]), sum(hits[300:])
    # expected rates: ~0.12 over calls 1-100, 0.75-0.8 over calls 301-400
    assert first < 25 and last > 60
    expected = sum(min(0.8, 0.0025 * (n - 1)) for n in range(1, N + 1))
    assert abs(sum(hits) - expected) < 5 * math.sqrt(expected)


def test_degrade_scales_latency_instead_of_thinning_it() -> None:
    p = perturbation(
        {"kind": "latency", "fixed_ms": 100}, {"mode": "degrade", "start": 1.0, "step": 0.5, "max": 2.0}
    )
    scales = [decide(1, p, n, "t", {}).scale for n in range(1, 5)]  # type: ignore[union-attr]
    assert scales == [1.0, 1.5, 2.0, 2.0]


def test_circuit_breaker_states() -> None:
    assert breaker_state([], 3, 2) == "closed"
    assert breaker_state([True, True], 3, 2) == "closed"
    assert breaker_state([True, True, True], 3, 2) == "open"
    assert breaker_state([True, True, True, True], 3, 2) == "open"  # cooling down: 1 of 2 calls
    assert breaker_state([True, True, True, True, True], 3, 2) == "half_open"
    assert breaker_state([True] * 5 + [False], 3, 2) == "closed"  # the trial call succeeded
    assert breaker_state([True] * 5 + [True], 3, 2) == "open"  # the trial failed: open again
    assert breaker_state([True, False, True, True], 3, 2) == "closed"  # not consecutive


def test_circuit_breaker_open_always_fires_closed_uses_its_probability() -> None:
    p = perturbation(ERROR, {"mode": "circuit_breaker", "failures": 2, "cooldown": 3, "probability": 0.0})
    assert decide(1, p, 3, "t", {}, [True, True]).state == "open"  # type: ignore[union-attr]
    assert decide(1, p, 3, "t", {}, [False, True]) is None
    loud = perturbation(ERROR, {"mode": "circuit_breaker", "failures": 2, "cooldown": 3, "probability": 0.3})
    closed_hits = sum(decide(1, loud, n, "t", {}, []) is not None for n in range(1, N + 1))
    assert within_binomial(closed_hits, N, 0.3)


def test_planner_counts_matched_calls_per_perturbation_and_session() -> None:
    only_cancel = perturbation(ERROR, {"mode": "every", "every": 2}, name="c", tool="cancel_*")
    planner = Planner([only_cancel], seed=1)
    calls = ["get_order", "cancel_order", "get_order", "cancel_order", "cancel_order", "cancel_order"]
    hits = [bool(planner.plan("s1", [], tool, {})) for tool in calls]
    assert hits == [False, False, False, True, False, True]  # the 2nd and 4th cancel_order calls
    assert not planner.plan("s2", [], "cancel_order", {})  # a new session counts from 1


def test_planner_resumes_counts_from_the_recorded_history() -> None:
    p = perturbation(ERROR, {"mode": "window", "start": 3, "end": 3})
    planner = Planner([p], seed=1)
    history = [("get_order", {}, False), ("get_order", {}, False)]
    assert planner.plan("resumed", history, "get_order", {})  # this is matched call 3


def test_argument_subset_match_with_globs() -> None:
    p = Perturbation.model_validate(
        {"name": "eu", "match": {"tool": "get_*", "arguments": {"region": "eu-*", "tier": 2}}, "fault": ERROR}
    )
    assert p.match.matches("get_invoice", {"region": "eu-west", "tier": 2, "x": 1})
    assert not p.match.matches("get_invoice", {"region": "us-east", "tier": 2})
    assert not p.match.matches("get_invoice", {"region": "eu-west"})
    assert not p.match.matches("list_invoices", {"region": "eu-west", "tier": 2})


_CHILD = """
import json, sys
from aw_mcp.load.world import load_world
from aw_mcp.sim.fault_planner import Planner
world = load_world(sys.argv[1])
planner = Planner(world.all_perturbations(), world.seed)
out = []
for i in range(200):
    tool = ["get_invoice", "list_payments", "create_payment", "issue_refund"][i % 4]
    args = {"invoice_id": f"inv_{i % 7}", "region": "eu"} if tool == "get_invoice" else {"payment_id": f"p{i}"}
    out.append([f.name for f in planner.plan("s", [], tool, args)])
print(json.dumps(out))
"""


def _fault_sequence(world_path: Path) -> list[list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(world_path)], capture_output=True, text=True, check=True, cwd=REPO
    )
    return json.loads(done.stdout)


def test_same_seed_gives_the_same_faults_in_two_processes(tmp_path: Path) -> None:
    world = REPO / "worlds" / "faults_payments.yaml"
    first, second = _fault_sequence(world), _fault_sequence(world)
    assert first == second
    assert sum(map(len, first)) > 50  # the sequence is not trivially empty
    reseeded = tmp_path / "reseeded.yaml"
    reseeded.write_text(world.read_text().replace("seed: 20260301", "seed: 1"))
    assert _fault_sequence(reseeded) != first


def test_latency_distributions_have_the_asked_centre() -> None:
    def samples(fault: dict) -> list[float]:
        f = LatencyFault.model_validate({"kind": "latency", **fault})
        return [
            f.sample_ms(
                uniform(0, "l", n, "t", {}, "a"),
                uniform(0, "l", n, "t", {}, "b"),
                uniform(0, "l", n, "t", {}, "c"),
            )
            for n in range(1, 2001)
        ]

    fixed = samples({"fixed_ms": 300, "jitter_ms": 50})
    assert min(fixed) >= 250 and max(fixed) <= 350 and abs(sum(fixed) / len(fixed) - 300) < 5
    uni = samples({"min_ms": 100, "max_ms": 200})
    assert min(uni) >= 100 and max(uni) <= 200 and abs(sum(uni) / len(uni) - 150) < 4
    normal = samples({"mean_ms": 500, "stddev_ms": 50})
    assert abs(sum(normal) / len(normal) - 500) < 5
    lognormal = sorted(samples({"median_ms": 400, "sigma": 0.6}))
    assert abs(lognormal[len(lognormal) // 2] - 400) < 30


def test_error_bodies_are_realistic_and_use_the_arguments() -> None:
    world = load_world_text(_WORLD.format(perturbations="[]"))
    cancel = world.tool("cancel_order")
    assert cancel is not None

    def body(**fault: object) -> str:
        from aw_mcp.spec.faults import ErrorFault

        return error_body(
            ErrorFault.model_validate({"kind": "error", **fault}), cancel, {"order_id": "ORD-7"}
        ).text

    assert (
        body(status=503)
        == "Error: 503 Service Unavailable - The service is temporarily unavailable. Please retry later."
    )
    assert "429 Too Many Requests" in body(status=429) and "Retry after 30 seconds" in body(status=429)
    assert "expired" in body(status=401) and "expired" in body(status=403)
    assert (
        body(status=404, message="Order {order_id} not found")
        == "Error: 404 Not Found - Order ORD-7 not found"
    )
    assert body(timeout_s=30) == "Error: Request to cancel_order timed out after 30s"
    assert "Quota Exceeded" in body(quota=True)
    assert body(declared="already_shipped") == "Error: 409 Conflict - Order ORD-7 has already shipped"
    as_json = json.loads(body(status=429, retry_after_s=12, format="json"))
    assert as_json == {
        "error": {
            "status": 429,
            "code": "RATE_LIMITED",
            "message": "Rate limit exceeded for this API key. Retry after 12 seconds.",
            "retry_after": 12,
        }
    }
    assert fill_template("{order_id} {missing}", {"order_id": "A"}) == "A {missing}"


# ---------------------------------------------------------------------------------------------------------------
# spec validation
# ---------------------------------------------------------------------------------------------------------------

_WORLD = """\
name: checks
seed: 3
tools:
  - name: get_order
    inputSchema: {{type: object, properties: {{order_id: {{type: string}}}}}}
    annotations: {{readOnlyHint: true}}
  - name: cancel_order
    inputSchema: {{type: object, properties: {{order_id: {{type: string}}}}}}
    errors:
      - {{name: already_shipped, status: 409, message: "Order {{order_id}} has already shipped"}}
perturbations: {perturbations}
"""


def _issues(perturbations: str, tmp_path: Path, extra: str = "") -> list[str]:
    path = tmp_path / "w.yaml"
    path.write_text(_WORLD.format(perturbations=perturbations) + extra)
    with pytest.raises(WorldSpecError) as info:
        load_world(path)
    return [line.replace(str(path), "w.yaml") for line in str(info.value).splitlines()]


def test_structural_errors_name_their_line(tmp_path: Path) -> None:
    issues = _issues(
        """
  - name: unknown-kind
    fault: {kind: explode}
  - name: bad-probability
    fault: {kind: error, status: 503}
    schedule: {mode: random, probability: 1.5}
  - name: typo
    fault: {kind: latency, fixed_ms: 10}
    shedule: {mode: always}
  - name: nested-typo
    fault:
      kind: latency
      fixd_ms: 10
  - name: reserved
    fault: {kind: protocol_error, code: -32042}
  - name: bad-mode
    fault: {kind: empty}
    schedule: {mode: sometimes}""",
        tmp_path,
    )
    text = "\n".join(issues)
    assert "w.yaml:13: perturbations[0].fault: Input tag 'explode'" in text
    assert "w.yaml:16: perturbations[1].schedule.probability: Input should be less than or equal to 1" in text
    assert "w.yaml:19: perturbations[2].shedule: unknown key" in text
    assert "w.yaml:23: perturbations[3].fault.fixd_ms: unknown key" in text
    assert "w.yaml:25: perturbations[4].fault: code -32042 is in the range -32099..-32020" in text
    assert "w.yaml:28: perturbations[5].schedule: Input tag 'sometimes'" in text


def test_cross_checks_name_their_line(tmp_path: Path) -> None:
    issues = _issues(
        """
  - name: no-such-tool
    match: {tool: "refund_*"}
    fault: {kind: error, status: 503}
  - name: undeclared
    match: {tool: "*_order"}
    fault: {kind: error, declared: already_shipped}
  - name: no-slot
    fault: {kind: inject, slot: nowhere}
  - name: remove-ghost
    fault: {kind: catalog, remove: [ghost]}
  - name: no-such-tool
    fault: {kind: empty}""",
        tmp_path,
    )
    text = "\n".join(issues)
    assert "w.yaml:13: perturbations[0].match.tool: 'refund_*' matches no tool" in text
    assert "w.yaml:17: perturbations[1].fault.declared: tool(s) get_order declare no error named" in text
    assert "w.yaml:19: perturbations[2].fault.slot: unknown injection slot" in text
    assert "w.yaml:21: perturbations[3].fault.remove[0]: no tool named 'ghost'" in text
    assert "w.yaml:22: perturbations[4]: duplicate perturbation name 'no-such-tool'" in text


def test_preset_errors_name_their_line(tmp_path: Path) -> None:
    issues = _issues(
        "[]", tmp_path, "presets:\n  - flaky\n  - {name: brownout, probabilty: 0.5}\n  - chaos\n"
    )
    text = "\n".join(issues)
    assert "w.yaml:14: presets[1].probabilty: unknown key" in text
    assert "w.yaml:15: presets[2]: Input tag 'chaos'" in text


def test_presets_expand_with_overrides() -> None:
    world = load_world_text(
        _WORLD.format(perturbations="[]")
        + "presets: [flaky, {name: brownout, probability: 0.5, tools: 'cancel_*'}, slow_network, adversarial]\n"
    )
    names = [p.name for p in world.all_perturbations()]
    assert names[:3] == ["flaky/unavailable", "flaky/timeout", "flaky/rate-limited"]
    assert (
        "brownout/breaker" in names and "slow_network/latency" in names and "adversarial/injection" in names
    )
    breaker = next(p for p in world.all_perturbations() if p.name == "brownout/breaker")
    assert breaker.schedule.probability == 0.5 and breaker.match.tool == "cancel_*"  # type: ignore[union-attr]
    assert not any(p.fault.kind == "malformed" for p in world.all_perturbations())  # opt-in only


def test_preset_flag_adds_a_preset_at_launch() -> None:
    world = load_world_text(_WORLD.format(perturbations="[]"))
    flagged = apply_overrides(world, Namespace(preset=["flaky:probability=0.4", "slow_network"]))
    names = [p.name for p in flagged.all_perturbations()]
    assert "flaky/unavailable" in names and "slow_network/latency" in names
    assert flagged.all_perturbations()[0].schedule.probability == 0.4  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="probability"):
        preset_from_flag("flaky:probability=3")
    with pytest.raises(WorldSpecError, match="matches no tool"):
        apply_overrides(world, Namespace(preset=["flaky:tools=nothing_*"]))


def test_bundled_fault_world_is_valid_and_uses_many_kinds_and_modes() -> None:
    world = load_world(REPO / "worlds" / "faults_payments.yaml")
    kinds = {p.fault.kind for p in world.all_perturbations()}
    modes = {p.schedule.mode for p in world.all_perturbations()}
    assert {"error", "latency", "counterfactual", "inject", "stale", "catalog"} <= kinds
    assert {"random", "always", "every", "first", "after", "window", "circuit_breaker", "degrade"} <= modes
    from aw_mcp.cli import main

    assert main(["validate", str(REPO / "worlds" / "faults_payments.yaml")]) == 0


def test_ledger_gives_fault_made_changes_always_and_left_out_turns_after_compaction() -> None:
    """Issue 31.3: what the kept turns show is never repeated. A counterfactual's change and a wrong-content
    fault's truth are always noted; what a call established is noted only once its turn is left out (compaction),
    as JSON numbered by turn (an error call or an invalid one never became a turn and establishes nothing)."""
    from aw_mcp.sim.ledger import Ledger, ledger_notes
    from aw_mcp.trajectory.records import CallRecord

    world = load_world_text(_WORLD.format(perturbations="[]"))

    def record(index: int, tool: str, observation: str, **extra: object) -> CallRecord:
        return CallRecord.model_validate(
            {
                "world": "checks",
                "session": "s",
                "index": index,
                "tool": tool,
                "arguments": {"order_id": "ORD-1"},
            }
            | {"observation": observation, **extra}
        )

    records = [
        (record(0, "get_order", '{"id": "ORD-1", "status": "shipped"}'), 1),  # a read
        (
            record(
                1, "cancel_order", '{"order": {"id": "ORD-1", "status": "cancelled", "refund_id": "rf_9"}}'
            ),
            2,
        ),
        (record(2, "cancel_order", "Invalid arguments", error="invalid arguments", in_history=False), None),
        (
            record(
                3,
                "get_order",
                '{"id": "ORD-1", "status": "delivered"}',
                faults=[
                    {"name": "w", "kind": "wrong_content", "instruction": "shows delivered", "applied": True}
                ],
            ),
            3,
        ),
        (
            record(
                4,
                "cancel_order",
                "Cancelled with a fee.",
                faults=[
                    {"name": "c", "kind": "counterfactual", "instruction": "fees apply", "applied": True}
                ],
            ),
            4,
        ),
    ]
    ledger = Ledger()
    for entry, turn in records:
        ledger.add(entry, turn, (turn or 2) + 1)
    entries = ledger.entries(world.tool)
    faults = [
        "Turn 3 (get_order) deliberately showed wrong content (shows delivered); the true state did not change.",
        "From turn 4 on, this holds in the world: fees apply",
    ]
    assert ledger_notes(entries, first_kept_turn=1) == faults  # nothing left out: the turns show the rest
    [*kept, left_out] = ledger_notes(entries, first_kept_turn=3)  # turns 1 and 2 left out
    assert kept == faults
    assert left_out.splitlines()[1:] == [
        '  {"turn": 1, "tool": "get_order", "arguments": {"order_id": "ORD-1"}, '
        '"established": {"id": "ORD-1", "status": "shipped"}}',
        '  {"turn": 2, "tool": "cancel_order", "arguments": {"order_id": "ORD-1"}, '
        '"established": {"id": "ORD-1", "status": "cancelled", "refund_id": "rf_9"}}',
    ]
    # Bounded: the oldest reads go first, then writes; a write compaction removed stays while a read can go.
    [*_, bounded] = ledger_notes(entries, first_kept_turn=3, limit=150)
    assert '"turn": 2' in bounded and '"turn": 1' not in bounded and "1 older entry not listed" in bounded
    screens = Ledger(include_calls=False)
    for entry, turn in records:
        screens.add(entry, turn, (turn or 2) + 1)
    assert ledger_notes(screens.entries(world.tool), first_kept_turn=5) == faults


def test_the_world_spec_loads_without_the_code_that_applies_faults() -> None:
    """world.py reads perturbation specs, presets and injection texts; applying faults reads the world's tools, so
    it must stay out of world.py's imports (the old cycle world → faults → prompting → world)."""
    check = "import sys, aw_mcp.spec.world; sys.exit('aw_mcp.sim.fault_apply' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", check], cwd=str(REPO), timeout=60).returncode == 0
