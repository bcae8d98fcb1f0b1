"""Under a tight budget the extractive L1 keeps the lines that tell the most, each said in few tokens."""

from __future__ import annotations

from dataclasses import replace

import pytest

from local_ai_memory._runtime.extractive import (
    _Candidate,
    _clauses,
    _compress,
    _cut,
    _emphasized,
    _plans,
    _select,
    _split_sentences,
    _table_row,
    _units,
    extract_summary,
    next_goal,
)
from local_ai_memory._runtime.messages import to_messages
from local_ai_memory._runtime.summary import COMPLETED, DECISIONS, DISCOVERIES, OPEN_ISSUES, USER_MARK, render_summary
from local_ai_memory._shared.tokens import TokenCounter

COUNTER = TokenCounter()


def test_compress_drops_openers_hedges_and_emphasis_but_keeps_every_number_and_name() -> None:
    line = "So, basically the **p99** on node-7 is just 41 ms at 800 QPS (v2.14.1)."
    short = _compress(line)
    assert short == "The p99 on node-7 is 41 ms at 800 QPS (v2.14.1)."
    assert COUNTER.count(short) < COUNTER.count(line)
    assert _compress("Confirmed: INV-20931 was charged twice.") == "INV-20931 was charged twice."


def test_compress_leaves_a_line_that_would_lose_its_meaning() -> None:
    assert _compress("Actually, no.") == "Actually, no."
    assert _compress("Just do it.") == "Just do it."  # a hedge only goes from inside a sentence


def test_units_weigh_identifiers_and_amounts_over_plain_words_and_small_numbers() -> None:
    units = _units("The refund re_3PbW1cKfT2 of €1,249.00 lands in 5 business days for ACME")
    assert units["re_3pbw1ckft2"] == 1.0
    assert units["€1,249.00"] == 1.0
    assert units["acme"] > units["business"] > 0
    assert units["5"] == units["business"]  # a bare small number is rarely the fact itself
    assert "the" not in units


def test_a_near_duplicate_is_passed_over_for_a_line_that_adds_something() -> None:
    first = _Candidate(DISCOVERIES, "The hot tier p99 is 41 ms at 800 QPS.", 3.0, 1)
    repeat = _Candidate(DISCOVERIES, "At 800 QPS the hot tier p99 is 41 ms.", 3.0, 2)
    other = _Candidate(DISCOVERIES, "Recall@10 is 0.955 with the fp16 rerank.", 2.0, 3)
    room = 2 * max(COUNTER.count(c.text) + 2 for c in (first, repeat, other))
    chosen = _select([first, repeat, other], COUNTER, room)
    assert len(chosen) == 2
    assert other in chosen
    assert not (first in chosen and repeat in chosen)


def test_what_the_goal_already_says_is_worth_nothing_more() -> None:
    said = _Candidate(DISCOVERIES, "ingest-gateway runs Go 1.21 with a 2Gi limit.", 3.0, 1)
    new = _Candidate(DISCOVERIES, "47,988 goroutines block at forwarder.go:88.", 2.0, 2)
    room = max(COUNTER.count(c.text) + 2 for c in (said, new)) + 1
    chosen = _select([said, new], COUNTER, room, goal="Find why ingest-gateway (Go 1.21) hits its 2Gi limit.")
    assert chosen == [new]


def test_the_run_repeating_a_fact_makes_it_win_over_a_one_off_number() -> None:
    once = _Candidate(DISCOVERIES, "The March count was 74 then 81 then 162.", 0.5, 1)
    echoed = _Candidate(DISCOVERIES, "Starter churn was 7.94% in June.", 0.5, 2)
    room = max(COUNTER.count(c.text) + 2 for c in (once, echoed)) + 1
    echoes = {"7.94%": 3, "starter": 3, "june": 2}
    assert _select([once, echoed], COUNTER, room, echoes=echoes) == [echoed]


def test_a_line_its_writer_put_in_bold_wins_over_an_equal_plain_one() -> None:
    plain = _Candidate(DISCOVERIES, "The p99 at 800 QPS is 41 ms on node-7.", 0.5, 1)
    bold = _Candidate(DISCOVERIES, "The p99 at 900 QPS is 45 ms on node-8.", 0.5, 2, bold=True)
    room = max(COUNTER.count(c.text) + 2 for c in (plain, bold)) + 1
    assert _select([plain, bold], COUNTER, room) == [bold]
    assert _select([plain, replace(bold, bold=False)], COUNTER, room) == [plain]  # else the first equal one


def test_what_the_run_put_in_bold_counts_more_in_any_line_that_repeats_it() -> None:
    first = _Candidate(DISCOVERIES, "Batch size was 50k rows on db-7.", 0.5, 1)
    second = _Candidate(DISCOVERIES, "Replica lag was 12s on db-8.", 0.5, 2)
    room = max(COUNTER.count(c.text) + 2 for c in (first, second)) + 1
    assert _select([first, second], COUNTER, room, emphasized=_emphasized(["Lag hit **12s** at peak."])) == [second]
    assert _select([first, second], COUNTER, room, emphasized=_emphasized(["Batches of **50k**."])) == [first]


def test_bold_words_are_read_from_what_the_user_and_the_assistant_wrote_not_from_a_tool_output() -> None:
    finding = "Its 5xx rate is **0.82%** on db-4."

    def tight(tool_output: str) -> str:
        messages = to_messages(
            [
                {"role": "user", "content": "Why is the canary failing?"},
                {"role": "assistant", "content": "", "tool_calls": [{"name": "read_doc", "args": {}, "id": "c1"}]},
                {"role": "tool", "name": "read_doc", "tool_call_id": "c1", "content": tool_output},
                {"role": "assistant", "content": f"Node-3 runs build 7731 with TLS 1.3. {finding}"},
            ]
        )
        return render_summary(extract_summary(messages, COUNTER, 56))

    assert _emphasized(["**0.82%** vs 0.11%", "__v2.14.1__ and *one* star"]) == {"0.82%", "v2.14.1"}
    text = tight("Notes: the canary is build 7731 on node-3, TLS 1.3.")
    assert "0.82%" in text
    assert "7731" not in text
    assert "**" not in text  # the marks themselves are not kept
    # a document's bold is not the run's emphasis
    assert tight("Notes: the canary is **build 7731** on **node-3**, **TLS 1.3**.") == text


def test_a_tight_budget_keeps_the_specific_finding_over_chatter() -> None:
    messages = to_messages(
        [
            {"role": "user", "content": "Why does the nightly backup of db-7 fail?"},
            {
                "role": "assistant",
                "content": (
                    "That explains a lot, honestly. It looks like things went wrong somewhere along the way. "
                    "The volume /mnt/backups has 500G and is at 98%, so pg_dump hits No space left on device. "
                    "This is a rather common situation in general, I would say. "
                    "It is something we see from time to time with setups like this one."
                ),
            },
        ]
    )
    summary = extract_summary(messages, COUNTER, 96)
    text = render_summary(summary)
    assert "98%" in text
    assert "/mnt/backups" in text
    assert "common situation" not in text
    assert COUNTER.count(text) <= 96


def test_a_stop_after_an_abbreviation_does_not_cut_a_sentence() -> None:
    text = (
        "Add an alert on growth (e.g. 10k goroutines for 15m). Costs vs. gains are fine. The answer is no."
        "\nNext e.g.\nend"
    )
    assert _split_sentences(text) == [
        "Add an alert on growth (e.g. 10k goroutines for 15m).",
        "Costs vs. gains are fine.",
        "The answer is no.",
        "Next e.g.",
        "end",
    ]


def test_tool_chatter_gives_way_to_a_finding_when_room_is_short() -> None:
    messages = to_messages(
        [
            {"role": "user", "content": "Why is the orders backfill so slow?"},
            {"role": "assistant", "content": "", "tool_calls": [{"name": "run_sql", "args": {}, "id": "c1"}]},
            {"role": "tool", "name": "run_sql", "tool_call_id": "c1", "content": "count\n381204117\n(1 row)"},
            {"role": "assistant", "content": "orders has 381M rows (212 GB); one 50k batch writes 41 MB of WAL."},
        ]
    )
    text = render_summary(extract_summary(messages, COUNTER, 64))
    assert "381M" in text
    assert "(1 row)" not in text
    wide = render_summary(extract_summary(messages, COUNTER, 768))
    assert "ran run_sql" in wide  # with room, what was done is still said


def test_an_assistant_plan_is_a_decision_and_looking_around_is_not() -> None:
    messages = to_messages(
        [
            {"role": "user", "content": "Port the CRC routine to Rust."},
            {
                "role": "assistant",
                "content": (
                    "I'll check the C source first. I'm adding forbid(unsafe_code) at the crate root of pktool. "
                    "In Rust I'll generate the table at compile time with a const fn. "
                    "Deploy the new build to the canary pod first."
                ),
            },
        ]
    )
    decisions = extract_summary(messages, COUNTER, 768).bullets[DECISIONS]
    assert any("forbid(unsafe_code)" in item for item in decisions)
    assert any("const fn" in item for item in decisions)
    assert any("canary pod" in item for item in decisions)
    assert not any("check the C source" in item for item in decisions)


def test_an_action_said_as_it_is_taken_or_as_an_imperative_how_is_a_plan() -> None:
    assert _plans("Adding status_code=201 to the POST route.")
    assert _plans("Use context.WithTimeout and pass that context to Post.")
    assert _plans("Buffer resCh with capacity 1.")
    assert not _plans("Checking the event log for the invoice.")  # looking around, not acting
    assert not _plans("Morning traffic is 40% higher than at night.")


def test_a_long_sentence_is_never_cut_inside_a_code_span() -> None:
    sentence = (
        "With `retry_policy: none` set on the card-gateway client in the canary config, those charges "
        "fail outright: the canary 5xx rate rises from 0.11% to 0.82% within the first hour of traffic."
    )
    parts = _clauses(sentence, COUNTER, 16)
    assert any("`retry_policy: none`" in part for part in parts)
    assert any(part.startswith("the canary 5xx rate") for part in parts)  # a clause mark outside code still cuts


def test_a_short_label_stays_with_what_it_labels_when_both_fit() -> None:
    sentence = (
        "Two options are left after the survey of the old town and the riverside hotels this week; "
        "Hotel da Ribeira: €145/night, 15 rooms free, meeting room €400/day."
    )
    parts = _clauses(sentence, COUNTER, 24)
    assert "Hotel da Ribeira: €145/night, 15 rooms free, meeting room €400/day." in parts
    assert not any(part == "Hotel da Ribeira:" for part in parts)


def test_a_table_row_is_said_as_subject_and_values_and_a_short_total_row_is_kept() -> None:
    row = "| Hotel da Ribeira | 14 × 2 × €145 | 4,060 |"
    assert _table_row(row) == "Hotel da Ribeira: 14 × 2 × €145, 4,060"
    assert COUNTER.count(_table_row(row)) < COUNTER.count(row)
    assert _table_row("|---|:---:|---|") == ""
    table = "Budget:\n\n| Item | € |\n|---|---|\n| Hotel da Ribeira | 4,060 |\n| **Total** | **7,330** |"
    messages = to_messages([{"role": "user", "content": "Plan the offsite."}, {"role": "assistant", "content": table}])
    text = render_summary(extract_summary(messages, COUNTER, 768))
    assert "Total: 7,330" in text
    assert "|" not in text


def test_what_a_replaced_goal_named_without_a_verb_lives_on_as_a_bullet() -> None:
    messages = to_messages(
        [
            {
                "role": "user",
                "content": "Help me plan our offsite. 14 people, Lisbon, late September, budget €9,000. Any ideas?",
            },
            {"role": "assistant", "content": "Two hotels near Alfama fit the budget."},
            {"role": "user", "content": "Change of plan: we go to Porto instead, October 8-10."},
        ]
    )
    summary = extract_summary(messages, COUNTER, 768)
    assert "Porto" in summary.goal
    text = render_summary(summary)
    note = summary.goal.partition("(earlier:")[2]
    # kept: in the note about the replaced goal when it fits there, else as a bullet of its own
    assert "14 people, Lisbon, late September, budget €9,000." in note or (
        "User: 14 people, Lisbon, late September, budget €9,000." in text
    )
    assert "User: Any ideas?" not in text  # what it asked stays in the "earlier goal" line only


def test_a_cut_goal_keeps_the_sentence_that_names_its_subject() -> None:
    first = (
        "We're rolling out payments-service v2.14.0 with Argo Rollouts. The canary is at 10% right now. "
        "Can you check the metrics and tell me whether it's safe to promote to 25%?"
    )
    more = "Abort the canary. And keep the new_3ds_flow flag off regardless, that is a separate rollout."
    goal, _moved = next_goal(first, more, COUNTER, 64, "extend")
    assert goal.startswith("We're rolling out payments-service v2.14.0")
    assert goal.endswith(more)
    assert COUNTER.count(goal) <= 64
    long_goal = (
        "I'm porting our packet checksum routine from C to Rust for pktool. It's the standard reflected "
        "CRC-32. " + "Every packet has a header and a body and a trailer. " * 6 + "Can you write the Rust version?"
    )
    cut, _moved = next_goal("", long_goal, COUNTER, 40)
    assert cut.startswith("I'm porting our packet checksum routine from C to Rust for pktool. It's the standard")
    assert cut.endswith("Can you write the Rust version?")
    assert not cut.endswith("…")  # whole sentences, as many as fit


def test_a_long_added_request_leaves_the_goal_it_extends_a_third_of_the_cap() -> None:
    first = "Our nightly export job for the billing-db crashes since Monday. Can you find out why and fix it?"
    more = (
        "Also add a retry with backoff around every call to the invoice API, log each retry with the invoice id "
        "and the attempt number, and send me a short summary of what failed overnight so I can forward it to the "
        "finance team before their standup. Keep the summary to five lines and put the failed invoice ids first."
    )
    goal, _moved = next_goal(first, more, COUNTER, 64, "extend")
    assert goal.startswith("Our nightly export job for the billing-db")  # what the task is about stays
    assert "Also add a retry with backoff" in goal
    assert COUNTER.count(goal) <= 64


def test_what_the_tool_calls_were_about_is_said_from_their_arguments() -> None:
    body = "x" * 500  # a long value is data (a file's content), not what the call was about
    messages = to_messages(
        [
            {"role": "user", "content": "Why does the nightly export crash?"},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {"name": "read_file", "args": {"path": "jobs/export_nightly.py"}, "id": "c1"},
                    {"name": "search_logs", "args": {"query": "OOMKilled", "since": "2024-06-01"}, "id": "c2"},
                    {"name": "write_file", "args": {"path": "notes.txt", "content": body}, "id": "c3"},
                    {"name": "read_file", "args": {"path": "jobs/export_nightly.py"}, "id": "c4"},
                    {"name": "login", "args": {"user": "ops-bot", "api_key": "sk-live-123"}, "id": "c5"},
                ],
            },
            {"role": "tool", "name": "read_file", "tool_call_id": "c1", "content": "def main(): ..."},
        ]
    )
    completed = extract_summary(messages, COUNTER, 768).bullets[COMPLETED]
    assert "read_file: jobs/export_nightly.py" in completed  # one line per tool, a repeated call said once
    assert "search_logs: query=OOMKilled, since=2024-06-01" in completed
    assert "write_file: notes.txt" in completed
    assert body not in " ".join(completed)
    assert "login: ops-bot" in completed  # a secret's value is never repeated
    assert "sk-live-123" not in " ".join(completed)


def test_a_responses_call_item_is_not_read_as_prose() -> None:
    messages = to_messages(
        [
            {"role": "user", "content": "Find the failing job."},
            {"type": "function_call", "call_id": "c1", "name": "grep", "arguments": '{"pattern": "ERROR 42"}'},
        ]
    )
    summary = extract_summary(messages, COUNTER, 768)
    assert "grep: ERROR 42" in summary.bullets[COMPLETED]
    assert not any('"pattern"' in line for bullets in summary.bullets.values() for line in bullets)


_TASK = "Our nightly export job for the billing-db started crashing on Monday. Can you find out why and fix it?"


def _goal_after(message: str) -> str:
    messages = to_messages(
        [
            {"role": "user", "content": _TASK},
            {"role": "assistant", "content": "The job OOMs at 2Gi while loading invoices."},
            {"role": "user", "content": message},
        ]
    )
    return extract_summary(messages, COUNTER, 768).goal


@pytest.mark.parametrize(
    "message",
    [
        "Next, run the test suite and show me the failures.",  # a step on the way
        "Now deploy it to staging.",  # more work on what is at hand
        "Now that the fix is deployed, can you check the error rate?",
        "Never mind, it works now.",  # sets the work aside but asks for nothing
        "Use the read replica instead.",
        "Wait, don't restart the pods yet.",  # a constraint that asks for nothing new
        "Actually, don't touch the cron entry. Can you also check the heap?",  # an addition to the work at hand
    ],
)
def test_a_step_or_a_remark_leaves_the_goal(message: str) -> None:
    assert _goal_after(message) == _TASK


@pytest.mark.parametrize(
    ("message", "subject"),
    [
        ("Never mind the crash, we're retiring that job. Please write the decommissioning checklist.", "checklist"),
        ("On second thought, drop the fix and write a runbook for manual exports.", "runbook"),
        ("Let's switch gears. Write the handover doc for data-eng.", "handover doc"),
        ("New priority: prepare the Q3 capacity plan for billing-db.", "capacity plan"),
        ("Different question: how do we rotate the billing-db credentials?", "rotate"),
        ("Cambio di programma: scrivi il piano di migrazione.", "piano di migrazione"),
        ("Wait, actually don't fix it at all. Can you write a postmortem draft for the crash?", "postmortem"),
        ("No need to dig any further. Please write the summary for the incident channel.", "incident channel"),
        ("不用再往下挖了。你直接帮我写一份事故总结。", "事故总结"),
    ],
)
def test_setting_the_work_aside_and_asking_for_another_changes_the_goal(message: str, subject: str) -> None:
    goal = _goal_after(message)
    assert subject in goal
    assert goal.index(subject) < goal.find("(earlier:")  # the old goal is only mentioned after the new one


@pytest.mark.parametrize(
    ("context", "ask"),
    [
        (
            "I have a customer, Jonas Weber, order #DE-88121, who says the parcel never arrived.",
            "He wants a refund. Please check the carrier status and handle it.",
        ),
        (
            "Quick context: we run 3 Kafka clusters on MSK, all on version 2.8.1.",
            "I need a plan to upgrade them to 3.6 with no downtime.",
        ),
        ("We're seeing 502s on checkout since the 14:05 deploy of cart-api v3.2.0.", "Roll it back, find the cause."),
        ("Bonjour, je suis Léa de l'équipe data.", "Peux-tu m'aider à migrer nos DAGs Airflow 1.10 vers Airflow 2.9 ?"),
    ],
)
def test_what_the_user_said_before_the_first_ask_stays_with_it_in_the_goal(context: str, ask: str) -> None:
    messages = to_messages(
        [
            {"role": "user", "content": context},
            {"role": "assistant", "content": "Sure."},
            {"role": "user", "content": ask},
            {"role": "assistant", "content": "On it."},
        ]
    )
    assert extract_summary(messages, COUNTER, 768).goal == f"{context} {ask}"


def test_a_tight_budget_cuts_the_context_of_the_first_ask_instead_of_dropping_it() -> None:
    context = (
        "Our ingest-gateway pods in eu-west-1 are restarting every 40 minutes or so since Tuesday. "
        "They run Go 1.21 with a 2Gi memory limit and GOGC at its default of 100. "
        "The on-call runbook says to bump the limit, but we already did that twice last month. "
        "Traffic is flat, around 1,200 requests per second at peak."
    )
    ask = "Yes, go ahead and profile the heap on one pod."
    messages = to_messages(
        [
            {"role": "user", "content": context},
            {"role": "assistant", "content": "Shall I take a heap profile?"},
            {"role": "user", "content": ask},
        ]
    )
    for budget in (768, 256):  # the same goal at both budgets, only shorter at 256
        goal = extract_summary(messages, COUNTER, budget).goal
        assert goal.startswith("Our ingest-gateway pods in eu-west-1 are restarting")
        assert goal.endswith(ask)
    assert COUNTER.count(extract_summary(messages, COUNTER, 256).goal) <= 64


def test_a_cut_goal_keeps_its_first_ask_and_what_the_user_said_before_it_over_later_details() -> None:
    message = (
        "Hold the rollout for now. Marta from finance owns the approval and she is back on Thursday. "
        "Can you write the change request for the billing-db resize so she can sign it? "
        "Add the monthly cost delta and the rollback steps. List who gets paged during the window."
    )
    goal, _moved = next_goal("", message, COUNTER, 40)
    assert goal == (
        "Hold the rollout for now. Marta from finance owns the approval and she is back on Thursday. "
        "Can you write the change request for the billing-db resize so she can sign it?"
    )


@pytest.mark.parametrize(
    ("message", "due", "cap"),
    [
        (
            "Our checkout page times out for some users in Safari. We have 40 support tickets about it since last "
            "week. The spring sale starts on Friday, so it has to be fixed by Thursday. Can you find the cause?",
            "by Thursday",
            36,
        ),
        (
            "Onze webshop geeft elke middag 502-fouten bij het afrekenen. Het draait op een VPS met 4 vCPU en "
            "nginx. Morgen start de actie, dus het moet vandaag opgelost worden.",
            "vandaag",
            42,
        ),
    ],
)
def test_a_cut_goal_keeps_when_the_task_is_due_before_other_context(message: str, due: str, cap: int) -> None:
    goal, _moved = next_goal("", message, COUNTER, cap)
    assert due in goal
    assert goal.startswith(message.split(".", maxsplit=1)[0])


def test_a_cut_new_goal_does_not_spend_its_room_on_setting_the_old_work_aside() -> None:
    message = (
        "Stop there. Finance just told me the billing-db export is being replaced by the warehouse sync next "
        "quarter, so a fix is wasted effort. Can you write a decommissioning checklist for the export job, "
        "with the cron entry, the S3 bucket, the IAM role and the alert rules it owns? List the teams that "
        "read the exported files so we can warn them."
    )
    messages = to_messages(
        [
            {"role": "user", "content": _TASK},
            {"role": "assistant", "content": "The job OOMs at 2Gi while loading invoices."},
            {"role": "user", "content": message},
        ]
    )
    tight = extract_summary(messages, COUNTER, 256).goal
    assert tight.startswith("Finance just told me the billing-db export is being replaced")
    assert "decommissioning checklist" in tight
    assert extract_summary(messages, COUNTER, 768).goal.startswith("Stop there.")  # uncut, it is said as it was


def test_a_statement_with_no_ask_after_it_stays_a_bullet() -> None:
    messages = to_messages([{"role": "user", "content": "The cluster is kestrel."}])
    summary = extract_summary(messages, COUNTER, 768)
    assert summary.goal == ""
    assert summary.bullets[DISCOVERIES] == ["User: The cluster is kestrel."]


def test_a_sentence_that_only_announces_the_change_is_not_part_of_the_new_goal() -> None:
    goal = _goal_after("Change of plans. Write the decommissioning checklist for the export job.")
    assert goal.startswith("Write the decommissioning checklist for the export job.")
    assert "Change of plans" not in goal
    assert "(earlier:" in goal  # what the replaced goal was about is still mentioned, after it


def test_a_request_added_after_a_change_goes_before_the_note_about_the_earlier_goal() -> None:
    messages = to_messages(
        [
            {"role": "user", "content": _TASK},
            {"role": "assistant", "content": "The job OOMs at 2Gi while loading invoices."},
            {"role": "user", "content": "New task: write the decommissioning checklist for the export job."},
            {"role": "assistant", "content": "Here is a first draft of the checklist."},
            {"role": "user", "content": "Also add a rollback step for the cron entry."},
        ]
    )
    goal = extract_summary(messages, COUNTER, 768).goal
    assert goal.index("checklist") < goal.index("rollback step") < goal.index("(earlier:")
    tight = extract_summary(messages, COUNTER, 64).goal  # no room for the note: the added request stays whole
    assert tight.endswith("Also add a rollback step for the cron entry.")
    assert "(earlier" not in tight


def test_a_noun_that_looks_like_an_order_or_a_gerund_is_not_a_plan() -> None:
    assert not _plans("Buffer is 256.")  # the first word is what the sentence is about
    assert not _plans("Nothing else significant.")
    assert not _plans("Morning traffic peaks at 09:00.")
    assert _plans("Buffer the channel to 256 slots.")
    assert _plans("Adding a dropped-message counter to metrics.go.")


def test_only_as_a_measure_is_a_finding_not_a_decision() -> None:
    text = "Organic growth in that segment was only 6.7% (p.43). We only deploy on Tuesdays from now on."
    summary = extract_summary(to_messages([{"role": "assistant", "content": text}]), COUNTER, 768)
    assert any("6.7%" in line for line in summary.bullets[DISCOVERIES])
    assert not any("6.7%" in line for line in summary.bullets[DECISIONS])
    assert any("Tuesdays" in line for line in summary.bullets[DECISIONS])


def test_a_clause_is_never_cut_inside_a_short_aside_in_brackets() -> None:
    sentence = (
        "Free cash flow was USD 187.4m (FY22: 202.9m), pressured by USD 156.0m capex for the Rotterdam "
        "sortation hub; about 60% of that spend is one-off and will not recur in the FY2024 plan at all."
    )
    parts = _clauses(sentence, COUNTER, 24)
    assert len(parts) > 1
    assert any("(FY22: 202.9m)" in part for part in parts)


def test_scratching_the_current_work_and_asking_for_another_changes_the_goal() -> None:
    goal = _goal_after("Scratch the export thing, the CFO wants the Q3 cost report by Friday. Can you build it?")
    assert goal.startswith("Scratch the export thing")
    assert "(earlier:" in goal


@pytest.mark.parametrize(
    "message",
    [
        "Nice. Now add regression tests for the OOM you found.",  # the next piece of work on the same goal
        "Make me a checklist for rolling the fix out to the other 4 jobs.",  # a new thing to make, for this goal
    ],
)
def test_the_next_piece_of_work_extends_the_goal_instead_of_replacing_it(message: str) -> None:
    goal = _goal_after(message)
    assert goal.startswith(_TASK)
    assert goal.endswith(message.removeprefix("Nice. "))


def test_text_without_spaces_is_split_into_sentences_and_its_words_are_counted() -> None:
    text = "本番のRedisのメモリ使用率が95%を超えました。原因を調べてもらえますか？"
    assert _split_sentences(text) == ["本番のRedisのメモリ使用率が95%を超えました。", "原因を調べてもらえますか？"]
    messages = to_messages(
        [
            {"role": "user", "content": text},
            {"role": "assistant", "content": "sess:* のキーにTTLが設定されていません（ttl=-1）。"},
            {"role": "user", "content": "以前は24時間でした。少しずつお願いします。"},
        ]
    )
    summary = extract_summary(messages, COUNTER, 768)
    assert summary.goal == text  # a task of many words: a later remark does not replace it as a stand-in
    assert any("ttl=-1" in line for line in summary.bullets[DISCOVERIES])  # no longer too short to keep


def test_asking_for_a_new_thing_to_be_made_extends_the_goal_in_other_languages_too() -> None:
    first = "¿Cuál de las dos propuestas de CRM nos sale más barata en 2 años?"
    then = "Vale, vamos con Clientia. Prepárame un correo para negociar la permanencia."
    messages = to_messages(
        [
            {"role": "user", "content": first},
            {"role": "assistant", "content": "Clientia cuesta 41.280 € en 2 años y VentaPro 47.900 €."},
            {"role": "user", "content": then},
        ]
    )
    goal = extract_summary(messages, COUNTER, 768).goal
    assert goal.startswith(first)
    assert "permanencia" in goal


def test_a_typeset_minus_becomes_the_sign_one_types() -> None:
    line = "Che 2021 (n=120, 12 wk): \u22121.04% vs \u22120.35%."
    assert _compress(line) == "Che 2021 (n=120, 12 wk): -1.04% vs -0.35%."


def test_a_negative_number_keeps_its_sign_when_bullet_marks_are_removed() -> None:
    from local_ai_memory._runtime.summary import clean_line

    assert clean_line("- -0.3% vs -0.5%, noninferior") == "-0.3% vs -0.5%, noninferior"
    assert clean_line("-.5 dB at 2 kHz") == "-.5 dB at 2 kHz"
    assert clean_line("-- * # heading-like text") == "heading-like text"


def test_a_long_table_row_keeps_its_first_cell_with_its_values() -> None:
    table = (
        "| Provider | 200k/mo | 500k/mo | EU residency |\n|---|---|---|---|\n"
        "| Amazon SES | $20 (+$24.95 dedicated IP optional) | $50 | yes (eu-central-1 / eu-west-1) |"
    )
    ask = {"role": "user", "content": "Compare the providers."}
    messages = to_messages([ask, {"role": "assistant", "content": table}])
    bullets = extract_summary(messages, COUNTER, 256).bullets[DISCOVERIES]
    assert any(line.startswith("Amazon SES: $20") for line in bullets)
    assert not any(line.startswith("$20") for line in bullets)  # never the values without what they are about


def test_a_bullet_costs_what_it_takes_once_rendered_so_the_room_is_used() -> None:
    said = [
        _Candidate(DECISIONS, "We use Postgres 16 in prod.", 4.0, 1, user=True),
        _Candidate(DISCOVERIES, "Retention is 7 days on clickstream-raw.", 3.0, 2, user=True),
        _Candidate(DISCOVERIES, "The migration revision is a71c9e02d4f3.", 1.0, 3),
    ]
    rendered = [f"* {USER_MARK if c.user else ''}{c.text}\n" for c in said]
    room = sum(COUNTER.count(line) for line in rendered)
    # the three fit exactly: none is left out for overhead the rendered L1 does not have
    assert _select(said, COUNTER, room) == said
    assert len(_select(said, COUNTER, room - 1)) == 2


def test_a_question_the_user_answered_is_not_an_open_issue() -> None:
    messages = to_messages(
        [
            {"role": "user", "content": "Add an index so the /admin/orders search stops timing out."},
            {"role": "assistant", "content": "The index build takes 11m42s on staging. Should I write the migration?"},
            {"role": "user", "content": "Yes, write it, and run it tonight at 02:00 UTC."},
            {"role": "assistant", "content": "Migration a71c9e02d4f3 written. Should I drop the old index too?"},
        ]
    )
    open_issues = extract_summary(messages, COUNTER, 256).bullets[OPEN_ISSUES]
    assert not any("Should I write the migration" in line for line in open_issues)
    # the last question has no answer yet: it stays open
    assert any("drop the old index" in line for line in open_issues)


def test_a_cut_line_never_ends_inside_a_number_or_a_word() -> None:
    line = (
        "VentaPro sale más caro con la implantación incluida: 14.000 € + 25 usuarios × 29 € × 24 meses = "
        "31.400 € a dos años."
    )
    token_cuts = [COUNTER.truncate(line, cap) for cap in range(8, 40)]
    assert any(cut.endswith(" 31.…") for cut in token_cuts)  # a token cut can leave a part of the total
    for cap in range(8, 40):
        head = _cut(line, COUNTER, cap)
        assert head.endswith("…")
        kept = head[:-1]
        assert line.startswith(kept)
        assert line[len(kept)] in " ,:"  # the cut falls between two words
        assert COUNTER.count(head) <= cap + 3
    assert _cut(line, COUNTER, 34).endswith("= 31.400…")  # the cap fell inside the total: it is kept whole
    assert _cut(line, COUNTER, 100) == line


def test_a_long_identifier_is_cut_inside_only_when_the_line_would_keep_too_little() -> None:
    line = (
        "Created [https://www.googleapis.com/compute/v1/projects/lumenfield-prod/global/sslCertificates/api-managed]."
    )
    head = _cut(line, COUNTER, 16)
    assert head.startswith("Created [https://www.googleapis.com/")  # not "Created…": that would name nothing
    assert COUNTER.count(head) <= 16


def test_a_tight_budget_keeps_a_foreign_amount_whole_in_its_bullet() -> None:
    text = (
        "VentaPro cuesta 14.000 € de implantación más 29 € por usuario al mes, 31.400 € en dos años "
        "aunque seáis solo 18 comerciales."
    )
    assert COUNTER.truncate(text, 24).endswith(" 31…")  # where a cut by tokens would fall
    messages = [{"role": "user", "content": "Compara los dos CRM."}, {"role": "assistant", "content": text}]
    summary = render_summary(extract_summary(to_messages(messages), COUNTER, 256))
    assert "al mes, 31.400…" in summary


def test_a_cut_goal_stays_within_its_cap_and_never_ends_inside_a_number() -> None:
    message = (
        "Prepara la comparativa de VentaPro y Clientia para el comité con el coste a dos años de 31.400 € "
        "frente a 25.916 € y los requisitos del acta."
    )
    assert COUNTER.truncate(message, 28).endswith(" 31.…")  # where a cut by tokens would fall
    goal, _ = next_goal("", message, COUNTER, 28)
    assert goal.endswith("a dos años de…")
    assert COUNTER.count(goal) <= 28  # the goal's cap has no slack


def test_a_title_before_a_name_ends_no_sentence() -> None:
    text = "At 23:58 on March 1, Dr. Patel changed the billing address. Mme. Roux approved it."
    assert _split_sentences(text) == [
        "At 23:58 on March 1, Dr. Patel changed the billing address.",
        "Mme. Roux approved it.",
    ]
