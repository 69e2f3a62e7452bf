"""Channels and security shared by the job client and the workers.

Mirrors common/grpc_util.h and common/security.h: 256 MiB messages,
keepalive pings every second (a dead connection is noticed within 3 s),
short reconnection backoff, TLS from PEM files, and metadata on every call
(the job API's bearer token, or the cluster secret of internal calls).
Retries: paramserver._retry.
"""

from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence, Tuple

import grpc

from paramserver.errors import InvalidArgumentError

MAX_MESSAGE_BYTES = 256 * 1024 * 1024
# Metadata keys (common/security.h).
CLUSTER_SECRET_KEY = "x-ps-cluster-secret"
AUTHORIZATION_KEY = "authorization"
_MIN_SECRET_BYTES = 16
_MAX_SECRET_BYTES = 1024



@dataclasses.dataclass(frozen=True)
class Security:
    """How a channel authenticates: TLS and metadata sent with every call.

    Build it with :func:`client_security` (the job API) or
    :func:`member_security` (workers); plaintext without metadata by default.
    """
    tls: bool = False
    root_certificates: Optional[bytes] = None
    private_key: Optional[bytes] = None
    certificate_chain: Optional[bytes] = None
    server_name: Optional[str] = None
    metadata: Tuple[Tuple[str, str], ...] = ()


def _read(path: str, what: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InvalidArgumentError(f"{what}: cannot read {path}: {e.strerror}")


def _check_secret(value: str, what: str) -> str:
    if not (_MIN_SECRET_BYTES <= len(value) <= _MAX_SECRET_BYTES) or any(
            not ("!" <= c <= "~") for c in value):
        raise InvalidArgumentError(
            f"{what}: must be {_MIN_SECRET_BYTES} to {_MAX_SECRET_BYTES} "
            "printable ASCII characters without spaces")
    return value


def read_secret_file(path: str) -> str:
    """A cluster secret file: one line, surrounding white space ignored."""
    text = _read(path, "cluster_secret_file").decode("ascii", "replace")
    return _check_secret(text.strip(), f"cluster_secret_file {path}")


def read_token_file(path: str) -> str:
    """The first token of a token file (blank lines and '#' lines skipped)."""
    text = _read(path, "token_file").decode("ascii", "replace")
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            return _check_secret(line, f"token_file {path}")
    raise InvalidArgumentError(f"token_file: {path} holds no token")


def _tls(tls_ca: Optional[str], tls_cert: Optional[str],
         tls_key: Optional[str], tls_server_name: Optional[str],
         **base) -> Security:
    if (tls_cert is None) != (tls_key is None):
        raise InvalidArgumentError(
            "tls_cert: a client certificate needs its key (tls_key) and the "
            "reverse")
    if tls_cert is not None and tls_ca is None:
        raise InvalidArgumentError("tls_ca: TLS needs the CA certificates")
    if tls_ca is None:
        return Security(**base)
    return Security(
        tls=True,
        root_certificates=_read(tls_ca, "tls_ca"),
        private_key=_read(tls_key, "tls_key") if tls_key else None,
        certificate_chain=_read(tls_cert, "tls_cert") if tls_cert else None,
        server_name=tls_server_name, **base)


def client_security(tls_ca: Optional[str] = None,
                    tls_cert: Optional[str] = None,
                    tls_key: Optional[str] = None,
                    tls_server_name: Optional[str] = None,
                    token: Optional[str] = None,
                    token_file: Optional[str] = None) -> Security:
    """The job API's security, as psctl's flags give it: TLS when `tls_ca`
    is set (with a client certificate if `tls_cert`/`tls_key`), and a bearer
    token from `token` or the first token of `token_file`."""
    if token is not None and token_file is not None:
        raise InvalidArgumentError("token: give token or token_file, not both")
    if token_file is not None:
        token = read_token_file(token_file)
    metadata: Tuple[Tuple[str, str], ...] = ()
    if token is not None:
        metadata = ((AUTHORIZATION_KEY,
                     "Bearer " + _check_secret(token, "token")),)
    return _tls(tls_ca, tls_cert, tls_key, tls_server_name, metadata=metadata)


def member_security(tls_ca: Optional[str] = None,
                    tls_cert: Optional[str] = None,
                    tls_key: Optional[str] = None,
                    tls_server_name: Optional[str] = None,
                    cluster_secret: Optional[str] = None,
                    cluster_secret_file: Optional[str] = None) -> Security:
    """A cluster member's security, as ps-worker's flags give it: TLS with
    the member's certificate, and the cluster secret on every call."""
    if cluster_secret is not None and cluster_secret_file is not None:
        raise InvalidArgumentError(
            "cluster_secret: give cluster_secret or cluster_secret_file, not "
            "both")
    if cluster_secret_file is not None:
        cluster_secret = read_secret_file(cluster_secret_file)
    metadata: Tuple[Tuple[str, str], ...] = ()
    if cluster_secret is not None:
        metadata = ((CLUSTER_SECRET_KEY,
                     _check_secret(cluster_secret, "cluster_secret")),)
    return _tls(tls_ca, tls_cert, tls_key, tls_server_name, metadata=metadata)


def create_channel(target: str, security: Security,
                   member: bool = False) -> grpc.Channel:
    """A channel with the cluster's limits, keepalive and reconnection.

    `member`: a cluster member's channel, which gives up a connection
    attempt after 2 s and dials again (MemberConnectionOptions); a client's
    waits 20 s (gRPC's default).
    """
    options: List[Tuple[str, object]] = [
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        ("grpc.keepalive_time_ms", 1000),
        ("grpc.keepalive_timeout_ms", 2000),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
        ("grpc.min_reconnect_backoff_ms", 2000 if member else 20000),
    ]
    if not security.tls:
        return grpc.insecure_channel(target, options=options)
    if security.server_name:
        options.append(("grpc.ssl_target_name_override", security.server_name))
    credentials = grpc.ssl_channel_credentials(
        root_certificates=security.root_certificates,
        private_key=security.private_key,
        certificate_chain=security.certificate_chain)
    return grpc.secure_channel(target, credentials, options=options)


def metadata_of(security: Security,
                extra: Sequence[Tuple[str, str]] = ()) -> Tuple[Tuple[str, str], ...]:
    return tuple(security.metadata) + tuple(extra)

