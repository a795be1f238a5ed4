#!/bin/bash
# Oracle solution.
cat > /app/solution.py <<'EOF'
def fn(text: str) -> bool:
    kept = [ch.casefold() for ch in text if ch.isalnum()]
    return kept == kept[::-1]
EOF
