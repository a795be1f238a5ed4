"""The web view: a static page (static/: HTML, CSS and our own JavaScript, no build step) and
the JSON it reads, served at /ui by the service and by `rollouts view` (a data dir or an
exported Parquet file, read-only).

- models.py: the pydantic models of the view's JSON;
- sources.py: where trajectories come from (the store through service/store/reader.py, or a
  Parquet file), paged so that nothing reads every payload;
- routes.py: the page and its JSON routes, one router for both apps;
- tokens.py: each token's text for the token view (the policy server's /detokenize, or the
  tokenizer files `rollouts view --tokenizer` reads);
- viewer.py: the app `rollouts view` serves (the routes over one source, no service).
"""
