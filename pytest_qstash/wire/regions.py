"""QStash's regions, in the three spellings they come in.

A multi-region account names a region ``us-east-1`` (its host, ``qstash-us-east-1``), marks
each delivery with ``Upstash-Region: US-EAST-1``, and its SDKs read ``QSTASH_REGION=US_EAST_1``
and variables prefixed ``US_EAST_1_``. ``region_named`` takes any of those spellings.

Only the standard library: the command line and the fake both ask.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Region:
    #: As the command line and the marker take it: ``us-east-1``.
    name: str

    @property
    def header(self) -> str:
        """The ``Upstash-Region`` value QStash delivers with: ``US-EAST-1``."""
        return self.name.upper()

    @property
    def env_name(self) -> str:
        """``QSTASH_REGION``'s value and the variables' prefix: ``US_EAST_1``."""
        return self.name.upper().replace("-", "_")

    def env(self, url: str, token: str, current_key: str, next_key: str) -> dict[str, str]:
        """The variables the SDKs read in multi-region mode, for this region on ``url``."""
        prefix = self.env_name
        return {
            "QSTASH_REGION": prefix,
            f"{prefix}_QSTASH_URL": url,
            f"{prefix}_QSTASH_TOKEN": token,
            f"{prefix}_QSTASH_CURRENT_SIGNING_KEY": current_key,
            f"{prefix}_QSTASH_NEXT_SIGNING_KEY": next_key,
        }


REGIONS = ("us-east-1", "eu-central-1")
ACCEPTED = ", ".join(REGIONS) + " (or US_EAST_1, EU-CENTRAL-1 ...)"


def region_named(value: object) -> Region:
    """The region ``value`` names, in any case, with ``-`` or ``_``; ValueError otherwise."""
    if not isinstance(value, str):
        raise TypeError(f"invalid region {value!r}: expected one of {ACCEPTED}")
    key = value.strip().lower().replace("_", "-")
    if key not in REGIONS:
        raise ValueError(f"unknown region {value!r}: expected one of {ACCEPTED}")
    return Region(key)
