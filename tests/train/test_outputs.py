"""Outputs of a finished run (adapter, tokenizer, summary, merge, samples, registry) and the other exits."""

from __future__ import annotations

import http.server
import json
import math
import threading

import torch
from safetensors.torch import load_file

from cheaptune.train import checkpoints as ck


def _args(model, data, out, *extra):
    return ["train", "--model", str(model), "--data", str(data), "-o", str(out), "--max-steps", "4",
            "--seq-len", "64", "--micro-batch", "2", "--device", "cpu", *extra]


def test_lora_outputs_summary_merge_samples_registry(tiny_model_dir, chat_file, tmp_path, run_cli):
    out, ckpts = tmp_path / "out", tmp_path / "bucket"
    cfg = tmp_path / "train.yaml"
    cfg.write_text("sample_prompts: ['What is 3 plus 3?']\nsample_max_new_tokens: 8\nval_set_size: 0.25\n")
    code, stdout, err = run_cli(*_args(tiny_model_dir, chat_file, out, "--merge", "--save-steps", "2",
                                       "--checkpoint-dir", str(ckpts), "--json"), str(cfg))
    assert code == 0, err
    s = json.loads(stdout)
    assert s == json.loads((out / "training_summary.json").read_text())
    assert s["steps"] == 4 and s["tokens"] > 0 and s["tokens_per_s"] > 0 and s["peak_rss_bytes"] > 0
    assert math.isclose(s["final_eval_perplexity"], math.exp(s["final_eval_loss"]))
    assert [h["step"] for h in s["loss_history"]] == [1, 2, 3, 4]
    assert s["final_train_loss"] == s["loss_history"][-1]["loss"]
    assert len(s["samples"]["before"]) == 1 and len(s["samples"]["after"]) == 1
    assert "step 4/4" in err and "tok/s" in err and "ETA" in err  # the progress line

    # adapter + tokenizer in output_dir; checkpoints (verified) only in the separate checkpoint dir
    assert (out / "adapter_model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert [p.name for p in ck.list_checkpoints(ckpts)] == ["checkpoint-2", "checkpoint-4"]
    assert all(ck.verify(p) is None for p in ck.list_checkpoints(ckpts)) and not ck.list_checkpoints(out)

    # merged = base + B @ A * alpha/r on a targeted weight
    merged = load_file(out / "merged" / "model.safetensors")
    base = load_file(tiny_model_dir / "model.safetensors")
    adapter = load_file(out / "adapter_model.safetensors")
    key = "model.layers.0.self_attn.q_proj.weight"
    a = adapter[next(k for k in adapter if "layers.0.self_attn.q_proj.lora_A" in k)]
    b = adapter[next(k for k in adapter if "layers.0.self_attn.q_proj.lora_B" in k)]
    assert torch.allclose(merged[key], base[key] + (b @ a) * (32 / 16), atol=1e-5)
    assert not torch.equal(merged[key], base[key])

    from cheaptune.runs.registry import Registry

    run_id = json.loads((ckpts / "cheaptune_run.json").read_text())["run_id"]
    row = Registry().get_run(run_id)
    assert row["status"] == "finished" and row["steps"] == 4 and row["method"] == "lora"


def test_budget_cap_exits_10_after_a_checkpoint(tiny_model_dir, chat_file, tmp_path, run_cli):
    out = tmp_path / "out"
    code, _, err = run_cli(*_args(tiny_model_dir, chat_file, out, "--price-per-hour", "100000", "--budget", "0.05"))
    assert code == 10, err
    assert "budget" in err and len(err.strip().splitlines()[-1]) > 0
    saved = ck.list_checkpoints(out)
    assert saved and ck.verify(saved[-1]) is None and ck.step_of(saved[-1]) < 4


def test_spot_notice_from_metadata_preempts_with_143(tiny_model_dir, chat_file, tmp_path, run_cli):
    class Preempted(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_GET(self):
            body = b"TRUE" if self.headers.get("Metadata-Flavor") == "Google" else b""
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Preempted)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}/computeMetadata/v1/instance/preempted"
        cfg = tmp_path / "t.yaml"
        cfg.write_text(f"spot_notice: gcp\nspot_notice_url: {url}\nspot_poll_seconds: 0.05\n")
        out = tmp_path / "out"
        code, _, err = run_cli(*_args(tiny_model_dir, chat_file, out), str(cfg))
    finally:
        srv.shutdown()
        srv.server_close()
    assert code == 143, err
    assert "GCP preemption notice: saved" in err
    assert ck.verify(ck.list_checkpoints(out)[-1]) is None


def test_full_fine_tune_says_it_saved_the_model(tiny_model_dir, chat_file, tmp_path, run_cli):
    """A full fine-tune writes model weights, not an adapter: its last line must not say "adapter"."""
    out = tmp_path / "out"
    code, stdout, err = run_cli(*_args(tiny_model_dir, chat_file, out, "--method", "full"))
    assert code == 0, err
    assert (out / "model.safetensors").is_file() and not (out / "adapter_model.safetensors").exists()
    assert f"model and summary in {out}" in stdout and "adapter" not in stdout
