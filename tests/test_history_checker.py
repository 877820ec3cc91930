"""The history checker can fail: a hand-written history of each anomaly class is
flagged with that class and only the operations that prove it, and correct
histories (unknown outcomes included) pass.

The histories are written as a client would record them; nothing here runs the
code under test.
"""

from __future__ import annotations

import pytest
from history import History, check
from history.checker import explain
from history.model import FAIL, OK, UNKNOWN


def P(entry: int, ledger: int = 1) -> tuple:
    return (ledger, entry, -1)


class H(History):
    """Shorthands for hand-written histories: one line per operation."""

    def send(self, value, topic="t", txn=None, writer="w1", pos=None, key=None,
             outcome=OK, row=None, process="p1"):
        op = self.invoke(process, "send", topic=topic, value=value, txn=txn, writer=writer,
                         key=key, row=row)
        if outcome == OK:
            self.ok(op, position=pos)
        elif outcome == UNKNOWN:
            self.unknown(op, "crashed")
        else:
            self.fail(op, "refused")
        return op

    def commit(self, txn, outcome=OK, winners=None, process="p1"):
        op = self.invoke(process, "commit", txn=txn, winners=winners)
        if outcome == OK:
            return self.ok(op)
        if outcome == UNKNOWN:
            return self.unknown(op, "crashed")
        return self.fail(op, "TxnTimedOut")

    def abort(self, txn, process="p1"):
        return self.ok(self.invoke(process, "abort", txn=txn))

    def read(self, session, values, topic="t", start="earliest", complete=False,
             process="r"):
        return self.ok(self.invoke(process, "read", topic=topic, session=session, start=start),
                       values=values, complete=complete)

    def receive(self, session, values, topic="in", sub="s", process="c"):
        return self.ok(self.invoke(process, "receive", topic=topic, sub=sub, session=session),
                       values=values)

    def ack(self, value, txn=None, topic="in", sub="s", process="c", session=None):
        return self.ok(self.invoke(process, "ack", topic=topic, sub=sub, value=value, txn=txn,
                                   session=session))

    def cursor(self, remaining, topic="in", sub="s"):
        return self.ok(self.invoke("checker", "cursor", topic=topic, sub=sub),
                       remaining=remaining)


def kinds(h: History) -> list[str]:
    return [a.kind for a in check(h)]


def only(h: History, kind: str):
    found = check(h)
    assert [a.kind for a in found] == [kind], explain(found)
    return found[0]


# ---------------------------------------------------------------- correct histories
def test_a_correct_history_with_every_kind_of_operation_passes():
    h = H()
    h.send("i1", topic="in", pos=P(0))
    h.send("i2", topic="in", pos=P(1))
    h.send("a", txn="T1", pos=P(0), key="k")
    h.send("b", txn="T1", pos=P(0), topic="u")
    h.send("c", txn="T2", pos=P(1), writer="w2")
    h.receive("c1", [(P(0), "i1"), (P(1), "i2")])
    h.ack("i1", txn="T1")
    h.ack("i2", txn="T2")
    h.read("early", [])  # pinned by the open T1: returns nothing yet
    h.commit("T1")
    h.abort("T2")
    h.send("d", pos=P(2), key="k")
    h.send("e", txn="T3", pos=P(3), writer="w3", key="k")
    h.commit("T3", outcome=UNKNOWN)  # the committer died: either outcome is fine...
    h.read("r1", [(P(0), "a"), (P(2), "d"), (P(3), "e")], complete=True)
    h.read("r1u", [(P(0), "b")], topic="u", complete=True)
    h.read("r2", [(P(2), "d")], start=P(0))
    h.read("r2", [(P(3), "e")], start=P(0))  # ...as long as every reader agrees
    h.receive("c2", [(P(1), "i2")])  # T2's ack was released: handed out again
    h.cursor(["i2"])
    assert check(h) == [], explain(check(h))


def test_an_unknown_commit_is_accepted_as_aborted_when_everything_says_so():
    h = H()
    h.send("a", txn="T1", pos=P(0))
    h.send("b", txn="T1", pos=P(0), topic="u")
    h.commit("T1", outcome=UNKNOWN)
    h.send("c", pos=P(1))
    h.read("r", [(P(1), "c")], complete=True)
    h.read("ru", [], topic="u", complete=True)
    assert check(h) == []


def test_a_losing_writer_skipped_and_its_winner_read_is_correct():
    h = H()
    h.send("a0", txn="B7", writer="task0-a0", pos=P(0))
    h.send("a1", txn="B7", writer="task0-a1", pos=P(1))
    h.commit("B7", winners=["task0-a1"])
    h.read("r", [(P(1), "a1")], complete=True)
    assert check(h) == []


# ---------------------------------------------------------------- reads
def test_aborted_read_G1a_is_flagged():
    h = H()
    s = h.send("a", txn="T1", pos=P(0))
    c = h.commit("T1", outcome="fail")
    r = h.read("r", [(P(0), "a")])
    a = only(h, "aborted-read")
    assert set(a.ops) == {s, c, r} and "T1" in a.message and "a" in a.message


def test_aborted_read_after_a_sweep_is_flagged():
    h = H()
    h.send("a", txn="T1", pos=P(0))
    h.ok(h.invoke("sweeper", "sweep"), aborted=["T1"])
    h.commit("T1", outcome=UNKNOWN)
    h.read("r", [(P(0), "a")])
    assert kinds(h) == ["aborted-read"]


def test_read_of_an_open_transaction_is_flagged_even_if_it_commits_later():
    h = H()
    h.send("a", txn="T1", pos=P(0))
    r = h.read("r", [(P(0), "a")])
    h.commit("T1")
    a = only(h, "open-read")
    assert r in a.ops and "before any commit" in a.message


def test_read_of_a_losing_writer_is_flagged():
    h = H()
    h.send("a0", txn="B7", writer="task0-a0", pos=P(0))
    h.send("a1", txn="B7", writer="task0-a1", pos=P(1))
    h.commit("B7", winners=["task0-a1"])
    h.read("r", [(P(0), "a0"), (P(1), "a1")])
    assert "task0-a0" in only(h, "losing-writer-read").message


def test_a_value_nobody_sent_is_flagged():
    h = H()
    h.read("r", [(P(0), "ghost")])
    only(h, "phantom-read")


def test_a_value_returned_twice_by_one_reader_is_flagged():
    h = H()
    h.send("a", pos=P(0))
    h.read("r", [(P(0), "a")])
    h.read("r", [(P(0), "a")])
    only(h, "duplicate-read")


def test_a_transaction_seen_by_one_reader_and_skipped_by_another_is_fractured():
    """All or none, across segments: T1 wrote to t and u; its commit's outcome is
    unknown, and one reader shows it committed while another read past it."""
    h = H()
    h.send("a", txn="T1", pos=P(0))
    h.send("b", txn="T1", pos=P(0), topic="u")
    h.commit("T1", outcome=UNKNOWN)
    h.send("c", pos=P(1), topic="u")
    r1 = h.read("r1", [(P(0), "a")])
    r2 = h.read("r2", [(P(1), "c")], topic="u")
    a = only(h, "fractured-read")
    assert r1 in a.ops and r2 in a.ops and "read past b" in a.message


def test_a_committed_write_a_reader_read_past_is_lost():
    h = H()
    h.send("a", txn="T1", pos=P(0))
    h.send("b", txn="T1", pos=P(1))
    h.commit("T1")
    h.read("r", [(P(1), "b")])
    assert "read past a" in only(h, "lost-write").message


def test_a_committed_write_the_final_reader_never_returned_is_lost():
    h = H()
    h.send("a", txn="T1", pos=P(0), topic="u")
    h.send("b", txn="T1", pos=P(0))
    h.commit("T1")
    h.read("r", [(P(0), "b")], complete=True)
    h.read("ru", [], topic="u", complete=True)
    assert "to its end" in only(h, "lost-write").message


def test_an_acknowledged_plain_write_the_final_reader_never_returned_is_lost():
    h = H()
    h.send("a", pos=P(0))
    h.read("r", [], complete=True)
    only(h, "lost-write")


def test_an_unknown_plain_write_may_be_missing():
    h = H()
    h.send("a", pos=P(0), outcome=UNKNOWN)
    h.read("r", [], complete=True)
    assert check(h) == []


def test_values_of_one_key_out_of_send_order_are_flagged():
    h = H()
    h.send("a", pos=P(1), key="k")
    h.send("b", pos=P(0), key="k")
    h.read("r", [(P(0), "b"), (P(1), "a")])
    assert "key k" in only(h, "key-order").message


def test_a_replayed_range_returning_other_values_is_flagged():
    h = H()
    h.send("a", pos=P(0))
    h.send("b", txn="T1", pos=P(1))
    h.commit("T1", outcome=UNKNOWN)
    h.send("c", pos=P(2))
    h.read("first", [(P(0), "a"), (P(1), "b"), (P(2), "c")])
    h.read("replay", [(P(0), "a"), (P(2), "c")])
    found = kinds(h)
    assert "unstable-replay" in found and "fractured-read" in found


def test_a_commit_and_an_abort_both_reported_is_flagged():
    h = H()
    h.send("a", txn="T1", pos=P(0))
    h.ok(h.invoke("sweeper", "sweep"), aborted=["T1"])
    h.commit("T1")
    only(h, "contradictory-outcome")


# ---------------------------------------------------------------- acks
def test_a_message_acked_by_a_plain_ack_and_a_committed_txn_is_acked_twice():
    h = H()
    h.send("i1", topic="in", pos=P(0))
    h.ack("i1", txn="T1")
    h.ack("i1")  # a plain ack while T1 holds it (issue 26, hole 3)
    h.commit("T1")
    only(h, "double-ack")


def test_two_plain_acks_of_one_message_are_at_least_once_not_an_anomaly():
    h = H()
    h.send("i1", topic="in", pos=P(0))
    h.ack("i1")
    h.ack("i1")  # the first was lost with a crash inside pulsar-client's ack grouping
    assert check(h) == []


def test_two_committed_transactions_acking_one_message_are_flagged():
    h = H()
    h.send("i1", topic="in", pos=P(0))
    h.ack("i1", txn="T1")
    h.commit("T1")
    h.ack("i1", txn="T2")
    h.commit("T2")
    only(h, "double-ack")


def test_a_committed_ack_missing_from_the_cursor_is_lost():
    h = H()
    h.send("i1", topic="in", pos=P(0))
    h.ack("i1", txn="T1")
    h.commit("T1")
    h.cursor(["i1"])
    assert "still on in|s" in only(h, "lost-ack").message


def test_an_ack_of_an_aborted_txn_on_the_cursor_is_flagged():
    h = H()
    h.send("i1", topic="in", pos=P(0))
    h.ack("i1", txn="T1")
    h.abort("T1")
    h.cursor([])
    only(h, "aborted-ack-applied")


def test_an_unknown_commit_explained_by_the_cursor_passes_either_way():
    for remaining in ([], ["i1"]):
        h = H()
        h.send("i1", topic="in", pos=P(0))
        h.ack("i1", txn="T1")
        h.commit("T1", outcome=UNKNOWN)
        h.cursor(remaining)
        assert check(h) == []


def test_a_message_handed_out_after_its_ack_committed_is_flagged():
    """...to a transactional consumer: its session acked under a txn before."""
    h = H()
    h.send("i0", topic="in", pos=P(0))
    h.send("i1", topic="in", pos=P(1))
    h.receive("c2", [(P(0), "i0")])
    h.ack("i0", txn="T0", session="c2")
    h.commit("T0")
    h.receive("c1", [(P(1), "i1")])
    h.ack("i1", txn="T1", session="c1")
    h.commit("T1")
    h.receive("c2", [(P(1), "i1")])
    only(h, "redelivered-after-commit")


def test_a_copy_handed_to_a_consumer_that_never_acked_in_a_txn_is_pulsars_promise():
    """A session with no transactional ack yet is held to pulsar-client's promise: a
    copy it held before the subscription's first claim may come out (its ack of it
    is checked like any other)."""
    h = H()
    h.send("i0", topic="in", pos=P(0))
    h.send("i1", topic="in", pos=P(1))
    h.receive("c2", [(P(0), "i0")])  # c2 pulled i0 and i1 before any claim existed
    h.receive("c1", [(P(1), "i1")])
    h.ack("i1", txn="T1", session="c1")
    h.commit("T1")
    h.receive("c2", [(P(1), "i1")])
    assert kinds(h) == []
    h.receive("c3", [(P(1), "i1")])  # began after the commit: it saw the claim table
    only(h, "redelivered-after-commit")


# ---------------------------------------------------------------- Spark micro-batches
def test_a_micro_batch_committed_twice_is_flagged():
    h = H()
    for t in ("B1a", "B1b"):
        h.ok(h.invoke("driver", "batch", sink="q", batch_id=1, txn=t))
        h.send(f"{t}-r0", txn=t, row="q#1/0", pos=P(0 if t == "B1a" else 1))
        h.commit(t)
    h.read("r", [(P(0), "B1a-r0"), (P(1), "B1b-r0")], complete=True)
    assert kinds(h) == ["batch-twice", "duplicate-row"]


def test_a_replayed_micro_batch_whose_second_attempt_aborted_passes():
    h = H()
    h.ok(h.invoke("driver", "batch", sink="q", batch_id=1, txn="B1a"))
    h.send("x", txn="B1a", row="q#1/0", pos=P(0))
    h.commit("B1a")
    h.ok(h.invoke("driver", "batch", sink="q", batch_id=1, txn="B1b"))
    h.send("y", txn="B1b", row="q#1/0", pos=P(1))
    h.abort("B1b")
    h.read("r", [(P(0), "x")], complete=True)
    assert check(h) == []


@pytest.mark.parametrize("twice", ["send"])
def test_a_value_sent_twice_is_a_workload_bug(twice):
    h = H()
    h.send("a", pos=P(0))
    h.send("a", pos=P(1))
    with pytest.raises(ValueError, match="unique"):
        check(h)


# ---------------------------------------------------------------- restores of the metastore
def restored_history(read_after: list) -> H:
    """T1 commits after the copy the metastore is later restored to: its decision is
    lost, a reader saw it in between, the sweep aborts T1 after the restore."""
    h = H()
    h.send("a", pos=P(0))
    h.read("r1", [(P(0), "a")])
    copy = h.now
    h.send("b", txn="T1", pos=P(1))
    h.commit("T1")
    h.read("r1", [(P(1), "b")])
    h.restore(copy)
    h.ok(h.invoke("sweeper", "sweep"), aborted=["T1"])
    h.send("c", pos=P(2))
    h.read("r1", read_after)
    h.read("final", [(P(0), "a")] + read_after, complete=True)
    return h


def test_a_decision_lost_with_a_restore_is_no_anomaly_when_readers_fail_closed():
    h = restored_history([(P(2), "c")])
    assert check(h) == [], explain(check(h))


def test_a_transaction_whose_decision_was_lost_is_never_delivered_after_the_restore():
    h = restored_history([(P(1), "b"), (P(2), "c")])
    assert set(kinds(h)) == {"aborted-read"}


def test_an_ack_applied_before_a_restore_lost_its_commit_is_no_anomaly():
    """The broker is not rolled back with the metastore: the input stays consumed while
    its transaction, reopened by the restore, times out (a lossy restore's price)."""
    h = H()
    h.send("i1", topic="in", pos=P(0))
    copy = h.now
    h.ack("i1", txn="T1")
    h.commit("T1", outcome=UNKNOWN)  # died after the CAS; a recovery applied the ack
    h.restore(copy)
    h.ok(h.invoke("sweeper", "sweep"), aborted=["T1"])
    h.cursor([])
    assert check(h) == [], explain(check(h))


def commit_answered_across_a_restore(read_after: list) -> H:
    """T1's commit is invoked after the copy and answered after the restore: its CAS
    ran on the store the restore threw away, and applying its acks then took the
    reconnections (10 s in the run that found this). Its answer says committed, but
    the decision is as lost as one answered before the restore."""
    h = H()
    h.send("i1", topic="in", pos=P(0))
    copy = h.now
    h.send("b", topic="out", txn="T1", pos=P(0))
    h.receive("c1", [(P(0), "i1")], process="p1")
    h.ack("i1", txn="T1", process="p1", session="c1")
    commit = h.invoke("p1", "commit", txn="T1", winners=None)
    h.restore(copy)
    h.ok(commit)
    h.ok(h.invoke("sweeper", "sweep"), aborted=["T1"])
    h.receive("c2", [(P(0), "i1")], process="p2")  # T1's ack is gone with it
    h.send("o2", topic="out", txn="T2", pos=P(1))
    h.ack("i1", txn="T2", process="p2", session="c2")
    h.commit("T2", process="p2")
    h.read("final", read_after, topic="out", complete=True)
    h.cursor([])
    return h


def test_a_commit_answered_after_a_restore_that_lost_it_is_no_anomaly():
    h = commit_answered_across_a_restore([(P(1), "o2")])
    assert check(h) == [], explain(check(h))


def test_a_commit_answered_after_a_restore_is_still_held_to_failing_closed():
    h = commit_answered_across_a_restore([(P(0), "b"), (P(1), "o2")])
    assert set(kinds(h)) == {"aborted-read"}


def test_a_commit_invoked_after_a_restore_is_decided():
    """Only a commit whose decision may predate the restore is excused."""
    h = H()
    h.send("a", pos=P(0))
    copy = h.now
    h.restore(copy)
    h.send("b", txn="T1", pos=P(1))
    h.commit("T1")
    h.read("final", [(P(0), "a")], complete=True)
    only(h, "lost-write")


def test_a_transaction_id_handed_out_twice_is_flagged():
    h = H()
    h.ok(h.invoke("p1", "begin"), txn="T1")
    h.ok(h.invoke("p2", "begin"), txn="T1")  # e.g. after a restore of the metastore
    only(h, "reused-id")


def test_a_micro_batch_retried_under_its_own_id_is_not_a_reuse():
    h = H()
    for _ in range(2):
        h.ok(h.invoke("driver", "batch", sink="q", batch_id=1, txn="B1"))
    h.ok(h.invoke("driver", "batch", sink="q", batch_id=2, txn="B1"))
    only(h, "reused-id")


def test_a_message_nobody_acked_gone_from_the_subscription_is_flagged():
    """An ack of one message of a batched entry must not take its neighbours."""
    h = H()
    h.send("i1", topic="in", pos=(1, 0, 0))
    h.send("i2", topic="in", pos=(1, 0, 1))
    h.ack("i1", txn="T1")
    h.commit("T1")
    h.cursor([])
    assert "i2" in only(h, "unacked-gone").message


def test_a_committed_transactions_output_read_while_its_ack_is_missing_is_a_lost_ack():
    """Consume-transform-produce whose commit's answer was lost: its output was read,
    so it committed, and its input must be off the subscription."""
    h = H()
    h.send("i1", topic="in", pos=P(0))
    h.send("o1", topic="out", txn="T1", pos=P(0))
    h.ack("i1", txn="T1")
    h.commit("T1", outcome=UNKNOWN)
    h.read("r", [(P(0), "o1")], topic="out", complete=True)
    h.cursor(["i1"])
    only(h, "lost-ack")


# ---------------------------------------------------------------- failed sends
def test_a_commit_after_a_send_that_raised_is_flagged():
    h = H()
    h.send("a", txn="T1", pos=P(0))
    h.send("b", txn="T1", outcome=UNKNOWN)
    h.commit("T1")
    h.read("r", [(P(0), "a")], complete=True)
    only(h, "commit-after-failed-send")


def test_a_failed_commit_after_a_send_that_raised_passes():
    h = H()
    h.send("a", txn="T1", pos=P(0))
    h.send("b", txn="T1", outcome=UNKNOWN)
    h.commit("T1", outcome=FAIL)
    h.read("r", [], complete=True)
    assert kinds(h) == []


# ---------------------------------------------------------------- the operator's edges
def test_a_micro_batch_of_one_query_committed_twice_is_flagged_per_query():
    """Two queries may both commit their batch 1 (a rebind moved the sink id); one query
    committing its batch 1 twice is batch-twice and its row read twice duplicate-row."""
    h = H()
    for query, txn, value, pos in (("qA", "A1", "a", P(0)), ("qB", "B1", "b", P(1)),
                                   ("qA", "A1b", "c", P(2))):
        h.ok(h.invoke("driver", "batch", sink="s", query=query, batch_id=1, txn=txn))
        h.send(value, txn=txn, pos=pos, row=f"{query}#1/0")
        h.commit(txn)
    h.read("r", [(P(0), "a"), (P(1), "b"), (P(2), "c")], complete=True)
    assert sorted(kinds(h)) == ["batch-twice", "duplicate-row"], explain(check(h))


def sent_in(h: H, value: str, form: str, pos) -> None:
    op = h.invoke("p1", "send", topic="t", value=value, txn="T1", writer="w1", key=None,
                  row=None)
    h.ok(op, position=pos, form=form)


def test_an_append_in_the_old_form_after_a_successful_switch_is_flagged():
    h = H()
    sent_in(h, "a", "one", P(0))
    h.ok(h.invoke("operator", "wire-format", form="three"))
    sent_in(h, "b", "one", P(1))  # a writer opened before the switch did not follow it
    h.commit("T1")
    h.read("r", [(P(0), "a"), (P(1), "b")], complete=True)
    assert "b was appended" in only(h, "stale-wire-form").message


def test_an_append_in_the_old_form_of_a_transaction_that_never_commits_passes():
    """Never delivered, so no reader of either build reads it: a writer whose
    transaction timed out (or was lost) unbeknown to it may still append. Flagged as
    soon as that transaction's commit may have taken effect."""
    h = H()
    h.ok(h.invoke("operator", "wire-format", form="three"))
    sent_in(h, "b", "one", P(1))
    h.read("r", [], complete=True)
    assert kinds(h) == [], explain(check(h))
    h.unknown(h.invoke("p1", "commit", txn="T1", winners=None), "died before the answer")
    assert "stale-wire-form" in kinds(h), explain(check(h))


def test_an_append_in_the_old_form_after_a_failed_switch_or_a_restore_passes():
    """A switch that failed (runs of the other form left) promised nothing; a restore
    of the metastore may bring the old form back."""
    h = H()
    h.fail(h.invoke("operator", "wire-format", form="three"), "open transactions left")
    sent_in(h, "a", "one", P(0))
    copy = h.now
    h.ok(h.invoke("operator", "wire-format", form="three"))
    h.restore(copy)  # the copy predates the switch
    sent_in(h, "b", "one", P(1))
    h.commit("T1")
    h.read("r", [(P(0), "a"), (P(1), "b")], complete=True)
    assert kinds(h) == [], explain(check(h))


def test_a_secret_in_an_error_or_a_log_line_is_flagged():
    h = H()
    h.fail(h.invoke("user", "open", mistake="urls swapped", secret="hunter2"),
           "ConfigError: option 'service.url' got 'redis://u:***@h/0'")
    assert kinds(h) == []
    h.ok(h.invoke("clients", "log"), lines=["opening redis://u:hunter2@h/0"])
    only(h, "secret-shown")


def test_a_process_acting_after_a_reset_of_the_metastore_is_flagged():
    """crossed-reset: after the reset, a process that ran before it commits and reads a
    transactional value; its refused begin and a plain ack of a plain message pass."""
    h = H()
    h.send("i1", topic="in", pos=P(0))
    h.note("operator", "fault", what="reset", reset=True, before=["p1", "c"])
    h.fail(h.invoke("p1", "begin"), "DeploymentChanged")
    h.ack("i1")  # plain: no metastore's business
    assert kinds(h) == [], explain(check(h))
    h.send("n1", txn="N", pos=P(0), process="new")
    h.commit("N", process="new")
    h.commit("T-old")  # p1's transaction of the old deployment
    h.read("s", [(P(0), "n1")], process="p1")
    found = check(h)
    assert [a.kind for a in found] == ["crossed-reset", "crossed-reset"], explain(found)
