#!/bin/bash
# Oracle solution.
cat > /app/solution.py <<'EOF'
def fn(words: list[str]) -> list[list[str]]:
    groups: dict[str, list[str]] = {}
    for word in words:
        groups.setdefault("".join(sorted(word)), []).append(word)
    return list(groups.values())
EOF
