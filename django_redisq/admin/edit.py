"""Edit a dead letter's arguments, then replay it: the admin's fix for a task that failed on bad input.

Everything is checked before anything is written: the JSON, the registered
task's signature (a call that would raise ``TypeError`` at once is refused
here, not after another round of retries) and the message limits of
``encode_arguments`` and ``MAX_MESSAGE_BYTES``. The form carries the SHA-1 of
the message it was built from, so an edit never overwrites arguments that
changed meanwhile; store/scripts/edit_replay.lua rewrites and replays in one atomic
step. The original arguments go into the admin log entry, so an edit can
always be told and undone by hand.
"""

from __future__ import annotations

import hashlib
import inspect as pyinspect
import json
from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.admin.models import CHANGE
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse

from django_redisq.admin.common import AdminPage
from django_redisq.core.message import dumps, encode_arguments
from django_redisq.exceptions import InvalidArguments, MessageChanged, TaskNotFound
from django_redisq.ops.inspector import TaskDetail, UnknownQueue
from django_redisq.ops.operations import Operations
from django_redisq.task import get_registered


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8"), usedforsecurity=False).hexdigest()  # a change check, as in edit_replay.lua


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=True)


class EditArgumentsForm(forms.Form):
    """A dead letter's args and kwargs as JSON; ``message`` is the new stored message once valid."""

    args = forms.CharField(label="args (a JSON list)", strip=True,
                           widget=forms.Textarea(attrs={"rows": 6, "cols": 60, "spellcheck": "false", "id": "redisq-edit-args"}))
    kwargs = forms.CharField(label="kwargs (a JSON object)", strip=True,
                             widget=forms.Textarea(attrs={"rows": 6, "cols": 60, "spellcheck": "false", "id": "redisq-edit-kwargs"}))
    sha = forms.CharField(widget=forms.HiddenInput, max_length=40, min_length=40)

    def __init__(self, *args: Any, task_path: str, limit: int, raw_message: str, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.task_path, self.limit, self.raw_message = task_path, limit, raw_message
        self.message = ""

    @staticmethod
    def _json(text: str, kind: type, what: str) -> Any:
        try:
            value = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise forms.ValidationError(f"Not valid JSON: {exc}"[:300]) from None
        if not isinstance(value, kind):
            raise forms.ValidationError(f"{what} must be a JSON {'list' if kind is list else 'object'}, not {type(value).__name__}.")
        return value

    def clean_args(self) -> list[Any]:
        return list(self._json(self.cleaned_data["args"], list, "args"))

    def clean_kwargs(self) -> dict[str, Any]:
        return dict(self._json(self.cleaned_data["kwargs"], dict, "kwargs"))

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if self.errors:
            return data
        args, kwargs = data["args"], data["kwargs"]
        task = get_registered(self.task_path)
        if task is None:
            raise forms.ValidationError(f"Task {self.task_path or '(unknown)'} is not registered in this process, so its "
                                        "arguments cannot be checked; a worker would not run it either.")
        sig = pyinspect.signature(task.func)
        try:
            sig.bind(*([None] if task.takes_context else []), *args, **kwargs)
        except TypeError as exc:
            bare = sig.replace(parameters=[p.replace(annotation=p.empty) for p in sig.parameters.values()],
                               return_annotation=sig.empty)  # annotations are often strings: noise here
            raise forms.ValidationError(f"These arguments do not fit {self.task_path}{bare}: {exc}.") from None
        try:
            args, kwargs, _ = encode_arguments(args, kwargs, self.limit)
        except InvalidArguments as exc:
            raise forms.ValidationError(str(exc)) from None
        stored = json.loads(self.raw_message)  # keeps the per-call options and metadata as they were
        stored["args"], stored["kwargs"] = args, kwargs
        self.message = dumps(stored)
        size = len(self.message.encode("utf-8"))
        if size > self.limit:
            raise forms.ValidationError(f"The message with these arguments is {size} bytes, over the limit of "
                                        f"{self.limit} (OPTIONS['MAX_MESSAGE_BYTES']).")
        return data


def edit_form(detail: TaskDetail, limit: int, data: Any = None) -> EditArgumentsForm:
    initial = {"args": _pretty(detail.args), "kwargs": _pretty(detail.kwargs), "sha": sha1(detail.raw_message)}
    return EditArgumentsForm(data, initial=initial, task_path=detail.row.task, limit=limit, raw_message=detail.raw_message)


def edit_view(model_admin: AdminPage, request: HttpRequest, alias: str, queue: str, task_id: str) -> HttpResponse:
    """Check the edited arguments, confirm, then rewrite and replay the dead letter and log the original arguments."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not model_admin.has_edit_permission(request):  # not "change": an edit runs the task with the editor's arguments
        raise PermissionDenied
    ins = model_admin.inspector_for(alias)
    try:
        detail = ins.task(queue, task_id)
    except UnknownQueue:
        raise Http404(f"queue {queue!r} is not configured") from None
    back = reverse("admin:django_redisq_deadletter_detail", args=[alias, queue, task_id])
    if detail is None or detail.dead_score is None or detail.message_error:
        messages.error(request, "This task is not a dead letter with readable arguments (any more); nothing was changed.")
        return HttpResponseRedirect(back)
    form = edit_form(detail, ins.options.max_message_bytes, request.POST)
    if not form.is_valid():
        return model_admin.detail_view(request, alias, queue, task_id, form=form)
    if form.cleaned_data["sha"] != sha1(detail.raw_message):
        messages.error(request, "The arguments of this dead letter changed since you started editing; nothing was "
                                "written. Here they are as they are now.")
        return HttpResponseRedirect(back)
    new_args, new_kwargs = form.cleaned_data["args"], form.cleaned_data["kwargs"]
    if request.POST.get("confirm") != "yes":
        context = model_admin.page_context(
            request, "Replay with edited arguments?", alias=alias, queue=queue, detail=detail, back=back,
            old_args=_pretty(detail.args), old_kwargs=_pretty(detail.kwargs), new_args=_pretty(new_args), new_kwargs=_pretty(new_kwargs),
            fields=[("args", request.POST["args"]), ("kwargs", request.POST["kwargs"]),
                    ("sha", form.cleaned_data["sha"]), ("confirm", "yes")],
        )
        return model_admin.render_page(request, "edit_confirm.html", context)
    try:
        Operations(ins).edit_replay(queue, task_id, form.cleaned_data["sha"], form.message)
    except (TaskNotFound, MessageChanged) as exc:
        messages.error(request, f"{exc}.")
        return HttpResponseRedirect(back)
    original = dumps({"args": detail.args, "kwargs": detail.kwargs})
    model_admin.log_ids(request, [f"{alias}/{queue}/{task_id}"], CHANGE,
                     f"Edited the arguments and replayed the dead letter (queue {queue}); the original arguments were {original}")
    messages.success(request, f"Replayed task {task_id} with the edited arguments; the original ones are in the admin log.")
    return HttpResponseRedirect(back)
