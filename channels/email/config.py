"""The email channel's config model: the `to` addresses, the sender, the outgoing SMTP
server (`smtp:`) and the built-in reply receiver (`inbound:`)."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from channels.base import ChannelConfig
from channels.config_checks import clean_recipients
from channels.email.text import one_line

_ADDRESS = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]{1,64}@[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")


def _address(value: str, what: str = "an email address") -> str:
    value = value.strip()
    if not _ADDRESS.match(value) or ".." in value or value.startswith("."):
        raise ValueError(f"must be {what} such as desk@example.com (ASCII, no display name)")
    return value


def _reply_address(value: str | None) -> str | None:
    """An address replies come back to, or None when unset: replies are matched by the
    `+token` the desk adds to its local part, so the owner's address may not have one."""
    if value is None or not value.strip():
        return None
    value = _address(value)
    if "+" in value.split("@", 1)[0]:
        raise ValueError("must not contain '+': the handoff token is added after a '+'")
    return value


class SmtpSettings(BaseModel):
    """The outgoing mail server."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(min_length=1, description="SMTP server host name, e.g. smtp.example.com (127.0.0.1 for a local relay).")
    port: int | None = Field(
        default=None, ge=1, le=65535,
        description="SMTP port; by default 587 with starttls, 465 with tls, 25 with none.",
    )
    security: Literal["starttls", "tls", "none"] = Field(
        default="starttls",
        description="starttls: upgrade a plain connection (port 587, required); tls: implicit TLS from the first byte "
        "(port 465); none: no encryption (a relay on localhost only).",
    )
    username: str | None = Field(default=None, description="Login name for SMTP AUTH; leave out for a server without auth.")
    password: SecretStr | None = Field(default=None, description="Password (or app password) for SMTP AUTH.")
    timeout: float = Field(
        default=30.0, gt=0, le=300,
        description="Seconds for connecting and for each SMTP command, including the message transfer.",
    )
    ca_file: str | None = Field(
        default=None, description="A PEM file of extra certificates to trust (a private CA or a self-signed server).",
    )
    helo_name: str | None = Field(
        default=None, description="Name we greet the server with (EHLO); the domain of from_address by default.",
    )

    @model_validator(mode="before")
    @classmethod
    def _starttls_shorthand(cls, data: Any) -> Any:
        """Early configs said `starttls: true` (the documented sketch did); it keeps working as a shorthand."""
        if isinstance(data, dict) and "starttls" in data:
            data = dict(data)
            flag = data.pop("starttls")
            if "security" in data:
                raise ValueError("starttls and security both set: keep security (starttls, tls or none)")
            if not isinstance(flag, bool):
                raise ValueError("starttls must be true or false (or use security: starttls | tls | none)")
            data["security"] = "starttls" if flag else ("tls" if data.get("port") == 465 else "none")
        return data

    @field_validator("username", "helo_name", "ca_file", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("password", mode="before")
    @classmethod
    def _empty_password(cls, value: Any) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        return None if isinstance(value, str) and not value else value

    @model_validator(mode="after")
    def _login_pair(self) -> SmtpSettings:
        if (self.username is None) != (self.password is None):
            raise ValueError("username and password go together: set both for SMTP AUTH, or neither")
        return self

    @property
    def effective_port(self) -> int:
        return self.port or {"starttls": 587, "tls": 465, "none": 25}[self.security]


class InboundSettings(BaseModel):
    """The built-in receiver replies are delivered to."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    host: str = Field(default="127.0.0.1", description="Interface the receiver listens on (0.0.0.0 for every interface).")
    port: int = Field(default=2525, ge=0, le=65535, description="Port the receiver listens on (0 picks a free one).")
    address: str | None = Field(
        default=None,
        description="The mailbox recipients reply to, e.g. desk@example.com; each message's Reply-To is this address "
        "with the handoff's token added (desk+<token>@example.com). Defaults to reply_to, then from_address.",
    )
    max_message_size: int = Field(
        default=2_000_000, ge=10_000, le=50_000_000, description="Largest accepted message in bytes (attachments included).",
    )

    @field_validator("address")
    @classmethod
    def _address(cls, value: str | None) -> str | None:
        return _reply_address(value)


class EmailConfig(ChannelConfig):
    kind: Literal["email"] = "email"
    to: list[str] = Field(min_length=1, max_length=50, description="Recipient addresses every handoff is sent to.")
    from_address: str = Field(
        validation_alias=AliasChoices("from_address", "from"),
        description="Sender address of every message, e.g. desk@example.com (the SMTP account must be allowed to use it). "
        "`from` is accepted as another name for this key.",
    )
    from_name: str = Field(default="Handoff Desk", max_length=80, description="Display name shown next to from_address.")
    reply_to: str | None = Field(
        default=None,
        description="Where replies go, before the handoff token is added; inbound.address, then from_address by default.",
    )
    smtp: SmtpSettings = Field(description="The outgoing mail server: {host, port, security, username, password, timeout}.")
    inbound: InboundSettings | None = Field(
        default=None,
        description="The built-in receiver for replies: {host, port, address, max_message_size}. Without it the desk "
        "sends mail but receives no replies (use the return form or the owner inbox to release).",
    )
    reply_token_secret: SecretStr | None = Field(
        default=None,
        description="Key for the MAC in reply tokens (any long random string). By default derived from the desk's "
        "secret_key; set it to keep replies to old mails working across a secret_key rotation.",
    )
    accept_forwarded: bool = Field(
        default=True,
        description="Accept a reply from an address not in `to` when it carries the handoff's token (the handoff email "
        "was forwarded to a colleague). false: only the `to` addresses may answer.",
    )

    @field_validator("to")
    @classmethod
    def _recipients(cls, value: list[str]) -> list[str]:
        return clean_recipients(value, _address)

    @field_validator("from_address")
    @classmethod
    def _from(cls, value: str) -> str:
        return _address(value)

    @field_validator("from_name")
    @classmethod
    def _name(cls, value: str) -> str:
        return one_line(value, 80)

    @field_validator("reply_to")
    @classmethod
    def _reply_to(cls, value: str | None) -> str | None:
        return _reply_address(value)

    @field_validator("reply_token_secret", mode="before")
    @classmethod
    def _empty_secret(cls, value: Any) -> Any:
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        return None if isinstance(value, str) and not value.strip() else value

    @property
    def reply_mailbox(self) -> str:
        """The address replies go to, before the token is added."""
        return self.reply_to or (self.inbound.address if self.inbound and self.inbound.address else None) or self.from_address

    @property
    def receiving_mailbox(self) -> str:
        """The address the built-in receiver accepts (with or without a token)."""
        return (self.inbound.address if self.inbound and self.inbound.address else None) or self.reply_mailbox
