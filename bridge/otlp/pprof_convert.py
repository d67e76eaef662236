"""Pure: a pprof ``google.v1.Profile`` → an OTLP ``ExportProfilesServiceRequest`` (profiles v1development).

Shaped like the OpenTelemetry Collector's pprof receiver output, so the link gateway treats pulled and received data
the same way:

- one OTLP ``Profile`` per pprof sample type (``cpu``/``nanoseconds``, ``samples``/``count``, …), all sharing one
  dictionary; each sample keeps its value for that type;
- pprof labels → sample attributes with the **key unchanged** (``span_id`` stays ``span_id``); string labels become
  string values, numeric labels integer values with their unit;
- ``time_nanos`` / ``duration_nanos`` → ``time_unix_nano`` / ``duration_nano``; ``period_type`` / ``period`` kept;
- mappings, functions, locations (inlined lines in pprof order: innermost first) and one stack per distinct
  location list; index 0 of every table is its zero value, ``link_table[0]`` the 16 + 8 zero-byte sentinel;
- the resource carries ``service.name``.
"""

from __future__ import annotations

from typing import Final

from opentelemetry.proto.collector.profiles.v1development import profiles_service_pb2 as svc
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.profiles.v1development import profiles_pb2 as ppb

from bridge._proto import profile_pb2 as pprof
from bridge.errors import InvalidArgument

SCOPE_NAME: Final = "profile-bridge/pprof-pull"


class _Strings:
    def __init__(self, table: list[str]) -> None:
        self.table = table
        self.index: dict[str, int] = {}
        self.add("")

    def add(self, text: str) -> int:
        found = self.index.get(text)
        if found is None:
            found = self.index[text] = len(self.table)
            self.table.append(text)
        return found


def pprof_to_otlp(profile: pprof.Profile, service_name: str) -> svc.ExportProfilesServiceRequest:
    """Convert one decoded pprof. Raises ``InvalidArgument`` when the pprof refers to things it does not hold."""
    conv = _Converter(profile)
    locations = conv.locations(conv.mappings(), conv.functions())
    sample_stacks, sample_attrs = conv.samples(locations)
    conv.profiles(service_name, sample_stacks, sample_attrs)
    conv.req.dictionary.string_table.extend(conv.strings.table)
    return conv.req


class _Converter:
    """One conversion: the pprof in, the request and its dictionary being filled, the shared string table."""

    def __init__(self, profile: pprof.Profile) -> None:
        self.profile = profile
        self.req = svc.ExportProfilesServiceRequest()
        self.dict = self.req.dictionary
        self.strings = _Strings([])

    def text(self, i: int, what: str) -> str:
        st = self.profile.string_table
        if not 0 <= i < len(st):
            raise InvalidArgument(f"pprof {what} refers to string {i}, outside its string table of {len(st)}")
        return st[i]

    def intern(self, i: int, what: str) -> int:
        return self.strings.add(self.text(i, what))

    def mappings(self) -> dict[int, int]:
        d = self.dict
        d.mapping_table.add()
        mapping_index: dict[int, int] = {}
        for m in self.profile.mapping:
            mapping_index[m.id] = len(d.mapping_table)
            d.mapping_table.add(
                memory_start=m.memory_start,
                memory_limit=m.memory_limit,
                file_offset=m.file_offset,
                filename_strindex=self.intern(m.filename, "mapping filename"),
            )
        return mapping_index

    def functions(self) -> dict[int, int]:
        d = self.dict
        d.function_table.add()
        function_index: dict[int, int] = {}
        for fn in self.profile.function:
            function_index[fn.id] = len(d.function_table)
            d.function_table.add(
                name_strindex=self.intern(fn.name, "function name"),
                system_name_strindex=self.intern(fn.system_name, "function system name"),
                filename_strindex=self.intern(fn.filename, "function filename"),
                start_line=fn.start_line,
            )
        return function_index

    def locations(self, mapping_index: dict[int, int], function_index: dict[int, int]) -> dict[int, int]:
        d = self.dict
        d.location_table.add()
        location_index: dict[int, int] = {}
        for loc in self.profile.location:
            location_index[loc.id] = len(d.location_table)
            out = d.location_table.add(address=loc.address)
            if loc.mapping_id:
                if loc.mapping_id not in mapping_index:
                    raise InvalidArgument(f"pprof location {loc.id} refers to unknown mapping {loc.mapping_id}")
                out.mapping_index = mapping_index[loc.mapping_id]
            for line in loc.line:
                if line.function_id not in function_index:
                    raise InvalidArgument(f"pprof location {loc.id} refers to unknown function {line.function_id}")
                out.lines.add(function_index=function_index[line.function_id], line=line.line, column=line.column)
        return location_index

    def samples(self, location_index: dict[int, int]) -> tuple[list[int], list[list[int]]]:
        """Each sample's stack index and attribute indices (one stack per distinct location list, one attribute per
        distinct (key, value, unit)); ``link_table[0]`` the zero sentinel."""
        d = self.dict
        d.stack_table.add()
        stack_index: dict[tuple[int, ...], int] = {}
        d.attribute_table.add()
        attribute_index: dict[tuple[str, str | int, str], int] = {}
        d.link_table.add(trace_id=bytes(16), span_id=bytes(8))
        sample_stacks: list[int] = []
        sample_attrs: list[list[int]] = []
        for sample in self.profile.sample:
            ids = tuple(sample.location_id)
            si = stack_index.get(ids)
            if si is None:
                try:
                    locs = [location_index[i] for i in ids]
                except KeyError as exc:
                    raise InvalidArgument(f"pprof sample refers to unknown location {exc.args[0]}") from exc
                si = stack_index[ids] = len(d.stack_table)
                d.stack_table.add(location_indices=locs)
            sample_stacks.append(si)
            sample_attrs.append([self.attribute(label, attribute_index) for label in sample.label])
        return sample_stacks, sample_attrs

    def attribute(self, label: pprof.Label, seen: dict[tuple[str, str | int, str], int]) -> int:
        key = self.text(label.key, "label key")
        value: str | int
        unit = ""
        if label.str:
            value = self.text(label.str, "label value")
        else:
            value = label.num
            unit = self.text(label.num_unit, "label unit")
        ak = (key, value, unit)
        ai = seen.get(ak)
        if ai is None:
            ai = seen[ak] = len(self.dict.attribute_table)
            kv = self.dict.attribute_table.add(key_strindex=self.strings.add(key))
            if isinstance(value, str):
                kv.value.string_value = value
            else:
                kv.value.int_value = value
            if unit:
                kv.unit_strindex = self.strings.add(unit)
        return ai

    def profiles(self, service_name: str, sample_stacks: list[int], sample_attrs: list[list[int]]) -> None:
        """One OTLP profile per pprof sample type, under one resource (``service.name``) and scope."""
        profile = self.profile
        resource = self.req.resource_profiles.add()
        resource.resource.attributes.append(
            common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value=service_name))
        )
        scope = resource.scope_profiles.add()
        scope.scope.name = SCOPE_NAME
        period_type = ppb.ValueType(
            type_strindex=self.intern(profile.period_type.type, "period type"),
            unit_strindex=self.intern(profile.period_type.unit, "period unit"),
        )
        for k, vt in enumerate(profile.sample_type):
            out_profile = scope.profiles.add(
                time_unix_nano=max(profile.time_nanos, 0),
                duration_nano=profile.duration_nanos,
                period=profile.period,
            )
            out_profile.sample_type.type_strindex = self.intern(vt.type, "sample type")
            out_profile.sample_type.unit_strindex = self.intern(vt.unit, "sample unit")
            out_profile.period_type.CopyFrom(period_type)
            for n, sample in enumerate(profile.sample):
                if len(sample.value) <= k:
                    raise InvalidArgument(
                        f"pprof sample has {len(sample.value)} values for {len(profile.sample_type)} sample types"
                    )
                out_profile.samples.add(
                    stack_index=sample_stacks[n], attribute_indices=sample_attrs[n], values=[sample.value[k]]
                )
