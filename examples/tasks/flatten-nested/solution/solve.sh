#!/bin/bash
# Oracle solution.
cat > /app/solution.py <<'EOF'
def fn(nested) -> list:
    if not isinstance(nested, (list, tuple)):
        return [nested]
    out = []
    stack = [iter(nested)]
    while stack:
        for item in stack[-1]:
            if isinstance(item, (list, tuple)):
                stack.append(iter(item))
                break
            out.append(item)
        else:
            stack.pop()
    return out
EOF
