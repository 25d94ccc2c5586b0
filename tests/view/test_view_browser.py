"""The bundled Perfetto UI in headless Chromium, served by `tokentrace view --no-browser --port P`
(a subprocess): it loads the annotated sample by itself, a link to a stall (gap_url) opens the
"GPU idle (tokentrace)" track at that stall with its slice selected (the page's text: track
name, slice name and args), the screenshot shows the track's row with the stall drawn, and
nothing is fetched from outside 127.0.0.1."""

from __future__ import annotations

import base64
import io
import time
from urllib.request import urlopen

from tokentrace.annotate import TRACK_NAME, gap_url
from tokentrace.catalog import run_query

LOAD_TIMEOUT_S = 120
TITLE_BOX_JS = f"""(() => {{
  const hits = [...document.querySelectorAll('*')].filter(
    e => e.children.length === 0 && e.textContent.trim().startsWith({TRACK_NAME!r}));
  if (!hits.length) return null;
  const r = hits[0].getBoundingClientRect();
  return [r.left, r.top, r.right, r.bottom];
}})()"""


def _first_stall(merged_t39):
    _, plain = merged_t39
    gaps = run_query(plain, "gap_causes")
    stall = gaps[gaps.is_stall == 1].iloc[0]
    return int(stall.ts), int(stall.dur), f"{stall.cause_kind}: {stall.cause_function}"


def _wait_for_text(chromium, *needles: str) -> float:
    start = time.monotonic()
    while time.monotonic() - start < LOAD_TIMEOUT_S:
        chromium.pump(0.5)
        text = chromium.evaluate("document.body ? document.body.innerText : ''") or ""
        if all(n in text for n in needles):
            return time.monotonic() - start
    raise AssertionError(f"the UI never showed {needles}; page text: {text[:2000]!r}")


def _screenshot(chromium, path):
    from PIL import Image

    data = base64.b64decode(chromium.page("Page.captureScreenshot", {"format": "png"})["data"])
    path.write_bytes(data)
    return Image.open(io.BytesIO(data)).convert("RGB")


def test_ui_loads_the_annotated_trace_at_a_stall(annotated_sample, merged_t39, view_process,
                                                 chromium, tmp_path):
    server = view_process(annotated_sample)
    base = f"http://127.0.0.1:{server.port}/"
    assert urlopen(server.url, timeout=10).status == 200
    assert urlopen(f"{base}localtrace?token={server.token}", timeout=30).read() == annotated_sample.read_bytes()
    ts, dur, name = _first_stall(merged_t39)

    # the printed URL's token: the UI's own fetches (the trace, file_info) carry its cookie
    chromium.page("Page.navigate", {"url": gap_url(ts, dur, server.url)})
    seconds = _wait_for_text(chromium, TRACK_NAME, name, "time.sleep", "host_late")
    chromium.pump(2.0)  # let the timeline paint
    image = _screenshot(chromium, tmp_path / "ui.png")
    print(f"UI showed the stall {seconds:.1f} s after navigating")

    # The screenshot is the UI, not a blank or error page.
    assert image.size == (1600, 1000)
    small = image.resize((400, 250))
    assert len(set(small.get_flattened_data() if hasattr(small, "get_flattened_data") else small.getdata())) > 150
    # The track's row is on screen with the stall drawn in it: the UI centres on the selected
    # slice, so its row holds a long run of one colour (the slice; not white, not background).
    left, top, right, bottom = chromium.evaluate(TITLE_BOX_JS)
    assert 0 <= top < bottom <= 1000, (top, bottom)
    run, colour = max(_longest_run(image, y, start=int(right)) for y in range(int(top), int(bottom) + 6))
    assert run >= 150 and colour not in {(255, 255, 255), image.getpixel((5, 990))}, (run, colour)

    # The trace came from our server, and nothing from elsewhere.
    served = server.requests()
    for path in ("/?token=[hidden]", "/localtrace", "/vizviewer_info", "/file_info"):
        assert f"127.0.0.1 GET {path} 200" in served, served
    _assert_offline(chromium, base)


def _longest_run(image, y: int, start: int) -> tuple[int, tuple]:
    """The longest run of one colour in row ``y`` right of ``start``, white excluded."""
    best, colour, length, previous = 0, None, 0, None
    for x in range(start, image.size[0]):
        pixel = image.getpixel((x, y))
        length = length + 1 if pixel == previous else 1
        previous = pixel
        if pixel != (255, 255, 255) and length > best:
            best, colour = length, pixel
    return best, colour


def _assert_offline(chromium, base: str) -> None:
    """Every request is to this server (or the UI's probe of a local trace_processor_shell on
    127.0.0.1:9001), or was refused by the browser before it left (the page's CSP)."""
    local = (base, "http://127.0.0.1:9001/", "data:", "blob:", "about:")
    blocked = {e["requestId"] for e in chromium.of("Network.loadingFailed") if e.get("blockedReason") == "csp"}
    sent = chromium.of("Network.requestWillBeSent")
    assert len(sent) > 10
    outside = [e["request"]["url"] for e in sent
               if not e["request"]["url"].startswith(local) and e["requestId"] not in blocked]
    assert outside == []
    answered = [e["response"]["url"] for e in chromium.of("Network.responseReceived")]
    assert answered and all(url.startswith(local) for url in answered)
