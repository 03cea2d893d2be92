"""OAuth 2.1 sign-in for HTTP MCP: the login and consent pages and the authorization server's endpoints.

django-oauth-toolkit does the protocol; these views add what the palace decides: the consent grants
`read` or `write` and may limit the wings, every grant is bound to this server's /mcp (RFC 8707),
dynamic registration follows the operator's policy, and each endpoint is rate-limited per client address.
Mounted only when PALAZZO_PUBLIC_URL is set (palazzo_site.urls).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import wraps
from typing import Any
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.contrib.auth import views as auth_views
from django.http import HttpRequest, HttpResponse, HttpResponseBase, JsonResponse
from django.urls import path
from django.utils.decorators import method_decorator
from django.views.decorators.csrf import csrf_exempt
from django_ratelimit.core import is_ratelimited
from oauth2_provider import views as oauth_views
from oauth2_provider.exceptions import OAuthToolkitError
from oauth2_provider.forms import AllowForm
from oauth2_provider.models import get_application_model
from oauthlib.oauth2.rfc6749.errors import CustomOAuth2Error

from palace.governance import oauth
from palace.schema.vocabulary import active_vocabulary

# Only these grants may be registered: the authorization code flow (with PKCE) and its refresh tokens.
REGISTRABLE_GRANTS = ("authorization_code", "refresh_token")


def _too_many(request: HttpRequest) -> HttpResponse:
    return JsonResponse(
        {"error": "slow_down", "error_description": "too many requests from this address; retry in a minute"},
        status=429,
    )


View = Callable[..., HttpResponseBase]


def rate_limited(group: str) -> Callable[[View], View]:
    """Refuse a client address past PALAZZO_OAUTH_RATE_LIMIT POSTs a period on one endpoint (429)."""

    def decorate(view: View) -> View:
        @wraps(view)
        def limited(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponseBase:
            if request.method == "POST" and is_ratelimited(
                request, group=f"oauth-{group}", key="ip", rate=settings.PALAZZO.oauth_rate_limit, increment=True
            ):
                return _too_many(request)
            return view(request, *args, **kwargs)

        return limited

    return decorate


class ConsentForm(AllowForm):
    """The consent page: allow or deny, write or read only, every wing or some."""

    write = forms.BooleanField(required=False)
    wings = forms.MultipleChoiceField(required=False, widget=forms.CheckboxSelectMultiple)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["wings"].choices = [(wing, wing) for wing in active_vocabulary().wings]

    def clean(self) -> dict[str, Any]:
        """Turn the person's choices into the granted scope; never more than the client asked for."""
        cleaned = super().clean() or {}
        requested = set(str(cleaned.get("scope") or "").split())
        asked = set(oauth.scope_wings(requested))
        chosen = [wing for wing in cleaned.get("wings") or [] if wing in (asked or active_vocabulary().wings)]
        if cleaned.get("allow") and not chosen:
            raise forms.ValidationError("choose at least one wing, or deny")
        every_wing = set(chosen) == set(active_vocabulary().wings)
        write = bool(cleaned.get("write")) and oauth.WRITE in requested
        cleaned["scope"] = oauth.granted_scope(write=write, wings=None if every_wing else chosen)
        return cleaned


@method_decorator(rate_limited("authorize"), name="dispatch")
class ConsentView(oauth_views.AuthorizationView):
    """GET: the consent page for a signed-in person; POST: their decision, redirected to the client."""

    template_name = "palace/oauth/consent.html"
    form_class = ConsentForm

    def get(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        """Refuse PKCE other than S256 and a resource other than this server's /mcp before any consent."""
        problem = _request_problem(request)
        if problem is None:
            response: HttpResponse = super().get(request, *args, **kwargs)
            return response
        try:  # the client and its redirect URI first: an error goes back only to a registered redirect
            _scopes, credentials = self.validate_authorization_request(request)
        except OAuthToolkitError as error:
            refused: HttpResponse = self.error_response(error, application=None)
            return refused
        application = get_application_model().objects.get(client_id=credentials["client_id"])
        code, description = problem
        redirect = OAuthToolkitError(
            error=CustomOAuth2Error(error=code, description=description, state=credentials.get("state")),
            redirect_uri=credentials["redirect_uri"],
        )
        answer: HttpResponse = self.error_response(redirect, application)
        return answer

    def get_initial(self) -> dict[str, Any]:
        """Bind the grant to /mcp even when the client sent no resource; pre-tick what the client asked for."""
        initial: dict[str, Any] = super().get_initial()
        initial["resource"] = oauth.resource_identifier()
        requested = str(initial.get("scope") or "").split()
        initial["wings"] = oauth.scope_wings(requested) or list(active_vocabulary().wings)
        initial["write"] = oauth.WRITE in requested
        return initial

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        """The page's text: who asks, where the answer goes, and whether write was asked for."""
        context: dict[str, Any] = super().get_context_data(**kwargs)
        context["redirect_host"] = urlsplit(str(kwargs.get("redirect_uri") or "")).netloc
        context["write_requested"] = oauth.WRITE in list(kwargs.get("scopes") or [])
        context["resource"] = oauth.resource_identifier()
        return context

    def form_valid(self, form: Any) -> HttpResponse:
        """Refuse a tampered resource; every grant is for this server's /mcp."""
        if not oauth.is_this_resource(str(form.cleaned_data.get("resource") or "")):
            return _refusal("invalid_target", "the grant must be for this server's /mcp")
        form.cleaned_data["resource"] = oauth.resource_identifier()
        response: HttpResponse = super().form_valid(form)
        return response


def _request_problem(request: HttpRequest) -> tuple[str, str] | None:
    """(error, description) for an authorization request palazzo refuses although the toolkit would not."""
    if request.GET.get("code_challenge") and request.GET.get("code_challenge_method") != "S256":
        return "invalid_request", "PKCE must use code_challenge_method S256 (plain is refused)"
    for resource in request.GET.getlist("resource"):
        if not oauth.is_this_resource(resource):
            return "invalid_target", f"resource {resource!r} is not this server; expected {oauth.resource_identifier()}"
    return None


def _refusal(error: str, description: str, status: int = 400) -> HttpResponse:
    return JsonResponse({"error": error, "error_description": description}, status=status)


@method_decorator(rate_limited("token"), name="dispatch")
class TokenView(oauth_views.TokenView):
    """The token endpoint (authorization code with PKCE, refresh with rotation)."""


@method_decorator(rate_limited("revoke"), name="dispatch")
class RevokeView(oauth_views.RevokeTokenView):
    """The revocation endpoint (RFC 7009)."""


@method_decorator(csrf_exempt, name="dispatch")
@method_decorator(rate_limited("register"), name="dispatch")
class RegistrationView(oauth_views.DynamicClientRegistrationView):
    """Dynamic client registration (RFC 7591) under the operator's redirect policy."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        """Check the redirect URIs and grant types, then let the toolkit register the client."""
        try:
            metadata = json.loads(request.body or b"null")
        except ValueError:
            return _refusal("invalid_client_metadata", "the body must be a JSON object")
        if not isinstance(metadata, dict):
            return _refusal("invalid_client_metadata", "the body must be a JSON object")
        uris = metadata.get("redirect_uris")
        if not isinstance(uris, list) or not uris:
            return _refusal("invalid_redirect_uri", "redirect_uris must be a non-empty array")
        for uri in uris:
            problem = oauth.redirect_uri_problem(uri)
            if problem:
                return _refusal("invalid_redirect_uri", problem)
        grants = metadata.get("grant_types", ["authorization_code"])
        if not isinstance(grants, list) or not set(map(str, grants)) <= set(REGISTRABLE_GRANTS):
            return _refusal("invalid_client_metadata", f"grant_types may only hold {', '.join(REGISTRABLE_GRANTS)}")
        response: HttpResponse = super().post(request, *args, **kwargs)
        return response


class LoginView(auth_views.LoginView):
    """Sign in with the admin's users (Django's own login), then back to the consent page."""

    template_name = "palace/oauth/login.html"
    redirect_authenticated_user = False

    @method_decorator(rate_limited("login"))
    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        """Check the password (rate-limited per address)."""
        response: HttpResponse = super().post(request, *args, **kwargs)
        return response


def protected_resource_metadata(request: HttpRequest, resource_path: str = "") -> HttpResponse:
    """RFC 9728 metadata of /mcp, at the root and at the path-suffixed location."""
    if resource_path.strip("/") not in ("", oauth.MCP_PATH.strip("/")):
        return _refusal("not_found", "no protected resource here", status=404)
    response: HttpResponse = oauth_views.OAuthProtectedResourceMetadataView.as_view()(request)
    return response


app_name = "oauth2_provider"  # the toolkit's metadata views reverse their URL names in this namespace
urlpatterns = [
    path("oauth/authorize/", ConsentView.as_view(), name="authorize"),
    path("oauth/token/", TokenView.as_view(), name="token"),
    path("oauth/revoke/", RevokeView.as_view(), name="revoke-token"),
    path("oauth/login/", LoginView.as_view(), name="login"),
    path(
        ".well-known/oauth-authorization-server",
        oauth_views.OAuthServerMetadataView.as_view(),
        name="oauth-server-metadata",
    ),
    path(".well-known/oauth-protected-resource", protected_resource_metadata, name="oauth-resource-metadata"),
    path(".well-known/oauth-protected-resource/<path:resource_path>", protected_resource_metadata),
]
if settings.PALAZZO.oauth_registration == "open":
    urlpatterns += [
        path("oauth/register/", RegistrationView.as_view(), name="dcr-register"),
        # RFC 7592: a registered client reads, updates or deletes itself with its registration token.
        path(
            "oauth/register/<str:client_id>/",
            oauth_views.DynamicClientRegistrationManagementView.as_view(),
            name="dcr-register-management",
        ),
    ]
