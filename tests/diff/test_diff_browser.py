"""diff.html rendered by headless Chromium (Debian's `chromium`), as the report's test does: the
screenshot shows the tables and the change bars, not a blank or broken page."""

from __future__ import annotations

import shutil
import subprocess

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium)")
def test_diff_page_renders_with_its_bars(serve_diffs, tmp_path):
    from PIL import Image

    page = tmp_path / "diff.html"
    page.write_text(serve_diffs["forward"].tables["html"])
    png = tmp_path / "diff.png"
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
               f"--screenshot={png}", "--window-size=1280,2000", page.resolve().as_uri()]
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    image = Image.open(png).convert("RGB")
    assert image.size == (1280, 2000)
    raw = image.tobytes()
    pixels = list(zip(raw[0::3], raw[1::3], raw[2::3]))
    non_white = sum(1 for p in pixels if p != (255, 255, 255)) / len(pixels)
    assert non_white > 0.05, non_white
    # the bars of the budget table: green (#2ca02c) where idle fell
    assert any(abs(r - 44) < 12 and abs(g - 160) < 12 and abs(b - 44) < 12 for r, g, b in pixels[::3])
