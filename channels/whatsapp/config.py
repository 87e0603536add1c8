"""The WhatsApp channel's config models: one Twilio account and its sender (WhatsAppConnection,
all a front of its own needs), and the staff numbers and dispatch template a channel adds
(WhatsAppConfig). Numbers are normalised here to `whatsapp:+E164`, so every comparison
elsewhere (is this sender staff? is this our sender?) is between equal strings."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, AliasChoices, BeforeValidator, Field, SecretStr

from channels.base import ChannelConfig
from channels.config_checks import clean_recipients, service_url

TWILIO_API = "https://api.twilio.com"
_E164 = re.compile(r"^\+[1-9]\d{6,14}$")
_SEPARATORS = re.compile(r"[\s().\-\u00a0]")
TemplateValue = Literal["summary", "expected_action", "link", "short_code", "urgency", "subscriber", "contact_back_email"]


def _default_template_variables() -> dict[str, TemplateValue]:
    return {"1": "summary", "2": "expected_action", "3": "link"}


def normalise_number(value: str) -> str:
    """`whatsapp:+1 (415) 523-8886` → `whatsapp:+14155238886`; ValueError when not E.164."""
    number = _SEPARATORS.sub("", value.strip().removeprefix("whatsapp:"))
    if not _E164.match(number):
        raise ValueError(f"'{value}' is not a phone number in E.164 form, such as +14155238886 (a + and the country code)")
    return f"whatsapp:{number}"


def number_or_none(value: str | None) -> str | None:
    """A webhook's `From` / `To` normalised, or None when it is missing or not a phone number."""
    try:
        return normalise_number(value) if value else None
    except ValueError:
        return None


def _as_list(value: Any) -> Any:
    if isinstance(value, str):  # `to: "+34600111222"`, or several from one ${VAR}, comma-separated
        return [part for part in value.split(",") if part.strip()]
    return value


# The rules of the keys, each given to its field as an AfterValidator.


def _account_sid(value: str) -> str:
    value = value.strip()
    if not re.fullmatch(r"AC[0-9a-fA-F]{32}", value):
        raise ValueError("must be the Account SID: AC followed by 32 hex digits (Twilio console → Account info)")
    return value


def _auth_token(value: SecretStr) -> SecretStr:
    token = value.get_secret_value().strip()
    if not token:
        raise ValueError("required")  # check-config adds the description: what it is, where to find it
    return SecretStr(token)


def _base_url(value: str) -> str:
    return service_url(value, "https://api.twilio.com").rstrip("/")


def _staff_numbers(value: list[str]) -> list[str]:
    return clean_recipients(value, normalise_number, name_items=False, twice="lists the same number twice")


def _content_sid(value: str | None) -> str | None:
    if value is None or not value.strip():
        return None
    if not re.fullmatch(r"HX[0-9a-fA-F]{32}", value.strip()):
        raise ValueError("must be a Content SID: HX followed by 32 hex digits (Content Template Builder)")
    return value.strip()


def _variables(value: dict[str, TemplateValue]) -> dict[str, TemplateValue]:
    if not value:
        raise ValueError("must map at least one template variable, such as {'1': summary}")
    return value


class WhatsAppConnection(ChannelConfig):
    """One Twilio account and its WhatsApp sender: everything needed to send and to verify
    webhooks. It is all a front of its own needs (`fronts: [{kind: whatsapp, …}]`); a channel
    adds the staff numbers (WhatsAppConfig)."""

    kind: Literal["whatsapp"] = "whatsapp"
    account_sid: Annotated[str, AfterValidator(_account_sid)] = Field(
        description="The Twilio Account SID (AC…): Twilio Console → Account Info.",
    )
    auth_token: Annotated[SecretStr, AfterValidator(_auth_token)] = Field(
        description="The Twilio account's Auth Token, which authenticates API calls and verifies webhook signatures: "
        "Twilio Console → Account Info.",
    )
    from_number: Annotated[str, AfterValidator(normalise_number)] = Field(
        validation_alias=AliasChoices("from_number", "from"),
        description="The WhatsApp sender, E.164 with or without 'whatsapp:' (such as +14155238886); `from` works too.",
    )
    status_callback: bool = Field(
        default=False,
        description="Ask Twilio to report delivery status to the webhook, so failures after acceptance "
        "(such as 63016) are logged.",
    )
    api_base_url: Annotated[str, AfterValidator(_base_url)] = Field(default=TWILIO_API, description="Twilio REST API base URL.")
    request_timeout: float = Field(default=10.0, gt=0, le=60, description="Seconds to wait for one Twilio call.")


class WhatsAppConfig(WhatsAppConnection):
    """A channel: the connection plus the staff numbers handoffs go to."""

    to: Annotated[list[str], BeforeValidator(_as_list), AfterValidator(_staff_numbers)] = Field(
        min_length=1, max_length=20,
        description="The recipients' WhatsApp numbers (E.164); every message goes to each, and only they may answer.",
    )
    content_sid: Annotated[str | None, AfterValidator(_content_sid)] = Field(
        default=None,
        description="An approved WhatsApp template (HX…) to send the dispatch with, so it arrives outside the 24-hour window.",
    )
    content_variables: Annotated[dict[str, TemplateValue], AfterValidator(_variables)] = Field(
        default_factory=_default_template_variables,
        description="Which value fills each template variable (with content_sid): summary, expected_action, link, "
        "short_code, urgency, subscriber, contact_back_email.",
    )
