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
    st = profile.string_table
    n_st = len(st)

    def text(i: int, what: str) -> str:
        if not 0 <= i < n_st:
            raise InvalidArgument(f"pprof {what} refers to string {i}, outside its string table of {n_st}")
        return st[i]

    req = svc.ExportProfilesServiceRequest()
    d = req.dictionary
    strings_out: list[str] = []
    strings = _Strings(strings_out)

    d.mapping_table.add()
    mapping_index: dict[int, int] = {}
    for m in profile.mapping:
        mapping_index[m.id] = len(d.mapping_table)
        d.mapping_table.add(
            memory_start=m.memory_start,
            memory_limit=m.memory_limit,
            file_offset=m.file_offset,
            filename_strindex=strings.add(text(m.filename, "mapping filename")),
        )

    d.function_table.add()
    function_index: dict[int, int] = {}
    for fn in profile.function:
        function_index[fn.id] = len(d.function_table)
        d.function_table.add(
            name_strindex=strings.add(text(fn.name, "function name")),
            system_name_strindex=strings.add(text(fn.system_name, "function system name")),
            filename_strindex=strings.add(text(fn.filename, "function filename")),
            start_line=fn.start_line,
        )

    d.location_table.add()
    location_index: dict[int, int] = {}
    for loc in profile.location:
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

    d.stack_table.add()
    stack_index: dict[tuple[int, ...], int] = {}
    d.attribute_table.add()
    attribute_index: dict[tuple[str, str | int, str], int] = {}
    d.link_table.add(trace_id=bytes(16), span_id=bytes(8))

    sample_stacks: list[int] = []
    sample_attrs: list[list[int]] = []
    for sample in profile.sample:
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
        attrs: list[int] = []
        for label in sample.label:
            key = text(label.key, "label key")
            value: str | int
            unit = ""
            if label.str:
                value = text(label.str, "label value")
            else:
                value = label.num
                unit = text(label.num_unit, "label unit")
            ak = (key, value, unit)
            ai = attribute_index.get(ak)
            if ai is None:
                ai = attribute_index[ak] = len(d.attribute_table)
                kv = d.attribute_table.add(key_strindex=strings.add(key))
                if isinstance(value, str):
                    kv.value.string_value = value
                else:
                    kv.value.int_value = value
                if unit:
                    kv.unit_strindex = strings.add(unit)
            attrs.append(ai)
        sample_attrs.append(attrs)

    resource = req.resource_profiles.add()
    resource.resource.attributes.append(
        common_pb2.KeyValue(key="service.name", value=common_pb2.AnyValue(string_value=service_name))
    )
    scope = resource.scope_profiles.add()
    scope.scope.name = SCOPE_NAME
    period_type = ppb.ValueType(
        type_strindex=strings.add(text(profile.period_type.type, "period type")),
        unit_strindex=strings.add(text(profile.period_type.unit, "period unit")),
    )
    for k, vt in enumerate(profile.sample_type):
        out_profile = scope.profiles.add(
            time_unix_nano=max(profile.time_nanos, 0),
            duration_nano=profile.duration_nanos,
            period=profile.period,
        )
        out_profile.sample_type.type_strindex = strings.add(text(vt.type, "sample type"))
        out_profile.sample_type.unit_strindex = strings.add(text(vt.unit, "sample unit"))
        out_profile.period_type.CopyFrom(period_type)
        for n, sample in enumerate(profile.sample):
            if len(sample.value) <= k:
                raise InvalidArgument(
                    f"pprof sample has {len(sample.value)} values for {len(profile.sample_type)} sample types"
                )
            out_profile.samples.add(
                stack_index=sample_stacks[n], attribute_indices=sample_attrs[n], values=[sample.value[k]]
            )
    d.string_table.extend(strings_out)
    return req
