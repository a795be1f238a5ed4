#!/bin/bash
# Oracle solution.
cat > /app/solution.py <<'EOF'
def fn(n: int) -> list[int]:
    if n < 2:
        return []
    sieve = bytearray([1]) * (n + 1)
    sieve[0] = sieve[1] = 0
    for i in range(2, int(n**0.5) + 1):
        if sieve[i]:
            sieve[i * i :: i] = bytearray(len(range(i * i, n + 1, i)))
    return [i for i, is_prime in enumerate(sieve) if is_prime]
EOF
