"""Build a tiny random-weight Qwen3 with the real Qwen3 tokenizer, for the real-engine tests.

    <vllm venv>/bin/python scripts/tiny_qwen3.py OUT_DIR [--eos im_end|endoftext] [--seed 0]

Needs torch, transformers and safetensors (the vLLM venv of scripts/vllm_env.sh has them).
Writes a `Qwen3ForCausalLM` (vocab 151936, hidden 256, 2 layers, 2 heads, 1 KV head, head_dim
128, tied embeddings, bf16; about 40M parameters, 80 MB), the tokenizer files of
`<repo>/../shared/qwen3-tokenizer` (override: ROLLOUTS_QWEN3_TOKENIZER) plus a `tokenizer.json`
built from them, and a generation_config.json like Qwen3-8B's (temperature 0.6, top_k 20, top_p
0.95, eos [151645, 151643]): a server started without `--generation-config vllm` applies those
to every request that leaves a field out.

Random weights give a nearly flat next-token distribution, so a turn would almost never end. The
logits are biased towards one end-of-turn token: every token embedding (tied with the lm_head)
gets the same constant in hidden dimension 0, which the final norm keeps large whatever the
token (the layers' writes to the residual stream are scaled down), and the chosen token's row
gets a larger one there, so its logit stands out by a nearly constant margin. At
temperature 1 with no truncation a turn then ends on that token after about `--mean-tokens`
tokens (geometric); under the generation config's top_k 20 / temperature 0.6 it ends at once,
which makes hidden sampling defaults easy to see. Deterministic for a given seed.

`--peak S` builds the other kind, for the weight-update tests: an lm_head of its own (untied),
random with S times the usual scale, and no end-of-turn bias. Its next-token distribution is
peaked (the sampled token usually has a logprob near 0) and differs completely between seeds,
so a token's logprob says which checkpoint produced it; its turns run until max_tokens.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
from pathlib import Path

IM_END = 151645
ENDOFTEXT = 151643
EOS_IDS = {"im_end": IM_END, "endoftext": ENDOFTEXT}
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json")
VOCAB = 151936
HIDDEN = 256
BIAS_DIM = 0
# The embedding's constant component, in units of the other components' std (0.02): after the
# RMS norms it carries most of that dimension, whatever the token.
BIAS_SCALE = 10.0
# The layers' writes to the residual stream are scaled down so that they cannot drown that
# dimension: the end-of-turn probability then hardly depends on the context.
LAYER_OUTPUT_SCALE = 0.1

GENERATION_CONFIG = {
    "bos_token_id": ENDOFTEXT,
    "do_sample": True,
    "eos_token_id": [IM_END, ENDOFTEXT],
    "pad_token_id": ENDOFTEXT,
    "temperature": 0.6,
    "top_k": 20,
    "top_p": 0.95,
}


def tokenizer_dir() -> Path:
    env = os.environ.get("ROLLOUTS_QWEN3_TOKENIZER")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[1].parent / "shared" / "qwen3-tokenizer"


def build(out: Path, eos: str, seed: int, mean_tokens: float, peak: float | None = None) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    src = tokenizer_dir()
    missing = [f for f in TOKENIZER_FILES if not (src / f).is_file()]
    if missing:
        sys.exit(f"tiny_qwen3: {src} lacks {', '.join(missing)} (set ROLLOUTS_QWEN3_TOKENIZER)")

    torch.manual_seed(seed)
    config = Qwen3Config(
        vocab_size=VOCAB,
        hidden_size=HIDDEN,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=128,
        max_position_embeddings=32768,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        tie_word_embeddings=peak is None,
        bos_token_id=ENDOFTEXT,
        eos_token_id=IM_END,
        torch_dtype="bfloat16",
    )
    model = Qwen3ForCausalLM(config).eval()
    with torch.no_grad():
        if peak is not None:
            # An untied head of independent random rows, scaled up: logits with a std of about
            # 0.32 * peak, so one or two tokens take nearly all the mass at every position.
            model.lm_head.weight.normal_(0.0, config.initializer_range * peak)
            _save(model.to(torch.bfloat16), out, src, eos, seed, mean_tokens, peak)
            return
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.mul_(LAYER_OUTPUT_SCALE)
            layer.mlp.down_proj.weight.mul_(LAYER_OUTPUT_SCALE)
        emb = model.model.embed_tokens.weight  # also the lm_head (tied)
        c = BIAS_SCALE * config.initializer_range
        emb[:, BIAS_DIM] = c
        # The final norm leaves dimension 0 near h0 (measured below): every logit gets h0 * c,
        # the chosen token's h0 * w. Its lead h0 * (w - c) against ~log(vocab) for the rest of
        # the (nearly flat) distribution makes P(end) about 1 / mean_tokens per token.
        h0 = _bias_activation(model, torch)
        lead = math.log((VOCAB - 1) / (mean_tokens - 1))
        emb[EOS_IDS[eos], BIAS_DIM] = c + lead / h0
    _save(model.to(torch.bfloat16), out, src, eos, seed, mean_tokens, None)


def _save(model, out: Path, src: Path, eos: str, seed: int, mean_tokens: float, peak):  # type: ignore[no-untyped-def]
    from transformers import AutoTokenizer

    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    (out / "generation_config.json").write_text(json.dumps(GENERATION_CONFIG, indent=2) + "\n")
    for name in TOKENIZER_FILES:
        shutil.copyfile(src / name, out / name)
    # A tokenizer.json spares vLLM converting the BPE files at every start.
    with tempfile.TemporaryDirectory() as tmp:
        AutoTokenizer.from_pretrained(src).save_pretrained(tmp)
        shutil.copyfile(Path(tmp) / "tokenizer.json", out / "tokenizer.json")
    (out / "tiny_qwen3.json").write_text(
        json.dumps(
            {"eos": eos, "eos_id": EOS_IDS[eos], "seed": seed, "mean_tokens": mean_tokens}
            | ({"peak": peak} if peak is not None else {})
        )
        + "\n"
    )


def _bias_activation(model, torch) -> float:  # type: ignore[no-untyped-def]
    """The final hidden state's dimension 0, averaged over a few random token sequences."""
    gen = torch.Generator().manual_seed(1234)
    ids = torch.randint(0, 150000, (4, 64), generator=gen)
    with torch.no_grad():
        hidden = model.model(input_ids=ids).last_hidden_state
    return float(hidden[..., BIAS_DIM].mean())


def calibrate(out: Path, samples: int) -> None:
    """Sample with transformers at temperature 1 and report how turns end (a check, not CI)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).eval()
    torch.manual_seed(0)
    prompt = torch.randint(0, 150000, (samples, 20))
    with torch.no_grad():
        seqs = model.generate(
            prompt,
            do_sample=True,
            temperature=1.0,
            top_k=0,
            top_p=1.0,
            max_new_tokens=200,
            eos_token_id=[IM_END, ENDOFTEXT],
            pad_token_id=ENDOFTEXT,
        )[:, 20:].tolist()
    lengths, enders = [], []
    for seq in seqs:
        end = next((i for i, t in enumerate(seq) if t in (IM_END, ENDOFTEXT)), None)
        lengths.append(len(seq) if end is None else end + 1)
        enders.append(None if end is None else seq[end])
    print(f"turn lengths: {sorted(lengths)}  ended on: {sorted(set(map(str, enders)))}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("out", type=Path)
    p.add_argument("--eos", choices=sorted(EOS_IDS), default="im_end")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--mean-tokens", type=float, default=15.0, help="mean turn length at T=1")
    p.add_argument("--peak", type=float, default=None, help="peaked, untied head (see above)")
    p.add_argument("--calibrate", type=int, default=0, metavar="N", help="sample N turns after")
    args = p.parse_args()
    build(args.out, args.eos, args.seed, args.mean_tokens, args.peak)
    if args.calibrate:
        calibrate(args.out, args.calibrate)
    print(args.out)


if __name__ == "__main__":
    main()
