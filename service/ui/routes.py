"""The web view's routes, the same in the service and in `rollouts view`:

- `pages`: GET /ui and its static files, without the API key (they hold no data; the page
  asks for the key and sends it with every call, as any API client does);
- `api`: GET /ui/api/... (JSON), and POST /ui/api/tokens (token texts, service/ui/tokens.py),
  which the service puts behind its key.

Both apps keep their `Source` in `app.state.ui_source` and where token texts come from in
`app.state.ui_tokens`; the service also has `app.state.service`, which is what makes the
overview live (GET /v1/events).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import FileResponse

from service.api.responses import errors
from service.trajectory import Trajectory
from service.ui.models import Overview, SamplePage, SampleQuery, TokenQuery, TokenTexts
from service.ui.sources import Source
from service.ui.tokens import NoTokenTexts, TokenTextSource

STATIC = Path(__file__).parent / "static"
# The files the page is made of, fixed at start: a name from the URL is looked up here, never
# joined to a path.
_FILES = {p.name: p for p in STATIC.iterdir() if p.is_file()}
_TYPES = {".html": "text/html", ".css": "text/css", ".js": "text/javascript"}

pages = APIRouter(include_in_schema=False)
api = APIRouter(prefix="/ui/api", tags=["ui"])


@pages.get("/ui")
def index() -> FileResponse:
    return FileResponse(_FILES["index.html"], media_type="text/html")


@pages.get("/ui/static/{name}")
def static(name: str) -> FileResponse:
    path = _FILES.get(name)
    if path is None:
        raise HTTPException(404, f"no file {name!r}")
    return FileResponse(path, media_type=_TYPES.get(path.suffix, "application/octet-stream"))


def _source(request: Request) -> Source:
    return request.app.state.ui_source


@api.get("/overview", response_model=Overview)
def overview(request: Request) -> Overview:
    """Rollouts with progress and status counts, mean reward per policy version, task ids, and
    the uncalibrated tasks."""
    source = _source(request)
    return Overview(
        source=source.label,
        live=getattr(request.app.state, "service", None) is not None,
        rollouts=source.rollouts(),
        reward_by_version=source.reward_by_version(),
        tasks=source.tasks(),
        uncalibrated=source.uncalibrated(),
    )


@api.get("/samples", response_model=SamplePage)
def samples(request: Request, q: Annotated[SampleQuery, Query()]) -> SamplePage:
    """One page of finished samples matching the filter, in store order."""
    return _source(request).samples(q)


@api.get("/trajectories/{trajectory_id}", response_model=Trajectory, responses=errors(404))
def trajectory(request: Request, trajectory_id: str) -> Trajectory:
    """One trajectory in full: messages, verifier output and files, tokens and logprobs."""
    t = _source(request).trajectory(trajectory_id)
    if t is None:
        raise HTTPException(404, f"no finished trajectory {trajectory_id!r} with its payload")
    return t


_NO_TOKENIZER = NoTokenTexts("no tokenizer here")


@api.post("/tokens", response_model=TokenTexts)
async def tokens(request: Request, q: TokenQuery) -> TokenTexts:
    """The text of each token id (the tokenizer files, or the policy server's /detokenize).
    Whatever goes wrong finding them, the answer is ids without text and a note saying why."""
    source: TokenTextSource = getattr(request.app.state, "ui_tokens", None) or _NO_TOKENIZER
    return await source.texts(list(dict.fromkeys(q.ids)))
