#!/bin/bash
# Oracle solution.
cat > /app/solution.py <<'EOF'
def fn(text: str) -> str:
    if any(ch.isdigit() for ch in text):
        raise ValueError("digits cannot be run-length encoded unambiguously")
    out = []
    i = 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == text[i]:
            j += 1
        out.append(f"{j - i}{text[i]}")
        i = j
    return "".join(out)
EOF
