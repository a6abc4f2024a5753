"""The docs site in a real headless browser: Debian's chromium driven by Playwright, the site
served by ``mvflow docs serve`` on a free localhost port.

Set-up installs what is missing (``pip install playwright``, ``apt-get install -y chromium``)
and skips with the reason only when no browser can be had. Browsers are never downloaded
by Playwright: it launches the system chromium through its executable path. No Spark.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from click.testing import CliRunner

from compiler.cli import cli

pytestmark = pytest.mark.slow  # a real browser (installed by the set-up when missing)

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
EVIL = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'

FILES = {
    "lineage/s.yml": """
        sources:
          - name: orders
            database: raw
            primary_key: [id]
            position: [ts]
            columns:
              - {name: id, type: bigint}
              - {name: amount, type: "decimal(10,2)", description: Order amount.}
              - {name: ts, type: timestamp}
          - name: rates
            database: raw
            primary_key: [currency]
            dictionary: true
            columns:
              - {name: currency, type: string}
              - {name: rate, type: double}
    """,
    "models/staging/stg.sql": "select o.id, o.amount, o.ts from {{ source('raw', 'orders') }} o",
    "models/marts/totals.sql": """
        {{ config(materialized='table') }}
        select s.id, s.amount * r.rate as amount_eur
        from {{ ref('stg') }} s join {{ source('raw', 'rates') }} r on r.currency = 'EUR'
    """,
    "models/marts/docs.yml": """
        models:
          - name: totals
            description: '%s'
    """ % EVIL,
}


def write_project(root: Path, files: dict[str, str]) -> Path:
    for name, text in {"project.yml": "name: t\n", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(textwrap.dedent(text).lstrip("\n"))
    return root


def _install(command: list[str]) -> bool:
    try:
        return subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=900).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.fixture(scope="session")
def browser():
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        _install([sys.executable, "-m", "pip", "install", "playwright"])
        try:
            from playwright.sync_api import sync_playwright
        except ImportError:
            pytest.skip("playwright is not installed and `pip install playwright` failed")
    if not os.path.exists(CHROMIUM) and shutil.which("apt-get"):
        _install(["apt-get", "install", "-y", "chromium"])
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"no browser: {CHROMIUM} is missing and `apt-get install -y chromium` failed")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield browser
        browser.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = write_project(tmp_path_factory.mktemp("site"), FILES)
    # A derived statement as the MV/fact stages write them, next to the run script.
    derived = root / "target" / "run" / "marts" / "totals" / "key_query_rates.sql"
    derived.parent.mkdir(parents=True)
    derived.write_text("SELECT s.id FROM raw.rates AS r CROSS JOIN staging.stg AS s WHERE r.currency = 'EUR'\n")
    result = CliRunner().invoke(cli, ["--project-dir", str(root), "docs", "generate"])
    assert result.exit_code == 0, result.output
    port = _free_port()
    mvflow = Path(sys.executable).with_name("mvflow")
    server = subprocess.Popen([str(mvflow), "--project-dir", str(root), "docs", "serve", "--port", str(port)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = server.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in line, line
        yield {"url": f"http://127.0.0.1:{port}/", "root": root}
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def page(browser, site):
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(site["url"])
    page.wait_for_selector("svg.graph g.node")
    yield page
    context.close()
    assert not errors, errors


def test_graph_renders_every_node(page):
    ids = sorted(page.locator("svg.graph g.node").evaluate_all("nodes => nodes.map(n => n.getAttribute('data-id'))"))
    assert ids == ["model.stg", "model.totals", "source.raw.orders", "source.raw.rates"]
    assert page.locator("svg.graph path.edge-line").count() == 3
    assert page.locator("svg.graph g.node.kind-table").count() == 1


def expect(locator):
    """Playwright's retrying assertion: it waits until the page has re-rendered after a hash
    change (imported here: the fixtures install playwright where it is missing)."""
    from playwright.sync_api import expect as retrying

    return retrying(locator)


def test_clicking_a_node_opens_its_page(page):
    page.locator('g.node[data-id="model.totals"]').click()
    page.wait_for_url("**#/model/totals")
    expect(page.locator("main h1")).to_have_text(re.compile("^totals"))
    assert page.locator(".sql-block .sql-title").first.inner_text() == "compiled SQL"
    assert page.locator(".sql-block .sql-title", has_text="key query rates").count() == 1
    page.locator(".sql-block summary", has_text="run script").click()
    assert "IDENTIFIER(:build_table)" in page.locator(".sql-block", has_text="run script").locator("pre.sql").inner_text()


def test_column_lineage_links_navigate(page):
    page.goto(page.url.split("#")[0] + "#/model/totals")
    row = page.locator("table.columns tr", has_text="amount_eur")
    row.locator("a.col-ref", has_text="stg.amount").click()
    page.wait_for_url("**#/column/model.stg/amount")
    expect(page.locator("main h1")).to_have_text("stg.amount")
    # Upstream reaches the source column; downstream leads back to the model column.
    page.locator("section", has_text="Upstream").locator("a.col-ref", has_text="raw.orders.amount").click()
    page.wait_for_url("**#/column/source.raw.orders/amount")
    expect(page.locator("main .description")).to_contain_text("Order amount.")
    page.locator("section", has_text="Downstream").locator("a.col-ref", has_text="totals.amount_eur").click()
    page.wait_for_url("**#/column/model.totals/amount_eur")


def test_search_finds_a_column(page):
    page.fill("#search", "amount_e")
    results = page.locator("#search-results li")
    results.first.wait_for()
    assert results.first.locator(".result-label").inner_text() == "totals.amount_eur"
    page.press("#search", "Enter")
    page.wait_for_url("**#/column/model.totals/amount_eur")


def test_script_in_a_description_shows_as_text(page):
    page.goto(page.url.split("#")[0] + "#/model/totals")
    description = page.locator("main p.description")
    expect(description).to_have_text(EVIL)
    assert page.evaluate("window.__pwned") is None
    assert page.locator("main script, main img").count() == 0


def test_site_opens_from_file_url(browser, site):
    page = browser.new_page()
    page.goto((site["root"] / "target" / "docs" / "index.html").as_uri() + "#/source/raw.rates")
    expect(page.locator("main h1")).to_have_text(re.compile(r"^raw\.rates"))
    assert page.locator("table.columns tr", has_text="currency").locator("a.ref", has_text="totals").count() == 1
    page.close()


def test_state_page_shows_what_status_prints(browser, tmp_path):
    from datetime import datetime, timezone

    from compiler.artifacts import write_artifacts
    from compiler.compile import compile_project
    from compiler.docs import generate_docs
    from compiler.kinds.mv.refresh import MvState
    from compiler.project import load_project
    from compiler.state import open_state_store
    from compiler.status import COLUMNS, topic_statuses

    root = write_project(tmp_path, FILES)
    manifest = compile_project(load_project(root))
    write_artifacts(manifest)
    store = open_state_store(manifest.project.target(None).state)
    now = datetime(2024, 5, 3, 12, 0, tzinfo=timezone.utc)
    # topics as the MV runner leaves them: the MV's batch and JSON state, a dictionary, a position input
    for topic, last, state in (("totals", (3,), MvState("a", 10_000, 120, "e7").dump()),
                               ("totals:raw.rates", (2,), '{"fingerprint": "1:2:3"}'),
                               ("totals:raw.orders", ("2024-05-01T11:00:00",), "")):
        lease = store.acquire(topic, "host:1", 60, now)
        store.commit(lease, last, 5, state, now)
        store.release(lease)
    page = browser.new_page()
    page.goto(generate_docs(manifest, now=now).as_uri() + "#/state")
    table = page.locator("main table.status")
    expect(table).to_be_visible()
    headers = table.locator("th").evaluate_all("cells => cells.map(c => c.textContent)")
    cells = table.locator("tbody tr").evaluate_all("rows => rows.map(r => Array.from(r.cells, c => c.textContent))")
    assert headers == [title for title, _ in COLUMNS]
    assert cells == [[getattr(s, field) for _, field in COLUMNS] for s in topic_statuses(store.offsets(), now)]
    state = {row[0]: row[7] for row in cells}
    assert state["totals"] == "slot a, 10,000 rows + 120 in delta" and state["totals:raw.rates"] == "snapshot of batch 2"
    assert "{" not in page.locator("main").inner_text()
    page.close()


def test_a_dbt_models_meta_and_exposures_show_on_its_page(browser, tmp_path):
    from compiler.artifacts import write_artifacts
    from compiler.compile import compile_project
    from compiler.docs import generate_docs
    from compiler.project import load_project

    files = {
        "dbt_project.yml": "name: shop\nprofile: shop\nconfig-version: 2\n",
        "profiles.yml": "shop:\n  target: dev\n  outputs:\n    dev: {type: spark, method: session, host: NA, schema: shop_dev}\n",
        "models/m.sql": "{{ config(meta={'owner': 'data-team'}) }}\nselect 1 as x\n",
        "models/m.yml": """
            version: 2
            models:
              - name: m
                columns: [{name: x, meta: {pii: none}}]
            exposures:
              - {name: kpis, type: dashboard, owner: {name: Ana}, depends_on: ["ref('m')"], url: "javascript:window.__pwned = 3"}
              - {name: app, type: application, depends_on: ["ref('m')"], url: "https://example.com/app"}
        """,
    }
    for name, text in files.items():  # a dbt project: no project.yml
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text).lstrip("\n"))
    root = tmp_path
    manifest = compile_project(load_project(root))
    write_artifacts(manifest)
    page = browser.new_page()
    page.goto(generate_docs(manifest).as_uri() + "#/model/m")
    exposures = page.locator("main table.exposures")
    expect(exposures).to_be_visible()
    rows = exposures.locator("tbody tr").evaluate_all("rows => rows.map(r => Array.from(r.cells, c => c.textContent))")
    assert [row[:3] for row in rows] == [["app", "application", "—"], ["kpis", "dashboard", "Ana"]]
    assert exposures.locator("a").evaluate_all("links => links.map(a => a.href)") == ["https://example.com/app"]
    main = page.locator("main").inner_text()
    assert "meta: owner" in main and "data-team" in main and "meta: pii = none" in main
    assert page.evaluate("window.__pwned") is None
    page.close()
