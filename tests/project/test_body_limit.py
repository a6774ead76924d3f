"""One body limit, IMPRI_MAX_BODY_BYTES, for every HTTP path: a 413 with a JSON detail."""

from __future__ import annotations

import httpx
import pytest
from django.conf import settings as django_settings

from impri.asgi import application

pytestmark = pytest.mark.django_db(transaction=True)

PATHS = ["/api/v1/actions", "/mcp", "/inbox/", "/accounts/login/"]


async def _post(path: str, body: bytes, key: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as http:
        return await http.post(
            path,
            content=body,
            headers={
                "Authorization": f"Bearer {key}",
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            },
        )


@pytest.mark.parametrize("path", PATHS)
async def test_a_body_over_the_limit_is_a_json_413_on_every_path(agent, settings, path):
    settings.IMPRI_MAX_BODY_BYTES = 2048
    response = await _post(path, b"x" * 4096, agent.key)
    assert response.status_code == 413
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {
        "detail": "request body is larger than the limit of 2048 bytes (IMPRI_MAX_BODY_BYTES)",
        "code": "too_large",
    }


async def test_a_body_within_the_limit_reaches_the_api(agent, settings):
    settings.IMPRI_MAX_BODY_BYTES = 2048
    response = await _post("/api/v1/actions", b"{}", agent.key)
    assert response.status_code == 422  # read and validated, not refused for its size


def test_django_parses_no_more_than_the_same_limit():
    assert django_settings.DATA_UPLOAD_MAX_MEMORY_SIZE == django_settings.IMPRI_MAX_BODY_BYTES
