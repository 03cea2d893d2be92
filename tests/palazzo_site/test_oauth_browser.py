"""The sign-in and consent pages in a real headless Chromium, and an operator revoking the grant in the admin."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.mcpserver.test_auth_http import token_client
from tests.palace.helpers import memory
from tests.palace.test_admin_browser import ARTIFACTS
from tests.palace.test_admin_browser import browser as chromium  # noqa: F401 - the Chromium fixture, by name
from tests.palazzo_site.test_oauth import PASSWORD, REDIRECT_URI, authorization_url, oauth_serve, pkce_pair, register

pytestmark = pytest.mark.slow


def test_it_grants_read_on_chosen_wings_in_chromium_and_the_admin_revokes_it(tmp_path: Path, chromium: object) -> None:  # noqa: F811
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait

    browser = chromium
    assert isinstance(browser, WebDriver)
    with oauth_serve(tmp_path / "data") as server:
        with token_client(server.mcp_url, server.operator) as client:
            client.ok("palace_store", memory("Build notes of the orrery live in the projects wing", wing="projects"))
            client.ok("palace_store", memory("Ada's reading list lives in the personal wing", wing="personal"))
        client_id = register(server, [REDIRECT_URI]).json()["client_id"]
        verifier, challenge = pkce_pair()
        browser.get(authorization_url(server, client_id, code_challenge=challenge))
        WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.ID, "login-form"))
        browser.find_element(By.NAME, "username").send_keys("ada")
        browser.find_element(By.NAME, "password").send_keys(PASSWORD)
        browser.find_element(By.ID, "sign-in").click()
        WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.ID, "consent-form"))
        page = browser.find_element(By.TAG_NAME, "body").text
        assert "Signed in as ada" in page and "user:ada" in page and server.mcp_url in page
        # Read only, and only the projects wing: untick write and every other wing.
        write = browser.find_element(By.ID, "id_write")
        if write.is_selected():
            write.click()
        for box in browser.find_elements(By.CSS_SELECTOR, "input[name=wings]"):
            if box.is_selected() != (box.get_attribute("value") == "projects"):
                box.click()
        ARTIFACTS.mkdir(exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "oauth-consent.png"))
        browser.find_element(By.ID, "allow").click()
        WebDriverWait(browser, 30).until(lambda b: b.current_url.startswith(REDIRECT_URI))
        code = parse_qs(urlsplit(browser.current_url).query)["code"][0]
        issued = httpx.post(
            server.base_url + "/oauth/token/",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": REDIRECT_URI,
                "client_id": client_id,
                "code_verifier": verifier,
            },
            timeout=30,
        )
        assert issued.status_code == 200, issued.text
        token = issued.json()
        assert token["scope"].split() == ["read", "wing:projects"]
        with token_client(server.mcp_url, token["access_token"]) as client:
            assert [item["wing"] for item in client.ok("palace_browse", {"limit": 50})["memories"]] == ["projects"]

        # The operator (ada is one) sees the person's grant in the admin and revokes it.
        browser.get(server.base_url + "/admin/oauth2_provider/accesstoken/")
        WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.ID, "result_list"))
        rows = [row for row in browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr") if "ada" in row.text]
        assert len(rows) == 1, [row.text for row in rows]
        assert "read wing:projects" in rows[0].text  # what the person granted, beside whom to
        rows[0].find_element(By.CSS_SELECTOR, "input.action-select").click()
        browser.find_element(By.CSS_SELECTOR, "select[name=action] option[value=revoke_tokens]").click()
        browser.find_element(By.CSS_SELECTOR, "button[name=index], input[name=index]").click()
        WebDriverWait(browser, 30).until(lambda b: "Revoked 1 access token" in b.page_source)
        browser.save_screenshot(str(ARTIFACTS / "oauth-admin-revoked.png"))
        refused = httpx.post(
            server.mcp_url, json={}, headers={"Authorization": f"Bearer {token['access_token']}"}, timeout=30
        )
        assert refused.status_code == 401
        refreshed = httpx.post(
            server.base_url + "/oauth/token/",
            data={"grant_type": "refresh_token", "refresh_token": token["refresh_token"], "client_id": client_id},
            timeout=30,
        )
        assert refreshed.status_code == 400, "revoking the grant revoked its refresh token too"
