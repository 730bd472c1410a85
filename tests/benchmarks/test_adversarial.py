"""The adversarial scorecard's generator and truth (no server: they run in about a second),
and its quick form end to end through the real proxy. The targets are not asserted: the
proxy does not meet them yet; full history meets recall and staleness by construction."""

from __future__ import annotations

import re
from pathlib import Path

from tests.benchmarks.adversarial import (
    DECOY_CLASSES,
    FACT_CLASSES,
    QUICK_FACTS,
    QUICK_TURNS,
    SEED,
    Script,
    benchmark,
    generate,
    probed,
)
from tests.benchmarks.scorecard import STRATEGIES


def _forms() -> list[Script]:
    return [generate(), generate(QUICK_TURNS, QUICK_FACTS)]


def test_the_generator_is_seeded_and_has_every_class() -> None:
    full, quick = _forms()
    again = generate()
    assert [t.text for t in again.turns] == [t.text for t in full.turns]
    assert [t.output for t in again.turns] == [t.output for t in full.turns]
    assert again.probes == full.probes and again.secrets == full.secrets
    assert generate(seed=SEED + 1).probes != full.probes
    assert len(full.turns) == 300 and len(full.facts) >= 200 and full.phrasing_count() >= 40
    assert len(quick.turns) == QUICK_TURNS and len(quick.facts) == QUICK_FACTS
    for script in (full, quick):
        assert {fact.cls for fact in script.facts} == set(FACT_CLASSES)
        assert {decoy.cls for decoy in script.decoys} == set(DECOY_CLASSES)
        for cls in (*FACT_CLASSES, *DECOY_CLASSES, "credential"):
            assert len(script.phrasings[cls]) >= 2, (cls, script.phrasings.get(cls))
        assert len(script.probes) == len(script.facts)
        assert any(turn.call for turn in script.turns)
        credentials = list(script.secrets.values())
        assert credentials and not any("password" in text.lower() for text in credentials)


def test_every_fact_is_found_whole_and_current_in_the_full_history() -> None:
    """Every probe's fact has its current value in a piece of the conversation that
    names it, and no later piece naming it offers an older value."""
    for script in _forms():
        messages = script.messages()
        for fact in script.facts:
            found, stale = probed(fact, messages)
            assert found and stale is None, (fact, stale)


def test_the_truth_judges_hand_written_statements() -> None:
    script = generate(QUICK_TURNS, QUICK_FACTS)
    fact = next(f for f in script.facts if f.cls == "update by verb")
    assert script.said((fact.subject, fact.answer))
    assert script.said((fact.aliases[1], f"`{fact.answer}`"))  # another name, wrapped
    assert script.said((fact.subject, fact.values[0]))  # an older value is no lie
    assert not script.said((fact.subject, fact.answer[:-1]))  # a lost last character
    assert not script.said((fact.subject, fact.answer + '"}'))  # a JSON tail
    assert not script.said((fact.subject, "`" + fact.answer))  # an open backtick
    for cls in ("question", "hypothetical", "negation", "rejected suggestion", "hunch"):
        decoy = next(d for d in script.decoys if d.cls == cls and d.subject)
        assert not script.said((decoy.subject, decoy.value)), decoy
    field = next(d for d in script.decoys if d.field)
    assert not script.said((field.subject, field.value))  # another field of the output
    assert script.said((" ".join(sorted(field.field)), field.value))  # its own field
    secret, said_in = next(iter(script.secrets.items()))
    verdict = script.judge(("guest wifi login", secret))
    assert not verdict.true and verdict.reason == "credential" and secret in said_in
    corrected = next(f for f in script.facts if f.cls == "correction, same message")
    assert not script.said((corrected.subject, corrected.retracted[0]))
    assert script.said((corrected.subject, corrected.answer))
    later = next(f for f in script.facts if f.cls == "correction, later message")
    assert script.said((later.subject, later.values[0], later.answer))  # "was replaced by"
    assert not script.said((later.subject, later.answer, later.values[0]))
    table = next(f for f in script.facts if f.cls == "markdown table")
    assert script.said((table.subject, table.answer))
    assert not script.said((table.subject.split()[-1], table.answer))  # qualifier dropped


def test_the_quick_form_prints_every_row_and_meets_the_gate(tmp_path: Path) -> None:
    """The quick form gates CI (issue 40): with summary, facts and recall nothing false
    is pinned or injected, no credential leaks, no replaced value is offered as current,
    recall finds at least 97% of the facts and memory across sessions 95%, and the
    recall blocks hold distinct units, each on its question, none in most of them."""
    text = benchmark(tmp_path, quick=True)
    rows = {
        name: values
        for name, *values in re.findall(
            r"^\| ([a-z +]+) \| (\d+)% \| (\d+)% \| (\d+) of \d+ \| (\d+) \| [\d,]+ \|"
            r" \d+% \| \d+% \|$",
            text,
            re.M,
        )
    }
    assert list(rows) == [strategy.name for strategy in STRATEGIES], text
    assert rows["full history"][:2] == ["100", "0"], text
    assert re.search(
        r"^\| facts \+ verbatim units \| \d+% \| \d+% \| \d+ of \d+ \| \d+ \|$", text, re.M
    )
    for cls in (*FACT_CLASSES, *DECOY_CLASSES, "credential"):
        assert re.search(rf"^\| {cls} \| ", text, re.M), cls
    assert len(re.findall(r" (PASS|MISS)$", text, re.M)) == 5, text
    assert re.search(r"^- recall blocks of distinct units.* PASS$", text, re.M), text
    assert all(row[2:] == ["0", "0"] for row in rows.values()), rows  # false, leaks
    recall, stale, *_ = rows["summary + facts + recall"]
    assert int(recall) >= 97 and stale == "0", rows
    memory = re.search(r"^\| facts \+ verbatim units \| (\d+)% \| (\d+)% \| (\d+) of", text, re.M)
    assert memory is not None and int(memory[1]) >= 95 and memory[3] == "0", text
