"""A real SMTP server on loopback (aiosmtpd) for the email provider: plain, STARTTLS or implicit TLS.

It keeps every message it accepts; ``refuse_rcpt`` makes it answer RCPT TO with a permanent 550,
``temporary`` with a 451. A self-signed certificate is made for the TLS modes (the provider's
``verify_tls: false`` setup accepts it).
"""

from __future__ import annotations

import datetime
import ipaddress
import ssl
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult, LoginPassword
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.support.stack import free_port


@dataclass
class Mailbox:
    """The aiosmtpd handler: what arrived, and how to answer."""

    refuse_rcpt: bool = False
    temporary: bool = False
    messages: list[tuple[str, list[str], Message]] = field(default_factory=list)
    logins: list[str] = field(default_factory=list)

    async def handle_RCPT(self, server: Any, session: Any, envelope: Any, address: str, options: Any) -> str:  # noqa: N802
        if self.refuse_rcpt:
            return "550 5.1.1 mailbox unavailable"
        if self.temporary:
            return "451 4.3.0 try again later"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802
        self.messages.append((envelope.mail_from, list(envelope.rcpt_tos), message_from_bytes(envelope.content)))
        return "250 Message accepted"


def self_signed(directory: Path) -> ssl.SSLContext:
    """A server TLS context with a fresh self-signed certificate for 127.0.0.1."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)
    return context


class Accounts:
    """An authenticator accepting one user name and password."""

    def __init__(self, user: str, password: str, mailbox: Mailbox) -> None:
        self.user, self.password, self.mailbox = user, password, mailbox

    def __call__(self, server: Any, session: Any, envelope: Any, mechanism: str, auth_data: Any) -> AuthResult:
        if isinstance(auth_data, LoginPassword) and (auth_data.login.decode(), auth_data.password.decode()) == (
                self.user, self.password):
            self.mailbox.logins.append(self.user)
            return AuthResult(success=True)
        return AuthResult(success=False, handled=False)


@dataclass
class SmtpServer:
    port: int
    mailbox: Mailbox
    security: str


@contextmanager
def smtp_server(security: str = "none", *, user: str | None = None, password: str | None = None,
                mailbox: Mailbox | None = None) -> Iterator[SmtpServer]:
    """Run an SMTP server in a thread: ``security`` is ``none``, ``starttls`` (required) or ``ssl``."""
    box = mailbox or Mailbox()
    port = free_port()
    kwargs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        context = self_signed(Path(tmp)) if security != "none" else None
        if security == "starttls":
            kwargs.update(tls_context=context, require_starttls=True)
        if security == "ssl":
            kwargs.update(ssl_context=context)
        if user is not None:
            kwargs.update(authenticator=Accounts(user, password or "", box), auth_required=True,
                          auth_require_tls=security == "starttls")  # aiosmtpd cannot tell implicit TLS
        controller = Controller(box, hostname="127.0.0.1", port=port, **kwargs)
        controller.start()
        try:
            yield SmtpServer(port, box, security)
        finally:
            controller.stop()
