"""After training: a run's adapter as merged weights, an Ollama Modelfile, a vLLM command, a hub repo or GGUF."""
