#!/usr/bin/python3
"""A registry token service for the tests (Docker's token authentication,
as the CNCF distribution registry's `auth.token` expects it): GET /token
with the user's basic credentials and a scope gives a JWT (RS256, signed
with PyJWT, its certificate in the `x5c` header) granting that scope.

    token_server.py PORT KEY.pem CERT.pem USER:PASSWORD ISSUER LOG

Each token issued is logged as one line: `user scope` (the test reads it
to see that the bearer flow ran). Runs until killed.
"""

import base64
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from urllib.parse import parse_qs, urlparse

import jwt
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

port, key_file, cert_file, login, issuer, log_file = sys.argv[1:7]
key = open(key_file, "rb").read()
cert = x509.load_pem_x509_certificate(open(cert_file, "rb").read())
x5c = [base64.b64encode(cert.public_bytes(Encoding.DER)).decode()]


class Token(BaseHTTPRequestHandler):
    def do_GET(self):
        url = urlparse(self.path)
        query = parse_qs(url.query)
        auth = self.headers.get("Authorization", "")
        given = base64.b64decode(auth[6:]).decode() if auth.startswith("Basic ") else ""
        if url.path != "/token" or given != login:
            self.send_response(401)
            self.end_headers()
            return
        user = login.split(":")[0]
        access = []
        for scope in query.get("scope", []):
            kind, name, actions = scope.split(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        claims = {
            "iss": issuer,
            "sub": user,
            "aud": query.get("service", [""])[0],
            "exp": now + 300,
            "nbf": now - 10,
            "iat": now,
            "jti": str(now),
            "access": access,
        }
        token = jwt.encode(claims, key, algorithm="RS256", headers={"x5c": x5c})
        with open(log_file, "a") as log:
            log.write(f"{user} {' '.join(query.get('scope', []))}\n")
        body = json.dumps({"token": token, "expires_in": 300}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


HTTPServer(("127.0.0.1", int(port)), Token).serve_forever()
