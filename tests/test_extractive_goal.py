"""The extractive L1's Current Goal follows what the user's messages do: set, replace, narrow, widen, abandon."""

from __future__ import annotations

import pytest

from local_ai_memory._runtime.extractive import classify_user_sentence, extract_summary
from local_ai_memory._runtime.messages import to_messages
from local_ai_memory._shared.tokens import TokenCounter

COUNTER = TokenCounter()


def _goal(*user: str, budget: int = 768) -> str:
    """The Current Goal after the user's messages, each answered by the assistant."""
    turns: list[dict[str, str]] = []
    for text in user:
        turns += [{"role": "user", "content": text}, {"role": "assistant", "content": "Understood."}]
    return extract_summary(to_messages(turns), COUNTER, budget).goal


def test_the_note_about_a_replaced_goal_keeps_what_named_its_subject() -> None:
    first = (
        "We're getting a ton of 502s on checkout since lunch. I'm the incident commander, incident INC-7781. "
        "Can you dig through the gateway logs and figure out what's going on?"
    )
    change = "New priority: I need a customer-facing status page update and internal notes for the postmortem."
    goal = _goal(first, change, budget=256)
    assert goal.startswith("New priority: I need a customer-facing status page update")
    note = goal.partition("(earlier:")[2]
    assert note.startswith(" We're getting a ton of 502s")  # the first sentence names the work
    assert "INC-7781" in note  # and the note, cut, keeps its identifier over the ask that says nothing of it
    assert COUNTER.count(goal) <= 64


@pytest.mark.parametrize(
    "sentence",
    [
        "So instead of the blog post, can you turn this into a talk outline?",
        "Rather than a hotfix, could you write a rollback plan?",
    ],
)
def test_a_polite_request_after_a_lead_clause_is_a_request(sentence: str) -> None:
    assert classify_user_sentence(sentence) == "request"


_FIRST = "Our nightly export job for the billing-db started crashing on Monday. Can you find out why and fix it?"


@pytest.mark.parametrize(
    ("message", "subject"),
    [
        ("You know what, forget the crash. Can you get the test suite running in parallel?", "parallel"),
        ("Weißt du was, vergiss das Gefrickel. Können wir nicht direkt eine echte .xlsx-Datei erzeugen?", ".xlsx"),
        ("Tá, muda o plano: primeiro quero quitar o cartão.", "quitar o cartão"),
        ("Donc finalement on laisse tomber l'export. Concentre-toi sur les cotisations.", "cotisations"),
        ("Dobra, to zmiana planu: zamiast łatać moment, przechodzimy na useFormatter.", "useFormatter"),
    ],
)
def test_setting_the_work_aside_in_other_words_and_asking_for_another_changes_the_goal(
    message: str, subject: str
) -> None:
    goal = _goal(_FIRST, message)
    assert subject in goal.partition("(earlier:")[0]
    assert "billing-db" in goal.partition("(earlier:")[2]


def test_a_change_of_plan_for_a_part_of_the_work_that_asks_nothing_new_leaves_the_goal() -> None:
    goal = _goal(_FIRST, "Also, change of plan for the remaining budget: don't suggest more stuff, I'll keep it.")
    assert goal.startswith(_FIRST)


@pytest.mark.parametrize(
    ("message", "choice"),
    [
        ("Ok, let's go with Resend in eu-west-1. Write that up for the team.", "Resend"),
        ("Bon, on part sur HelloAsso.", "HelloAsso"),
        ("Zróbmy tak: teraz tylko checkout przechodzi na useFormatter.", "tylko checkout"),
        ("Only the reports/ package for now.", "reports/"),
    ],
)
def test_a_choice_or_a_narrowing_of_the_task_joins_the_goal(message: str, choice: str) -> None:
    goal = _goal(_FIRST, message)
    assert goal.startswith(_FIRST)
    assert choice in goal


def test_a_narrowing_joins_the_goal_without_the_rest_of_its_message() -> None:
    message = "Only the invoices table for now. The staging copy is three weeks old, it has 41M rows."
    goal = _goal(_FIRST, message)
    assert goal == f"{_FIRST} Only the invoices table for now."  # the fact stays a bullet of its own


@pytest.mark.parametrize("sentence", ["But only if she doesn't object.", "Don't name the customer, just the ID."])
def test_a_condition_or_a_detail_is_no_narrowing_of_the_task(sentence: str) -> None:
    assert _goal(_FIRST, sentence) == _FIRST


@pytest.mark.parametrize(
    "message",
    ["So hybrid, keep the boiler as backup. Can you draft the memo now?", "Write those five points up as a summary."],
)
def test_asking_for_the_piece_of_work_to_be_written_extends_the_goal(message: str) -> None:
    goal = _goal(_FIRST, message)
    assert goal.startswith(_FIRST)
    assert goal.endswith(message)


@pytest.mark.parametrize(
    ("message", "parameter"),
    [
        ("Lisbon is rammed in October. What about Porto instead?", "Porto"),
        ("pytest-xdist is fine, it's already in the dev lockfile.", "pytest-xdist"),
        ("場所も箱根は遠いから鎌倉で。", "鎌倉"),
    ],
)
def test_a_parameter_the_user_puts_in_place_joins_the_goal(message: str, parameter: str) -> None:
    goal = _goal(_FIRST, message)
    assert goal.startswith(_FIRST)
    assert parameter in goal


@pytest.mark.parametrize(
    "sentence", ["Oh, the rebate is good to know.", "One sentence each is fine.", "What about it?"]
)
def test_a_remark_that_approves_nothing_in_particular_leaves_the_goal(sentence: str) -> None:
    assert _goal(_FIRST, sentence) == _FIRST


@pytest.mark.parametrize(
    "message",
    [
        "While we're at it, move the export to the new queue too.",
        "Mira, ya que estamos, quiero migrar todo a pgBackRest.",
    ],
)
def test_widening_the_task_while_at_it_extends_the_goal(message: str) -> None:
    assert _goal(_FIRST, message) == f"{_FIRST} {message}"


def test_an_extended_goal_cut_short_keeps_a_requirement_it_stated_over_nothing() -> None:
    first = (
        "We send about 200k transactional emails a month, growing to 500k next year. "
        "Compare pricing for SendGrid, Postmark, Mailgun and Resend at both volumes. "
        "Use the official pricing pages, not blog posts. Must have: EU data residency."
    )
    goal = _goal(first, "Go with Resend, eu-west-1.", budget=232)  # a goal cap of 58 tokens
    assert "EU data residency" in goal  # what names things is kept first when the older goal is cut
    assert goal.endswith("Go with Resend, eu-west-1.")
    assert COUNTER.count(goal) <= 58


def test_an_extended_goal_whose_first_sentence_fills_the_room_keeps_its_first_ask_whole() -> None:
    first = (
        "I just got out of a meeting where legal said that we cannot use any managed cloud vector service at all, "
        "and the platform team said that we are not adding a new database to operate, so it has to be Postgres. "
        "Can pgvector with HNSW handle our load, and with which settings?"
    )
    then = "Agreed on all five, I will ask platform to schedule the upgrade. Write those points up as the summary."
    goal = _goal(first, then, budget=256)
    assert goal.startswith("I just got out of a meeting")
    assert "Can pgvector with HNSW handle our load, and with which settings?" in goal
    assert goal.endswith(then)
    assert COUNTER.count(goal) <= 64


@pytest.mark.parametrize(
    "sentence", ["Release 2.8 is on March 15 and I won't risk it.", "Build 5200 crashes on start."]
)
def test_a_sentence_that_opens_with_a_thing_and_its_number_is_no_order(sentence: str) -> None:
    assert classify_user_sentence(sentence) not in ("request", "step")


def test_a_narrowing_stated_in_a_long_added_request_stays_in_the_goal_when_it_is_cut() -> None:
    then = (
        "Also add the migration for the invoices table. Only the reports/ package is in scope for this sprint. "
        "The staging copy is three weeks old and has 41M rows, restored from the Sunday snapshot by the DBA team. "
        "We're on Postgres 12.7 there, same as production, with the same extensions and the same settings."
    )
    goal = _goal(_FIRST, then, budget=256)
    assert "Only the reports/ package is in scope" in goal


def test_a_request_said_as_a_want_after_a_lead_clause_is_a_request() -> None:
    assert classify_user_sentence("Mira, ya que estamos, quiero migrar todo a pgBackRest.") == "request"
    assert classify_user_sentence("Ich will aber keine neue Bibliothek installieren.") != "request"


def test_holding_off_the_work_and_asking_for_another_changes_the_goal() -> None:
    goal = _goal(_FIRST, "Hold off on the fix, can you figure out where the September refund jump comes from first?")
    assert goal.startswith("Hold off on the fix")
    assert "billing-db" in goal.partition("(earlier:")[2]


def test_a_request_to_write_it_up_after_a_dash_extends_the_goal() -> None:
    then = "I don't want this to look like we're accusing anyone — write it up neutrally for loss prevention."
    goal = _goal(_FIRST, then)
    assert goal.startswith(_FIRST)
    assert "loss prevention" in goal
