"""Reading a reply: its new words without the quoted history and the signature, HTML turned
into text, and what marks a message as automatic (bounces, vacation notices, list mail).
Pure functions of the message: no network, no state."""

from __future__ import annotations

import re
from dataclasses import dataclass
from email.message import EmailMessage, Message
from email.parser import HeaderParser
from html.parser import HTMLParser

from channels.email.text import one_line

AUTO_PRECEDENCE = {"bulk", "junk", "list", "auto_reply"}


# Where quoted history starts, line by line (checked on each line of the reply).
_QUOTE_HEADERS = [
    re.compile(r"^\s*-{2,}\s*(original message|forwarded message|ursprüngliche nachricht|message d'origine)\s*-{2,}\s*$", re.I),
    re.compile(r"^\s*_{10,}\s*$"),  # Outlook on the web draws a line above the quoted header block
    re.compile(r"^\s*begin forwarded message:\s*$", re.I),
]
# An attribution names a date or time ("On Mon, 3 Jun 2024 at 10:00, Sam <…> wrote:"): the
# digit keeps "On second thought, here is what Sam wrote:" in the reply.
_ON_WROTE = re.compile(r"^\s*(on|am|le|el|op)\s(?=[^\n]*\d).{0,300}?(wrote|schrieb|a écrit|escribió|schreef)\s*:\s*$", re.I | re.S)
_HEADER_BLOCK_START = re.compile(r"^\s*\**(from|von|de|van)\s*:\**\s", re.I)
_HEADER_BLOCK_FIELD = re.compile(r"^\s*\**(sent|date|gesendet|datum|envoyé|enviado|to|an|à|para|subject|betreff|objet|asunto)\s*:", re.I)
_SIGNATURE = re.compile(r"^(-- ?|--)$")
_MOBILE_SIGNATURE = re.compile(r"^\s*(sent from my |get outlook for |sent from (mail|yahoo mail) for )", re.I)


def strip_reply(text: str) -> str:
    """The new words of an email reply: quoted history and the signature removed."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    kept: list[str] = []
    for index, line in enumerate(lines):
        if _SIGNATURE.match(line) or any(p.match(line) for p in _QUOTE_HEADERS):
            break
        if _ON_WROTE.match(line):
            break
        # Gmail wraps a long attribution: "On Mon, 3 Jun 2024 at 10:00, Sam Lee <sam@…>" / "wrote:"
        if index + 1 < len(lines) and re.match(r"^\s*(on|am|le|el|op)\s", line, re.I) and _ON_WROTE.match(line + " " + lines[index + 1]):
            break
        if _HEADER_BLOCK_START.match(line) and sum(
            1 for following in lines[index + 1 : index + 5] if _HEADER_BLOCK_FIELD.match(following)
        ) >= 2:
            break  # Outlook: "From: …" / "Sent: …" / "To: …" / "Subject: …"
        if line.lstrip().startswith(">"):
            continue  # quoted lines, also between the answers of an inline reply
        kept.append(line.rstrip())
    while kept and not kept[-1].strip():
        kept.pop()
    if kept and _MOBILE_SIGNATURE.match(kept[-1]):
        kept.pop()
    result = "\n".join(kept).strip("\n")
    return re.sub(r"\n{3,}", "\n\n", result).strip()


class _HtmlText(HTMLParser):
    """HTML to readable text: block elements end lines, quoted parts and non-content are dropped."""

    BLOCKS = {"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "table", "ul", "ol", "hr", "pre"}
    SKIP = {"script", "style", "head", "title", "blockquote"}
    QUOTE_CLASSES = ("gmail_quote", "yahoo_quoted", "moz-cite-prefix", "protonmail_quote")
    VOID = {"br", "hr", "img", "meta", "link", "input", "wbr", "col", "area", "base", "source"}

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._stack: list[tuple[str, bool]] = []  # (tag, skipping) for elements that matter
        self._ended = False  # past Outlook's header block of the quoted message: the rest is history

    @property
    def _skipping(self) -> bool:
        return self._ended or any(skip for _tag, skip in self._stack)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        attributes = dict(attrs)
        css = (attributes.get("class") or "") + " " + (attributes.get("id") or "")
        if "divRplyFwdMsg" in css or "appendonsend" in css:
            self._ended = True  # Outlook puts the quoted message *after* this block, not inside it
        skip = tag in self.SKIP or any(name in css for name in self.QUOTE_CLASSES)
        if tag in self.BLOCKS and not self._skipping:
            self.parts.append("\n")
        if tag == "li" and not self._skipping:
            self.parts.append("• ")
        if tag not in self.VOID:
            self._stack.append((tag, skip))

    def handle_endtag(self, tag: str) -> None:
        for position in range(len(self._stack) - 1, -1, -1):
            if self._stack[position][0] == tag:
                del self._stack[position:]
                break
        if tag in self.BLOCKS and not self._skipping:
            self.parts.append("\n")

    def handle_data(self, data: str) -> None:
        if not self._skipping:
            self.parts.append(re.sub(r"[ \t\r\n\f]+", " ", data))


def html_to_text(markup: str) -> str:
    parser = _HtmlText()
    parser.feed(markup)
    parser.close()
    text = "".join(parser.parts).replace("\xa0", " ")
    lines = [line.strip() for line in text.split("\n")]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()


def message_ids_in(value: str | None) -> list[str]:
    return re.findall(r"<[^<>\s]+>", value or "")


def _is_automatic(message: EmailMessage) -> bool:
    """Bounces, vacation notices and list mail: never a person answering (RFC 3834)."""
    auto = str(message.get("Auto-Submitted", "no")).strip().lower()
    if auto and not auto.startswith("no"):
        return True
    if str(message.get("Precedence", "")).strip().lower() in AUTO_PRECEDENCE:
        return True
    if any(message.get(h) for h in ("X-Autoreply", "X-Autorespond")):
        return True
    return str(message.get_content_type()) == "multipart/report"  # delivery status notifications


def _reply_text(message: EmailMessage) -> str:
    """The new words of a reply: the text/plain part (else the HTML one as text), stripped of
    quoted history and signature, with a note about attachments that were not forwarded."""
    part = message.get_body(preferencelist=("plain", "html"))
    text = ""
    if part is not None:
        try:
            content = part.get_content()
        except (LookupError, ValueError):  # an unknown charset: decode what can be decoded
            payload = part.get_payload(decode=True)
            content = payload.decode("utf-8", "replace") if isinstance(payload, bytes) else ""
        if part.get_content_type() == "text/html":
            content = html_to_text(str(content))
        text = strip_reply(str(content))
    names = [p.get_filename() or p.get_content_type() for p in message.iter_attachments()]
    if names:
        note = f"[{len(names)} attachment(s) not forwarded: {', '.join(one_line(n, 80) for n in names)}]"
        text = f"{text}\n{note}" if text else note
    return text.replace("\x00", "\ufffd")


@dataclass(frozen=True)
class Bounce:
    """A delivery status notification saying a message of ours never arrived: the original
    Message-ID, and the reporting server's words for why (RFC 3464)."""

    message_id: str
    recipient: str
    status: str
    diagnostic: str


def bounced(message: EmailMessage) -> Bounce | None:
    """The failure a DSN reports (`multipart/report; report-type=delivery-status` with an
    `Action: failed` recipient), with the Message-ID of the mail it returns; None for any
    other message, a delay (`Action: delayed`) or a DSN that names no original."""
    if message.get_content_type() != "multipart/report" or message.get_param("report-type") != "delivery-status":
        return None
    failed: Message | None = None
    original: str | None = None
    for part in message.walk():
        kind = part.get_content_type()
        if kind == "message/delivery-status":
            for block in part.get_payload() if isinstance(part.get_payload(), list) else []:
                if isinstance(block, Message) and str(block.get("Action", "")).strip().lower() == "failed":
                    failed = failed or block
        elif kind == "message/rfc822":
            inner = part.get_payload()
            if isinstance(inner, list) and inner and isinstance(inner[0], Message):
                original = original or _first_id(inner[0])
        elif kind == "text/rfc822-headers":
            raw = part.get_payload(decode=True)
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(part.get_payload())
            original = original or _first_id(HeaderParser().parsestr(text))
    if failed is None or original is None:
        return None
    recipient = str(failed.get("Final-Recipient", failed.get("Original-Recipient", ""))).split(";")[-1].strip()
    return Bounce(
        message_id=original, recipient=one_line(recipient, 200), status=one_line(str(failed.get("Status", "")), 20),
        diagnostic=one_line(str(failed.get("Diagnostic-Code", "")).split(";", 1)[-1], 300),
    )


def _first_id(headers: Message) -> str | None:
    found = message_ids_in(str(headers.get("Message-ID", "")))
    return found[0] if found else None
