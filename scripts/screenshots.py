"""Screenshots of each tab of the web app, for the README: docs/screenshots/{run,advanced,results,inside}.png.

    .venv/bin/python scripts/screenshots.py [--out docs/screenshots] [--chromium /usr/bin/chromium]

Starts the app (tests/app_server.py, with a temporary results.db) on a free 127.0.0.1 port, drives
Debian's chromium headless with Playwright, and saves small PNGs (palette-quantized). Advanced mode
is shown with the tests' scripted model (it replays each task's subtly wrong variant, then its
reference solution), labelled as such on the page ("model scripted"): the tiny built-in host writes
nonsense, and Qwen3.5-2B is not reachable offline. Everything else is the real app.
"""
from __future__ import annotations

import argparse
import io
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def save(page, path: Path, clip_height: int = 1500):
    from PIL import Image

    png = page.screenshot(full_page=True)
    img = Image.open(io.BytesIO(png)).convert("RGB")
    if img.height > clip_height:
        img = img.crop((0, 0, img.width, clip_height))
    img = img.quantize(colors=64, method=Image.Quantize.MEDIANCUT)
    img.save(path, optimize=True)
    print(f"{path} ({path.stat().st_size // 1024} KiB, {img.width}x{img.height})")


def pick(page, elem_id, option):
    page.click(f"#{elem_id} input")
    page.click(f"li[role=option][aria-label='{option}']")


def shoot(url: str, out: Path, chromium: str):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=ARGS)
        ctx = b.new_context(viewport={"width": 1280, "height": 900})
        ctx.set_default_timeout(120_000)
        ctx.route("**/*", lambda r: r.continue_() if "//127.0.0.1" in r.request.url else r.abort())
        page = ctx.new_page()
        page.goto(url)
        page.wait_for_selector("#run-button")
        # Run CUDA: the default example
        page.click("#run-button")
        page.wait_for_selector("#run-result [data-verdict]")
        save(page, out / "run.png")
        # Advanced mode: two tasks with the scripted model
        page.click("#model-accordion .label-wrap")
        page.locator("#model-spec textarea").fill("scripted")
        page.locator("#model-spec textarea").press("Tab")
        page.click("#model-load")
        page.wait_for_selector("#model-status [data-model=ready]")
        page.click("#model-accordion .label-wrap")
        page.get_by_role("tab", name="Advanced mode").click()
        for task in ("to_upper", "gcd_pairs"):
            pick(page, "task", task)
            page.wait_for_function("() => document.querySelector('#statement textarea').value.length > 10")
            page.click("#solve-button")
            page.wait_for_function(f"() => (document.querySelector('#solve-out [data-done]') || {{}}).textContent"
                                   f"?.length > 0 && document.querySelector('#solve-out').textContent.includes('task {task}')")
        time.sleep(1)
        save(page, out / "advanced.png")
        page.get_by_role("tab", name="Results").click()
        page.wait_for_selector("#plot-within [aria-roledescription=bar]")
        time.sleep(1)
        save(page, out / "results.png")
        # Inside: record the Run tab's kernel, step to a later snapshot
        page.get_by_role("tab", name="Inside").click()
        page.click("#record-button")
        page.wait_for_selector("#inside-status [data-recorded]")
        box = page.locator("#step-slider input[type=number]")
        box.fill("60")
        box.press("Enter")
        page.wait_for_selector("#step-view [data-snapshot='60']")
        save(page, out / "inside.png", clip_height=1700)
        b.close()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=str(ROOT / "docs" / "screenshots"))
    p.add_argument("--chromium", default=os.environ.get("QWENGPU_CHROMIUM") or shutil.which("chromium")
                   or "/usr/bin/chromium")
    a = p.parse_args()
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="qwengpu-shots-"))
    port = free_port()
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False")
    env.pop("SPACE_ID", None)
    log = open(tmp / "server.log", "wb")
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "app_server.py"), str(port), "--db",
                             str(tmp / "results.db")], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                urllib.request.urlopen(url, timeout=5)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"the app did not start: {(tmp / 'server.log').read_text()[-2000:]}")
                time.sleep(0.5)
        shoot(url, out, a.chromium)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
