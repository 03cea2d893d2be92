"""The admin: read-only journal and usage, API tokens, a memory page and the palace overview (with a search)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import FileResponse, Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.html import format_html, format_html_join

from palace.errors import PalaceError
from palace.governance import audit, tokens
from palace.models import ApiToken, AuditRecord, JournalEntry, PalaceOverview, UsageEvent

# Chart.js 4.6.1, vendored with its licence (palace/vendor/chart.js/README.md): a wheel install has no npm.
CHART_JS = Path(__file__).resolve().parent / "vendor" / "chart.js" / "chart.umd.min.js"
# How many memories the overview's search lists.
SEARCH_HITS = 20


class ReadOnlyAdmin(admin.ModelAdmin):
    """Nobody adds, changes or deletes history, superusers included."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def _admin_actor(request: HttpRequest) -> str:
    return f"admin:{request.user.get_username()}"


def _memory_links(ids: list[int]) -> str:
    shown = ids[:10]
    links = format_html_join(
        ", ", '<a href="{}">{}</a>', ((reverse("admin:palace_memory", args=[i]), i) for i in shown)
    )
    more = f" (+{len(ids) - len(shown)} more)" if len(ids) > len(shown) else ""
    return format_html("{}{}", links, more)


@admin.register(JournalEntry)
class JournalEntryAdmin(ReadOnlyAdmin):
    """The write-ahead journal; each row links to the memories it touched."""

    list_display = ("id", "created_at", "operation", "status", "wing", "added_by", "memories", "reason")
    list_filter = ("operation", "status", "wing", "added_by", "created_at")
    search_fields = ("reason", "added_by", "memory_ids", "payload")
    date_hierarchy = "created_at"
    readonly_fields = ("memories",)

    @admin.display(description="memories")
    def memories(self, entry: JournalEntry) -> str:
        return _memory_links([int(i) for i in entry.memory_ids])

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """A journal entry's page shows the full records it wrote or removed: a read, audited."""
        response = super().change_view(request, object_id, form_url, extra_context)
        entry = self.get_object(request, object_id)
        if entry is not None and response.status_code == 200:
            ids = [int(i) for i in entry.memory_ids]
            audit.record_read(
                operation="admin_journal", actor=_admin_actor(request), filters={"entry": entry.pk}, result_ids=ids
            )
        return response

    def get_urls(self) -> list[URLPattern]:
        memory = path("memory/<int:memory_id>/", self.admin_site.admin_view(self.memory_view), name="palace_memory")
        return [memory, *super().get_urls()]

    def memory_view(self, request: HttpRequest, memory_id: int) -> HttpResponse:
        """One memory as the palace holds it now (superseded or deleted ones say so)."""
        if not self.has_view_permission(request):
            raise Http404
        try:
            from palace.reads import selectors  # the store bindings load on first use, not at Django start-up

            found = selectors.recall(ids=[memory_id], actor=_admin_actor(request), operation="admin_memory")
            error = ""
        except PalaceError as exc:
            found, error = {"memories": [], "missing": [memory_id]}, str(exc)
        context = {
            **self.admin_site.each_context(request),
            "title": f"Memory {memory_id}",
            "memory_id": memory_id,
            "memory": found["memories"][0] if found["memories"] else None,
            "error": error,
            "journal_url": reverse("admin:palace_journalentry_changelist") + f"?q={memory_id}",
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/palace/memory.html", context)


@admin.register(UsageEvent)
class UsageEventAdmin(ReadOnlyAdmin):
    """Every palace call with its gain estimate."""

    list_display = (
        "id",
        "created_at",
        "operation",
        "tool",
        "ok",
        "exec_ms",
        "bytes_out",
        "estimated_tokens",
        "baseline_tokens",
        "wing",
        "added_by",
    )
    list_filter = ("operation", "tool", "ok", "wing", "created_at")
    search_fields = ("operation", "tool", "added_by", "wing")
    date_hierarchy = "created_at"


@admin.register(AuditRecord)
class AuditRecordAdmin(ReadOnlyAdmin):
    """The read audit: who read which memories, when (append-only; purged only by `manage.py audit purge`)."""

    list_display = ("id", "created_at", "actor", "operation", "result_count", "degraded", "query_length")
    list_filter = ("operation", "actor", "degraded", "created_at")
    search_fields = ("actor", "operation", "query_sha256", "result_ids")
    date_hierarchy = "created_at"


@admin.register(PalaceOverview)
class PalaceOverviewAdmin(ReadOnlyAdmin):
    """The palace overview page (counts, newest memories, a chart of tokens saved per day)."""

    def get_urls(self) -> list[URLPattern]:
        chart = path("chart.js", self.admin_site.admin_view(self.chart_js), name="palace_chart_js")
        return [chart, *super().get_urls()]

    def chart_js(self, request: HttpRequest) -> FileResponse:
        """Chart.js as shipped in the package (palace/vendor/chart.js)."""
        if not CHART_JS.is_file():
            raise Http404("Chart.js is missing from this install: reinstall palazzo")
        return FileResponse(CHART_JS.open("rb"), content_type="text/javascript")

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise Http404
        try:
            from palace.operations import overview  # the store bindings load on first use, not at Django start-up

            data = overview.overview(actor=_admin_actor(request))
            error = ""
        except PalaceError as exc:
            data, error = {}, str(exc)
        query = request.GET.get("q", "").strip()
        hits, search_error = self._search(request, query) if query else ([], "")
        counts = data.get("counts", {})
        context = {
            **self.admin_site.each_context(request),
            "title": "Palace overview",
            "overview": data,
            "error": error,
            "query": query,
            "hits": hits,
            "search_error": search_error,
            "count_tables": [
                (label, sorted(counts.get(label, {}).items(), key=lambda kv: (-kv[1], kv[0])))
                for label in ("wings", "rooms", "halls", "categories")
            ],
            "chart_data": data.get("tokens_saved_per_day", []),
            "chart_installed": CHART_JS.is_file(),
            "opts": self.model._meta,
        }
        return TemplateResponse(request, "admin/palace/overview.html", context)

    @staticmethod
    def _search(request: HttpRequest, query: str) -> tuple[list[dict[str, Any]], str]:
        """The memories palace_find answers for query (current ones, best first; audited as the admin's read)."""
        from palace.reads import selectors  # the store bindings load on first use, not at Django start-up

        try:
            found = selectors.find(query=query, limit=SEARCH_HITS, whole=True, actor=_admin_actor(request))
        except PalaceError as exc:
            return [], str(exc)
        return found["results"], ""


class ApiTokenForm(forms.ModelForm):
    """The add form: name, owner, the user it belongs to, and scope (the secret is generated)."""

    class Meta:
        model = ApiToken
        fields = ("name", "owner", "user", "scope")

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        if not tokens.NAME_PATTERN.match(name):
            raise forms.ValidationError("Use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit.")
        return name


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """API tokens: created here or with `manage.py token`; the secret is shown once; revoke, never edit."""

    list_display = ("name", "owner", "user", "scope", "wings", "created_at", "last_used_at", "revoked_at")
    list_filter = ("scope", "revoked_at")
    search_fields = ("name", "owner")
    form = ApiTokenForm
    fields = ("name", "owner", "user", "scope")
    actions = ("revoke",)

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # Revoked tokens stay listed so names are never reused and the journal's token:<name> stays meaningful.
        return False

    def save_model(self, request: HttpRequest, obj: ApiToken, form: Any, change: bool) -> None:
        username = obj.user.get_username() if obj.user else None
        created = tokens.create_token(name=obj.name, scope=obj.scope, owner=obj.owner, user=username)
        # The admin's redirect and messages need the saved row.
        obj.pk = ApiToken.objects.get(name=created["name"]).pk
        self.message_user(
            request,
            format_html(
                "Token {} created. Its secret is shown this once, copy it now: <code>{}</code>",
                created["name"],
                created["secret"],
            ),
            messages.WARNING,
        )

    @admin.action(description="Revoke the selected tokens")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiToken]) -> None:
        names = [token.name for token in queryset]
        for name in names:
            tokens.revoke_token(name=name)
        self.message_user(request, f"Revoked {len(names)} token(s): {', '.join(names)}", messages.SUCCESS)

    def get_actions(self, request: HttpRequest) -> dict[str, Any]:
        # The revoke action stays available even though rows cannot be changed in place.
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)
        return actions


# The login page says how an account is made: `palazzo createsuperuser` on the host.
admin.site.login_template = "admin/palace/login.html"


def register_oauth_admin() -> None:
    """With OAuth on: each person's grants in the admin (the toolkit's token admin, with scope and resource)."""
    from oauth2_provider.admin import AccessTokenAdmin
    from oauth2_provider.models import get_access_token_model

    class PersonGrantAdmin(AccessTokenAdmin):
        """Each person's OAuth grants: who granted which client what (scope, resource), until when.

        Revoke with the toolkit's "Revoke selected access tokens" action: it revokes the refresh token too.
        Rows without a person are clients' registration tokens (RFC 7592).
        """

        list_display = ("pk", "user", "application", "scope", "resource", "expires")
        list_filter = ("application", "user")

    admin.site.unregister(get_access_token_model())
    admin.site.register(get_access_token_model(), PersonGrantAdmin)


if settings.PALAZZO.oauth_enabled:
    register_oauth_admin()
