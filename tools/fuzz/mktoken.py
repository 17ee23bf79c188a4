"""Print an HS256 JWT with the admin role for the fuzz run's broker (stdlib only).

Usage: LANES_JWT_SECRET=... python3 tools/fuzz/mktoken.py
The token is valid for one hour, longer than any run.
"""

import base64
import hashlib
import hmac
import json
import os
import time


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def main() -> None:
    secret = os.environ["LANES_JWT_SECRET"].encode()
    header = b64url(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    now = int(time.time())
    claims = {"sub": "fuzz-api", "roles": ["admin"], "iat": now, "exp": now + 3600}
    payload = b64url(json.dumps(claims).encode())
    signature = hmac.new(
        secret, f"{header}.{payload}".encode(), hashlib.sha256
    ).digest()
    print(f"{header}.{payload}.{b64url(signature)}")


if __name__ == "__main__":
    main()
