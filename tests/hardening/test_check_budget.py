"""Issue 34, items 1-3 (and the keyword side of item 7): no schema check can stall the event loop. A `$ref` DAG is
walked once per (subschema, value), `uniqueItems` hashes, `format: regex` is parsed by RE2 within a size bound,
`multipleOf` never overflows, and a check past its budget is one clear problem naming the keyword. The memoizing
validator must decide exactly as jsonschema does (a seeded comparison on random schemas and values).

Before the fix: 18 levels of fan-out held the loop 16 s (40 never ended), 4,000 objects under `uniqueItems` 38 s,
a 4 MB `format: regex` value 18 s; `a{4294967296}` and `multipleOf` on 1e400 were internal errors."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from typing import Any

import jsonschema
import pytest

from aw_mcp.load.world import load_world_text
from aw_mcp.sim.simulator import Simulator
from aw_mcp.spec import check_budget
from aw_mcp.spec.check_budget import best_problem, canonical
from aw_mcp.spec.issues import WorldSpecError
from aw_mcp.spec.schema_check import SchemaCheck
from tests.conftest import REPO, ScriptedWorldModel, observation
from tests.hardening.loop_lag import PING_BOUND_S, lag_during


def fan_out(levels: int, keyword: str = "anyOf") -> dict[str, Any]:
    """Each level's branches point twice at the next level: 2^levels paths through `levels + 1` subschemas."""
    defs: dict[str, Any] = {
        f"d{i}": {keyword: [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
        for i in range(levels)
    }
    defs[f"d{levels}"] = {"type": "string"}
    return {"type": "object", "$defs": defs, "properties": {"p": {"$ref": "#/$defs/d0"}}}


def world_text(
    input_schema: dict[str, Any], output_schema: dict[str, Any] | None = None, extra: str = ""
) -> str:
    text = f"name: bounds\ntools:\n  - name: t\n    inputSchema: {json.dumps(input_schema)}\n"
    if output_schema is not None:
        text += f"    outputSchema: {json.dumps(output_schema)}\n"
    return text + extra


def test_ref_fan_out_is_linear_in_a_child_process() -> None:
    """40 levels (2^40 paths) in every applicator, for arguments, answers and a world file's example; in a child
    process with a deadline, so that before the fix the test fails instead of hanging."""
    script = (
        "import json, sys\n"
        "from aw_mcp.load.world import load_world_text\n"
        "cases = json.loads(sys.stdin.read())\n"
        "for text, bad in cases:\n"
        "    tool = load_world_text(text).tool('t')\n"
        "    assert tool.argument_problems({'p': bad}), text[:80]\n"
        "    assert tool.argument_problems({'p': 'ok'}) == [] or 'oneOf' in text\n"
        "    assert tool.output_problem({'p': bad}) is not None\n"
    )
    cases = []
    for keyword in ("anyOf", "allOf", "oneOf"):
        schema = fan_out(40, keyword)
        example = "    examples: [{arguments: {p: x}, result: {p: x}}]\n" if keyword != "oneOf" else ""
        cases.append((world_text(schema, schema, example), 1))
    done = subprocess.run(
        [sys.executable, "-c", script],
        input=json.dumps(cases),
        cwd=REPO,
        timeout=60,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_check_past_its_budget_names_the_keyword(monkeypatch: pytest.MonkeyPatch) -> None:
    tool = load_world_text(world_text(fan_out(6))).tool("t")
    assert tool is not None
    monkeypatch.setattr(check_budget, "MAX_CHECK_STEPS", 10)  # off an event loop, as here
    (problem,) = tool.argument_problems({"p": 1})
    assert problem.startswith(
        "the arguments could not be checked against inputSchema: the check took more than"
    )
    assert "at the keyword `" in problem


def test_unique_items_hashes_canonical_json() -> None:
    tool = load_world_text(world_text({"type": "object", "properties": {"a": {"uniqueItems": True}}})).tool(
        "t"
    )
    assert tool is not None
    assert tool.argument_problems({"a": [{"i": i, "tags": [i, "x"]} for i in range(4000)]}) == []
    twice = [{"i": i} for i in range(4000)] + [{"i": 17}]
    assert tool.argument_problems({"a": twice}) == [
        "field `a`: has non-unique elements (items 17 and 4000 are equal)"
    ]
    assert tool.argument_problems({"a": [1, 1.0]})  # one number
    assert tool.argument_problems({"a": [{"x": 1, "y": 2}, {"y": 2, "x": 1}]})  # key order does not matter
    assert tool.argument_problems({"a": [1, True]}) == [] and tool.argument_problems({"a": [0, False]}) == []
    assert tool.argument_problems({"a": [[1, 2], [2, 1]]}) == []  # arrays are ordered
    assert canonical({"a": [1, {"b": None}]}) == canonical({"a": [1.0, {"b": None}]})


def test_format_regex_is_parsed_within_a_bound() -> None:
    tool = load_world_text(world_text({"type": "object", "properties": {"r": {"format": "regex"}}})).tool("t")
    assert tool is not None
    huge = "|".join(f"x{i}" for i in range(550_000))  # 4 MB: Python's re took 18 s
    (problem,) = tool.argument_problems({"r": huge})
    assert "field `r`: is not a valid `format: regex`: a regex of" in problem and "at most 32,768" in problem
    assert not any("cannot be checked" in p for p in tool.argument_problems({"r": "a{4294967296}"}))
    assert (
        tool.argument_problems({"r": "(a)\\1"}) == []
    )  # a backreference: RE2 lacks it, Python's parser takes it
    assert tool.argument_problems({"r": "^[a-z]+$"}) == []
    (problem,) = tool.argument_problems({"r": "(unclosed"})
    assert "is not a valid `format: regex`: not a regex" in problem


def test_multiple_of_never_overflows_and_non_finite_numbers_are_refused() -> None:
    schema = {"type": "object", "properties": {"a": {"multipleOf": 0.75}, "b": {"multipleOf": 3}}}
    tool = load_world_text(world_text(schema)).tool("t")
    assert tool is not None
    assert tool.argument_problems({"a": 3 * 10**400}) == []  # exact: a float division would overflow
    (problem,) = tool.argument_problems({"a": 10**400})
    assert problem.startswith("field `a`: 10000") and "more characters]" in problem  # the number, cut
    for value in (float("inf"), float("-inf"), float("nan"), json.loads("1e400")):
        (problem,) = tool.argument_problems({"b": value})
        assert problem.startswith("field `b`: ") and "is not a JSON number (JSON has no NaN" in problem
    (problem,) = tool.argument_problems({"c": [1, {"d": float("nan")}]})
    assert problem.startswith("field `c.1.d`: nan is not a JSON number")


def test_a_ref_to_something_that_is_not_a_schema_is_refused_at_load() -> None:
    schema = {"type": "object", "properties": {"a": {"enum": [1, 2]}, "b": {"$ref": "#/properties/a/enum"}}}
    with pytest.raises(WorldSpecError) as caught:
        load_world_text(world_text(schema), "w.yaml")
    assert "w.yaml:4: tools[0].inputSchema:" in str(caught.value)
    assert "points at an array, not a schema" in str(caught.value)


# --- the memo decides as jsonschema does -------------------------------------------------------------------------


def _random_schema(rng: random.Random, depth: int, defs: list[str]) -> Any:
    if depth <= 0 or rng.random() < 0.2:
        return rng.choice(
            [
                {"type": rng.choice(["string", "integer", "number", "object", "array", "boolean", "null"])},
                {"minimum": rng.randint(-2, 2)},
                {"enum": [1, "a", None, [1]]},
                {"const": rng.choice([1, "a", {"k": 1}])},
                {"multipleOf": rng.choice([2, 0.5])},
                {"maxLength": 2},
                {"required": ["k"]},
                {"uniqueItems": True},
                {"$ref": f"#/$defs/{rng.choice(defs)}"} if defs else True,
                rng.choice([True, False]),
            ]
        )
    sub = lambda: _random_schema(rng, depth - 1, defs)  # noqa: E731
    keyword = rng.choice(
        [
            "anyOf",
            "allOf",
            "oneOf",
            "not",
            "if",
            "properties",
            "items",
            "prefixItems",
            "contains",
            "ref",
            "dep",
        ]
    )
    if keyword in ("anyOf", "allOf", "oneOf"):
        return {keyword: [sub() for _ in range(rng.randint(1, 3))]}
    if keyword == "not":
        return {"not": sub()}
    if keyword == "if":
        return {"if": sub(), "then": sub(), "else": sub()}
    if keyword == "properties":
        out: dict[str, Any] = {"properties": {"k": sub(), "m": sub()}}
        extra = rng.choice(["additionalProperties", "unevaluatedProperties", None])
        if extra:
            out[extra] = sub() if rng.random() < 0.5 else False
        return out
    if keyword == "items":
        return {"items": sub(), "minItems": rng.randint(0, 2)}
    if keyword == "prefixItems":
        return {"prefixItems": [sub()], "unevaluatedItems": rng.choice([False, sub()])}
    if keyword == "contains":
        return {"contains": sub(), "unevaluatedItems": rng.choice([False, True, sub()])}
    if keyword == "dep":
        return {"dependentSchemas": {"k": sub()}, "unevaluatedProperties": False}
    return {"$ref": f"#/$defs/{rng.choice(defs)}"} if defs else sub()


def _random_value(rng: random.Random, depth: int) -> Any:
    if depth <= 0 or rng.random() < 0.3:
        return rng.choice([1, 2, 0.5, -3, "a", "abc", None, True, False, [], {}])
    if rng.random() < 0.5:
        return [_random_value(rng, depth - 1) for _ in range(rng.randint(0, 3))]
    keys = rng.sample(["k", "m", "z"], rng.randint(0, 3))
    return {key: _random_value(rng, depth - 1) for key in keys}


def test_the_memoizing_validator_decides_as_jsonschema_does() -> None:
    rng = random.Random(34)
    compared = 0
    for _ in range(300):
        names = ["a", "b", "c"]
        defs = {name: _random_schema(rng, 2, names[i + 1 :]) for i, name in enumerate(names)}
        root = _random_schema(rng, 3, names)
        schema = {"$defs": defs, **(root if isinstance(root, dict) else {"allOf": [root]})}
        ours = SchemaCheck(schema)
        theirs = jsonschema.Draft202012Validator(schema)
        for _ in range(5):
            value = _random_value(rng, 3)
            expected = list(theirs.iter_errors(value))
            got = ours.errors(value)
            assert bool(got) == bool(expected), (schema, value, got, expected)
            assert {tuple(e.absolute_path) for e in got} == {tuple(e.absolute_path) for e in expected}, (
                schema,
                value,
            )
            best = jsonschema.exceptions.best_match(expected)
            found = best_problem(got)
            if best is not None and best.validator != "uniqueItems":
                assert found is not None and found[1] == list(best.absolute_path), (schema, value)
                assert found[0].message == best.message, (schema, value)
            compared += 1
    assert compared > 1000


# --- another session's pings during each former stall ------------------------------------------------------------


def _simulator(text: str, answer: str = '{"p": "x"}') -> tuple[Simulator, ScriptedWorldModel]:
    model = ScriptedWorldModel(lambda *_: observation(answer))
    return Simulator(load_world_text(text), model), model


@pytest.mark.anyio
async def test_pings_during_an_18_level_fan_out_in_arguments_and_answers() -> None:
    schema = fan_out(18)
    simulator, model = _simulator(world_text(schema, schema), answer='{"p": 1}')
    outcome, lag = await lag_during(lambda: simulator.call("t", {"p": 1}))
    assert lag < PING_BOUND_S, f"a ping waited {lag:.2f} s"
    assert outcome.is_error and "Invalid arguments for tool t: field `p`: 1 is not valid" in outcome.text
    assert model.calls == []
    outcome, lag = await lag_during(lambda: simulator.call("t", {"p": "ok"}))  # the answer breaks it: retried
    assert lag < PING_BOUND_S, f"a ping waited {lag:.2f} s"
    assert outcome.is_error and "did not produce a valid result" in outcome.text


@pytest.mark.anyio
async def test_pings_during_4000_unique_objects() -> None:
    simulator, _ = _simulator(world_text({"type": "object", "properties": {"a": {"uniqueItems": True}}}))
    arguments = {"a": [{"i": i, "name": f"item {i}"} for i in range(4000)] + [{"i": 3, "name": "item 3"}]}
    outcome, lag = await lag_during(lambda: simulator.call("t", arguments))
    assert lag < PING_BOUND_S, f"a ping waited {lag:.2f} s"
    assert outcome.is_error and "has non-unique elements (items 3 and 4000 are equal)" in outcome.text


@pytest.mark.anyio
async def test_pings_during_a_4_mb_regex_argument() -> None:
    simulator, _ = _simulator(world_text({"type": "object", "properties": {"r": {"format": "regex"}}}))
    huge = "|".join(f"x{i}" for i in range(550_000))  # 4 MB
    outcome, lag = await lag_during(lambda: simulator.call("t", {"r": huge}))
    assert lag < PING_BOUND_S, f"a ping waited {lag:.2f} s"
    assert outcome.is_error and "`format: regex`" in outcome.text
    outcome = await simulator.call("t", {"r": "a{4294967296}"})
    assert "Internal simulator error" not in outcome.text
