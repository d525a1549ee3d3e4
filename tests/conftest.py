from __future__ import annotations

import pytest

from magnetsdk.testing import ARCHITECTURES, tiny_magnet


@pytest.fixture(scope="session", params=sorted(ARCHITECTURES))
def magnet(request):
    """A tiny adapted-config Magnet, once per architecture."""
    return tiny_magnet(request.param)


@pytest.fixture(scope="session")
def llama_magnet():
    return tiny_magnet("llama")
