"""The live refresh tries every gpuhunt online provider with the user's credentials and says why it could not
reach the others. A fake gpuhunt module stands in for the real one: no network, no credentials needed."""

from __future__ import annotations

import sys
import types
from datetime import datetime, timezone

import pytest

from cheaptune.catalog import live

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)


class MissingCredsError(Exception):
    pass


class GPUHuntError(Exception):
    pass


def item(gpu, price, spot=False):
    return types.SimpleNamespace(price=price, gpu_count=1, gpu_name=gpu, gpu_memory=80, spot=spot,
                                 location="fra1", instance_name=f"1x-{gpu}{'-spot' if spot else ''}")


class Catalog:
    def __init__(self, balance_resources=True, auto_reload=True):
        self.catalog = {}  # no offline provider in this fake
        self.providers = []

    def load(self):
        raise GPUHuntError("Failed to load catalogs of all providers")  # offline: unreachable here

    def add_provider(self, provider):
        self.providers.append(provider)

    def query(self, provider):
        return [i for p in self.providers if provider == p.NAME for i in p.get()]


def provider_module(monkeypatch, name, from_env):
    cls = type(f"{name.title()}Provider", (), {"NAME": name, "from_env": classmethod(from_env)})
    module = types.ModuleType(f"gpuhunt.providers.{name}")
    setattr(module, cls.__name__, cls)
    monkeypatch.setitem(sys.modules, module.__name__, module)


@pytest.fixture
def fake_gpuhunt(monkeypatch):
    gh = types.ModuleType("gpuhunt")
    gh.Catalog, gh.GPUHuntError, gh.MissingCredsError = Catalog, GPUHuntError, MissingCredsError
    providers = types.ModuleType("gpuhunt.providers")
    gh.providers = providers
    monkeypatch.setitem(sys.modules, "gpuhunt", gh)
    monkeypatch.setitem(sys.modules, "gpuhunt.providers", providers)

    def vultr(cls):  # credentials set: a working provider
        p = cls()
        p.get = lambda: [item("H100", 2.30), item("L40S", 1.20), item("H100", 0.0)]
        return p

    def crusoe(cls):
        raise MissingCredsError("Set the CRUSOE_ACCESS_KEY environment variable")

    def seeweb(cls):
        p = cls()
        p.get = lambda: (_ for _ in ()).throw(ConnectionError("seeweb.it unreachable"))
        return p

    provider_module(monkeypatch, "vultr", vultr)
    provider_module(monkeypatch, "crusoe", crusoe)
    provider_module(monkeypatch, "seeweb", seeweb)
    monkeypatch.setattr(live, "_vast", lambda date, defaults: live.ProviderResult(error="vast: served elsewhere"))
    return gh


def test_every_online_provider_is_tried_and_each_unreached_one_says_why(fake_gpuhunt):
    results = live.fetch("2026-12-01", online=("vultr", "crusoe", "seeweb", "digitalocean", "vastai"))
    assert {o.gpu for o in results["vultr"].offers} == {"H100", "L40S"}
    assert results["vultr"].dropped["zero, negative or missing price"] == 1
    h100 = next(o for o in results["vultr"].offers if o.gpu == "H100")
    assert (h100.date, h100.read, h100.source) == ("2026-12-01", "2026-12-01", "gpuhunt vultr live query")
    assert h100.billing_unit_s == 3600  # the snapshot's own Vultr billing facts (per hour, 1 h minimum)
    assert results["crusoe"].error == "not queried: no credentials (Set the CRUSOE_ACCESS_KEY environment variable)"
    assert results["seeweb"].error == "ConnectionError: seeweb.it unreachable"
    assert results["digitalocean"].error == "not queried: this gpuhunt version has no such provider"
    assert results["vast"].error == "vast: served elsewhere"


def test_the_cache_keeps_the_reached_providers_and_reports_the_others(fake_gpuhunt, tmp_path, monkeypatch):
    monkeypatch.setenv("CHEAPTUNE_HOME", str(tmp_path))
    monkeypatch.setattr(live, "ONLINE", ("vultr", "crusoe"))
    meta, results = live.refresh(NOW)
    assert meta["providers"]["vultr"]["rows"] == 2 and meta["providers"]["vultr"]["error"] is None
    assert "no credentials" in meta["providers"]["crusoe"]["error"]


def test_our_online_list_is_gpuhunt_s_own():
    catalog = pytest.importorskip("gpuhunt._internal.catalog", reason="the .[live] extra is not installed")
    assert set(live.ONLINE) == set(catalog.ONLINE_PROVIDERS)
