"""Every page and JSON endpoint of `cheaptune ui` through Starlette's TestClient."""

from __future__ import annotations

import sqlite3

import pytest
from markupsafe import escape
from starlette.testclient import TestClient

from cheaptune.plan import render
from cheaptune.runs.registry import Registry
from cheaptune.ui.app import create_app
from cheaptune.ui.plans import find_plans
from tests.plan.test_render_save import result
from tests.ui.conftest import HOSTILE


@pytest.fixture
def client(registry, plans) -> TestClient:
    return TestClient(create_app(registry, [plans]))


def _ids(registry) -> dict[str, str]:
    return {r["name"]: r["id"] for r in Registry(registry).list_runs()}


def test_runs_page_lists_runs_and_escapes_the_hostile_name(client, registry):
    page = client.get("/runs")
    assert page.status_code == 200
    assert "lora-a" in page.text and "$0.75" in page.text and "A100-80GB" in page.text
    assert HOSTILE not in page.text and str(escape(HOSTILE)) in page.text
    assert client.get("/").url.path == "/runs"


def test_runs_json_and_filters(client):
    rows = client.get("/api/runs").json()["rows"]
    assert {r["status"] for r in rows} == {"finished", "running"}
    only = client.get("/api/runs", params={"method": "qlora"}).json()["rows"]
    assert [r["cells"][0] for r in only] == [HOSTILE]  # JSON carries text; the page's script sets textContent
    assert client.get("/api/runs", params={"q": "lora-"}).json()["rows"][0]["cells"][5] == "$0.75"
    assert client.get("/api/runs", params={"provider": "nowhere"}).json()["rows"] == []


def test_run_page_shows_probe_events_eval_and_commands(client, registry):
    rid = _ids(registry)["lora-a"]
    page = client.get(f"/runs/{rid}")
    assert page.status_code == 200
    assert "+10%" in page.text and "-10%" in page.text  # memory over, speed under the prediction
    assert "half the budget spent" in page.text and "exact_match" in page.text
    assert f"cheaptune export {rid} --to merged" in page.text and "--resume auto" in page.text
    data = client.get(f"/api/runs/{rid}").json()
    assert [p["cost_usd"] for p in data["series"]] == [0.25, 0.5, 0.75]
    assert data["budget_usd"] == 5.0 and data["problems"] == []


def test_missing_run_folder_is_a_message_on_that_run_only(client, registry):
    ids = _ids(registry)
    bad = client.get(f"/runs/{ids[HOSTILE]}")
    assert bad.status_code == 200 and "is missing (moved or deleted)" in bad.text
    assert HOSTILE not in bad.text and "<img" not in bad.text and str(escape(HOSTILE)) in bad.text
    assert "is missing" not in client.get(f"/runs/{ids['lora-a']}").text


def test_corrupt_record_shows_on_that_run_only(client, registry):
    rid = _ids(registry)["lora-a"]
    with sqlite3.connect(registry) as con:
        con.execute("UPDATE runs SET config_json = '{not json' WHERE id = ?", (rid,))
        con.execute("UPDATE events SET detail = '[broken' WHERE run_id = ? AND kind = 'budget_50'", (rid,))
    con.close()
    rows = {r["id"]: r for r in client.get("/api/runs").json()["rows"]}
    assert "not valid JSON" in rows[rid]["problem"]
    assert [r["problem"] for i, r in rows.items() if i != rid] == [None]
    page = client.get(f"/runs/{rid}")
    assert page.status_code == 200 and "detail is not valid JSON" in page.text


def test_unknown_ids_are_404(client):
    assert client.get("/runs/no-such-run").status_code == 404
    assert "no-such-run" in client.get("/runs/no-such-run").text
    missing = client.get("/api/runs/no-such-run")
    assert missing.status_code == 404 and "no run 'no-such-run'" in missing.json()["error"]
    assert client.get("/plans/ffffffffffff").status_code == 404
    assert client.get("/compare", params={"ids": "nope"}).status_code == 404
    assert client.get("/nothing/here").status_code == 404


def test_compare_page_and_json(client, registry):
    ids = list(_ids(registry).values())
    page = client.get("/compare", params=[("ids", i) for i in ids])
    assert page.status_code == 200 and "lora-a" in page.text and HOSTILE not in page.text
    runs = client.get("/api/compare", params=[("ids", i) for i in ids]).json()["runs"]
    assert [r["cost_usd"] for r in runs] == [0.75, None]  # cheapest first, unpriced last
    assert runs[0]["quality"] == 0.8


def test_plan_pages_render_like_plan_markdown(client, plans):
    refs = {r.path.name: r.id for r in find_plans([plans])}
    assert set(refs) == {"plan.yaml", "plan.json", "broken.json"}  # the Axolotl config is not a plan
    listing = client.get("/plans").text
    assert "plan.yaml" in listing and "config.yaml" not in listing
    md = render.to_markdown(result())
    doc = client.get(f"/api/plans/{refs['plan.json']}").json()
    for row in doc["rows"]:
        assert "| " + " | ".join(row) + " |" in md  # the same cells as `plan --markdown`
    assert [name for name, _ in doc["sections"]][0] == "Recommendation"
    assert all(b["compute"] > 0 for b in doc["bars"])
    page = client.get(f"/plans/{refs['plan.json']}").text
    assert "Why not the others" in page and "plan-chart" in page
    saved = client.get(f"/api/plans/{refs['plan.yaml']}").json()
    assert saved["rows"][0][0] == "recommended" and saved["bars"][0]["compute"] > 0
    broken = client.get(f"/plans/{refs['broken.json']}")
    assert broken.status_code == 200 and "not a complete" in broken.text


def test_static_files_and_plotly_served_locally(client):
    js = client.get("/static/plotly.min.js")
    assert js.status_code == 200 and len(js.content) > 1_000_000 and b"plotly" in js.content[:2000].lower()
    assert "Plotly.react" in client.get("/static/app.js").text
    assert "default-src 'self'" in client.get("/runs").headers["content-security-policy"]


def test_missing_registry_is_a_message_not_an_error(tmp_path, plans):
    c = TestClient(create_app(tmp_path / "absent.sqlite", [plans]))
    page = c.get("/runs")
    assert page.status_code == 200 and "no run registry" in page.text
    assert c.get("/api/runs").status_code == 503
    assert c.get("/runs/x").status_code == 503
    assert not (tmp_path / "absent.sqlite").exists()  # read-only: nothing created


def test_reads_while_a_writer_holds_the_lock(client, registry):
    rid = _ids(registry)["lora-a"]
    writer = sqlite3.connect(registry)
    writer.execute("BEGIN IMMEDIATE")
    writer.execute("UPDATE runs SET steps = 99 WHERE id = ?", (rid,))
    try:
        assert client.get("/runs").status_code == 200
        assert client.get(f"/api/runs/{rid}").status_code == 200
    finally:
        writer.rollback()
        writer.close()


def test_token_is_checked_on_every_request(registry, plans):
    c = TestClient(create_app(registry, [plans], token="s3cret-token"))
    for url in ("/runs", "/api/runs", "/static/app.js", "/static/plotly.min.js", "/plans", "/nothing"):
        assert c.get(url).status_code == 403, url
    assert c.get("/runs", params={"token": "wrong-token"}).status_code == 403
    assert c.get("/api/runs", headers={"Authorization": "Bearer s3cret-token"}).status_code == 200
    first = c.get("/runs", params={"token": "s3cret-token"})
    assert first.status_code == 200
    assert c.get("/api/runs").status_code == 200  # the cookie the first visit set


def test_run_page_events_read_as_sentences(client, registry):
    run = Registry(registry).start_run(name="preempted-run", model="m")
    run.event("preempted", {"reason": "SIGTERM", "step": 5, "save_s": 0.5})
    run.event("starvation", {"message": "training waits for data 30% of the time", "step": 6})
    run.finish("preempted")
    page = client.get(f"/runs/{run.id}")
    assert "preempted at step 5 (SIGTERM); checkpoint saved in 0.50 s" in page.text
    assert "&#34;reason&#34;" not in page.text and '"reason"' not in page.text  # no raw JSON
    assert "training waits for data 30% of the time" in page.text
