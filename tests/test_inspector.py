"""The inspector: its data (projection, weights, search) against the library, the server's
read-only contract and errors, and the page in a real headless browser (Debian's chromium)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest

import poincare_index as pi
from poincare_index.cli import main
from poincare_index.inspector import InspectorServer, StoreView, open_store
from poincare_index.inspector.data import (
    RING_SPREAD,
    TIME_RADII,
    choose_layout,
    depth_spread,
    depths,
    disk_coordinates,
)
from poincare_memory import HalfLife, Memory, Product, ValidityWindow

NOW = datetime.now(timezone.utc).replace(microsecond=0)
TOPICS = ["invoice refund", "parcel courier", "password login", "battery firmware", "hill sprints"]


def seed_store(path: Path | None, fillers: int = 0) -> Memory:
    """The seed's validity example (session "seed") plus generated fillers (other sessions)."""
    mem = Memory(decay=Product(HalfLife(hours=24 * 90), ValidityWindow()), path=path)
    mem.add("API rate limit is 100 rps (release 2.3)", id="old", t=NOW - timedelta(days=90),
            valid_until=NOW - timedelta(days=20), metadata={"session": "seed"})  # fmt: skip
    mem.add("API rate limit is 250 rps (release 2.4)", id="new", t=NOW - timedelta(days=20),
            valid_from=NOW - timedelta(days=20), metadata={"session": "seed"})  # fmt: skip
    if fillers:
        rng = np.random.default_rng(5)
        texts = [
            f"note {i} about the {TOPICS[i % 5]} issue, case {rng.integers(10**6)}" for i in range(fillers)
        ]
        ages = rng.uniform(0, 365, fillers)
        mem.add_many(
            texts,
            t=[NOW - timedelta(days=float(a)) for a in ages],
            metadata=[{"session": f"s{i % 7}"} for i in range(fillers)],
        )
    return mem


def get(server: InspectorServer, path: str):
    return json.loads(urllib.request.urlopen(server.url + path, timeout=10).read())


def test_disk_projection_keeps_depth_and_stays_inside():
    rng = np.random.default_rng(0)
    x = pi.project(rng.normal(size=(500, 10)) * 0.5)
    xy = disk_coordinates(x)
    np.testing.assert_allclose(np.linalg.norm(xy, axis=1), np.linalg.norm(x, axis=1), rtol=1e-12)
    assert np.all(np.linalg.norm(xy, axis=1) < 1)


def test_layout_is_time_when_every_depth_is_equal_and_depth_otherwise():
    ring = np.full(1000, 1.5)
    ring[:20] = 0.0  # texts without a word sit at the origin: under 5 %, they do not count
    assert depth_spread(ring) == 0.0 and choose_layout(ring) == "time"
    assert choose_layout(ring + np.linspace(0, 2 * RING_SPREAD, 1000)) == "depth"
    assert choose_layout(np.array([1.5])) == "depth" and choose_layout(np.zeros(0)) == "depth"
    # the default embedder: one ring, hence the time layout; a generated hierarchy: the disk
    mem = seed_store(None, fillers=50)
    view = StoreView(mem)
    assert view.layout == "time" and view.depth_spread < 1e-4
    assert view.meta()["layout"] == "time" and set(view.meta()["layouts"]) == {"depth", "time"}
    index = pi.PoincareFlatIndex(8)
    index.add(pi.datasets.hierarchy(300, 8, seed=1).points, t=NOW)
    assert StoreView(index).layout == "depth"


def test_time_layout_keeps_directions_and_puts_time_on_the_radius():
    mem = seed_store(None, fillers=50)
    view = StoreView(mem)
    depth_xy, time_xy = view.coordinates("depth"), view.coordinates("time")
    np.testing.assert_allclose(depths(depth_xy), depths(depth_xy)[0], atol=1e-6)  # the ring
    radius = np.linalg.norm(time_xy, axis=1)
    unit = depth_xy / np.linalg.norm(depth_xy, axis=1)[:, None]
    np.testing.assert_allclose(time_xy, unit * radius[:, None], atol=1e-12)  # same angles
    order = np.argsort(view.t_us, kind="stable")
    assert np.all(np.diff(radius[order]) >= -1e-12)  # older inside, newer outside
    assert (radius[order[0]], radius[order[-1]]) == pytest.approx(TIME_RADII)
    assert view.points(layout="time")["x"] == np.round(time_xy[:, 0], 5).tolist()
    i = view.row_of["new"]
    assert view.point("new")["depth"] == pytest.approx(depths(depth_xy[i : i + 1])[0], abs=1e-6)
    with pytest.raises(ValueError, match="layout"):
        view.coordinates("spiral")


def test_weights_are_the_policy_and_search_follows_the_seed():
    mem = seed_store(None)
    view = StoreView(mem)
    at = NOW - timedelta(days=40)
    day20 = NOW - timedelta(days=20)
    expected = mem.decay.log_weight([NOW - timedelta(days=90), day20], at, [None, day20], [day20, None])
    np.testing.assert_allclose(view.weights(at)["log_weight"], expected, atol=1e-4)
    assert [r["id"] for r in view.search("rate limit", NOW, 2, None, None)] == ["new", "old"]
    assert [r["id"] for r in view.search("rate limit", at, 2, None, None)] == ["old", "new"]
    hit = view.search("rate limit", NOW, 1, None, None)[0]
    assert hit["score"] == pytest.approx(hit["distance_term"] + hit["depth_term"] + hit["time_term"])
    assert mem["new"].access_count == 0  # the inspector counts nothing unless asked
    assert view.point("old")["valid_until"].startswith(str((NOW - timedelta(days=20)).date()))
    with pytest.raises(KeyError):
        view.point("zz")
    mem.add("a third memory", id="third")
    view.sync(max_age=0)
    assert "third" in view.points()["ids"]


def test_server_is_read_only_and_reports_errors(tmp_path):
    seed_store(tmp_path, fillers=30).close()

    def digest():
        h = hashlib.sha256()
        for p in sorted(tmp_path.rglob("*")):
            if p.is_file() and p.name != "LOCK":
                h.update(p.name.encode() + p.read_bytes())
        return h.hexdigest()

    before = digest()
    view = open_store(tmp_path)
    with InspectorServer(view).start() as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert [
            r["id"] for r in get(server, "api/search?q=rate+limit&k=2&field=session&value=seed")["results"]
        ] == [
            "new",
            "old",
        ]
        assert get(server, "api/points?field=session&value=seed")["ids"] == ["old", "new"]
        # the page's binary arrays: float32, in the order of /api/ids, one generation
        with urllib.request.urlopen(server.url + "api/points?format=f32&layout=time", timeout=10) as res:
            xy = np.frombuffer(res.read(), dtype="<f4").reshape(-1, 2)
            assert res.headers["Content-Type"] == "application/octet-stream"
            generation = res.headers["X-Generation"]
        np.testing.assert_array_equal(xy, view.coordinates("time").astype(np.float32))
        assert get(server, "api/ids")["ids"] == view.ids
        at = urllib.parse.quote((NOW - timedelta(days=40)).isoformat())
        with urllib.request.urlopen(server.url + f"api/weights?format=f32&at={at}", timeout=10) as res:
            logw = np.frombuffer(res.read(), dtype="<f4")
            assert res.headers["X-Generation"] == generation
        expected = view.log_weights(NOW - timedelta(days=40))
        np.testing.assert_allclose(logw, expected.astype(np.float32), rtol=1e-6)
        for bad, code in (
            ("api/point?id=nope", 404),
            ("api/weights?at=yesterday", 400),
            ("api/nothing", 404),
            ("api/points?layout=spiral", 400),
            ("api/points?format=xml", 400),
        ):
            with pytest.raises(urllib.error.HTTPError) as err:
                urllib.request.urlopen(server.url + bad, timeout=10)
            assert err.value.code == code
        req = urllib.request.Request(server.url + "api/search", data=b"{}", method="POST")
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 405
    view.memory.close()
    assert digest() == before  # the server wrote nothing


def test_inspect_command_refuses_missing_and_corrupt_stores(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "missing")]) == 2
    assert "no store" in capsys.readouterr().err
    with Memory(path=tmp_path / "store") as mem:
        mem.add("x", id="x")
    cfg = tmp_path / "store" / "default" / "config.json"
    cfg.write_text(cfg.read_text().replace('"time_coef": 1.0', '"time_coef": 2.0'))
    assert main(["inspect", str(tmp_path / "store")]) == 2
    assert "checksum" in capsys.readouterr().err
    index = pi.PoincareIndex(4)
    index.add(pi.project(np.random.default_rng(1).normal(size=(50, 4)) * 0.3), t=NOW)
    index.save(tmp_path / "idx")
    view = open_store(tmp_path / "idx", half_life_hours=24)
    assert view.meta()["kind"] == "index" and len(view.points()["ids"]) == 50
    assert view.search("3", NOW, 1, None, None)[0]["id"] == "3"


# ---- the page in a real browser ----------------------------------------------------------------


def _browser():
    """A headless Debian chromium driven by selenium, or a skip (a failure when CI is set)."""
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    driver_bin = shutil.which("chromedriver")
    why = None
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        why = "selenium is not installed (pip install '.[test]')"
    if why is None and (chromium is None or driver_bin is None):
        why = "Debian's chromium and its driver are missing (apt-get install chromium chromium-driver)"
    if why is not None:
        if os.environ.get("CI"):
            pytest.fail(f"browser test cannot run in CI: {why}")
        pytest.skip(why)
    options = webdriver.ChromeOptions()
    options.binary_location = chromium
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(executable_path=driver_bin), options=options)


def _wait(driver, script: str, timeout: float = 15.0):
    end = time.time() + timeout
    while time.time() < end:
        value = driver.execute_script(script)
        if value:
            return value
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for: {script}")


@pytest.mark.slow
def test_page_in_headless_chromium(tmp_path):
    driver = _browser()
    seed_store(tmp_path, fillers=10_000).close()
    artifacts = Path(os.environ.get("POINCARE_TEST_ARTIFACTS", "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    view = open_store(tmp_path)
    # The positions wait for the test's word: the page must say it is loading meanwhile.
    release, positions_f32 = threading.Event(), view.positions_f32
    view.positions_f32 = lambda layout="depth": release.wait(30) and positions_f32(layout)
    try:
        with InspectorServer(view).start() as server:
            driver.get(server.url)
            _wait(driver, "return document.getElementById('loading-text').textContent.includes('10,002')")
            assert driver.find_element("id", "loading").is_displayed()
            assert "Loading 10,002 points" in driver.find_element("id", "loading").text
            assert driver.execute_script("return document.body.dataset.ready") is None
            release.set()
            _wait(driver, "return document.body.dataset.ready === '1'")
            assert not driver.find_element("id", "loading").is_displayed()
            driver.refresh()  # timed without the hold
            _wait(driver, "return document.body.dataset.ready === '1'")
            ready_ms = driver.execute_script("return window.inspectorReady")
            first_ms = driver.execute_script("return window.inspectorTimings.firstPoints")
            assert not driver.find_element("id", "loading").is_displayed()
            assert "10,002 memories" in driver.find_element("id", "summary").text
            # the default embedder puts every text on one ring: the time layout, labelled as such
            assert driver.execute_script("return state.layout") == "time"
            assert "Radius: time" in driver.find_element("id", "legend").text
            assert "not the hyperbolic geometry" in driver.find_element("id", "projection").text
            driver.execute_script(
                "const l = document.getElementById('layout'); l.value = 'depth';"
                "l.dispatchEvent(new Event('change'));"
            )
            _wait(driver, "return document.body.dataset.layout === 'depth'")
            assert "hyperbolic depth" in driver.find_element("id", "legend").text
            assert "Projection:" in driver.find_element("id", "projection").text
            radius = driver.execute_script("return Math.hypot(state.xy[0], state.xy[1])")
            assert radius == pytest.approx(float(np.linalg.norm(view.coordinates("depth")[0])), abs=1e-6)
            # scope to the seed's session, search at the slider's time (now)
            driver.execute_script(
                "const f = document.getElementById('field'); f.value = 'session';"
                "f.dispatchEvent(new Event('change'));"
            )
            _wait(driver, "return document.getElementById('value').options.length > 0")
            driver.execute_script(
                "const v = document.getElementById('value'); v.value = 'seed';"
                "v.dispatchEvent(new Event('change'));"
            )
            driver.find_element("id", "query").send_keys("rate limit")
            driver.find_element("id", "search-button").click()
            order = _wait(driver, "return document.getElementById('results').dataset.order")
            assert order.split(",") == ["new", "old"]
            # move the slider 40 days back: the ranking flips, as the seed says
            at = (NOW - timedelta(days=40)).isoformat()
            driver.execute_script(f"window.inspector.setTime({json.dumps(at)})")
            _wait(driver, "return document.body.dataset.updates === '1'")
            order = driver.execute_script("return document.getElementById('results').dataset.order")
            assert order.split(",") == ["old", "new"]
            terms = driver.find_element("css selector", "#results li .terms").text
            assert "distance" in terms and "time" in terms
            # clicking a result shows its fields
            driver.find_element("css selector", "#results li").click()
            _wait(driver, "return document.getElementById('details').dataset.id === 'old'")
            assert "valid_until" in driver.find_element("id", "details").text
            # so does clicking the point itself in the disk
            from selenium.webdriver.common.action_chains import ActionChains

            canvas = driver.find_element("id", "disk")
            px, py = driver.execute_script(
                "const i = state.ids.indexOf('new'); const p = pointCanvas(i);"
                "const r = canvas.getBoundingClientRect();"
                "return [p[0] * r.width / canvas.width - r.width / 2,"
                " p[1] * r.height / canvas.height - r.height / 2];"
            )
            ActionChains(driver).move_to_element_with_offset(canvas, int(px), int(py)).click().perform()
            _wait(driver, "return document.getElementById('details').dataset.id === 'new'")
            # slider timings over a sweep of the year (no query: weights only)
            driver.execute_script("document.getElementById('query').value = '';")
            driver.find_element("id", "search-button").click()
            for i, days in enumerate(range(300, 0, -60), start=2):
                t = (NOW - timedelta(days=days)).isoformat()
                driver.execute_script(f"window.inspector.setTime({json.dumps(t)})")
                _wait(driver, f"return document.body.dataset.updates === '{i}'")
            timings = driver.execute_script("return window.sliderTimings")
            # the screenshot: every session, a search at the slider's time (now)
            driver.execute_script(
                "const f = document.getElementById('field'); f.value = '';"
                "f.dispatchEvent(new Event('change'));"
                f"window.inspector.setTime({json.dumps(NOW.isoformat())});"
            )
            _wait(driver, f"return document.body.dataset.updates === '{len(timings) + 1}'")
            driver.execute_script(
                "const l = document.getElementById('layout'); l.value = 'time';"
                "l.dispatchEvent(new Event('change'));"
            )
            _wait(driver, "return document.body.dataset.layout === 'time'")
            driver.find_element("id", "query").send_keys("invoice refund")
            driver.find_element("id", "search-button").click()
            _wait(
                driver,
                "return (document.getElementById('results').dataset.order || '').split(',').length === 10",
            )
            shot = artifacts / "inspector.png"
            driver.save_screenshot(str(shot))
            assert shot.stat().st_size > 10_000
            print(
                f"\ninspector, 10,002 memories: first points {first_ms:.0f} ms, "
                f"interactive {ready_ms:.0f} ms after navigation; "
                f"slider updates {', '.join(f'{t:.0f}' for t in timings)} ms "
                f"(median {np.median(timings):.0f} ms); screenshot {shot}"
            )
    finally:
        driver.quit()
        view.memory.close()


def test_inspect_command_serves_the_store(tmp_path):
    import subprocess
    import sys

    seed_store(tmp_path, fillers=20).close()
    proc = subprocess.Popen(
        [sys.executable, "-m", "poincare_index.cli", "inspect", str(tmp_path), "--port", "0"],
        stdout=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split(" at ")[1].split()[0]
        assert url.startswith("http://127.0.0.1:")
        # The URL comes first, the store is read meanwhile: a second line says when it is in.
        assert json.loads(urllib.request.urlopen(url + "api/status", timeout=10).read())["state"] in (
            "loading",
            "ready",
        )
        assert proc.stdout.readline().startswith("loaded 22 memories in ")
        meta = json.loads(urllib.request.urlopen(url + "api/meta", timeout=10).read())
        assert meta["count"] == 22 and meta["touch"] is False
        page = urllib.request.urlopen(url, timeout=10).read().decode()
        assert "/static/app.js" in page and "http" not in page.replace("http-equiv", "")
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_allow_writes_counts_accesses(tmp_path):
    seed_store(tmp_path).close()
    view = open_store(tmp_path, allow_writes=True)
    view.search("rate limit", NOW, 2, None, None)
    assert view.memory["new"].access_count == 1
    view.memory.close()
    with Memory(path=tmp_path, read_only=True) as again:
        assert again["new"].access_count == 1


def test_live_view_follows_accesses():
    mem = seed_store(None)
    view = StoreView(mem, touch=True)
    view.search("rate limit", NOW, 2, None, None)
    view.sync(max_age=0)
    assert view.point("new")["access_count"] == 1


def test_the_inspector_of_a_store_another_memory_writes_shows_new_memories(tmp_path):
    writer = seed_store(tmp_path, fillers=5)
    view = open_store(tmp_path)  # read-only, as `poincare-index inspect` opens it
    with InspectorServer(view).start() as server:
        before = get(server, "api/points")["ids"]
        writer.add("a memory written while the page is open", id="late")
        writer.delete("old")
        time.sleep(0.3)  # the view re-reads at most every 0.25 s
        after = get(server, "api/points")["ids"]
        assert "late" in after and "late" not in before
        assert "old" in before and "old" not in after
        hits = get(server, "api/search?q=written+while+the+page&k=1")["results"]
        assert hits[0]["id"] == "late"
    view.memory.close()
    writer.close()


def raw_request(server: InspectorServer, head: bytes) -> tuple[int, dict[str, str]]:
    """Sends a hand-written request (any Host header) and returns (status, headers)."""
    import socket

    host, port = server.httpd.server_address[:2]
    with socket.create_connection((host, port), timeout=10) as sock:
        sock.sendall(head)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    lines = data.split(b"\r\n\r\n", 1)[0].decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    return status, {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}


def test_requests_naming_another_host_are_refused(tmp_path):
    """A DNS-rebinding page reaches 127.0.0.1 under its own name: the Host header gives it away."""
    mem = seed_store(None)
    with InspectorServer(StoreView(mem)).start() as server:
        port = server.httpd.server_address[1]
        for host, status in (
            (f"127.0.0.1:{port}", 200),
            (f"localhost:{port}", 200),
            (f"LOCALHOST:{port}", 200),
            (f"[::1]:{port}", 200),
            (f"evil.example:{port}", 421),
            ("evil.example", 421),
            (f"127.0.0.1:{port + 1}", 421),
            (f"127.0.0.1.evil.example:{port}", 421),
        ):
            got, _ = raw_request(
                server, f"GET /api/meta HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
            )
            assert got == status, host
        got, _ = raw_request(server, b"GET /api/meta HTTP/1.0\r\n\r\n")  # no Host at all
        assert got == 421


def test_every_answer_carries_the_security_headers(tmp_path):
    mem = seed_store(None)
    with InspectorServer(StoreView(mem)).start() as server:
        port = server.httpd.server_address[1]
        for path in ("/", "/static/app.js", "/api/meta", "/api/nothing", "/api/point?id=nope"):
            _, headers = raw_request(
                server, f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n".encode()
            )
            assert headers["x-content-type-options"] == "nosniff", path
            csp = headers["content-security-policy"]
            assert (
                "default-src 'none'" in csp and "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
            )


def test_an_idle_connection_is_closed_and_frees_its_thread(tmp_path):
    """Before: a socket that never sent a request held a server thread for 30 s."""
    import socket

    mem = seed_store(None)
    with InspectorServer(StoreView(mem), connection_timeout=0.3).start() as server:
        host, port = server.httpd.server_address[:2]
        with socket.create_connection((host, port), timeout=10) as idle:
            started = time.monotonic()
            assert idle.recv(1) == b""  # the server hung up on the silent client
            assert time.monotonic() - started < 8
        assert get(server, "api/meta")["count"] == 2
    with pytest.raises(ValueError, match="connection_timeout"):
        InspectorServer(StoreView(mem), connection_timeout=0)


# ---- listening before the store is loaded --------------------------------------------------------


def _status(server: InspectorServer, path: str) -> tuple[int, dict[str, str], bytes]:
    try:
        with urllib.request.urlopen(server.url + path, timeout=10) as res:
            return res.status, dict(res.headers), res.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


def test_the_server_answers_with_a_loading_state_while_its_loader_runs():
    """Before: InspectorServer took only a built view, so `inspect` listened (and showed its URL)
    only once the store was open and projected -- 9.8 s at 200k memories."""
    mem = seed_store(None, fillers=20)
    release, stages = threading.Event(), []

    def loader(report):
        report("opening the test store")
        stages.append("opening")
        assert release.wait(30)
        report("projecting")
        return StoreView(mem)

    with InspectorServer(loader).start() as server:
        _wait_for(lambda: stages)
        assert server.view is None
        code, _, body = _status(server, "api/status")
        status = json.loads(body)
        assert code == 200 and status["state"] == "loading" and status["stage"] == "opening the test store"
        code, headers, body = _status(server, "api/meta")
        assert code == 503 and headers["Retry-After"] == "1" and json.loads(body)["state"] == "loading"
        code, headers, page = _status(server, "")
        text = page.decode()
        # the page says so and reloads itself; no script runs before there is data
        assert code == 200 and 'http-equiv="refresh" content="1"' in text
        assert "opening the test store" in text and "<script" not in text
        assert "http" not in text.replace("http-equiv", "") and headers["Content-Security-Policy"]
        assert _status(server, "static/style.css")[0] == 200
        with pytest.raises(TimeoutError, match="still loading"):
            server.wait_ready(timeout=0.05)
        release.set()
        view = server.wait_ready(timeout=30)
        assert server.view is view and len(view.ids) == 22
        assert json.loads(_status(server, "api/status")[2])["state"] == "ready"
        assert json.loads(_status(server, "api/meta")[2])["count"] == 22
        assert "/static/app.js" in _status(server, "")[2].decode()


def test_a_failed_load_is_served_as_its_error_and_raised_by_wait_ready():
    def loader(report):
        raise pi.IndexFormatError("the test store is damaged")

    with InspectorServer(loader).start() as server:
        with pytest.raises(pi.IndexFormatError, match="damaged"):
            server.wait_ready(timeout=30)
        code, _, body = _status(server, "api/meta")
        assert code == 500 and json.loads(body)["error"] == "IndexFormatError: the test store is damaged"
        code, _, page = _status(server, "")
        assert code == 500 and "the test store is damaged" in page.decode()
        assert "refresh" not in page.decode()  # nothing more will come
    with pytest.raises(TypeError, match="StoreView or a loader"):
        InspectorServer(42)


def test_memory_inspect_returns_before_the_points_are_projected(monkeypatch):
    mem = seed_store(None, fillers=5)
    release = threading.Event()
    refresh = StoreView.refresh

    def held_refresh(self):
        assert release.wait(30)
        refresh(self)

    monkeypatch.setattr(StoreView, "refresh", held_refresh)
    started = time.monotonic()
    server = mem.inspect()
    try:
        assert time.monotonic() - started < 5  # before: it waited for the projection
        assert get(server, "api/status")["state"] == "loading"
        release.set()
        assert len(server.wait_ready(timeout=30).ids) == 7
        assert get(server, "api/meta")["count"] == 7
    finally:
        release.set()
        server.close()


def test_store_loader_refuses_at_once_what_needs_no_loading(tmp_path):
    from poincare_index.inspector import store_loader

    for name in ("a", "b"):
        with Memory(path=tmp_path, namespace=name) as mem:
            mem.add("x", id="x")
    with pytest.raises(ValueError, match=r"several namespaces \(a, b\); choose one"):
        store_loader(tmp_path)
    with pytest.raises(FileNotFoundError, match=r"holds no namespace 'c' \(it holds a, b\)"):
        store_loader(tmp_path, "c")
    stages = []
    view = store_loader(tmp_path, "b")(stages.append)
    assert view.ids == ["x"] and stages[0].startswith("opening the store at") and "1 memories" in stages[1]
    view.memory.close()


def test_inspect_command_reports_a_load_that_fails_after_the_url(tmp_path, capsys):
    seed_store(tmp_path).close()
    with Memory(path=tmp_path):  # holds the writer lock: --allow-writes cannot have it
        assert main(["inspect", str(tmp_path), "--allow-writes", "--port", "0"]) == 2
    captured = capsys.readouterr()
    assert "http://127.0.0.1:" in captured.out
    assert captured.err.startswith("poincare-index inspect: ") and len(captured.err.splitlines()) == 1


def test_principal_axes_are_the_svd_axes_with_a_fixed_sign():
    from poincare_index.inspector.data import principal_axes

    rng = np.random.default_rng(3)
    tangent = rng.normal(size=(3000, 12)) * np.linspace(3.0, 0.5, 12)
    axes = principal_axes(tangent)
    centred = tangent - tangent.mean(axis=0)
    want = np.linalg.svd(centred, full_matrices=False)[2][:2].T
    np.testing.assert_allclose(np.abs(axes.T @ want), np.eye(2), atol=1e-9)
    assert np.all(axes[np.argmax(np.abs(axes), axis=0), [0, 1]] > 0)


def _wait_for(condition, timeout: float = 10.0):
    end = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.01)
