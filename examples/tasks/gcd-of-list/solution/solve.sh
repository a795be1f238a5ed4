#!/bin/bash
# Oracle solution.
cat > /app/solution.py <<'EOF'
import math


def fn(numbers: list[int]) -> int:
    if not numbers:
        raise ValueError("gcd of an empty list is undefined")
    result = 0
    for n in numbers:
        result = math.gcd(result, n)
    return result
EOF
