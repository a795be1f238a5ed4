#!/bin/bash
# Oracle solution.
cat > /app/solution.py <<'EOF'
from collections import deque
from itertools import islice


def fn(iterable, n: int):
    if n < 1:
        raise ValueError("window size must be at least 1")
    iterator = iter(iterable)

    def windows():
        window = deque(islice(iterator, n), maxlen=n)
        if len(window) < n:
            return
        yield tuple(window)
        for item in iterator:
            window.append(item)
            yield tuple(window)

    return windows()
EOF
