"""Part of the Harbor probe (harbor_probe.py): a message form as a template. Harbor's message,
produced with sentinel arguments, becomes a template with a `{placeholder}` for each argument;
every case must give the same template, and the template must reproduce each case exactly.
Standard library only.
"""

from __future__ import annotations

from typing import Any


class ProbeError(RuntimeError):
    pass


# ------------------------------------------------------------------------- templates


def _template(text: str, values: dict[str, Any]) -> str:
    """`text` with every occurrence of each value replaced by its {name}, the rest escaped."""
    taken = [False] * len(text)
    spans = []
    for name, value in sorted(values.items(), key=lambda kv: -len(str(kv[1]))):
        v = str(value)
        if not v:
            raise ProbeError(f"empty sentinel for {name}")
        start = 0
        while (i := text.find(v, start)) != -1:
            if any(taken[i : i + len(v)]):
                start = i + 1
                continue
            spans.append((i, i + len(v), name))
            for j in range(i, i + len(v)):
                taken[j] = True
            start = i + len(v)
    out, pos = [], 0
    for start, end, name in sorted(spans):
        out.append(text[pos:start].replace("{", "{{").replace("}", "}}"))
        out.append("{" + name + "}")
        pos = end
    out.append(text[pos:].replace("{", "{{").replace("}", "}}"))
    return "".join(out)


def templatize(what: str, cases: list[tuple[str, dict[str, Any]]]) -> str:
    """The one template that every (text, values) case is an instance of."""
    templates = {_template(text, values) for text, values in cases}
    if len(templates) != 1:
        raise ProbeError(f"{what}: Harbor's message form is not what this probe expects")
    template = templates.pop()
    for text, values in cases:
        if template.format(**values) != text:
            raise ProbeError(f"{what}: the template does not reproduce Harbor's message")
    return template
