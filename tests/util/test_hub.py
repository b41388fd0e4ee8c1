"""The hub switch is read when asked (not at import), and the datasets library's own switch counts only there."""

from __future__ import annotations

from cheaptune.util.hub import offline


def test_offline_reads_the_variables_at_call_time(monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    assert not offline() and not offline(datasets=True)
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    assert not offline() and offline(datasets=True)
    for value, on in (("ON", True), ("yes", True), ("0", False), ("", False)):
        monkeypatch.setenv("HF_HUB_OFFLINE", value)
        assert offline() is on
