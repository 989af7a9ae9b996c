"""``./manage.py workshop``: run the seeds' workshop scenario end to end.

Starts ``runechomq`` in a child process and waits until it is up (it has
registered the daily digest and announced its consumers); enqueues a
round-start reminder for an absolute instant, notices that deliver at once,
one that fails transiently three times before it gets through, one deferred
with ``enqueue_in``, one to a chat that blocked the bot (discarded at once),
one whose API stays down (dead after six attempts) and one occurrence of the
daily digest, after three players' guesses are scored onto the leaderboard
the digest names; waits until every job has reached its final state; stops
the worker with SIGTERM; prints what happened to each job and the standings.
"""

import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import time

from django.core.management.base import BaseCommand, CommandError

from echomq_django import Board, BrandedId, JobHandle, Jobs, Outcome, get_connection
from echomq_django.protocol import keyspace
from echomq_django.repeat import Repeat
from echomq_django.protocol.clock import mint_now_ms, server_now_ms
from example_project.notifications import jobs as workshop
from example_project.notifications.scoring import points

#: The round's secret and three players' guesses, two each: the board keeps the best.
SECRET = ["🍕", "🚀", "🎸", "🌵", "🐙", "🎲"]
GUESSES = {"USR-ada": [["🚀", "🍕", "🎸", "🌵", "🐙", "🎲"], ["🍕", "🚀", "🎸", "🌵", "🐙", "🎲"]],
           "USR-bo": [["🎲", "🐙", "🌵", "🎸", "🚀", "🍕"], ["🍕", "🎸", "🚀", "🌵", "🐙", "🍩"]],
           "USR-cy": [["🍕", "🍩", "🍪", "🎸", "🎲", "🚀"], ["🍩", "🍪", "🍕", "🚀", "🎸", "🌵"]]}

TERMINAL = {"done", "dead"}


def fmt_ms(ms) -> str:
    """HH:MM:SS.mmm in UTC (the table's headers say so)."""
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3]


class Command(BaseCommand):
    help = "Run the workshop scenario on EchoMQ and print what happened to every job."

    def add_arguments(self, parser):
        parser.add_argument("--timeout", type=float, default=50.0,
                            help="seconds to wait for every job to finish (default 50)")

    def _wait_ready(self, conn, worker, deadline):
        """Wait until runechomq has synced the declared schedules (the daily
        digest is registered) and its consumers have announced themselves, so
        the table measures the queue, not the worker's start-up."""
        repeat, name = Repeat(conn), workshop.standings_digest.path
        announcement = keyspace.worker(f"{socket.gethostname()}:{worker.pid}")
        while repeat.get(workshop.QUEUE, name) is None or not conn.exists(announcement):
            if time.monotonic() > deadline or worker.poll() is not None:
                raise CommandError("runechomq did not come up")
            time.sleep(0.05)

    def _enqueue_scenario(self, conn) -> list:
        """Enqueue the scenario; returns [(handle, label, due ms, expected state)].
        A job enqueued now is due at the server time read just before it."""
        # Keeps re-runs apart; minted on the server's clock like every id in
        # this process (protocol.md, "Ordering").
        run = BrandedId.generate("RND", mint_now_ms(conn))[-6:].lower()
        plan = []

        def add(label, expected, make, delay_ms=0):
            due = server_now_ms(conn) + delay_ms
            plan.append((make(due), label, due, expected))

        add("round_start_reminder (enqueue_at +2 s)", "done",
            lambda due: workshop.round_start_reminder.enqueue_at(due, f"RMM-{run}", f"RND-{run}"),
            delay_ms=2_000)
        for i in range(3):
            add(f"deliver to chat-{i}", "done",
                lambda due: workshop.deliver.enqueue(f"chat-{run}-{i}", "Your turn!"))
        add("deliver, 3 transient 429s", "done",
            lambda due: workshop.deliver.enqueue(f"flaky-{run}", "Standings", fail_first=3))
        add("deliver (enqueue_in 1.5 s)", "done",
            lambda due: workshop.deliver.enqueue_in(1_500, f"later-{run}", "Round over"),
            delay_ms=1_500)
        add("deliver, bot blocked (403: Discard)", "dead",
            lambda due: workshop.deliver.enqueue(f"blocked-{run}", "Hello?"))
        add("deliver, API down (503 every time)", "dead",
            lambda due: workshop.deliver.enqueue(f"down-{run}", "Anyone?"))
        board = Board(conn, workshop.BOARD)
        for player, guesses in GUESSES.items():
            for guess in guesses:
                board.submit(player, points(guess, SECRET))
        # The daily digest was registered by runechomq at boot (its @job
        # declares the cron); run one occurrence now so the table shows it.
        add("standings_digest (daily cron, run now)", "done",
            lambda due: JobHandle(workshop.QUEUE, Repeat(conn).run_now(
                workshop.QUEUE, workshop.standings_digest.path), Outcome.ENQUEUED))
        return plan

    def handle(self, *args, **options):
        conn = get_connection()
        deadline = time.monotonic() + options["timeout"]
        self.stdout.write(f"starting runechomq for queue {workshop.QUEUE}\n")
        worker = subprocess.Popen(
            [sys.executable, "manage.py", "runechomq", workshop.QUEUE, "--concurrency", "4"],
            env=dict(os.environ), stdin=subprocess.DEVNULL)
        jobs = Jobs(conn)
        try:
            self._wait_ready(conn, worker, deadline)
            plan = self._enqueue_scenario(conn)
            self.stdout.write(f"enqueued {len(plan)} jobs on queue {workshop.QUEUE}\n")
            rows = {}
            while time.monotonic() < deadline:
                rows = {h.job_id: jobs.get(h.queue, h.job_id) for h, *_ in plan}
                if all(r is not None and r.state in TERMINAL for r in rows.values()):
                    break
                if worker.poll() is not None:
                    raise CommandError(f"runechomq exited early with {worker.returncode}")
                time.sleep(0.2)
        finally:
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=30)
        self.stdout.write(f"runechomq stopped on SIGTERM with exit code {code}\n\n")

        header = f"{'job id':<30} {'job':<40} {'tries':>5} {'state':<6} {'due (UTC)':<12} {'last run (UTC)':<14} {'late ms':>7}"
        self.stdout.write(header + "\n" + "-" * len(header) + "\n")
        wrong = 0
        for handle, label, due_ms, expected in plan:
            row = rows.get(handle.job_id)
            state = row.state if row else "gone"
            ran = row.started_at_ms if row else None
            # Lateness of the first run only: a retried job's last run is late
            # on purpose (its backoff).
            late = str(ran - due_ms) if ran is not None and row.attempts == 1 else ""
            mark = "" if state == expected else f"  <- expected {expected}"
            wrong += state != expected
            self.stdout.write(
                f"{handle.job_id:<30} {label:<40} {row.attempts if row else '-':>5} {state:<6} "
                f"{fmt_ms(due_ms):<12} {fmt_ms(ran):<14} {late:>7}{mark}\n")
            if row and row.state == "dead":
                self.stdout.write(f"{'':<30} reason: {row.reason}; last error: "
                                  f"{(row.last_error or '').strip().splitlines()[-1]}\n")
        digest = Repeat(conn).get(workshop.QUEUE, workshop.standings_digest.path)
        if digest is not None:
            self.stdout.write(
                f"\nrecurring: {digest.name} ({digest.cron}, {digest.tz}) next runs at "
                f"{dt.datetime.fromtimestamp(digest.next_run_ms / 1000, dt.timezone.utc):%Y-%m-%d %H:%M} UTC\n")
        ran = next((rows.get(h.job_id) for h, label, *_ in plan if label.startswith("standings")),
                   None)
        if ran is not None and ran.state == "done":
            top = ", ".join(f"{player} {pct}%" for player, pct in ran.result_value["top"])
            self.stdout.write(f"standings (the digest's top three; each player's best of two "
                              f"guesses, out of 600): {top}\n")
        if wrong or code != 0:
            raise CommandError(f"{wrong} job(s) did not reach their expected state")
        self.stdout.write(f"\nall {len(plan)} jobs reached their expected final state\n")
