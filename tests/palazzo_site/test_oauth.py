"""OAuth 2.1 sign-in on HTTP MCP, with real parts: `serve` with PALAZZO_PUBLIC_URL, the MCP Python SDK's
OAuth client provider (discovery, dynamic registration, PKCE, token), the real login and consent pages
(answered over HTTP here; tests/palazzo_site/test_oauth_browser.py answers them in Chromium), and the
hostile requests an authorization server must refuse, each leaving nothing written.
"""

from __future__ import annotations

import base64
import hashlib
import json
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, cast
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import anyio.to_thread
import httpx
import httpx2
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from mcp.client.auth import OAuthClientProvider
from mcp.shared.auth import AuthorizationCodeResult, OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from palace.governance.oauth import redirect_uri_problem
from tests.mcpserver.conftest import Palazzo, free_port, http_server, migrate
from tests.mcpserver.test_auth_http import http_session, manage, token_client
from tests.palace.helpers import memory

pytestmark = pytest.mark.slow
PASSWORD = "correct horse battery staple"
REDIRECT_URI = "http://127.0.0.1:53682/callback"


@dataclass(frozen=True)
class OAuthServer:
    """A running `serve` with OAuth on, and the people who can sign in to it."""

    base_url: str
    data_dir: Path
    env: dict[str, str]
    operator: str  # an API token with the write scope, beside OAuth as scripts use it

    @property
    def mcp_url(self) -> str:
        return self.base_url + "/mcp"

    def manage(self, *args: str) -> Any:
        return manage(self.data_dir, *args, **self.env)

    def count(self, model: str) -> int:
        """Rows of an OAuth model that a person granted (Grant, AccessToken), read with manage.py shell.

        Registration also writes an AccessToken (the client's RFC 7592 registration token, for no person).
        """
        result = self.manage(
            "shell",
            "-c",
            f"from oauth2_provider.models import {model}; print({model}.objects.filter(user__isnull=False).count())",
        )
        assert result.returncode == 0, result.stderr
        return int(result.stdout.strip().splitlines()[-1])


def create_person(data_dir: Path, username: str, env: dict[str, str]) -> None:
    result = manage(
        data_dir,
        "createsuperuser",
        "--noinput",
        "--username",
        username,
        "--email",
        f"{username}@example.com",
        DJANGO_SUPERUSER_PASSWORD=PASSWORD,
        **env,
    )
    assert result.returncode == 0, result.stderr


@contextmanager
def oauth_serve(data_dir: Path, **extra_env: str) -> Iterator[OAuthServer]:
    """`serve` with PALAZZO_PUBLIC_URL (OAuth on) on a free port, with the person ada."""
    port = free_port()
    env = {"PALAZZO_PUBLIC_URL": f"http://127.0.0.1:{port}", **extra_env}
    migrate(data_dir)
    create_person(data_dir, "ada", env)
    operator = manage(data_dir, "token", "create", "operator", "--scope", "write", **env)
    assert operator.returncode == 0, operator.stderr
    with http_server(data_dir, port=port, **cast(dict[str, Any], env)) as base_url:
        yield OAuthServer(base_url, data_dir, env, operator.stdout.strip())


@pytest.fixture
def server(tmp_path: Path) -> Iterator[OAuthServer]:
    with oauth_serve(tmp_path / "data") as running:
        yield running


class FormReader(HTMLParser):
    """The inputs of one form of a page: hidden values, and which checkboxes are ticked."""

    def __init__(self, form_id: str) -> None:
        super().__init__()
        self.form_id = form_id
        self.inside = False
        self.fields: list[tuple[str, str]] = []
        self.checkboxes: dict[str, list[tuple[str, bool]]] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        if tag == "form":
            self.inside = found.get("id") == self.form_id
        elif tag == "input" and self.inside and found.get("name"):
            name, value = str(found["name"]), found.get("value") or ""
            if found.get("type") == "checkbox":
                self.checkboxes.setdefault(name, []).append((value or "on", "checked" in found))
            elif found.get("type") in ("hidden", "text", "password", None):
                self.fields.append((name, value))

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self.inside = False


def read_form(html: str, form_id: str) -> FormReader:
    reader = FormReader(form_id)
    reader.feed(html)
    assert reader.fields, f"no form {form_id!r} on the page:\n{html[:2000]}"
    return reader


def sign_in_and_consent(
    authorization_url: str,
    *,
    username: str = "ada",
    allow: bool = True,
    write: bool = True,
    wings: list[str] | None = None,
) -> httpx.Response:
    """A person's browser: the sign-in, then the consent page answered; returns the redirect back to the client."""
    with httpx.Client(follow_redirects=False, timeout=30) as browser:
        to_login = browser.get(authorization_url)
        assert to_login.status_code == 302, to_login.text
        login_url = urljoin(authorization_url, to_login.headers["location"])
        login = read_form(browser.get(login_url).text, "login-form")
        signed_in = browser.post(login_url, data=dict(login.fields) | {"username": username, "password": PASSWORD})
        assert signed_in.status_code == 302, signed_in.text
        consent_url = urljoin(login_url, signed_in.headers["location"])
        page = browser.get(consent_url)
        assert page.status_code == 200, page.text
        consent = read_form(page.text, "consent-form")
        chosen = wings if wings is not None else [value for value, ticked in consent.checkboxes["wings"] if ticked]
        answer: dict[str, Any] = dict(consent.fields) | {"wings": chosen}
        if write:
            answer["write"] = "on"
        if allow:
            answer["allow"] = "Authorize"
        return browser.post(consent_url, data=answer)


class MemoryTokens:
    """The SDK's TokenStorage, in memory: what a client would keep between runs."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


@contextmanager
def sdk_oauth_client(url: str, storage: MemoryTokens, **consent: Any) -> Iterator[Palazzo]:
    """The MCP SDK's own OAuth client provider; its browser step is sign_in_and_consent."""
    answered: dict[str, str] = {}

    async def open_browser(authorization_url: str) -> None:
        response = await anyio.to_thread.run_sync(lambda: sign_in_and_consent(authorization_url, **consent))
        assert response.status_code == 302, response.text
        location = response.headers["location"]
        assert location.startswith(REDIRECT_URI), location
        answered.update({key: values[0] for key, values in parse_qs(urlsplit(location).query).items()})

    async def callback() -> AuthorizationCodeResult:
        return AuthorizationCodeResult(code=answered["code"], state=answered.get("state"), iss=answered.get("iss"))

    provider = OAuthClientProvider(
        server_url=url,
        client_metadata=OAuthClientMetadata(
            client_name="palazzo SDK test",
            redirect_uris=[REDIRECT_URI],  # type: ignore[list-item]
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
            token_endpoint_auth_method="none",
        ),
        storage=storage,
        redirect_handler=open_browser,
        callback_handler=callback,
    )

    with http_session(url, lambda: httpx2.AsyncClient(auth=provider, timeout=60)) as palazzo:
        yield palazzo


def exported(server: OAuthServer) -> list[dict[str, Any]]:
    """Every memory, from GET /export with the operator's API token (serve holds the embedded store)."""
    answer = httpx.get(server.base_url + "/export", headers={"Authorization": f"Bearer {server.operator}"}, timeout=60)
    assert answer.status_code == 200, answer.text
    return [json.loads(line) for line in answer.text.splitlines() if line.strip()]


def test_it_signs_a_person_in_with_the_sdk_oauth_client_and_acts_as_them(tmp_path: Path) -> None:
    with oauth_serve(tmp_path / "data", PALAZZO_LOG_LEVEL="debug") as server:
        secrets_seen = sign_in_refresh_and_revoke(server)
    # Even at debug level, no code, token or password reaches the log.
    [log] = (tmp_path).glob("serve-*.log")
    logged = log.read_text()
    assert "oauth" in logged.lower()  # the log did record the flow's requests
    leaked = [secret for secret in secrets_seen if secret in logged]
    assert not leaked, leaked
    records = audit_records(server)
    actors = {record["operation"]: record["actor"] for record in records}
    assert actors == {"find": "user:ada", "http_export": "token:operator"}  # each read names who made it


def audit_records(server: OAuthServer) -> list[dict[str, Any]]:
    result = server.manage("audit", "export", "--format", "json")
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


def sign_in_refresh_and_revoke(server: OAuthServer) -> list[str]:
    """The SDK's whole flow, a refresh with rotation, a reused refresh token, a revocation; the secrets used."""
    unauthenticated = httpx.post(server.mcp_url, json={}, timeout=30)
    assert unauthenticated.status_code == 401
    challenge = unauthenticated.headers["www-authenticate"]
    assert f'resource_metadata="{server.base_url}/.well-known/oauth-protected-resource/mcp"' in challenge
    storage = MemoryTokens()
    with sdk_oauth_client(server.mcp_url, storage) as client:
        stored = client.ok("palace_store", memory("Ada set the orrery's lunar gear to 223 teeth", room="oauth"))
        found = client.ok("palace_find", {"query": "lunar gear teeth", "room": "oauth"})
        assert [hit["id"] for hit in found["results"]] == [stored["id"]]
    assert storage.client is not None and storage.tokens is not None and storage.tokens.refresh_token
    [written] = exported(server)
    assert written["added_by"] == "user:ada"

    # Refresh with rotation: a new pair; the old refresh token is spent, and its reuse revokes the family.
    refresh = {"grant_type": "refresh_token", "client_id": storage.client.client_id}
    rotated = httpx.post(
        server.base_url + "/oauth/token/", data=refresh | {"refresh_token": storage.tokens.refresh_token}, timeout=30
    )
    assert rotated.status_code == 200, rotated.text
    fresh = rotated.json()
    assert (
        fresh["refresh_token"] != storage.tokens.refresh_token and fresh["access_token"] != storage.tokens.access_token
    )
    with token_client(server.mcp_url, fresh["access_token"]) as client:
        assert client.total() == 1
    replayed = httpx.post(
        server.base_url + "/oauth/token/", data=refresh | {"refresh_token": storage.tokens.refresh_token}, timeout=30
    )
    assert replayed.status_code == 400 and replayed.json()["error"] == "invalid_grant"

    # Revocation: the access token stops working at once.
    second = httpx.post(
        server.base_url + "/oauth/token/", data=refresh | {"refresh_token": fresh["refresh_token"]}, timeout=30
    )
    token = second.json().get("access_token") if second.status_code == 200 else fresh["access_token"]
    revoked = httpx.post(
        server.base_url + "/oauth/revoke/",
        data={"token": token, "client_id": storage.client.client_id},
        timeout=30,
    )
    assert revoked.status_code == 200, revoked.text
    refused = httpx.post(server.mcp_url, json={}, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    assert refused.status_code == 401 and 'error="invalid_token"' in refused.headers["www-authenticate"]
    return [
        storage.tokens.access_token,
        storage.tokens.refresh_token,
        fresh["access_token"],
        fresh["refresh_token"],
        token,
        PASSWORD,
    ]


def test_it_limits_a_person_s_grant_to_read_and_the_wings_they_chose(server: OAuthServer) -> None:
    with token_client(server.mcp_url, server.operator) as client:
        client.ok("palace_store", memory("The projects wing holds the orrery build notes", wing="projects"))
        client.ok("palace_store", memory("The personal wing holds Ada's reading list", wing="personal"))
    with sdk_oauth_client(server.mcp_url, MemoryTokens(), write=False, wings=["projects"]) as client:
        browsed = client.ok("palace_browse", {"limit": 50})["memories"]
        assert [item["wing"] for item in browsed] == ["projects"]
        refused = client.call("palace_store", memory("Ada may not write with a read grant"))
        assert refused.is_error and "[read_scope] user 'ada'" in refused.content[0].text  # type: ignore[union-attr]
    assert len(exported(server)) == 2


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    return verifier, challenge


def register(server: OAuthServer, redirect_uris: list[str]) -> httpx.Response:
    return httpx.post(
        server.base_url + "/oauth/register/",
        json={"client_name": "Orrery notebook", "redirect_uris": redirect_uris, "token_endpoint_auth_method": "none"},
        timeout=30,
    )


def authorization_url(server: OAuthServer, client_id: str, **overrides: str | None) -> str:
    _verifier, challenge = pkce_pair()
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": REDIRECT_URI,
        "scope": "read write",
        "state": "xyz",
        "code_challenge": challenge,
        "code_challenge_method": "S256",
        "resource": server.mcp_url,
    } | overrides
    return server.base_url + "/oauth/authorize/?" + urlencode({k: v for k, v in query.items() if v is not None})


def test_it_refuses_hostile_authorization_requests_and_writes_nothing(server: OAuthServer) -> None:
    registered = register(server, [REDIRECT_URI])
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]
    # Registration: only https, or http on loopback; nothing but code and refresh grants.
    for uris in (["http://evil.example/callback"], ["javascript:alert(1)"], [], "x", [7]):
        refused = register(server, uris)  # type: ignore[arg-type]
        assert refused.status_code == 400 and refused.json()["error"] == "invalid_redirect_uri", refused.text
    grants = httpx.post(
        server.base_url + "/oauth/register/",
        json={"redirect_uris": [REDIRECT_URI], "grant_types": ["client_credentials"]},
        timeout=30,
    )
    assert grants.status_code == 400 and "grant_types" in grants.text
    assert (
        server.manage(
            "shell", "-c", "from oauth2_provider.models import Application as A; print(A.objects.count())"
        ).stdout.split()[-1]
        == "1"
    )

    def outcome(url: str) -> httpx.Response:
        """The consent page's answer for a request, or the error the page shows before any consent."""
        with httpx.Client(follow_redirects=False, timeout=30) as browser:
            login_url = urljoin(url, browser.get(url).headers["location"])
            login = read_form(browser.get(login_url).text, "login-form")
            signed_in = browser.post(login_url, data=dict(login.fields) | {"username": "ada", "password": PASSWORD})
            return browser.get(urljoin(login_url, signed_in.headers["location"]))

    # A redirect URI one character off: an error page, never a redirect to it.
    off_by_one = outcome(authorization_url(server, client_id, redirect_uri=REDIRECT_URI[:-1] + "X"))
    assert off_by_one.status_code != 302 and "Mismatching redirect URI" in off_by_one.text
    # A native client's loopback redirect may change its port (RFC 8252 section 7.3), nothing else.
    other_port = outcome(authorization_url(server, client_id, redirect_uri="http://127.0.0.1:40001/callback"))
    assert other_port.status_code == 200 and 'id="consent-form"' in other_port.text
    other_path = outcome(authorization_url(server, client_id, redirect_uri="http://127.0.0.1:40001/callbacks"))
    assert other_path.status_code != 302 and "Mismatching redirect URI" in other_path.text
    # PKCE missing or plain: refused back to the client with invalid_request.
    for method in (None, "plain"):
        overrides: dict[str, str | None] = {"code_challenge_method": method}
        if method is None:
            overrides["code_challenge"] = None
        refused = outcome(authorization_url(server, client_id, **overrides))
        assert refused.status_code == 302 and "error=invalid_request" in refused.headers["location"], refused.text
    # Another resource (RFC 8707): invalid_target.
    other = outcome(authorization_url(server, client_id, resource="https://other.example/mcp"))
    assert other.status_code == 302 and "error=invalid_target" in other.headers["location"], other.text
    assert server.count("Grant") == 0 and server.count("AccessToken") == 0

    # A proper grant; its code works once, only with its verifier, and never for another resource.
    verifier, challenge = pkce_pair()
    url = authorization_url(server, client_id, code_challenge=challenge)
    location = sign_in_and_consent(url).headers["location"]
    code = parse_qs(urlsplit(location).query)["code"][0]
    exchange = {
        "grant_type": "authorization_code",
        "code": code,
        "redirect_uri": REDIRECT_URI,
        "client_id": client_id,
        "code_verifier": verifier,
    }
    token_url = server.base_url + "/oauth/token/"
    wrong_verifier = httpx.post(token_url, data=exchange | {"code_verifier": pkce_pair()[0]}, timeout=30)
    assert wrong_verifier.status_code == 400, wrong_verifier.text
    elsewhere = httpx.post(token_url, data=exchange | {"resource": "https://other.example/mcp"}, timeout=30)
    assert elsewhere.status_code == 400, elsewhere.text
    assert server.count("AccessToken") == 0
    issued = httpx.post(token_url, data=exchange, timeout=30)
    assert issued.status_code == 200, issued.text
    reused = httpx.post(token_url, data=exchange, timeout=30)
    assert reused.status_code == 400 and reused.json()["error"] == "invalid_grant"
    assert server.count("AccessToken") == 1
    # Garbage and API-token look-alikes are refused as invalid tokens; nothing was stored by anyone.
    for presented in ("pz_nope_nope", "x" * 40, issued.json()["access_token"] + "x"):
        answer = httpx.post(server.mcp_url, json={}, headers={"Authorization": f"Bearer {presented}"}, timeout=30)
        assert answer.status_code == 401, presented
    assert exported(server) == []


def test_it_refuses_an_expired_access_token(tmp_path: Path) -> None:
    with oauth_serve(tmp_path / "data", PALAZZO_OAUTH_TOKEN_SECONDS="2") as server:
        storage = MemoryTokens()
        with sdk_oauth_client(server.mcp_url, storage) as client:
            assert client.total() == 0
        assert storage.tokens is not None
        time.sleep(2.5)
        expired = httpx.post(
            server.mcp_url, json={}, headers={"Authorization": f"Bearer {storage.tokens.access_token}"}, timeout=30
        )
        assert expired.status_code == 401 and 'error="invalid_token"' in expired.headers["www-authenticate"]


def test_it_rate_limits_the_token_endpoint_per_address(tmp_path: Path) -> None:
    # Counted in fixed windows: an hour's makes a window ending between the 7 requests all but impossible.
    with oauth_serve(tmp_path / "data", PALAZZO_OAUTH_RATE_LIMIT="5/h") as server:
        answers = [
            httpx.post(server.base_url + "/oauth/token/", data={"grant_type": "authorization_code"}, timeout=30)
            for _ in range(7)
        ]
        assert all(answer.status_code in (400, 401) for answer in answers[:5]), [a.status_code for a in answers]
        assert [answer.status_code for answer in answers[5:]] == [429, 429]
        assert answers[-1].json()["error"] == "slow_down"


def test_it_keeps_api_tokens_beside_oauth_and_stops_a_person_s_when_they_leave(server: OAuthServer) -> None:
    created = server.manage("token", "create", "ada-laptop", "--user", "ada")
    assert created.returncode == 0, created.stderr
    owned = created.stdout.strip()
    unknown = server.manage("token", "create", "nobody-laptop", "--user", "nobody")
    assert unknown.returncode != 0 and "user" in unknown.stderr and "'nobody'" in unknown.stderr
    storage = MemoryTokens()
    with sdk_oauth_client(server.mcp_url, storage) as client:
        assert client.total() == 0
    assert storage.tokens is not None
    with token_client(server.mcp_url, owned) as client:
        stored = client.ok("palace_store", memory("Ada's laptop hook fed the orrery session"))
    assert [item["added_by"] for item in exported(server)] == ["token:ada-laptop"]  # a token stamps as before
    assert stored["duplicate"] is False
    # Ada leaves: the operator deactivates her; her API token and her OAuth grant stop, the operator's does not.
    left = server.manage(
        "shell",
        "-c",
        "from django.contrib.auth.models import User; User.objects.filter(username='ada').update(is_active=False)",
    )
    assert left.returncode == 0, left.stderr
    for presented in (owned, storage.tokens.access_token):
        answer = httpx.post(server.mcp_url, json={}, headers={"Authorization": f"Bearer {presented}"}, timeout=30)
        assert answer.status_code == 401, presented
    assert len(exported(server)) == 1


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=40),
    lambda children: (
        st.lists(children, min_size=1, max_size=4)
        | st.dictionaries(st.text(max_size=12), children, min_size=1, max_size=5)
    ),
    max_leaves=15,
)
REGISTRATION_FIELDS = ("redirect_uris", "grant_types", "token_endpoint_auth_method", "client_name", "scope")
TOKEN_FIELDS = ("grant_type", "code", "redirect_uri", "client_id", "code_verifier", "refresh_token", "resource")


def test_it_answers_any_registration_or_token_request_with_a_client_error_never_a_crash(tmp_path: Path) -> None:
    with oauth_serve(tmp_path / "data", PALAZZO_OAUTH_RATE_LIMIT="100000/m") as server:

        @settings(max_examples=80, deadline=None)
        @given(
            body=JSON_VALUES
            | st.fixed_dictionaries({}, optional={field: JSON_VALUES for field in REGISTRATION_FIELDS}),
            form=st.dictionaries(st.sampled_from(TOKEN_FIELDS), st.text(max_size=60), max_size=7),
        )
        def check(body: Any, form: dict[str, str]) -> None:
            registered = httpx.post(server.base_url + "/oauth/register/", content=json.dumps(body), timeout=30)
            assert registered.status_code in (201, 400), registered.text
            assert registered.headers["content-type"].startswith("application/json")
            if registered.status_code == 201:
                assert all(redirect_uri_problem(uri) is None for uri in body["redirect_uris"])
            token = httpx.post(server.base_url + "/oauth/token/", data=form, timeout=30)
            assert token.status_code in (400, 401), token.text
            assert "access_token" not in token.json()

        check()
        assert server.count("AccessToken") == 0 and exported(server) == []
