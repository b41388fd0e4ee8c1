"""Embedded models for offline use: a tiny random Llama for tests, SmolLM2-135M for the demo."""
