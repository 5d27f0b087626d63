"""The seven domains: their built-in tool sets (shaped like the actions the world model was trained on) and the facts
of their trained prompt format (role phrase, section order, screen or not, tagged answers).

A world of domain `terminal`, `search`, `swe`, `android`, `web` or `os` may omit `tools:` and gets these (the web
domain's are BrowserGym's functions, see `browsergym.py`; the Android domain's are AndroidWorld's JSON action types, see
`androidworld.py`). They are
plain dicts in the YAML (wire) shape so `world.py` validates them exactly like user-written tools.
"""

from __future__ import annotations

from typing import Any, Literal

from aw_mcp.spec import androidworld, browsergym

Domain = Literal["mcp", "search", "terminal", "swe", "android", "web", "os"]
DOMAINS: tuple[Domain, ...] = ("mcp", "search", "terminal", "swe", "android", "web", "os")

# Domains whose observation is a screen (terminal screen or UI tree): a world gives its initial screen (`screen:`), which
# the first action turn shows as the current state; every later observation is the next screen.
SCREEN_DOMAINS: frozenset[str] = frozenset({"terminal", "android", "web", "os"})
# Of those, the ones whose every action turn carries the then-current screen as `**Current State:**` (the
# AgentWorldBench Android rows; the web and OS prompts name the current page/screen as an input of every step).
# Terminal shows it on the first turn only: each observation already is the next screen.
EVERY_TURN_SCREEN_DOMAINS: frozenset[str] = frozenset({"android", "web", "os"})
# Domains whose first action turn opens with the agent's `**Task Instruction:**` (a world's `task:`).
TASK_DOMAINS: frozenset[str] = frozenset({"android", "web", "os"})

# The first line of each domain's trained system prompt after `# Role and Objective` names this role.
ROLE_PHRASES: dict[str, str] = {
    "mcp": "You are a **Tool World Model**",
    "search": "You are a **Search World Model**",
    "terminal": "You are a **Terminal World Model**",
    "swe": "You are a **Tool World Model**",
    "android": "You are an **Android World Model**",
    "web": "You are a **Web World Model**",
    "os": "You are a **Desktop World Model**",
}

# The trained prompts' top-level sections, in order (each domain's template keeps them as its first sections).
TRAINED_SECTIONS: dict[str, tuple[str, ...]] = {
    "mcp": (
        "Role and Objective",
        "Environment Management",
        "Environment Execution",
        "Input Definitions & Action Space",
        "Predicted Observation Requirements",
    ),
    "search": (
        "Role and Objective",
        "Environment Management",
        "Environment Execution",
        "Key Principles",
        "Input Definitions & Action Space",
        "Few-shot Examples",
    ),
    "terminal": (
        "Role and Objective",
        "Environment Management",
        "Environment Execution",
        "Key Principles",
        "Input Definitions & Action Space",
        "Predicted Observation Requirements",
        "Terminal Environment Specifics",
        "Few-shot Examples",
    ),
    "swe": (
        "Role and Objective",
        "Environment Management",
        "Environment Execution",
        "Key Principles",
        "Input Definitions & Action Space",
        "Predicted Observation Requirements",
    ),
    "android": ("Role and Objective", "Content Requirements", "Format Requirements"),
    "web": ("Role and Objective", "Action Space", "Content Requirements", "Format Requirements"),
    "os": ("Role and Objective",),
}

# Domains whose answer is one `<predicted_observation>...</predicted_observation>` block.
TAGGED_DOMAINS: frozenset[str] = frozenset({"android", "web", "os"})


def _obj(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


BUILTIN_TOOLS: dict[str, list[dict[str, Any]]] = {
    "terminal": [
        {
            "name": "send_keys",
            "title": "Send keystrokes to the terminal",
            "description": (
                "Type keystrokes into the interactive terminal and wait `duration` seconds; returns the terminal "
                "screen afterwards. End a command with '\\n' to run it; use tmux-style names such as C-c for "
                "control keys."
            ),
            "inputSchema": _obj(
                {
                    "keystrokes": {"type": "string", "description": "Exact keystrokes, e.g. 'ls -la\\n'."},
                    "duration": {
                        "type": "number",
                        "minimum": 0,
                        "maximum": 600,
                        "default": 1.0,
                        "description": "Seconds to wait before reading the screen.",
                    },
                },
                ["keystrokes"],
            ),
            "annotations": {"destructiveHint": True, "openWorldHint": False},
        }
    ],
    # The official search prompt's three tools, with its inputs: `web_search` takes a batch (`queries`) or one
    # `query`; `web_extractor` takes `{"url"}`; `dict_memory` is a key-value memory (add, update, retrieve,
    # retrieve_all, remove, remove_all).
    "search": [
        {
            "name": "web_search",
            "title": "Web search",
            "description": "Search the web: ten ranked results (URL, title, snippet, date) for each query.",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "queries": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 10},
                    "query": {"type": "string", "minLength": 1},
                },
                "anyOf": [{"required": ["queries"]}, {"required": ["query"]}],
                "additionalProperties": False,
            },
            "annotations": {"readOnlyHint": True, "openWorldHint": True},
        },
        {
            "name": "web_extractor",
            "title": "Read a web page",
            "description": "Fetch a web page and return its content as Markdown text.",
            "inputSchema": _obj({"url": {"type": "string", "description": "The page's URL."}}, ["url"]),
            "annotations": {"readOnlyHint": True, "openWorldHint": True},
        },
        {
            "name": "dict_memory",
            "title": "Key-value memory",
            "description": (
                "A persistent key-value memory: `add` or `update` the items of `dict`, `retrieve` or `remove` the "
                "keys in `key_list`, `retrieve_all`, `remove_all`."
            ),
            "inputSchema": _obj(
                {
                    "operation": {
                        "enum": ["add", "update", "retrieve", "retrieve_all", "remove", "remove_all"]
                    },
                    "dict": {"type": "object", "description": "Items to add or update."},
                    "key_list": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Keys to act on.",
                    },
                },
                ["operation"],
            ),
            "annotations": {"openWorldHint": False},
        },
    ],
    # The official SWE prompt names `run_shell_command` and speaks of files, directories, todo lists and background
    # PIDs: the tool set of Qwen Code (the Gemini-CLI family), whose names and arguments these follow. Which exact
    # tools the trained SWE data used is not shown; SWE-agent's `execute_bash` and `str_replace_editor` remain as
    # LEGACY_TOOLS, for worlds that name them.
    "swe": [
        {
            "name": "run_shell_command",
            "title": "Run a shell command",
            "description": (
                "Run a command with `bash -c` in the repository; returns the command, its directory, stdout, stderr, "
                "the error, the exit code and any background PIDs."
            ),
            "inputSchema": _obj(
                {
                    "command": {"type": "string", "description": "The exact command to run."},
                    "description": {"type": "string", "description": "What the command is for, in brief."},
                    "directory": {"type": "string", "description": "Where to run it, relative to the root."},
                    "is_background": {"type": "boolean", "description": "Run it in the background."},
                },
                ["command"],
            ),
            "annotations": {"destructiveHint": True, "openWorldHint": False},
        },
        {
            "name": "read_file",
            "title": "Read a file",
            "description": "Read a file (a slice of its lines with `offset` and `limit`).",
            "inputSchema": _obj(
                {
                    "path": {"type": "string", "description": "The file's absolute path."},
                    "offset": {"type": "integer", "minimum": 0, "description": "The 0-based first line."},
                    "limit": {"type": "integer", "minimum": 1, "description": "The most lines to read."},
                },
                ["path"],
            ),
            "annotations": {"readOnlyHint": True, "openWorldHint": False},
        },
        {
            "name": "write_file",
            "title": "Write a file",
            "description": "Write content to a file, creating it and its directories or overwriting it.",
            "inputSchema": _obj(
                {"file_path": {"type": "string"}, "content": {"type": "string"}}, ["file_path", "content"]
            ),
            "annotations": {"destructiveHint": True, "openWorldHint": False},
        },
        {
            "name": "edit",
            "title": "Edit a file",
            "description": (
                "Replace `old_string` with `new_string` in a file (once, unless `expected_replacements` says more); "
                "an empty `old_string` creates the file."
            ),
            "inputSchema": _obj(
                {
                    "file_path": {"type": "string"},
                    "old_string": {"type": "string"},
                    "new_string": {"type": "string"},
                    "expected_replacements": {"type": "integer", "minimum": 1},
                },
                ["file_path", "old_string", "new_string"],
            ),
            "annotations": {"destructiveHint": True, "openWorldHint": False},
        },
        {
            "name": "list_directory",
            "title": "List a directory",
            "description": "List the files and subdirectories of a directory, directories first.",
            "inputSchema": _obj(
                {
                    "path": {"type": "string"},
                    "ignore": {"type": "array", "items": {"type": "string"}},
                    "respect_git_ignore": {"type": "boolean"},
                },
                ["path"],
            ),
            "annotations": {"readOnlyHint": True, "openWorldHint": False},
        },
        {
            "name": "glob",
            "title": "Find files",
            "description": "Find files matching a glob pattern, newest first.",
            "inputSchema": _obj({"pattern": {"type": "string"}, "path": {"type": "string"}}, ["pattern"]),
            "annotations": {"readOnlyHint": True, "openWorldHint": False},
        },
        {
            "name": "grep_search",
            "title": "Search file contents",
            "description": "Search files for a regular expression; returns the matching lines with paths and numbers.",
            "inputSchema": _obj(
                {
                    "pattern": {"type": "string"},
                    "path": {"type": "string"},
                    "glob": {"type": "string"},
                    "limit": {"type": "integer", "minimum": 1},
                },
                ["pattern"],
            ),
            "annotations": {"readOnlyHint": True, "openWorldHint": False},
        },
        {
            "name": "todo_write",
            "title": "Write the todo list",
            "description": "Replace the session's todo list.",
            "inputSchema": _obj(
                {
                    "todos": {
                        "type": "array",
                        "items": _obj(
                            {
                                "id": {"type": "string"},
                                "content": {"type": "string", "minLength": 1},
                                "status": {"enum": ["pending", "in_progress", "completed"]},
                            },
                            ["id", "content", "status"],
                        ),
                    }
                },
                ["todos"],
            ),
            "annotations": {"openWorldHint": False},
        },
    ],
    "android": androidworld.tools(),
    "web": browsergym.tools(),
    "os": [
        {
            "name": "run_gui_code",
            "title": "Control the desktop",
            "description": (
                "Run Python code using pyautogui (mouse, keyboard, screenshots) on the desktop; returns the next "
                "screen as an accessibility tree. Use pyautogui.click(x, y), pyautogui.write('text'), "
                "pyautogui.hotkey('ctrl', 's'), time.sleep(s)."
            ),
            "inputSchema": _obj(
                {"code": {"type": "string", "description": "Python source to run."}}, ["code"]
            ),
            "annotations": {"destructiveHint": True, "openWorldHint": False},
        }
    ],
}


# Tools a world gets when its `tools:` names them (merged like a built-in): names an earlier version had built in,
# which worlds and agents may depend on. Not what the model was trained on (see the SWE set above).
LEGACY_TOOLS: dict[str, list[dict[str, Any]]] = {
    "swe": [
        {
            "name": "execute_bash",
            "title": "Run a shell command",
            "description": "Run a bash command in the repository's sandbox; returns stdout, stderr and exit code.",
            "inputSchema": _obj(
                {
                    "command": {"type": "string"},
                    "timeout": {"type": "number", "minimum": 1, "maximum": 3600, "default": 120},
                },
                ["command"],
            ),
            "annotations": {"destructiveHint": True, "openWorldHint": False},
        },
        {
            "name": "str_replace_editor",
            "title": "View and edit files",
            "description": (
                "File viewer and editor. `view` shows a file with line numbers or lists a directory; `create` writes "
                "a new file; `str_replace` replaces one exact, unique occurrence of old_str; `insert` adds text "
                "after insert_line; `undo_edit` reverts the last edit of path."
            ),
            "inputSchema": _obj(
                {
                    "command": {"enum": ["view", "create", "str_replace", "insert", "undo_edit"]},
                    "path": {"type": "string", "description": "Absolute path."},
                    "file_text": {"type": "string"},
                    "old_str": {"type": "string"},
                    "new_str": {"type": "string"},
                    "insert_line": {"type": "integer", "minimum": 0},
                    "view_range": {
                        "type": "array",
                        "items": {"type": "integer"},
                        "minItems": 2,
                        "maxItems": 2,
                    },
                },
                ["command", "path"],
            ),
            "annotations": {"destructiveHint": True, "openWorldHint": False},
        },
    ],
}
