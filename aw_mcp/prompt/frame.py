"""The trained conversation's frame: the fixed text around an action and around an observation, in one place.

A leaf module (it imports nothing from aw_mcp): the prompt renderer (prompting.py), the answer parser
(answer_parser.py), the grammar that frames a constrained answer (constrained.py) and the judge (judging.py) all
read the frame from here. Facts: docs/trained-format.md in the shared docs; README "The trained format".

An action turn: `### Turn N` on its own line, then (when shown) `**Task Instruction:**` and the task,
`**Current State:**` and the screen, then `**Action:**` and the action, then our `**World notes for this step:**`.
An answer: the thinking between `<think>` and `</think>`, then the observation after `**Environment Observation:**`
on its own line, or, in the screen domains that tag it (domains.TAGGED_DOMAINS), between
`<predicted_observation>` tags on their own lines.
"""

from __future__ import annotations

OBSERVATION_MARKER = "**Environment Observation:**"
ANSWER_TAG = "predicted_observation"  # the tag eval.py extracts an answer from, in every domain
ANSWER_OPEN = f"<{ANSWER_TAG}>"
ANSWER_CLOSE = f"</{ANSWER_TAG}>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"

TURN_HEADING = "### Turn {number}"
TASK_INSTRUCTION = "**Task Instruction:**"
CURRENT_STATE = "**Current State:**"
ACTION = "**Action:**"
NOTES_HEADER = "**World notes for this step:**"  # ours: not in the trained format, read as part of the turn


def turn_heading(number: int) -> str:
    return TURN_HEADING.format(number=number)


def observation_frame(tagged: bool) -> tuple[str, str]:
    """(prefix, suffix) around the observation in a trained answer: the `<predicted_observation>` tags on their own
    lines (`tagged`), else the marker on its own line and nothing after."""
    if tagged:
        return f"{ANSWER_OPEN}\n", f"\n{ANSWER_CLOSE}"
    return f"{OBSERVATION_MARKER}\n", ""
