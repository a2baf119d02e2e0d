"""The real page in headless Chromium (Playwright driving Debian's `chromium`).

One app server per module (tests/app_server.py: the app with a scripted double of the model
registered as "scripted", results in a temporary results.db), on a free 127.0.0.1 port, killed at
the end. Every browser request outside 127.0.0.1 is blocked and recorded, and a test fails if the
page tried one. Without chromium or playwright a developer skips; CI fails.

Covered: an example kernel runs with the "exact" verdict and the reference interpreter's outputs;
a compile error shows nvcc's message with its line; the model backend explains that it is not
built; advanced mode with the scripted model streams a wrong-but-exact attempt then a correct one,
and the Results plot gains the task; the Inside view steps through snapshots; no host file is
served; and ten concurrent sessions all get their own correct results while every advanced-mode
attempt is logged exactly once.
"""
from __future__ import annotations

import math
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = os.environ.get("QWENGPU_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
TIMEOUT_MS = 90_000


def _need(ok: bool, msg: str):
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(msg + " (CI must run the browser tests: .ci/run installs chromium)")
        pytest.skip(msg)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("app")
    port = _free_port()
    db = tmp / "results.db"
    log = open(tmp / "server.log", "wb")
    env = dict(os.environ, GRADIO_ANALYTICS_ENABLED="False", PYTHONUNBUFFERED="1")
    env.pop("SPACE_ID", None)
    env.pop("QWENGPU_PUBLIC", None)
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "app_server.py"), str(port), "--db", str(db)],
                            cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"the app server exited: {(tmp / 'server.log').read_text()[-3000:]}")
            try:
                if _get(url)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("the app server did not start within 120 s")
            time.sleep(0.5)
        yield SimpleNamespace(url=url, db=db, log=tmp / "server.log", proc=proc)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(timeout=15)
        log.close()


@pytest.fixture(scope="module")
def browser():
    _need(Path(CHROMIUM).exists(), f"chromium not found at {CHROMIUM}")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _need(False, "playwright is not installed")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


class Session:
    """One browser context (its own cookies, its own Gradio session) on the app."""

    def __init__(self, browser, url):
        self.outside = []
        self.ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
        self.ctx.set_default_timeout(TIMEOUT_MS)
        self.ctx.route("**/*", self._route)
        self.page = self.ctx.new_page()
        self.page.goto(url)
        self.page.wait_for_selector("#run-button")

    def _route(self, route):
        host = route.request.url.split("/")[2] if "://" in route.request.url else ""
        if host.split(":")[0] in ("127.0.0.1", "localhost") or route.request.url.startswith(("data:", "blob:")):
            route.continue_()
        else:
            self.outside.append(route.request.url)
            route.abort()

    def pick(self, elem_id, option):
        self.page.click(f"#{elem_id} input")
        self.page.click(f"li[role=option][aria-label='{option}']")

    def tab(self, name):
        self.page.get_by_role("tab", name=name).click()

    def close(self):
        self.ctx.close()
        assert not self.outside, f"the page tried to reach beyond 127.0.0.1: {self.outside[:5]}"


@pytest.fixture
def session(browser, server):
    s = Session(browser, server.url)
    yield s
    s.close()


def _table(page, buffer):
    """Rows of an output buffer's table: [index, machine, reference, ...] as strings."""
    return page.eval_on_selector_all(f"#run-result [data-buffer='{buffer}'] tr",
                                     "rows => rows.slice(1).map(r => [...r.children].map(c => c.textContent))")


def _set_example(s, name):
    s.pick("example", name)
    s.page.wait_for_function(f"() => document.querySelector('#source .cm-content').textContent.includes('{name}')")


# ------------------------------------------------------------------------------------------- tests


def test_run_an_example_and_see_the_exact_verdict(session):
    from gpu_layers.interp import run_case
    from gpu_layers.suite import load_suite

    s = session
    _set_example(s, "crc32_bytes")
    s.page.click("#run-button")
    s.page.wait_for_selector("#run-result [data-verdict]")
    box = s.page.locator("#run-result [data-verdict]")
    assert box.get_attribute("data-verdict") == "exact", box.inner_text()
    assert box.get_attribute("data-correct") == "true"
    assert "machine tokens" in s.page.inner_text("#run-status")
    case = [c for c in load_suite() if c.name == "crc32_bytes"][0]
    want = run_case(case).outputs["crc"]
    rows = _table(s.page, "crc")
    assert [int(r[1]) for r in rows] == [int(r[2]) for r in rows] == [int(x) for x in want]


BAD = 'extern "C" __global__ void k(int* a) {\n    int t = threadIdx.x\n    a[t] = t;\n}\n'


def test_a_compile_error_shows_the_message_and_line(session):
    s = session
    s.page.locator("#source .cm-content").fill(BAD)
    s.page.fill("#grid textarea", "1")
    s.page.fill("#block textarea", "32")
    s.page.fill("#args textarea", "a i32* zeros(32) out")
    s.page.click("#run-button")
    s.page.wait_for_selector("#run-result [data-verdict=error]")
    text = s.page.inner_text("#run-result")
    assert 'kernel.cu(3): error: expected a ";"' in text and "line 3 of your source" in text
    assert "Traceback" not in text


def test_the_model_backend_names_a_kernel_the_core_does_not_run(session):
    # shared_histogram in blocks of 256 threads: more than the core's 128; refused by name before
    # any core is loaded, so the run is the reference's alone
    s = session
    _set_example(s, "shared_histogram")
    s.page.fill("#block textarea", "256")
    s.page.get_by_label("Inside the model (the compiled machine core)").check()
    s.page.click("#run-button")
    s.page.wait_for_selector("#run-result [data-verdict=reference-only]")
    text = s.page.inner_text("#run-result")
    assert "the machine core does not run this kernel: 256 threads per block: the machine core v0 runs up to 128" in text


def _bars(page, elem_id):
    return page.eval_on_selector_all(f"#{elem_id} [aria-roledescription=bar]", "els => els.map(e => e.getAttribute('aria-label'))")


def _wait(s, server, selector, what, timeout_ms=45_000):
    """Wait for a selector; on timeout fail with what the page and the server show (for diagnosis)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    try:
        s.page.wait_for_selector(selector, timeout=timeout_ms)
    except PlaywrightTimeout:
        shot = server.log.with_name(f"failure-{int(time.time())}.png")
        s.page.screenshot(path=str(shot), full_page=True)
        def text(sel, html=False):
            return s.page.evaluate(f"() => {{ const e = document.querySelector({sel!r}); "
                                   f"return e ? e.{'innerHTML' if html else 'textContent'} : null; }}")

        pytest.fail(f"{what}: {selector!r} not found in {timeout_ms / 1000:.0f} s; model status "
                    f"{text('#model-status', True)!r}; model field "
                    f"{s.page.evaluate('() => document.querySelector(`#model-spec textarea`)?.value')!r}; "
                    f"results summary {text('#results-summary')!r}; bars {_bars(s.page, 'plot-within')}; "
                    f"screenshot {shot}; server log: {server.log.read_text()[-3000:]}")


def _use_scripted(s, server):
    """Choose the scripted model in the Model panel and load it (the server names what it loaded)."""
    s.page.click("#model-accordion .label-wrap")
    box = s.page.locator("#model-spec textarea")
    box.wait_for()
    # The panel mounts its field when first opened and then sets its initial value ("tiny"): a value
    # typed before that lands is overwritten (seen under load), so type once it has landed, and check.
    s.page.wait_for_function("() => document.querySelector('#model-spec textarea').value === 'tiny'")
    for _ in range(5):
        box.fill("scripted")
        box.press("Tab")
        time.sleep(0.3)
        if box.input_value() == "scripted":
            break
    s.page.click("#model-load")
    _wait(s, server, "#model-status [data-model=ready][data-spec=scripted]", "the scripted model did not load")


def _solve(s, task, attempts=3):
    s.tab("Advanced mode")
    s.pick("task", task)
    s.page.wait_for_function("() => document.querySelector('#statement textarea').value.length > 10")
    s.page.click("#solve-button")
    s.page.wait_for_selector("#solve-out [data-done], #solve-out [data-where=advanced]")
    err = s.page.locator("#solve-out [data-where=advanced]")
    assert err.count() == 0, err.inner_text()
    cards = s.page.eval_on_selector_all(
        "#solve-out [data-attempt]", "els => els.map(e => [e.dataset.attempt, e.dataset.verdict, e.dataset.exact, "
                                     "e.dataset.correct])")
    done = s.page.locator("#solve-out [data-done]")
    return cards, done.get_attribute("data-run-id"), int(done.get_attribute("data-attempts"))


def test_advanced_mode_streams_attempts_and_updates_the_results_plot(session, server):
    s = session
    s.tab("Results")
    s.page.wait_for_selector("#results-summary [data-outcomes]")
    assert not any("gcd_pairs" in (b or "") for b in _bars(s.page, "plot-within"))
    _use_scripted(s, server)
    cards, run_id, n = _solve(s, "gcd_pairs")
    assert cards == [["1", "wrong", "true", "false"], ["2", "correct", "true", "true"]]
    text = s.page.inner_text("#solve-out")
    assert "executed exactly" in text and "The code the model wrote" in text and "gcd_pairs" in text
    s.tab("Results")
    _wait(s, server, "#results-summary [data-outcomes='1']", "the Results tab did not refresh after the solve")
    _wait(s, server, "#plot-within [aria-roledescription=bar][aria-label*=gcd_pairs]",
          "the within-N plot did not gain the task's bar")
    assert "task: gcd_pairs; within N: 1" in _bars(s.page, "plot-within")
    assert "task: gcd_pairs; first try: 0" in _bars(s.page, "plot-first")
    with sqlite3.connect(server.db) as c:
        rows = c.execute("SELECT attempt, verdict, executed_exactly, correct FROM attempts WHERE run_id = ? "
                         "ORDER BY attempt", (run_id,)).fetchall()
    assert rows == [(1, "wrong", 1, 0), (2, "correct", 1, 1)]
    with s.page.expect_download() as dl:           # CSV export of every attempt
        s.page.click("#csv-attempts")
    csv = Path(dl.value.path()).read_text()
    assert csv.splitlines()[0].startswith("id,run_id,") and csv.count(run_id) == 2


def test_inside_view_steps_through_the_run(session):
    s = session
    s.tab("Inside")
    s.page.click("#record-button")
    s.page.wait_for_selector("#inside-status [data-recorded]")
    assert "machine code" in s.page.inner_text("#inside-status")
    view = s.page.locator("#step-view [data-snapshot]")
    assert view.get_attribute("data-snapshot") == "0"
    s.page.click("#step-next")
    s.page.wait_for_selector("#step-view [data-snapshot='1']")
    box = s.page.locator("#step-slider input[type=number]")
    box.fill("40")
    box.press("Enter")
    s.page.wait_for_selector("#step-view [data-snapshot='40']")
    step40 = int(s.page.get_attribute("#step-view [data-snapshot]", "data-step"))
    assert step40 >= 40
    assert s.page.locator("#step-view [data-registers]").count() == 1
    assert "<wi 0" in s.page.inner_text("#step-view [data-tokens]")
    s.page.click("#step-prev")
    s.page.wait_for_selector("#step-view [data-snapshot='39']")
    assert int(s.page.get_attribute("#step-view [data-snapshot]", "data-step")) < step40
    assert s.page.locator("#step-view td.qg-w, #step-view td.qg-c").count() > 0
    from webapp.render import CORE_LAYERS
    assert f"{CORE_LAYERS} layers" in s.page.inner_text("#layer-map")


def test_no_host_file_is_served(server):
    for path in ("gradio_api/file=/etc/passwd", "gradio_api/file=app.py", f"gradio_api/file={ROOT / 'app.py'}",
                 f"gradio_api/file={server.db}", "gradio_api/file=../../../../etc/passwd", "file=/etc/passwd",
                 "static/../app.py", "assets/../../app.py"):
        code, body = _get(server.url + path)
        assert code in (403, 404), path
        assert b"root:" not in body and b"build_app" not in body


def test_ten_concurrent_sessions(browser, server):
    """Ten sessions at once: each runs isqrt_u32 on its own inputs and must see its own exact, correct
    results; then each solves a task with the scripted model, and the database must hold exactly the
    attempts the pages showed, each once."""
    sessions = [Session(browser, server.url) for _ in range(10)]
    try:
        for k, s in enumerate(sessions):
            s.page.fill("#args textarea", f"in u32* range({1000 * k * k}, {1000 * k * k + 32})\n"
                                          "root u32* zeros(32) out\nrem u32* zeros(32) out")
        for s in sessions:
            s.page.click("#run-button")
        for k, s in enumerate(sessions):
            s.page.wait_for_selector("#run-result [data-verdict]")
            v = s.page.locator("#run-result [data-verdict]")
            assert v.get_attribute("data-verdict") == "exact", v.inner_text()
            xs = range(1000 * k * k, 1000 * k * k + 32)
            assert [int(r[1]) for r in _table(s.page, "root")] == [math.isqrt(x) for x in xs]
            assert [int(r[2]) for r in _table(s.page, "rem")] == [x - math.isqrt(x) ** 2 for x in xs]
        tasks = ["vec_add", "gcd_pairs", "to_upper"]
        for k, s in enumerate(sessions):
            _use_scripted(s, server)
            s.tab("Advanced mode")
            s.pick("task", tasks[k % 3])
            s.page.wait_for_function("() => document.querySelector('#statement textarea').value.length > 10")
        for s in sessions:
            s.page.click("#solve-button")
        shown = {}
        for s in sessions:
            s.page.wait_for_selector("#solve-out [data-done], #solve-out [data-where=advanced]")
            done = s.page.locator("#solve-out [data-done]")
            assert done.count() == 1, s.page.inner_text("#solve-out")
            shown[done.get_attribute("data-run-id")] = int(done.get_attribute("data-attempts"))
        assert len(shown) == 10 and all(n == 2 for n in shown.values())
        with sqlite3.connect(server.db) as c:
            q = ",".join("?" * len(shown))
            rows = c.execute(f"SELECT run_id, attempt, attempt_uid FROM attempts WHERE run_id IN ({q})",
                             list(shown)).fetchall()
        assert len(rows) == sum(shown.values()) == len({r[2] for r in rows})
        for run_id, n in shown.items():
            assert sorted(a for r, a, _ in rows if r == run_id) == list(range(1, n + 1))
    finally:
        for s in sessions:
            s.close()
