"""LoCoMo's conversations as a chat client holds them, and their questions.

LoCoMo (Maharana et al., ACL 2024) is ten long conversations between two people, each of
19-32 sessions days or weeks apart, with questions whose evidence turns are annotated. The
development half (five conversations) is research data kept beside the repository, never
in it: it is found at run time (`locate`), from `LOCOMO_DIR`, else
`shared/data/locomo-dev` beside the checkout or beside any directory above it.

A conversation becomes chat messages as a chat app shows it: the first speaker's turns are
the user's messages, the second's the assistant's, each turn prefixed with its speaker's
name ("Ana: ...") and a shared image as "[shares a photo: caption]"; consecutive turns
of one speaker make one message, and the first turn of each session is preceded by a line
with the session's date ("[3 March 2023, 9:05 am]"). A question is scored on its evidence
turns' texts, each of which is in exactly one message.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

__all__ = [
    "CATEGORIES",
    "Conversation",
    "Question",
    "Session",
    "chat",
    "load",
    "locate",
]

# As released: 5 (adversarial, whose answer is not in the conversation) is not scored.
CATEGORIES = {4: "single-hop", 1: "multi-hop", 2: "temporal", 3: "open-domain"}
_RELATIVE = Path("shared") / "data" / "locomo-dev"
_EVIDENCE = re.compile(r"D:?(\d+):(\d+)")  # "D3:12"; one file writes "D:11:26"
_SESSION = re.compile(r"session_(\d+)")
_DATE = re.compile(r"(\d{1,2}:\d{2}\s*[ap]m) on (\d{1,2}) (\w+),? (\d{4})", re.IGNORECASE)


@dataclass(frozen=True)
class Session:
    number: int
    date: str  # as the chat shows it: "3 March 2023, 9:05 am"
    turns: tuple[dict[str, Any], ...]  # {speaker, dia_id, text[, blip_caption]}


@dataclass(frozen=True)
class Question:
    text: str
    answer: str
    category: int
    evidence: tuple[str, ...]  # the evidence turns' texts
    sessions: frozenset[int]  # the sessions the evidence is in


@dataclass(frozen=True)
class Conversation:
    name: str  # the file's: "conv-26"
    speakers: tuple[str, str]  # (the user's, the assistant's)
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]  # categories 1-4 whose every evidence turn exists
    unscorable: int  # questions of categories 1-4 naming no turn, or a turn it lacks

    def system(self) -> dict[str, str]:
        """The client's system message: who is talking, and how the messages show it."""
        first, second = self.speakers
        return {
            "role": "system",
            "content": f"A chat between two friends, {first} and {second}. Each message"
            " starts with who wrote it; a line in brackets gives the date a conversation"
            " began.",
        }


def locate() -> Path:
    """The development half's directory: `LOCOMO_DIR`, else `shared/data/locomo-dev` in
    the checkout's parent directory or any directory above it."""
    named = os.environ.get("LOCOMO_DIR")
    if named:
        if not (Path(named) / "conv-26.json").is_file():
            raise SystemExit(f"LOCOMO_DIR={named} holds no LoCoMo conversation (conv-26.json)")
        return Path(named)
    checkout = Path(__file__).resolve().parents[2]
    for parent in checkout.parents:
        if (parent / _RELATIVE).is_dir():
            return parent / _RELATIVE
    raise SystemExit(
        f"LoCoMo's development half was not found: set LOCOMO_DIR, or put it at"
        f" {_RELATIVE} beside the checkout ({checkout.parent / _RELATIVE}) or above it"
    )


def load(directory: Path) -> list[Conversation]:
    """Every `conv-*.json` of `directory`, by name."""
    return [_conversation(path) for path in sorted(directory.glob("conv-*.json"))]


def _conversation(path: Path) -> Conversation:
    data = orjson.loads(path.read_bytes())
    numbers = sorted(int(m[1]) for key in data if (m := _SESSION.fullmatch(key)))
    sessions = tuple(
        Session(n, _date(data[f"session_{n}_date_time"]), tuple(data[f"session_{n}"]))
        for n in numbers
        if data[f"session_{n}"]
    )
    turns = {turn["dia_id"]: (s.number, turn["text"]) for s in sessions for turn in s.turns}
    questions: list[Question] = []
    unscorable = 0
    for qa in data["qa"]:
        if qa["category"] not in CATEGORIES:
            continue
        ids = [f"D{a}:{b}" for e in qa["evidence"] for a, b in _EVIDENCE.findall(e)]
        if not ids or any(i not in turns for i in ids):
            unscorable += 1
            continue
        questions.append(
            Question(
                qa["question"],
                str(qa["answer"]),
                qa["category"],
                tuple(dict.fromkeys(turns[i][1] for i in ids)),
                frozenset(turns[i][0] for i in ids),
            )
        )
    return Conversation(
        path.stem,
        (data["speaker_a"], data["speaker_b"]),
        sessions,
        tuple(questions),
        unscorable,
    )


def _date(released: str) -> str:
    """ "9:05 am on 3 March, 2023" as "3 March 2023, 9:05 am" (as released where it differs)."""
    found = _DATE.search(released)
    if found is None:
        return released
    time, day, month, year = found.groups()
    return f"{day} {month} {year}, {time}"


def chat(conversation: Conversation, sessions: tuple[Session, ...]) -> list[dict[str, str]]:
    """`sessions` as chat messages (no system message): the first speaker's turns are the
    user's, the second's the assistant's; one speaker's consecutive turns make one message."""
    first = conversation.speakers[0]
    messages: list[dict[str, str]] = []
    for session in sessions:
        for index, turn in enumerate(session.turns):
            line = f"{turn['speaker']}: {turn['text']}"
            if turn.get("blip_caption"):
                line += f" [shares a photo: {turn['blip_caption']}]"
            if index == 0:
                line = f"[{session.date}]\n{line}"
            role = "user" if turn["speaker"] == first else "assistant"
            if messages and messages[-1]["role"] == role:
                messages[-1]["content"] += "\n" + line
            else:
                messages.append({"role": role, "content": line})
    return messages
