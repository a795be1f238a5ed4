#!/bin/bash
# Oracle solution.
cat > /app/solution.py <<'EOF'
from itertools import islice


def fn(iterable, size: int):
    if size < 1:
        raise ValueError("size must be at least 1")
    iterator = iter(iterable)

    def chunks():
        while chunk := list(islice(iterator, size)):
            yield chunk

    return chunks()
EOF
