"""A small built-in training corpus for the shipped BPE: chat, tool calls, JSON, code, numbers.

Generated from fixed phrase lists with a seeded RNG, so training needs no download and the same
text comes out every time. It is deliberately varied rather than large: the tokenizer only needs
sensible merges for tests and demos on random-weight tiny models.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator

_SUBJECTS = [
    "The agent",
    "The user",
    "A sandbox",
    "The model",
    "Our team",
    "The verifier",
    "This tool",
    "The scheduler",
    "The calendar",
    "The assistant",
    "Each request",
    "The server",
]
_VERBS = [
    "reads",
    "writes",
    "sends",
    "checks",
    "creates",
    "updates",
    "deletes",
    "schedules",
    "summarises",
    "searches",
    "returns",
    "streams",
    "verifies",
    "restores",
    "forks",
    "answers",
]
_OBJECTS = [
    "the email",
    "a message",
    "the meeting",
    "the file",
    "a snapshot",
    "the page",
    "the report",
    "the weather forecast",
    "a new task",
    "the results",
    "the channel",
    "the document",
    "the function call",
    "the tokens",
    "the cache",
    "the invoice",
]
_TAILS = [
    "before noon.",
    "every morning.",
    "for the whole team.",
    "in the background.",
    "when the deadline moves.",
    "and then waits for a reply.",
    "without losing any data.",
    "as soon as possible.",
    "with a short summary.",
    "on Monday at 9:30.",
    "if nothing changed.",
]
_QUESTIONS = [
    "What is the weather in {city} today?",
    "Can you schedule a meeting with {name} on {day}?",
    "Please summarise the last three emails from {name}.",
    "How many unread messages are in #{channel}?",
    "Write a Python function that adds two numbers.",
    "Find the file called {file} and show me its contents.",
    "Remind me to call {name} at {hour}:00.",
    "Translate 'good morning' into French.",
    "Why did the build fail?",
    "List the open issues assigned to {name}.",
]
_ANSWERS = [
    "Sure, I can help with that.",
    "Here is what I found:",
    "The meeting is scheduled for {day} at {hour}:00.",
    "It is {temp} degrees and sunny in {city}.",
    "I could not find a file with that name.",
    "Done. I have sent the message to {name}.",
    "Let me check the calendar first.",
    "There are {n} unread messages.",
]
_THOUGHTS = [
    "The user wants {what}. I should call the {tool} tool first.",
    "Let me think step by step about the constraints.",
    "I need the city name before I can look up the weather.",
    "The result looks correct, so I can answer now.",
    "Two calls are independent, so I can run them in parallel.",
]
_CITIES = ["Paris", "Beijing", "London", "Tokyo", "Berlin", "New York", "Shanghai", "Lagos"]
_NAMES = ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Li Wei"]
_DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
_CHANNELS = ["general", "random", "eng", "ops", "design"]
_FILES = ["main.py", "README.md", "config.json", "notes.txt", "app.py", "test_api.py"]
_TOOLS = [
    ("get_weather", {"city": "string", "unit": "string", "days": "integer"}),
    ("send_email", {"to": "string", "subject": "string", "body": "string"}),
    ("search_files", {"query": "string", "limit": "integer"}),
    ("create_event", {"title": "string", "start": "string", "duration_minutes": "integer"}),
    ("run_python", {"code": "string", "timeout_s": "number"}),
    ("post_message", {"channel": "string", "text": "string", "thread": "boolean"}),
]
_CODE = [
    "def add(a: int, b: int) -> int:\n    return a + b\n",
    "for i in range(10):\n    print(i * i)\n",
    "import json\n\ndata = json.loads(text)\nprint(data['name'])\n",
    "class Cache:\n    def __init__(self):\n        self.items = {}\n\n    def get(self, key):\n"
    "        return self.items.get(key)\n",
    "async def fetch(client, url):\n    resp = await client.get(url)\n    return resp.json()\n",
    "if __name__ == '__main__':\n    main()\n",
    "const total = items.reduce((acc, x) => acc + x.price, 0);\n",
    "SELECT id, name FROM users WHERE active = 1 ORDER BY name;\n",
    "$ pytest tests -q\n3 passed in 0.42s\n",
]
_CHINESE = [
    "你好，请帮我查一下明天北京的天气。",
    "我们使用基于XTML的聊天模板序列化所有数据。",
    "工具调用的参数是类型化的，字符串参数显示为原始文本。",
    "思考通道始终保留在历史记录中。",
    "请把会议改到下午三点。",
]


def _fill(rng: random.Random, template: str) -> str:
    return template.format(
        city=rng.choice(_CITIES),
        name=rng.choice(_NAMES),
        day=rng.choice(_DAYS),
        channel=rng.choice(_CHANNELS),
        file=rng.choice(_FILES),
        hour=rng.randint(8, 18),
        temp=rng.randint(-5, 35),
        n=rng.randint(0, 40),
        what=rng.choice(_OBJECTS),
        tool=rng.choice(_TOOLS)[0],
    )


def _arg_value(rng: random.Random, kind: str) -> object:
    if kind == "integer":
        return rng.randint(0, 100)
    if kind == "number":
        return round(rng.uniform(0, 60), 1)
    if kind == "boolean":
        return rng.random() < 0.5
    return rng.choice([*_CITIES, *_NAMES, "hello world", "Quarterly report", "print(1)"])


def builtin_corpus(num_docs: int = 1500, seed: int = 0) -> Iterator[str]:
    """Yield ``num_docs`` short documents of mixed kinds."""
    rng = random.Random(seed)
    for i in range(num_docs):
        kind = i % 6
        if kind == 0:
            yield " ".join(
                f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} "
                f"{rng.choice(_TAILS)}"
                for _ in range(rng.randint(2, 6))
            )
        elif kind == 1:
            yield (
                f'message role="user"\n{_fill(rng, rng.choice(_QUESTIONS))}\n'
                f'message role="assistant"\nthink\n{_fill(rng, rng.choice(_THOUGHTS))}\n'
                f"response\n{_fill(rng, rng.choice(_ANSWERS))}\n"
            )
        elif kind == 2:
            name, params = rng.choice(_TOOLS)
            args = {k: _arg_value(rng, v) for k, v in params.items()}
            idx = rng.randint(0, 3)
            typed = " ".join(
                f'arg name="{k}"' + ("" if isinstance(v, str) else ' type="json"')
                for k, v in args.items()
            )
            yield (
                f'tools call tool="{name}" index="{idx}" {typed}\n'
                + json.dumps({"name": name, "arguments": args})
                + f'\nmessage role="tool" tool="{name}" index="{idx}"\n'
                + json.dumps({"ok": True, "result": _fill(rng, rng.choice(_ANSWERS))})
            )
        elif kind == 3:
            name, params = rng.choice(_TOOLS)
            yield json.dumps(
                {
                    "type": "function",
                    "function": {
                        "name": name,
                        "description": f"{name.replace('_', ' ').capitalize()}.",
                        "parameters": {
                            "type": "object",
                            "properties": {k: {"type": v} for k, v in params.items()},
                            "required": list(params)[:1],
                        },
                    },
                }
            )
        elif kind == 4:
            yield rng.choice(_CODE) + "\n" + rng.choice(_CODE)
        else:
            yield (
                f"{rng.choice(_CHINESE)} {rng.randint(0, 99999)} {rng.uniform(0, 1000):.3f} "
                f"{rng.choice(_DAYS)} {rng.randint(1, 28)}/{rng.randint(1, 12)}/2026 "
                f'type:="tool-declare" type:="thinking-effort" reasoning effort: '
                f"{rng.choice(['low', 'high', 'max'])}"
            )
