from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PartialStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMPLETE: _ClassVar[PartialStatus]
    PARTIAL: _ClassVar[PartialStatus]
COMPLETE: PartialStatus
PARTIAL: PartialStatus

class Trace(_message.Message):
    __slots__ = ("resource_spans",)
    RESOURCE_SPANS_FIELD_NUMBER: _ClassVar[int]
    resource_spans: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, resource_spans: _Optional[_Iterable[bytes]] = ...) -> None: ...

class TraceByIDMetrics(_message.Message):
    __slots__ = ("inspectedBytes", "backendReads", "backendBytes", "additionalMetrics")
    class AdditionalMetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    INSPECTEDBYTES_FIELD_NUMBER: _ClassVar[int]
    BACKENDREADS_FIELD_NUMBER: _ClassVar[int]
    BACKENDBYTES_FIELD_NUMBER: _ClassVar[int]
    ADDITIONALMETRICS_FIELD_NUMBER: _ClassVar[int]
    inspectedBytes: int
    backendReads: int
    backendBytes: int
    additionalMetrics: _containers.ScalarMap[str, int]
    def __init__(self, inspectedBytes: _Optional[int] = ..., backendReads: _Optional[int] = ..., backendBytes: _Optional[int] = ..., additionalMetrics: _Optional[_Mapping[str, int]] = ...) -> None: ...

class TraceByIDResponse(_message.Message):
    __slots__ = ("trace", "metrics", "status", "message")
    TRACE_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    trace: Trace
    metrics: TraceByIDMetrics
    status: PartialStatus
    message: str
    def __init__(self, trace: _Optional[_Union[Trace, _Mapping]] = ..., metrics: _Optional[_Union[TraceByIDMetrics, _Mapping]] = ..., status: _Optional[_Union[PartialStatus, str]] = ..., message: _Optional[str] = ...) -> None: ...
