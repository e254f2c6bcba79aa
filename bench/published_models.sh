# bench/published_models.sh: the GPT of the published runs as a .shard file
# (sourced by bench/explore_published.sh and tests/cli.sh).
#   gpt FILE HEADS D LAYERS GPUS BATCH MICROBATCH DEVICE
gpt() { # file heads d layers gpus batch mbs device
  cat >"$1" <<EOF
const vocab = 51200, ctx = 2048, d = $3, heads = $2, layers = $4
layer block(x) {
  x = x + attention(layernorm(x), heads = heads, causal = true)
  x = x + mlp(layernorm(x), hidden = 4 * d, act = gelu)
  return x
}
model gpt(tokens: i32[B, T], targets: i32[B, T]) {
  x = embedding(tokens, vocab, d) + positional(T, d)
  repeat layers { x = block(x) }
  logits = linear(layernorm(x), vocab, bias = false, tied = embedding)
  return cross_entropy(logits, targets)
}
mesh m { nodes = $(($5 / 8)), per_node = 8, device = $8 }
train {
  model = gpt, mesh = m
  batch = $6, seq = ctx, microbatch = $7, steps = 1
  optimizer = adamw(lr = 1e-4, betas = (0.9, 0.95), weight_decay = 0.1)
  precision = bf16
}
EOF
}
