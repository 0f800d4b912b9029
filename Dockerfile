# The orch daemon image. No credentials in it: docker-compose.yml mounts or passes them at run time.
FROM python:3.11-slim
RUN apt-get update && apt-get install -y --no-install-recommends openssh-client rclone \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --create-home --uid 1000 orch
WORKDIR /opt/orch
COPY pyproject.toml README.md ./
COPY orchestrator ./orchestrator
COPY providers ./providers
RUN pip install --no-cache-dir ".[all]"
USER orch
ENTRYPOINT []
CMD ["orch", "daemon"]
