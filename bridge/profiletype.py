"""Pure: Pyroscope profile type ids, ``name:sample_type:sample_unit:period_type:period_unit``
(e.g. ``process_cpu:cpu:nanoseconds:cpu:nanoseconds``), and the series labels Pyroscope derives from them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from bridge.errors import InvalidArgument

NAME_LABEL: Final = "__name__"
PROFILE_TYPE_LABEL: Final = "__profile_type__"


class BadProfileType(InvalidArgument, ValueError):
    """A profile type id that is not five ``:``-separated parts. Both a ``BridgeError`` (invalid_argument on the
    wire) and a ``ValueError`` (for callers validating user input)."""


@dataclass(frozen=True, slots=True)
class ProfileType:
    name: str
    sample_type: str
    sample_unit: str
    period_type: str
    period_unit: str

    @property
    def id(self) -> str:
        return ":".join((self.name, self.sample_type, self.sample_unit, self.period_type, self.period_unit))

    def labels(self) -> dict[str, str]:
        """The series labels Pyroscope stores for a profile of this type."""
        return {
            NAME_LABEL: self.name,
            PROFILE_TYPE_LABEL: self.id,
            "__type__": self.sample_type,
            "__unit__": self.sample_unit,
            "__period_type__": self.period_type,
            "__period_unit__": self.period_unit,
        }

    def sample_period(self, period: int) -> int:
        """What one sample adds to a value of a sampled time type (``samples``, ``cpu``, ``wall``), in its unit,
        given the profile's ``period``; 0 when the profile does not say, or for other types (allocations,
        contentions: not sampled in time). A count of samples adds 1; a time in the unit of the period
        (``cpu:nanoseconds`` under a ``cpu:nanoseconds`` period of 10,000,000: pyroscope-io, the Go SDK, the JFR
        converter) adds the period. Whether the values really are whole samples (they are not for
        ``@pyroscope/nodejs``'s measured CPU) is checked where they are counted (``bridge.sampling``)."""
        if self.sample_type not in ("samples", "cpu", "wall"):
            return 0
        if self.sample_unit == "count":
            return 1
        if period > 0 and self.sample_unit == self.period_unit and self.period_type in ("cpu", "wall"):
            return period
        return 0

    @classmethod
    def parse(cls, type_id: str) -> ProfileType:
        """Five parts; name, sample type and sample unit must not be empty (some profiles have no period)."""
        parts = type_id.split(":")
        if len(parts) != 5 or not all(parts[:3]):
            raise BadProfileType(
                f"profile type {type_id!r} is not name:sample_type:sample_unit:period_type:period_unit "
                "(e.g. process_cpu:cpu:nanoseconds:cpu:nanoseconds)"
            )
        return cls(*parts)
