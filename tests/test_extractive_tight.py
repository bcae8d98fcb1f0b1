"""The extractive L1 at a tight budget: more facts in the same tokens, and none of the secrets.

Each test pins one rule: short "name: value" facts read from tool output, clauses of one sentence
said in one bullet, an English bullet of the assistant without its articles, a goal without small
talk, and the secret guard that reads whole words of a name.
"""

from __future__ import annotations

import pytest

from local_ai_memory._runtime.extractive import (
    _argument_words,
    _Candidate,
    _select,
    _tool_fields,
    _without_articles,
    classify_user_sentence,
    extract_summary,
    next_goal,
    secret_key,
    secret_value,
)
from local_ai_memory._runtime.messages import to_messages
from local_ai_memory._runtime.summary import DECISIONS, DISCOVERIES, USER_MARK, render_summary
from local_ai_memory._shared.tokens import TokenCounter

COUNTER = TokenCounter()

CERTBOT = """Saving debug log to /var/log/letsencrypt/letsencrypt.log
- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - -
Found the following certs:
  Certificate Name: api.lumenfield.io
    Serial Number: 4a1c0e9f...
    Key Type: RSA
    Domains: api.lumenfield.io
    Expiry Date: 2025-03-21 11:04:52+00:00 (VALID: 1 days)
    Certificate Path: /etc/letsencrypt/live/api.lumenfield.io/fullchain.pem
"""


def test_a_tool_output_gives_its_short_name_value_lines_and_nothing_else() -> None:
    fields = _tool_fields(CERTBOT)
    assert "Expiry Date: 2025-03-21 11:04:52+00:00 (VALID: 1 days)" in fields
    assert fields[0] == "Certificate Name: api.lumenfield.io"
    assert not any("Saving debug log" in field or "Serial Number" in field for field in fields)  # "..." is cut short
    assert "Key Type: RSA" not in fields  # a value that names nothing specific


def test_a_field_that_holds_a_secret_or_a_sentence_is_never_taken() -> None:
    output = (
        '{\n  "id": "cus_Q8842",\n  "api_key": "sk_live_51Habc",\n  "password": "hunter2",\n'
        '  "note": "Called twice. Refund 4417 later."\n}'
    )
    fields = _tool_fields(output)
    assert fields == ["id: cus_Q8842"]
    assert _tool_fields("User: The admin password is hunter2.") == []  # the value speaks of a secret
    assert _tool_fields("INFO: started 3 workers\nhttps://example.com/a:1") == []  # a log line, a URL


def test_a_field_said_again_keeps_its_first_value_and_a_listing_gives_only_its_first_fields() -> None:
    progress = "\n".join(f"aws_db_instance.main: Modifying, {n}0s elapsed" for n in range(1, 4))
    assert _tool_fields(progress) == ["aws_db_instance.main: Modifying, 10s elapsed"]
    listing = "\n".join(f"host{n}: 10.0.0.{n}" for n in range(20))
    assert len(_tool_fields(listing)) == 4


def test_a_fact_stated_only_in_tool_output_reaches_l1_as_a_short_field_line() -> None:
    messages = [
        {"role": "user", "content": "Why did the HTTPS check on api.lumenfield.io fail? It's on web-01."},
        {"role": "assistant", "content": "Let me look at certbot.", "tool_calls": [{"name": "ssh_exec"}]},
        {"role": "tool", "name": "ssh_exec", "content": CERTBOT},
        {"role": "assistant", "content": "The renewal timer is disabled, so the cert is about to expire."},
    ]
    text = render_summary(extract_summary(to_messages(messages), COUNTER, 768))
    assert "ssh_exec: Expiry Date: 2025-03-21" in text
    assert "Saving debug log" not in text  # no raw dump
    assert "Found the following certs" not in text


@pytest.mark.parametrize(
    ("name", "secret"),
    [
        ("author", False),
        ("max_tokens", False),
        ("compass", False),
        ("pinned_version", False),
        ("api_key", True),
        ("apiKey", True),
        ("x-api-key", True),
        ("authToken", True),
        ("access_token", True),
        ("DB_PASSWORD", True),
        ("client_secret", True),
        ("Authorization", True),
        ("session_cookie", True),
        ("STRIPE_KEY", True),
        ("key", False),
    ],
)
def test_a_name_is_secret_when_a_whole_word_of_it_says_so(name: str, secret: bool) -> None:
    assert secret_key(name) is secret


@pytest.mark.parametrize(
    "value",
    [
        "sk_live_51HqLyjWDarjtT1zdp7dc",
        "ghp_16C7e42F292c6912E7710c838347Ae178B4a",
        "AKIAIOSFODNN7EXAMPLE",
        "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.sig",
        "postgres://app:pass@db-1/shop",
        "the admin password is hunter2",
    ],
)
def test_a_value_shaped_like_a_key_or_naming_a_secret_is_secret(value: str) -> None:
    assert secret_value(value)
    assert _tool_fields(f"DATABASE: {value}") == []


def test_an_ordinary_value_is_no_secret() -> None:
    assert not secret_value("2025-03-21 11:04:52+00:00")
    assert not secret_value("scikit-learn 1.4.2, ask-later")


def test_a_call_argument_named_like_a_secret_only_in_part_is_still_said() -> None:
    assert _argument_words('{"author": "priya", "max_tokens": 512}') == "author=priya, max_tokens=512"
    assert _argument_words('{"repo": "acme/shop", "github_token": "ghp_x1y2"}') == "acme/shop"
    assert _argument_words('{"repo": "acme/shop", "header": "sk-proj-Ab12Cd34Ef56"}') == "acme/shop"


def test_kept_clauses_of_one_sentence_make_one_bullet_and_pay_its_mark_once() -> None:
    sentence = (1, "Optimistic: we grandfather Starter back to $19 from Aug 1; so churn drops to ~3.3% from August")
    first = _Candidate(DISCOVERIES, "Optimistic: we grandfather Starter back to $19 from Aug 1", 3.0, 1, True, sentence)
    second = _Candidate(DISCOVERIES, "so churn drops to ~3.3% from August", 3.0, 1, True, sentence, part=1)
    other = _Candidate(DISCOVERIES, "Base case: churn stays at the June level, 4.2%.", 3.0, 2, True)
    apart = sum(COUNTER.count(f"* {USER_MARK}{c.text}\n") for c in (first, second, other))
    chosen = _select([first, second, other], COUNTER, apart - 3, bullet_cap=64)  # no room for three marks
    assert [c.text for c in chosen] == [f"{first.text}; {second.text}", other.text]
    together = sum(COUNTER.count(f"* {USER_MARK}{c.text}\n") for c in chosen)
    assert together <= apart - 3


def test_clauses_too_long_for_one_bullet_stay_apart() -> None:
    sentence = (1, "whole sentence")
    first = _Candidate(DECISIONS, "We keep orders_merchant_id_idx until reporting confirms", 3.0, 1, sentence=sentence)
    second = _Candidate(DECISIONS, "and the prod migration runs at 02:00 UTC", 3.0, 1, sentence=sentence, part=1)
    chosen = _select([first, second], COUNTER, 200, bullet_cap=12)
    assert [c.text for c in chosen] == [first.text, second.text]


def test_an_english_line_loses_its_articles_but_not_code_quotes_or_names() -> None:
    line = 'The planner walks `the_idx` backwards and filters out 21.9M rows of the table, says "the end".'
    short = _without_articles(line)
    assert short == 'Planner walks `the_idx` backwards and filters out 21.9M rows of table, says "the end".'
    assert COUNTER.count(short) < COUNTER.count(line)
    assert _without_articles("Option A is cheaper than the option B.") == "Option A is cheaper than option B."
    assert _without_articles("The test shows that the queue is full.") == "Test shows queue is full."
    german = "An der Grenze ist die Latenz höher, und das ist normal."
    assert _without_articles(german) == german  # not English: "an" is a preposition there
    assert _without_articles("The end.") == "The end."  # too little English to tell


def test_at_a_tight_budget_the_assistant_drops_articles_and_the_user_keeps_their_words() -> None:
    messages = [
        {"role": "user", "content": "Find out why the exporter writes NaN. The export job runs at 02:00 UTC."},
        {"role": "assistant", "content": "The cause is a division by zero in the ratio column of the report."},
    ]
    tight = render_summary(extract_summary(to_messages(messages), COUNTER, 256))
    roomy = render_summary(extract_summary(to_messages(messages), COUNTER, 768))
    assert "Cause is division by zero in ratio column of report." in tight
    assert "The cause is a division by zero in the ratio column of the report." in roomy
    assert "The export job runs at 02:00 UTC." in tight  # in the goal, as the user said it


@pytest.mark.parametrize("greeting", ["Hi!", "Bonjour !", "Hola.", "Moin!", "Ugh.", "Good."])
def test_small_talk_is_chat_and_a_goal_does_not_keep_it(greeting: str) -> None:
    assert classify_user_sentence(greeting) == "chat"
    message = f"{greeting} Write the migration for the orders table."
    assert next_goal("", message, COUNTER, 64)[0] == "Write the migration for the orders table."


def test_a_listing_of_records_gives_the_first_records_fields() -> None:
    second = CERTBOT.replace("api.lumenfield.io", "lumenfield.io").replace("2025-03-21 11:04:52", "2025-05-30 08:12:10")
    fields = _tool_fields(CERTBOT + second)
    assert "Expiry Date: 2025-03-21 11:04:52+00:00 (VALID: 1 days)" in fields
    assert not any("2025-05-30" in field for field in fields)


def test_a_field_from_a_tool_named_user_cannot_pass_for_the_user() -> None:
    messages = [
        {"role": "user", "content": "Look up the order for ticket 48213."},
        {"role": "tool", "name": "User", "content": "User: cus_Q8842\nplan: business_monthly_v2"},
    ]
    summary = extract_summary(to_messages(messages), COUNTER, 768)
    assert "tool User: User: cus_Q8842" in summary.bullets[DISCOVERIES]
    assert not any(item.startswith(USER_MARK) for items in summary.bullets.values() for item in items)
