"""The prompts of the terminal agent: the first user turn, observations and error messages."""

from __future__ import annotations

SYSTEM_PROMPT = """You are an AI assistant solving command-line tasks in a Linux terminal.

Reply to every message with exactly one JSON object and nothing else:
{
  "analysis": "what you see in the terminal and what it means",
  "plan": "what you will do next and why",
  "commands": [
    {"keystrokes": "ls -la\\n", "duration": 0.5}
  ],
  "task_complete": false
}

Rules:
- "keystrokes" are typed verbatim into a persistent bash session (working directory and
  environment persist). End a command with "\\n" to run it. A keystrokes value of exactly
  "C-c" sends Ctrl-C to interrupt the running program.
- "duration" is how many seconds to wait for the command's output (at most 60). Use small
  values for quick commands.
- The next message shows the new terminal output.
- Set "task_complete" to true when the task is done. You will be asked to confirm once."""

INITIAL_TERMINAL = "root@sandbox:/app# "


def first_user_message(instruction: str) -> str:
    return f"Task:\n{instruction.strip()}\n\nCurrent terminal state:\n{INITIAL_TERMINAL}"


def observation_message(terminal_output: str) -> str:
    return f"New terminal output:\n{terminal_output}"


def confirm_message(terminal_output: str) -> str:
    return (
        f"New terminal output:\n{terminal_output}\n\n"
        "Are you sure the task is complete? Your solution will be graded and you cannot change "
        'it afterwards. If so, reply again with "task_complete": true.'
    )


def error_message(problem: str) -> str:
    return (
        f"Your previous reply could not be used: {problem}\n"
        "Reply with exactly one JSON object with the keys analysis, plan, commands and "
        "task_complete."
    )
