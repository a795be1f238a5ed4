# The rollouts service image: `rollouts serve` and the CPU stand-in `rollouts policy-stub`
# (the `standin` package, run as `python -m standin`).
#
# Normal machine (pip reaches PyPI):
#   docker build -t rollouts:local .
# Offline machine (no registry, no PyPI in the build): use the local Debian base image and wheels
# prepared on the host by scripts/prepare_wheels.py (scripts/stack_build.sh does both):
#   docker build --build-arg BASE_IMAGE=rollouts-base:bookworm -t rollouts:local .
#
# Only the classic builder's features are used (no BuildKit mounts), so docker-compose 1.29 can
# build it too.

ARG BASE_IMAGE=python:3.11-slim

# ---- deps stage: a virtual environment in /opt/rollouts with the dependencies only ---------------
FROM ${BASE_IMAGE} AS deps

# build/wheels/ is optional: the glob lets the COPY succeed when it is absent (pyproject.toml always
# matches). When wheels are present the install below never touches the network.
COPY pyproject.toml build/wheel[s] /wheels/

# The Debian base has python3-venv but no pip/ensurepip: pip then runs from its wheel (wheels are
# zip-importable) with the venv's interpreter, so it installs into the venv and leaves no pip behind.
# The project itself goes to /opt/rollouts-app (see below), which a .pth file puts on sys.path.
RUN set -eu; \
    python3 -c "import tomllib; print('\n'.join(tomllib.load(open('/wheels/pyproject.toml', 'rb'))['project']['dependencies']))" > /tmp/requirements.txt; \
    if ls /wheels/*.whl >/dev/null 2>&1; then \
        python3 -m venv --without-pip /opt/rollouts; \
        echo "/opt/rollouts/bin/python $(ls /wheels/pip-*.whl)/pip" > /tmp/pip; \
        echo "--no-index --find-links /wheels" > /tmp/pip-source; \
    else \
        python3 -m venv /opt/rollouts; \
        echo "/opt/rollouts/bin/pip" > /tmp/pip; \
        : > /tmp/pip-source; \
    fi; \
    $(cat /tmp/pip) install --no-cache-dir --disable-pip-version-check $(cat /tmp/pip-source) \
        -r /tmp/requirements.txt; \
    /opt/rollouts/bin/python -c "import site; print(site.getsitepackages()[0])" > /tmp/site; \
    echo /opt/rollouts-app > "$(cat /tmp/site)/rollouts-app.pth"

# ---- app stage: the project, installed (not editable) into its own folder ------------------------
# Kept apart from the dependencies so that a source edit rebuilds and copies only this small folder,
# not the whole environment.
FROM deps AS app
COPY pyproject.toml README.m[d] /src/
COPY service /src/service
COPY sandboxes /src/sandboxes
COPY clients /src/clients
COPY standin /src/standin
RUN set -eu; \
    $(cat /tmp/pip) install --no-cache-dir --disable-pip-version-check $(cat /tmp/pip-source) \
        --no-deps --target /opt/rollouts-app /src; \
    /opt/rollouts/bin/python -c "import clients.cli, service, sandboxes, standin.server"

# ---- final stage: the base plus the two folders -----------------------------------------------
FROM ${BASE_IMAGE}

COPY --from=deps /opt/rollouts /opt/rollouts
COPY --from=app /opt/rollouts-app /opt/rollouts-app
ENV PATH=/opt/rollouts-app/bin:/opt/rollouts/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1

# The service keeps its SQLite store here; compose mounts the named volume `rollouts-data`
# over it. No VOLUME instruction: it would give every container of this image (the stand-in
# too) an anonymous volume that `down` without -v leaves behind.
RUN mkdir -p /var/lib/rollouts /data/tasks

# Runs as root on purpose: `serve` talks to the host's Docker Engine through the mounted socket,
# which is root-equivalent on the host anyway, so a non-root user here would protect nothing and
# would need the host's docker group id. The stand-in (no socket) runs as nobody; see
# docker-compose.yml and docs/stack.md.
EXPOSE 8080 8000
ENTRYPOINT ["rollouts"]
CMD ["--help"]
