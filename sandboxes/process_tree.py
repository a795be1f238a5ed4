"""Shell wrappers that run a command in its own process group, so a timeout kills the tree.

`wrap_command` runs `bash -lc "$command"` as a job under `set -m` (job control): bash gives the
job its own process group, whose id (the job's pid) is written to a file named by a token.
`kill_tree_command` SIGKILLs that whole group, which takes background children (`sleep &`)
with it, not just the shell. Pure bash: works in any image that has bash.
"""

from __future__ import annotations

from sandboxes.isolation import SERVICE_STATE_DIR

# Not /tmp: an agent that fills /tmp must not stop a timeout from killing its processes.
STATE_DIR = SERVICE_STATE_DIR


def pid_file(token: str) -> str:
    return f"{STATE_DIR}/exec-{token}.pgid"


def wrap_command(prelude: str = "") -> str:
    """Script for `bash -c SCRIPT rollouts-exec TOKEN COMMAND`.

    `prelude` runs first in the foreground with the exec's stdin (e.g. untar an upload); the
    command then runs with stdin from /dev/null and stderr merged into stdout. The script's
    exit status is the command's (137 when killed).
    """
    pf = pid_file("$1")
    return f"""
mkdir -p {STATE_DIR}
{prelude}
cd /app 2>/dev/null
set -m
bash -lc "$2" </dev/null 2>&1 &
job=$!
exec 2>/dev/null  # job-control notices ("Done", "Killed") are not the command's output
echo "$job" > "{pf}"
wait "$job"
rc=$?
rm -f "{pf}"
exit "$rc"
"""


def kill_tree_command(token: str) -> str:
    """Script that SIGKILLs the process group of the exec named by `token`."""
    pf = pid_file(token)
    # The pid file may not exist yet if the timeout was tiny: wait for it briefly.
    return f"""
for _ in {{1..50}}; do
  if [ -s "{pf}" ]; then
    pg=$(cat "{pf}")
    kill -KILL -- "-$pg" 2>/dev/null
    rm -f "{pf}"
    exit 0
  fi
  sleep 0.1
done
exit 1
"""
