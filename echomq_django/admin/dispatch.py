"""The admin's actions as views: POST with CSRF and the change permission,
a confirmation page for destructive ones, one :class:`~.actions.Actions` call,
one admin message saying what it did (docs/admin.md, "Actions").
"""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import BadRequest, PermissionDenied
from django.http import Http404, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.http import url_has_allowed_host_and_scheme

from ..connection import get_connection
from ..exceptions import NoSuchJobError
from ..rules import check_job_id, check_schedule_name
from .actions import Actions
from .views import queue_or_404, require_view, set_url

__all__ = ["ACTIONS", "action"]

OK, WARN = messages.SUCCESS, messages.WARNING

#: action name -> (needs, destructive, question for the confirmation page)
ACTIONS = {
    "run_now": ("job", False, ""),
    "retry": ("job", False, ""),
    "cancel": ("job", True, "Cancel job {target}? A pending or scheduled job never runs; "
                            "a running one is asked to stop."),
    "delete": ("job", True, "Delete job {target}? Its row and its place in every set are "
                            "removed for good."),
    "pause": ("", False, ""),
    "resume": ("", False, ""),
    "retry_all_dead": ("", True, "Retry every dead letter of queue {queue}? Each goes back "
                                 "to pending with its attempts reset."),
    "purge_dead": ("", True, "Purge every dead letter of queue {queue}? Their rows are "
                             "deleted for good."),
    "repeat_run_now": ("name", False, ""),
    "repeat_remove": ("name", True, "Remove the recurring schedule {target}? Jobs it "
                                    "already minted are kept."),
}

#: What an action's target must be, by what it needs (the rules of rules.py):
#: a target that breaks its rule is a bad request (400), never sent.
TARGET_RULES = {"job": check_job_id, "name": check_schedule_name}

#: action name -> (the Actions method, {its answer: (message level, text)}); the
#: key None stands for any answer. Texts are formatted with queue, target and answer.
REPLIES = {
    "run_now": ("run_now", {
        "moved": (OK, "Job {target} moved from schedule to pending; it runs next."),
        "not scheduled": (WARN, "Job {target} is not scheduled; nothing changed."),
        "gone": (WARN, "Job {target} had expired; its schedule entry was dropped.")}),
    "retry": ("retry_dead", {
        "moved": (OK, "Job {target} moved from dead to pending with attempts reset."),
        "not dead": (WARN, "Job {target} is not dead; nothing changed."),
        "gone": (WARN, "Job {target} had expired; its dead entry was dropped.")}),
    "cancel": ("cancel", {
        "cancelled": (OK, "Job {target} cancelled; it will not run."),
        "flagged": (OK, "Job {target} is running; it was asked to stop."),
        "finished": (WARN, "Job {target} had finished already; nothing changed.")}),
    "delete": ("delete", {
        "deleted": (OK, "Job {target} deleted."),
        "not found": (WARN, "No job {target}; nothing changed."),
        "running": (WARN, "Job {target} is running; cancel it instead. Nothing changed.")}),
    "pause": ("pause", {
        True: (OK, "Queue {queue} paused: consumers stop claiming; scheduled jobs are "
                   "still promoted."),
        False: (WARN, "Queue {queue} was paused already.")}),
    "resume": ("resume", {
        True: (OK, "Queue {queue} resumed."),
        False: (WARN, "Queue {queue} was not paused.")}),
    "retry_all_dead": ("retry_all_dead", {
        None: (OK, "{answer} dead job(s) of {queue} moved back to pending.")}),
    "purge_dead": ("purge_dead", {None: (OK, "{answer} dead job(s) of {queue} purged.")}),
    "repeat_run_now": ("run_repeat_now", {
        None: (OK, "Schedule {target} ran now as job {answer} (its next run is unchanged).")}),
    "repeat_remove": ("remove_repeat", {
        True: (OK, "Schedule {target} removed."),
        False: (WARN, "No schedule {target}; nothing changed.")}),
}

#: What an action that put jobs on pending says instead when the queue is
#: paused: the jobs wait there until the queue is resumed.
PAUSED = {
    "run_now": "Job {target} moved from schedule to pending, but queue {queue} is paused: "
               "it will not run until the queue is resumed.",
    "retry": "Job {target} moved from dead to pending with attempts reset, but queue {queue} "
             "is paused: it will not run until the queue is resumed.",
    "retry_all_dead": "{answer} dead job(s) of {queue} moved back to pending, but queue "
                      "{queue} is paused: they will not run until the queue is resumed.",
    "repeat_run_now": "Schedule {target} ran now as job {answer} (its next run is unchanged), "
                      "but queue {queue} is paused: it will not run until the queue is resumed.",
}


def action(request, model_admin, queue: str, name: str):
    """Run one action (POST with CSRF; change permission) and say what it did
    in an admin message; then go back to ``next`` (a local URL) or the queue.
    A destructive action's first POST renders the confirmation page; the
    second, with ``confirm=yes``, acts. A job id or schedule name that breaks
    its rule answers 400 (BadRequest) before anything is sent; the admin's own
    buttons never send one."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    require_view(request, model_admin)
    if not model_admin.has_change_permission(request):
        raise PermissionDenied
    queue = queue_or_404(queue)
    if name not in ACTIONS:
        raise Http404(f"no action {name!r}")
    needs, destructive, question = ACTIONS[name]
    target = request.POST.get(needs, "").strip() if needs else ""
    if needs and not target:
        messages.error(request, f"{name}: no {needs} given.")
        return _back(request, queue)
    if needs:
        try:
            TARGET_RULES[needs](target)
        except ValueError as err:
            raise BadRequest(f"{name}: {err}") from None
    if destructive and request.POST.get("confirm") != "yes":
        opts = model_admin.model._meta
        return TemplateResponse(request, "admin/echomq_django/confirm.html", {
            **model_admin.admin_site.each_context(request),
            "opts": opts, "app_label": opts.app_label, "title": "Are you sure?",
            "queue": queue, "action": name, "needs": needs, "target": target,
            "question": question.format(queue=queue, target=target),
            "next": next_url(request, queue),
        })
    level, text = _do(Actions(get_connection()), name, queue, target)
    messages.add_message(request, level, text)
    return _back(request, queue)


def _do(acts: Actions, name: str, queue: str, target: str) -> tuple[int, str]:
    method, replies = REPLIES[name]
    try:
        answer = getattr(acts, method)(queue, target) if target else getattr(acts, method)(queue)
    except NoSuchJobError:
        return WARN, f"No job {target}; nothing changed."
    except LookupError as err:
        return WARN, f"{err}; nothing changed."
    except ValueError as err:
        return messages.ERROR, f"{target or queue}: {err}"
    level, text = replies[answer] if answer in replies else replies[None]
    moved = level == OK and answer != 0
    if name in PAUSED and moved and acts.queues.is_paused(queue):
        level, text = WARN, PAUSED[name]
    return level, text.format(queue=queue, target=target, answer=answer)


def next_url(request, queue: str) -> str:
    """Where an action goes back to: its POSTed ``next`` when that is a
    local URL, else the queue's pending page."""
    target = request.POST.get("next", "")
    if target and url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()):
        return target
    return set_url(queue, "pending")


def _back(request, queue: str):
    return HttpResponseRedirect(next_url(request, queue))
