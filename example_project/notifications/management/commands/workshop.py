"""``./manage.py workshop``: run the seeds' workshop scenario end to end.

Starts ``runechomq`` in a child process and waits until it is up (it has
written the queue's limits, registered the daily digest and announced its
consumers), then plays seed 004's notification worker:

- a burst of notices to one room, then a broadcast to many players' chats
  queued behind it: fair lanes serve the broadcast while the room drains at
  its own pace, and the room's budget defers what it cannot send yet;
- a round-start reminder for an absolute instant (``enqueue_at``), a notice
  deferred with ``enqueue_in``, one that fails transiently three times before
  it gets through (backoff), one to a chat that blocked the bot (discarded at
  once), one whose API stays down (dead after six attempts), and one
  occurrence of the daily digest naming the leaderboard's top players.

It waits until every job (and every deferred copy) has reached its final
state, stops the worker with SIGTERM and prints what happened to each job,
then what the limits held, measured on the server clock from the fake API's
call log: the most sends started in any second, in all and per chat, the
most sends of one chat at once, and the longest a chat waited behind the
room's burst. It fails when a job ends in the wrong state or a figure breaks
its limit.
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
from echomq_django.protocol.clock import mint_now_ms, server_now_ms
from echomq_django.repeat import Repeat
from example_project.notifications import jobs as workshop
from example_project.notifications.measure import bucket_allows, most_at_once, most_in_window
from example_project.notifications.scoring import points
from example_project.notifications.tasks import round_recap

#: The round's secret and three players' guesses, two each: the board keeps the best.
SECRET = ["🍕", "🚀", "🎸", "🌵", "🐙", "🎲"]
GUESSES = {"USR-ada": [["🚀", "🍕", "🎸", "🌵", "🐙", "🎲"], ["🍕", "🚀", "🎸", "🌵", "🐙", "🎲"]],
           "USR-bo": [["🎲", "🐙", "🌵", "🎸", "🚀", "🍕"], ["🍕", "🎸", "🚀", "🌵", "🐙", "🍩"]],
           "USR-cy": [["🍕", "🍩", "🍪", "🎸", "🎲", "🚀"], ["🍩", "🍪", "🍕", "🚀", "🎸", "🌵"]]}
#: Notices the room gets at once, and players' chats the broadcast reaches.
BURST, BROADCAST = 6, 40
#: The figures' window: "in any one second".
SECOND_MS = 1_000

TERMINAL = {"done", "dead"}


def fmt_ms(ms) -> str:
    """HH:MM:SS.mmm in UTC (the table's headers say so)."""
    if ms is None:
        return "-"
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%H:%M:%S.%f")[:-3]


class Command(BaseCommand):
    help = "Run the workshop scenario on EchoMQ and print what happened to every job."

    def add_arguments(self, parser):
        parser.add_argument("--timeout", type=float, default=60.0,
                            help="seconds to wait for every job to finish (default 60)")

    def _wait_ready(self, conn, worker, deadline):
        """Wait until runechomq has written the queue's limits, synced the
        declared schedules (the daily digest is registered) and announced its
        consumers, so the table measures the queue, not the worker's start-up."""
        repeat, name = Repeat(conn), workshop.standings_digest.path
        announcement = keyspace.worker(f"{socket.gethostname()}:{worker.pid}")
        while (repeat.get(workshop.QUEUE, name) is None or not conn.exists(announcement)
               or Jobs(conn).limits(workshop.QUEUE)["rate"] is None):
            if time.monotonic() > deadline or worker.poll() is not None:
                raise CommandError("runechomq did not come up")
            time.sleep(0.05)

    def _enqueue_scenario(self, conn, run):
        """Enqueue the scenario. Returns (story, room, burst, broadcast): story
        is [(handle, label, due ms, expected state)], the others lists of
        handles. A job enqueued now is due at the server time read just before it."""
        story = []

        def add(label, expected, make, delay_ms=0):
            due = server_now_ms(conn) + delay_ms
            story.append((make(due), label, due, expected))

        room = f"RMM-{run}"
        burst = [workshop.notify(room, f"guess {i + 1} scored") for i in range(BURST)]
        broadcast = [workshop.notify(f"USR-{run}-{i:02}", "Round over") for i in range(BROADCAST)]
        add("round_start_reminder (enqueue_at +2 s)", "done",
            lambda due: workshop.round_start_reminder.enqueue_at(due, room, f"RND-{run}"),
            delay_ms=2_000)
        add("deliver, 3 transient 429s", "done",
            lambda due: workshop.notify(f"flaky-{run}", "Standings", fail_first=3))
        add("deliver (enqueue_in 1.5 s)", "done",
            lambda due: workshop.notify_in(1_500, f"later-{run}", "Round over"),
            delay_ms=1_500)
        add("deliver, bot blocked (403: Discard)", "dead",
            lambda due: workshop.notify(f"blocked-{run}", "Hello?"))
        add("deliver, API down (503 every time)", "dead",
            lambda due: workshop.notify(f"down-{run}", "Anyone?"))
        board = Board(conn, workshop.BOARD)
        for player, guesses in GUESSES.items():
            for guess in guesses:
                board.submit(player, points(guess, SECRET))
        # The daily digest was registered by runechomq at boot (its @job
        # declares the cron); run one occurrence now so the table shows it.
        add("standings_digest (daily cron, run now)", "done",
            lambda due: JobHandle(workshop.QUEUE, Repeat(conn).run_now(
                workshop.QUEUE, workshop.standings_digest.path), Outcome.ENQUEUED))
        # One task defined the Django way (notifications/tasks.py), on the
        # same queue and worker; its TaskResult is read back by id at the end.
        add("round_recap (django.tasks @task)", "done",
            lambda due: self._task_handle(round_recap.enqueue(room, f"RND-{run}")))
        return story, room, burst, broadcast

    def _task_handle(self, result):
        """A TaskResult as the table's JobHandle (its id is "<queue>:<job id>")."""
        self.task_result = result
        queue, job_id = result.id.split(":")
        return JobHandle(queue, job_id, Outcome.ENQUEUED)

    @staticmethod
    def _chain(rows, job_id):
        """The rows of a job and of the copies it was deferred as, in order."""
        chain = [rows.get(job_id)]
        while chain[-1] is not None and isinstance(chain[-1].result_value, dict) \
                and "as" in chain[-1].result_value:
            chain.append(rows.get(chain[-1].result_value["as"]))
        return chain

    def _wait_final(self, jobs, worker, ids, deadline):
        """Read every job (and deferred copy) until all are final; returns id -> row."""
        rows = {}
        while time.monotonic() < deadline:
            rows = {}
            pending = list(ids)
            while pending:
                job_id = pending.pop()
                row = rows[job_id] = jobs.get(workshop.QUEUE, job_id)
                if row is not None and isinstance(row.result_value, dict) \
                        and "as" in row.result_value:
                    pending.append(row.result_value["as"])
            if all(r is not None and r.state in TERMINAL for r in rows.values()):
                return rows
            if worker.poll() is not None:
                raise CommandError(f"runechomq exited early with {worker.returncode}")
            time.sleep(0.2)
        return rows

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
            # Keeps re-runs apart; minted on the server's clock like every id
            # in this process (protocol.md, "Ordering").
            run = BrandedId.generate("RND", mint_now_ms(conn))[-6:].lower()
            story, room, burst, broadcast = self._enqueue_scenario(conn, run)
            handles = [h for h, *_ in story] + burst + broadcast
            self.stdout.write(f"enqueued {len(handles)} jobs on queue {workshop.QUEUE}\n")
            rows = self._wait_final(jobs, worker, [h.job_id for h in handles], deadline)
        finally:
            worker.send_signal(signal.SIGTERM)
            code = worker.wait(timeout=30)
        self.stdout.write(f"runechomq stopped on SIGTERM with exit code {code}\n\n")
        wrong = self._print_story(rows, story)
        wrong += self._print_crowd(rows, room, burst, broadcast)
        broken = self._print_figures(conn, jobs, rows, story, room, burst, broadcast)
        self._print_digest(conn, rows, story)
        if wrong or code != 0:
            raise CommandError(f"{wrong} job(s) did not reach their expected final state")
        if broken:
            raise CommandError(f"{broken} figure(s) broke their limit")
        self.stdout.write(f"\nall {len(handles)} jobs reached their expected final state, "
                          f"every figure within its limit\n")

    def _print_story(self, rows, story) -> int:
        header = (f"{'job id':<30} {'job':<40} {'tries':>5} {'state':<6} {'due (UTC)':<12} "
                  f"{'last claim (UTC)':<16} {'late ms':>7}")
        self.stdout.write(header + "\n" + "-" * len(header) + "\n")
        wrong = 0
        for handle, label, due_ms, expected in story:
            row = rows.get(handle.job_id)
            state = row.state if row else "gone"
            ran = row.started_at_ms if row else None
            # Lateness of the first run only: a retried job's last run is late
            # on purpose (its backoff and its chat's rate).
            late = str(ran - due_ms) if ran is not None and row.attempts == 1 else ""
            mark = "" if state == expected else f"  <- expected {expected}"
            wrong += state != expected
            line = (f"{handle.job_id:<30} {label:<40} {row.attempts if row else '-':>5} "
                    f"{state:<6} {fmt_ms(due_ms):<12} {fmt_ms(ran):<16} {late:>7}{mark}")
            self.stdout.write(line.rstrip() + "\n")
            if row and row.state == "dead":
                self.stdout.write(f"{'':<30} reason: {row.reason}; last error: "
                                  f"{(row.last_error or '').strip().splitlines()[-1]}\n")
        return wrong

    def _print_crowd(self, rows, room, burst, broadcast) -> int:
        """The burst and the broadcast, one line each; returns how many ended wrong."""
        chains = [self._chain(rows, h.job_id) for h in burst]
        deferred = sum(len(c) - 1 for c in chains)
        burst_ok = sum(c[-1] is not None and c[-1].state == "done" for c in chains)
        sent = [rows.get(h.job_id) for h in broadcast]
        broadcast_ok = sum(r is not None and r.state == "done" for r in sent)
        self.stdout.write(
            f"\nburst: {BURST} notices to room {room} at once: {burst_ok} delivered; "
            f"{deferred} deferral(s) by the room's budget ({workshop.ROOM_BUDGET[0]} per "
            f"{workshop.ROOM_BUDGET[1]} ms, RateLimiter), each re-enqueued with enqueue_in "
            f"and acked\n"
            f"broadcast: 'Round over' to {BROADCAST} players' chats, queued behind the burst: "
            f"{broadcast_ok} delivered\n")
        return (BURST - burst_ok) + (BROADCAST - broadcast_ok)

    def _print_figures(self, conn, jobs, rows, story, room, burst, broadcast) -> int:
        """The limits' figures, from the fake API's call logs; returns how many broke."""
        chats = {room} | self._chats(rows)
        spans = {chat: [tuple(map(int, entry.decode().split("|")))
                        for entry in conn.lrange(workshop.sends_key(chat), 0, -1)]
                 for chat in chats}
        starts = [s for chat_spans in spans.values() for s, _ in chat_spans]
        limits = jobs.limits(workshop.QUEUE)
        rate, lane_rate, lane_cap = limits["rate"], limits["lane_rate"], limits["lane_concurrency"]
        # The broadcast chats' first send, against when they were enqueued.
        firsts = [(min(s for s, _ in spans[rows[h.job_id].group]), rows[h.job_id].enqueued_at_ms)
                  for h in broadcast if spans.get(rows[h.job_id].group)]
        room_sends = sorted(s for s, _ in spans.get(room, []))
        figures = [
            ("sends started in any 1 s, all chats", most_in_window(starts, SECOND_MS),
             rate and bucket_allows(*rate, SECOND_MS), f"rate {rate and '%d per %d ms' % rate}"),
            ("sends started in any 1 s, one chat",
             max(most_in_window([s for s, _ in v], SECOND_MS) for v in spans.values()),
             lane_rate and bucket_allows(*lane_rate, SECOND_MS),
             f"lane_rate {lane_rate and '%d per %d ms' % lane_rate}"),
            ("sends of one chat running at once", max(most_at_once(v) for v in spans.values()),
             lane_cap, f"lane_concurrency {lane_cap}"),
        ]
        self.stdout.write(f"\nmeasured on the server clock, {len(starts)} sends to "
                          f"{len(chats)} chats{'':<6}{'most':>6} {'limit':>6}\n")
        broken = 0
        for label, most, limit, source in figures:
            over = limit is not None and most > limit
            broken += over or limit is None
            self.stdout.write(f"  {label:<56} {most:>6} {limit if limit else '-':>6}  "
                              f"({'no limit set' if limit is None else source})"
                              f"{'  <- over the limit' if over else ''}\n")
        if firsts and room_sends:
            first, enqueued = max(firsts, key=lambda f: f[0] - f[1])
            ahead = sum(s < first for s in room_sends)
            self.stdout.write(
                f"  {'longest a chat waited behind the room burst (ms)':<56} "
                f"{first - enqueued:>6} {'-':>6}  ({ahead} of the room's {len(room_sends)} "
                f"sends went first; {len(chats)} chats shared the queue's rate)\n")
        return broken

    @staticmethod
    def _chats(rows):
        """Every chat a deliver job of this run was sent to (its lane)."""
        return {r.group for r in rows.values() if r is not None and r.group}

    def _print_digest(self, conn, rows, story):
        digest = Repeat(conn).get(workshop.QUEUE, workshop.standings_digest.path)
        if digest is not None:
            self.stdout.write(
                f"\nrecurring: {digest.name} ({digest.cron}, {digest.tz}) next runs at "
                f"{dt.datetime.fromtimestamp(digest.next_run_ms / 1000, dt.timezone.utc):%Y-%m-%d %H:%M} UTC\n")
        ran = next((rows.get(h.job_id) for h, label, *_ in story if label.startswith("standings")),
                   None)
        if ran is not None and ran.state == "done":
            top = ", ".join(f"{player} {pct}%" for player, pct in ran.result_value["top"])
            self.stdout.write(f"standings (the digest's top three; each player's best of two "
                              f"guesses, out of 600): {top}\n")
        recap = round_recap.get_result(self.task_result.id)   # any process can, by id
        self.stdout.write(f"django.tasks: round_recap {recap.id} {recap.status}, "
                          f"return value {recap.return_value if recap.status == 'SUCCESSFUL' else None}\n")
