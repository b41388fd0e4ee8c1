#!/usr/bin/env bash
# Regenerates the four worked examples from real `cheaptune plan` runs (whole bundled catalog, offline).
# Usage: docs/scenarios/generate.sh   (from the repository root; the first run simulates memory for each model)
set -euo pipefail
out=docs/scenarios
run() {
  local name=$1 title=$2 story=$3; shift 3
  {
    echo "# $title"
    echo
    echo "$story"
    echo
    echo '```'
    echo "cheaptune plan $*"
    echo '```'
    echo
    cheaptune plan "$@" --markdown
  } > "$out/$name.md"
}
run chatbot-persona "Chatbot persona: Llama-2-7B with QLoRA" \
  "A few thousand short conversations in one persona's voice. The guide picks QLoRA so a 7B model trains on a small GPU." \
  meta-llama/Llama-2-7b-hf --examples 3000 --avg-tokens 400 --epochs 3 --seq-len 1024 --method qlora --budget 20
run domain-text "Domain text generation: Mistral-7B with LoRA" \
  "Twenty thousand in-domain documents of about 700 tokens, two epochs, LoRA as the guide suggests, a 50 USD budget." \
  mistralai/Mistral-7B-v0.1 --examples 20000 --avg-tokens 700 --epochs 2 --method lora --budget 50
run code-completion "Code completion: CodeLlama-7B, method chosen by the planner" \
  "30 million tokens of a company's code, two epochs; the planner compares full fine-tuning, LoRA and QLoRA." \
  codellama/CodeLlama-7b-hf --tokens 30000000 --epochs 2
run sentiment "Sentiment classification: a small LLM on a larger dataset" \
  "200,000 short labelled reviews (about 128 tokens each) with TinyLlama 1.1B: small enough that full fine-tuning is an option." \
  TinyLlama/TinyLlama_v1.1 --examples 200000 --avg-tokens 128 --seq-len 512
run full-70b-multi-gpu "Full fine-tune of a 70B model: several GPUs" \
  "Llama-2-70B, full fine-tuning on 20 million tokens. Its weights, gradients and Adam state (about 550 GiB) fit no single GPU, so the planner shards them over 8 GPUs with FSDP or ZeRO-3." \
  meta-llama/Llama-2-70b-hf --tokens 20000000 --method full
