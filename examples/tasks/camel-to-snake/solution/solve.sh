#!/bin/bash
# Oracle solution.
cat > /app/solution.py <<'EOF'
import re


def fn(name: str) -> str:
    step = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", name)
    step = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", step)
    return step.lower()
EOF
