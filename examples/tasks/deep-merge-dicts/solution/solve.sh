#!/bin/bash
# Oracle solution.
cat > /app/solution.py <<'EOF'
def fn(base: dict, override: dict) -> dict:
    def copy(value):
        return {k: copy(v) for k, v in value.items()} if isinstance(value, dict) else value

    result = copy(base)
    for key, value in override.items():
        if isinstance(result.get(key), dict) and isinstance(value, dict):
            result[key] = fn(result[key], value)
        else:
            result[key] = copy(value)
    return result
EOF
