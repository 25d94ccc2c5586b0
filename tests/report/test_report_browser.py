"""report.html rendered by headless Chromium (Debian's `chromium`): the screenshot shows the
page with its embedded plots, not a blank or broken page."""

from __future__ import annotations

import shutil
import subprocess

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _screenshot(page, tmp_path):
    png = tmp_path / "report.png"
    command = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking", "--disable-component-update",
               "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
               f"--screenshot={png}", "--window-size=1280,2000", page.resolve().as_uri()]
    subprocess.run(command, check=True, capture_output=True, timeout=120)
    return png


@pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary (apt-get install chromium)")
def test_report_renders_with_its_images(analyzed_t39, tmp_path):
    from PIL import Image

    image = Image.open(_screenshot(analyzed_t39.output / "report.html", tmp_path)).convert("RGB")
    assert image.size == (1280, 2000)
    raw = image.tobytes()
    pixels = list(zip(raw[0::3], raw[1::3], raw[2::3]))
    colours = len(set(pixels))
    non_white = sum(1 for p in pixels if p != (255, 255, 255)) / len(pixels)
    # Text alone gives a few hundred colours; the figures' bars, heatmap and lines give more.
    assert colours > 1000, colours
    assert non_white > 0.10, non_white
    # The timeline's gap colour (host_late red, #d62728) is on screen: the SVG figures drawn.
    assert any(abs(r - 214) < 12 and abs(g - 39) < 12 and abs(b - 40) < 12
               for r, g, b in pixels[::7])
