"""``email``: send a message over SMTP (STARTTLS, implicit TLS or plain), with the tenant's stored account.

smtplib runs in a thread (its socket timeout bounds it to the attempt's time). The receipt id
becomes the Message-ID, so a receiver can recognise a duplicate of the same call. SMTP answers are
mapped where they enter: 5xx refusals are permanent ``upstream_error``s, 4xx and connection failures
retryable ones (retried only when the tool is declared idempotent: sending mail is a write).
"""

from __future__ import annotations

import asyncio
import smtplib
import ssl
from email.message import EmailMessage
from email.utils import formatdate
from typing import Any

from workers.errors import ToolTimeout, UpstreamError
from workers.integrations.base import Call, Method, Provider, Values, schema

DEFAULT_PORTS = {"starttls": 587, "ssl": 465, "none": 25}
ADDRESSES = {"oneOf": [{"type": "string", "minLength": 3}, {"type": "array", "items": {"type": "string"},
                                                               "minItems": 1, "maxItems": 100}]}


def _addresses(value: Any) -> list[str]:
    if value is None:
        return []
    return [value] if isinstance(value, str) else list(value)


def build_message(values: Values, receipt_id: str) -> EmailMessage:
    message = EmailMessage()
    message["From"] = values["from_address"]
    message["To"] = ", ".join(_addresses(values["to"]))
    if values.get("cc"):
        message["Cc"] = ", ".join(_addresses(values["cc"]))
    if values.get("reply_to"):
        message["Reply-To"] = values["reply_to"]
    message["Subject"] = values["subject"]
    message["Date"] = formatdate(localtime=False)
    message["Message-ID"] = f"<{receipt_id}@toolrelay>"
    message.set_content(values.get("text") or "")
    if values.get("html"):
        message.add_alternative(values["html"], subtype="html")
    return message


def _tls_context(values: Values) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if values.get("verify_tls") is False:  # a private relay with a self-signed certificate
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


def _refusal(code: int, what: str, details: dict[str, Any]) -> UpstreamError:
    """5xx is permanent, 4xx temporary (RFC 5321)."""
    return UpstreamError(f"the SMTP server refused {what} ({code})", retryable=400 <= code < 500, details=details)


def _text(raw: bytes | str) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes) else str(raw)


def send_blocking(values: Values, message: EmailMessage, timeout_s: float) -> dict[str, Any]:
    """Connect, secure, log in, send. Every smtplib failure becomes a ToolFailure."""
    security = values.get("security", "starttls")
    host = values["host"]
    port = int(values.get("port") or DEFAULT_PORTS[security])
    recipients = _addresses(values["to"]) + _addresses(values.get("cc")) + _addresses(values.get("bcc"))
    try:
        smtp: smtplib.SMTP
        if security == "ssl":
            smtp = smtplib.SMTP_SSL(host, port, timeout=timeout_s, context=_tls_context(values))
        else:
            smtp = smtplib.SMTP(host, port, timeout=timeout_s)
        with smtp:
            smtp.ehlo()
            if security == "starttls":
                smtp.starttls(context=_tls_context(values))
                smtp.ehlo()
            if values.get("username"):
                smtp.login(values["username"], values.get("password") or "")
            refused = smtp.send_message(message, from_addr=values["from_address"], to_addrs=recipients)
    except smtplib.SMTPRecipientsRefused as exc:
        codes = {addr: [code, _text(msg)] for addr, (code, msg) in exc.recipients.items()}
        temporary = all(400 <= code < 500 for code, _ in exc.recipients.values())
        raise UpstreamError("the SMTP server refused every recipient", retryable=temporary,
                            details={"refused": codes}) from None
    except smtplib.SMTPAuthenticationError as exc:
        raise UpstreamError(f"SMTP login failed ({exc.smtp_code})", retryable=False,
                            details={"smtp_code": exc.smtp_code, "smtp_error": _text(exc.smtp_error)}) from None
    except smtplib.SMTPSenderRefused as exc:
        raise _refusal(exc.smtp_code, f"the sender {exc.sender}",
                       {"smtp_code": exc.smtp_code, "smtp_error": _text(exc.smtp_error)}) from None
    except smtplib.SMTPNotSupportedError as exc:
        raise UpstreamError(f"the SMTP server does not support this: {exc}", retryable=False) from None
    except smtplib.SMTPResponseException as exc:
        raise _refusal(exc.smtp_code, "the message",
                       {"smtp_code": exc.smtp_code, "smtp_error": _text(exc.smtp_error)}) from None
    except ssl.SSLError as exc:
        raise UpstreamError(f"TLS with the SMTP server failed: {exc}", retryable=False) from None
    except TimeoutError as exc:
        raise ToolTimeout(f"the SMTP server {host}:{port} did not answer within {timeout_s:g} s") from exc
    except (OSError, smtplib.SMTPException) as exc:
        raise UpstreamError(f"cannot talk to the SMTP server {host}:{port}: {type(exc).__name__}: {exc}") from None
    return {
        "message_id": message["Message-ID"],
        "accepted": [addr for addr in recipients if addr not in refused],
        "refused": {addr: [code, _text(msg)] for addr, (code, msg) in refused.items()},
    }


async def send(values: Values, call: Call) -> dict[str, Any]:
    message = build_message(values, call.receipt_id)
    return await asyncio.to_thread(send_blocking, values, message, call.request_timeout())


SETUP = schema({
    "host": {"type": "string", "minLength": 1, "description": "SMTP server host name."},
    "port": {"type": "integer", "minimum": 1, "maximum": 65535, "description": "Default: 587, 465 (ssl) or 25."},
    "security": {"enum": ["starttls", "ssl", "none"], "default": "starttls"},
    "verify_tls": {"type": "boolean", "default": True, "description": "false accepts self-signed certificates."},
    "username": {"type": "string"},
    "password": {"type": "string", "writeOnly": True},
    "from_address": {"type": "string", "minLength": 3, "description": "The sender address."},
}, ["host", "from_address"])

PROVIDER = Provider(
    name="email",
    description="Send email over SMTP with the tenant's own server and account.",
    setup=SETUP,
    methods=(
        Method(
            name="send",
            description="Send an email message (plain text, optionally with an HTML alternative).",
            arguments=schema({
                "to": {**ADDRESSES, "description": "Recipient address or addresses."},
                "cc": ADDRESSES,
                "bcc": ADDRESSES,
                "reply_to": {"type": "string"},
                "subject": {"type": "string", "maxLength": 998},
                "text": {"type": "string", "description": "Plain-text body."},
                "html": {"type": "string", "description": "Optional HTML body."},
            }, ["to", "subject", "text"]),
            output=schema({"message_id": {"type": "string"},
                           "accepted": {"type": "array", "items": {"type": "string"}},
                           "refused": {"type": "object"}}, ["message_id", "accepted"]),
            run=send,
            effect="write",
            idempotent=False,
        ),
    ),
)
