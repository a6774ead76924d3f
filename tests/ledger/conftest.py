import pytest

from tests.conftest import make_reviewer

from .helpers import SECRET


@pytest.fixture(autouse=True)
def _stripe_secret(settings):
    settings.IMPRI_STRIPE_WEBHOOK_SECRET = ["whsec_old_one", SECRET]
    settings.IMPRI_LEDGER_SETTLE_H = 24


@pytest.fixture
def lead(db):
    """A reviewer in the group the seed rules route payments to."""
    return make_reviewer("lena", "support-leads")
