import json

from django.conf import settings
from oauth2_provider.oauth2_validators import OAuth2Validator


class ClaimsFileValidator(OAuth2Validator):
    # Every claim goes out whatever the scopes (the toolkit drops unknown ones like groups).
    oidc_claim_scope = None

    def get_additional_claims(self, request):
        claims = json.loads((settings.OP_DIR / "claims.json").read_text())
        return {"preferred_username": request.user.username, **claims[request.user.username]}
