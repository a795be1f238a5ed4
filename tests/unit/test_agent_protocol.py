import pytest

from service.agent.harnesses.default import DefaultHarness
from service.agent.protocol import ReplyError
from service.agent.protocol import parse_reply as parse_with

ERRORS = DefaultHarness().errors  # the default profile's texts


def parse_reply(text: str):  # type: ignore[no-untyped-def]
    return parse_with(text, ERRORS)


def test_parses_reply_with_surrounding_text():
    reply = parse_reply(
        'Sure.\n{"analysis": "a", "plan": "p", "commands": '
        '[{"keystrokes": "echo }\\n", "duration": 0.1}], "task_complete": false} trailing'
    )
    assert reply.commands[0].keystrokes == "echo }\n"
    assert reply.commands[0].duration == 0.1
    assert reply.task_complete is False


def test_defaults_for_missing_optional_keys():
    reply = parse_reply('{"task_complete": true}')
    assert reply.commands == [] and reply.task_complete


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("no json here", "No JSON object"),
        ('{"analysis": "x", ', "ends before"),
        ('{"analysis": x}', "not valid JSON"),
        ('{"commands": [{"duration": 1}]}', "commands.0.keystrokes"),
        ('{"commands": [{"keystrokes": "ls", "duration": -1}]}', "commands.0.duration"),
    ],
)
def test_errors_name_the_problem(text, needle):
    with pytest.raises(ReplyError, match=needle.replace(".", r"\.")):
        parse_reply(text)
