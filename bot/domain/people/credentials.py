"""Passwords and TOTP codes, checked so that an unknown account and a wrong password cost
and answer the same.

Passwords are argon2id hashes (argon2-cffi's defaults, RFC 9106's second recommended set);
a hash made with older parameters is re-hashed on the next good sign-in. A sign-in for an
address nobody has still verifies against a fixed dummy hash, so the time taken does not
tell which addresses exist.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime

import pyotp
from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError, VerifyMismatchError

from bot.errors import DeskError

MIN_PASSWORD = 12
MAX_PASSWORD = 256
_HASHER = PasswordHasher()
_DUMMY_HASH = _HASHER.hash("not a password anyone has: equalises the time of unknown accounts")


class WeakPassword(DeskError):
    code = "invalid_password"

    def __init__(self, problem: str) -> None:
        super().__init__(f"password: {problem}")


def check_new_password(password: str) -> str:
    """A password a person chose, or WeakPassword naming what is wrong (never trimmed)."""
    if len(password) < MIN_PASSWORD:
        raise WeakPassword(f"at least {MIN_PASSWORD} characters, got {len(password)}")
    if len(password) > MAX_PASSWORD:
        raise WeakPassword(f"at most {MAX_PASSWORD} characters, got {len(password)}")
    if password.strip() != password:
        raise WeakPassword("no spaces at its start or end (they are easy to lose)")
    return password


def hash_password(password: str) -> str:
    return _HASHER.hash(check_new_password(password))


def verify_password(stored: str | None, password: str) -> bool:
    """Whether `password` matches `stored`; with no stored hash (unknown account, or one that
    has none) the dummy hash is checked, so both answer after the same work."""
    try:
        _HASHER.verify(stored or _DUMMY_HASH, password)
    except (VerifyMismatchError, VerificationError, InvalidHashError):
        return False
    return stored is not None


def needs_rehash(stored: str) -> bool:
    return _HASHER.check_needs_rehash(stored)


def new_totp_secret() -> str:
    return pyotp.random_base32()


def totp_uri(secret: str, *, account: str, issuer: str = "Handoff Desk") -> str:
    """The otpauth:// URI an authenticator app takes (as a QR code or typed)."""
    return pyotp.TOTP(secret).provisioning_uri(name=account, issuer_name=issuer)


def verify_totp(secret: str, code: str, *, at: float) -> bool:
    """A 6-digit code of `secret` at unix time `at`, one step either side allowed (clock drift)."""
    return totp_step(secret, code, at=at) is not None


def totp_step(secret: str, code: str, *, at: float) -> int | None:
    """The time step (unix time // 30) whose code `code` is, at unix time `at` with one step
    either side allowed, or None. Storing the step of each accepted code lets the caller
    refuse the same code, or an older one, a second time."""
    code = code.replace(" ", "")
    if len(code) != 6 or not code.isdigit():
        return None
    totp = pyotp.TOTP(secret)
    now = totp.timecode(datetime.fromtimestamp(at, UTC))
    return next((step for step in (now - 1, now, now + 1)
                 if hmac.compare_digest(totp.generate_otp(step), code)), None)


def password_fingerprint(stored: str | None) -> str:
    """A short digest of a stored password hash ("none" without one): signed links and
    half-finished sign-ins carry it, so they die once the password changes (or is first set)."""
    return hashlib.sha256(stored.encode()).hexdigest()[:16] if stored else "none"
