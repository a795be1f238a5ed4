#!/bin/bash
# Oracle solution.
cat > /app/solution.py <<'EOF'
import re

_PATTERN = re.compile(r"(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?")
_SECONDS = (86400, 3600, 60, 1)


def fn(text: str) -> int:
    match = _PATTERN.fullmatch(text) if text else None
    if match is None or not any(group is not None for group in match.groups()):
        raise ValueError(f"invalid duration: {text!r}")
    return sum(int(g) * s for g, s in zip(match.groups(), _SECONDS) if g is not None)
EOF
