"""The app `rollouts view` serves: the web view's routes over one source, read-only, with no
scheduler, store writer or API key (it listens on loopback only). Token texts come from the
tokenizer files given (`--tokenizer`), else the token view shows ids."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse

from service.settings import LOOPBACK_NAMES
from service.store.schema import DB_NAME
from service.ui.routes import api, pages
from service.ui.sources import ParquetSource, Source, StoreSource
from service.ui.tokens import NoTokenTexts, TokenTextSource
from service.web_guard import WebGuard

VIEW_PORT = 8090  # `rollouts view`'s default port


def open_source(path: Path) -> Source:
    """A data dir (the service's --data-dir) or an exported Parquet file."""
    if path.is_dir():
        if not (path / DB_NAME).exists():
            raise FileNotFoundError(f"no rollouts database in {path}")
        return StoreSource(path, f"data dir {path}")
    if path.suffix == ".parquet" and path.is_file():
        return ParquetSource(path)
    raise FileNotFoundError(f"{path} is neither a data dir nor a Parquet file")


NO_TOKENIZER = NoTokenTexts(
    "no tokenizer: start rollouts view with --tokenizer PATH (the model's tokenizer.json, "
    "vocab.json or their folder) to see each token's text"
)


def create_view_app(source: Source, tokens: TokenTextSource | None = None) -> FastAPI:
    app = FastAPI(title="rollouts view", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.ui_source = source
    app.state.ui_tokens = tokens or NO_TOKENIZER
    app.add_middleware(WebGuard, allowed_hosts=list(LOOPBACK_NAMES))
    app.include_router(pages)
    app.include_router(api)

    @app.get("/", include_in_schema=False)
    def root() -> RedirectResponse:
        return RedirectResponse("/ui")

    return app
