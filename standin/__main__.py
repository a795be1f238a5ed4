"""`python -m standin`: run the stand-in policy server (a stand-in for vLLM, not a model).

`rollouts policy-stub` runs this program with the same arguments (it does not import the
stand-in: the stand-in is a separate program, see tests/unit/test_layers.py).
"""

from __future__ import annotations

import typer
from pydantic import ValidationError

from standin.attacks import ATTACKS


def policy_stub(
    tasks: str = typer.Option(..., "--tasks", help="Tasks (folder or Parquet) to script."),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8000, "--port"),
    model: str = typer.Option("stub", "--model", help="Model name served on /v1/models."),
    max_model_len: int = typer.Option(32768, "--max-model-len"),
    p_correct: float = typer.Option(1.0, "--p-correct", help="Chance a sample types the oracle."),
    p_malformed: float = typer.Option(0.02, "--p-malformed", help="Chance a reply is bad JSON."),
    seed: int = typer.Option(0, "--seed"),
    tokens_per_s: float | None = typer.Option(None, "--tokens-per-s", help="Decode speed."),
    shared_decode: bool = typer.Option(
        False,
        "--shared-decode",
        help="--tokens-per-s is the engine's total, shared by all requests (as on a GPU).",
    ),
    ttft_ms: float = typer.Option(0.0, "--ttft-ms", help="Time to first token."),
    record: str | None = typer.Option(None, "--record", help="Append served choices (JSONL)."),
    attack: str | None = typer.Option(
        None, "--attack", help=f"Adversarial first command: {', '.join(ATTACKS)}."
    ),
    length_jitter: int = typer.Option(
        0, "--length-jitter", help="Up to N extra analysis words per reply (samples differ)."
    ),
    long_tail: float = typer.Option(
        0.0,
        "--long-tail",
        help="Long-tail episodes: sigma of the lognormal of each sample's verbosity (reply "
        "lengths and turns spent looking around; 0: off). At 8k tokens a turn, 1.3 gives "
        "replies p99/p50 of about 10.",
    ),
    verbose_words: int = typer.Option(
        0,
        "--verbose-words",
        help="Filler words of analysis in every reply, as many as fit (long replies: a small "
        "context fills in a few turns and a harness that summarizes does).",
    ),
    scale_out: bool = typer.Option(
        True,
        "--scale-out/--no-scale-out",
        help="Offer /inference/v1/generate (with per-token weight versions), like vLLM's "
        "--enable-scale-out; without it that route answers 403.",
    ),
) -> None:
    """Serve a stand-in for vLLM's OpenAI-compatible API, scripted from a task set."""
    import uvicorn

    from standin.engine import StubSettings
    from standin.server import build_app

    try:
        settings = StubSettings(
            tasks=tasks,
            host=host,
            port=port,
            model=model,
            max_model_len=max_model_len,
            p_correct=p_correct,
            p_malformed=p_malformed,
            seed=seed,
            tokens_per_s=tokens_per_s,
            shared_decode=shared_decode,
            ttft_ms=ttft_ms,
            record=record,
            attack=attack,
            length_jitter=length_jitter,
            long_tail=long_tail,
            verbose_words=verbose_words,
            scale_out=scale_out,
        )
        app = build_app(settings)
    except ValidationError as e:
        err = e.errors()[0]
        field = ".".join(str(p) for p in err["loc"]).replace("_", "-")
        typer.echo(f"error: --{field}: {err['msg']}", err=True)
        raise typer.Exit(2) from None
    except (ValueError, OSError) as e:
        typer.echo(f"error: {e}", err=True)
        raise typer.Exit(2) from None
    typer.echo(f"policy-stub: serving {model!r} (a stand-in for vLLM) on http://{host}:{port}")
    uvicorn.run(app, host=host, port=port, log_level="warning")


def main() -> None:
    app = typer.Typer(add_completion=False)
    app.command("policy-stub")(policy_stub)
    app()


if __name__ == "__main__":
    main()
