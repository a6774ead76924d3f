"""Start the test provider: ``python -m tests.oidc_provider.serve PORT CLIENT_ID SECRET REDIRECT``.

Makes its RSA key, migrates, creates the users of claims.json (password:
``<username>-password``) and the confidential client for Impri, then serves
with runserver. OP_DIR and OP_URL come from the environment.
"""

import json
import os
import sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa


def main(port: str, client_id: str, secret: str, redirect_uri: str) -> None:
    op_dir = Path(os.environ["OP_DIR"])
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    (op_dir / "key.pem").write_bytes(pem)
    os.environ["DJANGO_SETTINGS_MODULE"] = "tests.oidc_provider.settings"

    import django

    django.setup()
    from django.contrib.auth.models import User
    from django.core.management import call_command
    from oauth2_provider.models import Application

    call_command("migrate", verbosity=0)
    for username in json.loads((op_dir / "claims.json").read_text()):
        User.objects.create_user(username, password=f"{username}-password")
    Application.objects.create(
        name="impri",
        client_id=client_id,
        client_secret=secret,
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=redirect_uri,
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=True,
    )
    call_command("runserver", f"127.0.0.1:{port}", use_reloader=False, use_threading=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
