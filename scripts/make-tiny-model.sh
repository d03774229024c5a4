#!/bin/sh
# Writes a tiny Hugging Face model directory to the path given (default models/tiny): a stand-in,
# for the fine-tuning quick start (README.md), for the model a user downloads from the Hub. A
# Llama of the demo preset's shape (3.5M parameters) with the small byte-level BPE tokenizer of
# tests/data/tokenizers/gpt2-bytelevel, to which ChatML's <|im_start|> and <|im_end|> are added,
# and Qwen2's chat template; its weights are megatrain's random initialization (train --steps 0,
# then export). Needs build/megatrain (or $MEGATRAIN).
set -eu
out=${1:-models/tiny}
bin=${MEGATRAIN:-build/megatrain}
root=$(dirname "$0")/..
[ -x "$bin" ] || { echo "make-tiny-model.sh: $bin is missing: run make first" >&2; exit 1; }
[ ! -e "$out" ] || { echo "make-tiny-model.sh: $out exists" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/tokenizer"
sed 's/^ "added_tokens": \[$/&\
  {"id": 2324, "content": "<|im_start|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},\
  {"id": 2325, "content": "<|im_end|>", "single_word": false, "lstrip": false, "rstrip": false, "normalized": false, "special": true},/' \
    "$root/tests/data/tokenizers/gpt2-bytelevel/tokenizer.json" >"$tmp/tokenizer/tokenizer.json"
cat >"$tmp/tokenizer/tokenizer_config.json" <<'EOF'
{
  "bos_token": null,
  "eos_token": "<|im_end|>",
  "pad_token": "<|endoftext|>",
  "chat_template": "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n' }}{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
}
EOF
cat >"$tmp/config.json" <<'EOF'
{
  "architectures": ["LlamaForCausalLM"],
  "model_type": "llama",
  "hidden_size": 256,
  "intermediate_size": 688,
  "num_hidden_layers": 4,
  "num_attention_heads": 8,
  "num_key_value_heads": 4,
  "vocab_size": 2326,
  "max_position_embeddings": 1024,
  "rope_theta": 10000.0,
  "rms_norm_eps": 1e-05,
  "tie_word_embeddings": true,
  "eos_token_id": 2325
}
EOF
printf 'The weights of this model are random: it has never read a word.\n' >"$tmp/any.txt" # read by no step
"$bin" train --config "$tmp/config.json" --tokenizer "$tmp/tokenizer" --data "$tmp/any.txt" --val-fraction 0 \
    --seq 8 --batch 1 --steps 0 --out "$tmp/run" 2>"$tmp/log" || { cat "$tmp/log" >&2; exit 1; }
mkdir -p "$(dirname "$out")"
"$bin" export "$tmp/run" "$out" --dtype fp32 2>"$tmp/log" >/dev/null || { cat "$tmp/log" >&2; exit 1; }
echo "wrote $out"
