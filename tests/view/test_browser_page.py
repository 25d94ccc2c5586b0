"""The browser gets a private redirect page, never the tokened URL in its arguments
(tests/robustness/test_view_token_argv.py checks the arguments of a real ``view``)."""

from __future__ import annotations

import stat
import webbrowser

from tokentrace.view import browser

URL = "http://127.0.0.1:8123/?token=Abc_123#!/viewer?url=x&y=<1>"


def test_the_redirect_page_is_private_and_leads_to_the_url():
    page = browser.redirect_page(URL)
    try:
        assert stat.S_IMODE(page.stat().st_mode) == 0o600
        text = page.read_text(encoding="utf-8")
        escaped = "http://127.0.0.1:8123/?token=Abc_123#!/viewer?url=x&amp;y=&lt;1&gt;"
        assert f'content="0;url={escaped}"' in text and f'href="{escaped}"' in text
    finally:
        page.unlink()


def test_the_browser_is_given_the_page_and_the_page_goes_with_the_server(monkeypatch):
    opened = []
    monkeypatch.setenv("BROWSER", "true")
    monkeypatch.setattr(webbrowser, "open", lambda uri, new=0: opened.append(uri) or True)
    with browser.open_browser(URL) as ok:
        assert ok and len(opened) == 1
        assert opened[0].startswith("file://") and "Abc_123" not in opened[0]
        page = browser.Path(opened[0].removeprefix("file://"))
        assert "Abc_123" in page.read_text(encoding="utf-8")
    assert not page.exists()
