"""The admin in a real headless Chromium (Debian's chromium + chromium-driver, driven by selenium)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.mcpserver.conftest import ROOT, free_port, http_server, migrate, server_env
from tests.mcpserver.test_auth_http import token_client

pytestmark = pytest.mark.slow

ARTIFACTS = ROOT / "artifacts"
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1280,1400",
)


def _chromium(profile: Path, *extra_flags: str) -> object:
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    if chromium is None or driver is None:
        pytest.fail("chromium and chromedriver are required: run scripts/ci-services.sh (make services)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for flag in (*CHROMIUM_FLAGS, *extra_flags):
        options.add_argument(flag)
    options.add_argument(f"--user-data-dir={profile}")
    return webdriver.Chrome(service=Service(executable_path=driver), options=options)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[object]:
    session = _chromium(tmp_path / "chromium-profile")
    try:
        yield session
    finally:
        session.quit()  # type: ignore[attr-defined]


@pytest.fixture
def offline_browser(tmp_path: Path) -> Iterator[object]:
    """Chromium that reaches only this machine: every other host is unresolvable and behind a dead proxy."""
    session = _chromium(
        tmp_path / "offline-profile",
        "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1",
        f"--proxy-server=http://127.0.0.1:{free_port()}",  # nothing listens there; loopback bypasses proxies
    )
    try:
        yield session
    finally:
        session.quit()  # type: ignore[attr-defined]


def test_it_shows_the_journal_and_the_overview_chart_in_a_browser(tmp_path: Path, browser: object) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait

    assert isinstance(browser, WebDriver)
    data_dir = tmp_path / "data"
    migrate(data_dir)
    env = server_env(data_dir, DJANGO_SUPERUSER_PASSWORD="correct horse battery")
    subprocess.run(
        [
            sys.executable,
            "manage.py",
            "createsuperuser",
            "--no-input",
            "--username",
            "admin",
            "--email",
            "admin@example.com",
        ],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    secret = subprocess.run(
        [sys.executable, "manage.py", "token", "create", "browser-test"],
        cwd=ROOT,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.strip()
    with http_server(data_dir) as base_url:
        with token_client(f"{base_url}/mcp", secret) as client:
            stored = client.ok(
                "palace_store",
                {
                    "text": "the admin shows this memory",
                    "wing": "projects",
                    "room": "admin",
                    "hall": "facts",
                    "category": "technical",
                },
            )
            client.ok("palace_find", {"query": "what does the admin show"})

        browser.get(f"{base_url}/admin/login/?next=/admin/palace/journalentry/")
        browser.find_element(By.NAME, "username").send_keys("admin")
        browser.find_element(By.NAME, "password").send_keys("correct horse battery")
        browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        WebDriverWait(browser, 30).until(lambda b: "journalentry" in b.current_url and "login" not in b.current_url)
        rows = browser.find_elements(By.CSS_SELECTOR, "#result_list tbody tr")
        assert len(rows) == 1 and "token:browser-test" in rows[0].text
        assert browser.find_elements(By.LINK_TEXT, "Add journal entry") == []
        rows[0].find_element(By.LINK_TEXT, str(stored["id"])).click()
        WebDriverWait(browser, 30).until(lambda b: "the admin shows this memory" in b.page_source)

        browser.get(f"{base_url}/admin/palace/palaceoverview/")
        WebDriverWait(browser, 30).until(
            lambda b: b.execute_script("return typeof Chart !== 'undefined' && !!Chart.getChart('tokens-saved-chart')")
        )
        # The chart drew: its canvas holds non-transparent pixels and its dataset has today's savings.
        painted = browser.execute_script(
            "const c = document.getElementById('tokens-saved-chart');"
            "const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;"
            "let n = 0; for (let i = 3; i < d.length; i += 4) { if (d[i] > 0) n++; } return n;"
        )
        saved_today = browser.execute_script(
            "const data = Chart.getChart('tokens-saved-chart').data.datasets[0].data; return data[data.length - 1];"
        )
        assert painted > 1000 and saved_today > 0
        assert "projects" in browser.find_element(By.ID, "counts-wings").text
        assert "the admin shows this memory" in browser.find_element(By.ID, "newest-memories").text
        ARTIFACTS.mkdir(exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "admin-overview.png"))
    assert (ARTIFACTS / "admin-overview.png").stat().st_size > 10_000


def test_it_renders_the_api_docs_with_the_network_cut(tmp_path: Path, offline_browser: object) -> None:
    from selenium.common.exceptions import WebDriverException
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait

    assert isinstance(offline_browser, WebDriver)
    browser = offline_browser
    data_dir = tmp_path / "data"
    migrate(data_dir)
    with http_server(data_dir) as base_url:
        # The cut is real: the CDN django-ninja falls back to cannot be reached from this browser.
        with pytest.raises(WebDriverException, match="ERR_"):
            browser.get("https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui-bundle.js")
        browser.get(f"{base_url}/api/docs")
        WebDriverWait(browser, 30).until(lambda b: b.find_elements(By.CSS_SELECTOR, ".swagger-ui .opblock"))
        assert "palazzo" in browser.find_element(By.CSS_SELECTOR, ".swagger-ui .info .title").text
        operations = " ".join(element.text for element in browser.find_elements(By.CSS_SELECTOR, ".opblock-summary"))
        assert "/ingest" in operations and "/export" in operations and "/healthz" in operations
        loaded = browser.execute_script(
            "return performance.getEntriesByType('resource').map(entry => entry.name).concat([location.href]);"
        )
        assert loaded and all(url.startswith(base_url) for url in loaded), loaded
        ARTIFACTS.mkdir(exist_ok=True)
        browser.save_screenshot(str(ARTIFACTS / "api-docs-offline.png"))


def test_it_leads_from_the_root_to_the_admin_login_and_searches_memories_there(tmp_path: Path, browser: object) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.support.ui import WebDriverWait

    from tests.palazzo_site.test_hook import PALAZZO

    assert isinstance(browser, WebDriver)
    data_dir = tmp_path / "data"
    migrate(data_dir)
    env = server_env(data_dir, DJANGO_SUPERUSER_PASSWORD="correct horse battery")
    for command in (
        ["createsuperuser", "--no-input", "--username", "admin", "--email", "admin@example.com"],
        ["token", "create", "browser-test"],
    ):
        done = subprocess.run([str(PALAZZO), *command], env=env, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
    secret = done.stdout.strip()
    memories = {
        "gear": "The lunar gear of the orrery has 223 teeth, one per synodic month of the saros cycle.",
        "tea": "Green tea is brewed at 80 degrees for two minutes, never with boiling water.",
    }
    with http_server(data_dir) as base_url:
        with token_client(f"{base_url}/mcp", secret) as client:
            ids = {
                name: client.ok(
                    "palace_store",
                    {"text": text, "wing": "projects", "room": "orrery", "hall": "facts", "category": "technical"},
                )["id"]
                for name, text in memories.items()
            }
        browser.get(f"{base_url}/")
        WebDriverWait(browser, 30).until(lambda b: "/admin/login/" in b.current_url)
        assert "palazzo createsuperuser" in browser.find_element(By.ID, "palace-login-help").text
        browser.find_element(By.NAME, "username").send_keys("admin")
        browser.find_element(By.NAME, "password").send_keys("correct horse battery")
        browser.find_element(By.CSS_SELECTOR, "input[type=submit]").click()
        WebDriverWait(browser, 30).until(lambda b: b.current_url.rstrip("/").endswith("/admin"))
        browser.find_element(By.LINK_TEXT, "Palace overview").click()
        search = WebDriverWait(browser, 30).until(
            lambda b: b.find_element(By.CSS_SELECTOR, "#memory-search input[name=q]")
        )
        search.send_keys("how many teeth does the moon wheel have")
        browser.find_element(By.CSS_SELECTOR, "#memory-search input[type=submit]").click()
        rows = WebDriverWait(browser, 30).until(
            lambda b: b.find_elements(By.CSS_SELECTOR, "#memory-search-results tbody tr")
        )
        assert "223 teeth" in rows[0].text and "orrery" in rows[0].text
        rows[0].find_element(By.LINK_TEXT, str(ids["gear"])).click()
        WebDriverWait(browser, 30).until(lambda b: memories["gear"] in b.page_source)
