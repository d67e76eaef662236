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

class SearchResponse(_message.Message):
    __slots__ = ("traces", "metrics")
    TRACES_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    traces: _containers.RepeatedCompositeFieldContainer[TraceSearchMetadata]
    metrics: SearchMetrics
    def __init__(self, traces: _Optional[_Iterable[_Union[TraceSearchMetadata, _Mapping]]] = ..., metrics: _Optional[_Union[SearchMetrics, _Mapping]] = ...) -> None: ...

class TraceSearchMetadata(_message.Message):
    __slots__ = ("traceID", "rootServiceName", "rootTraceName", "startTimeUnixNano", "durationMs", "spanSet", "spanSets", "serviceStats")
    class ServiceStatsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ServiceStats
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ServiceStats, _Mapping]] = ...) -> None: ...
    TRACEID_FIELD_NUMBER: _ClassVar[int]
    ROOTSERVICENAME_FIELD_NUMBER: _ClassVar[int]
    ROOTTRACENAME_FIELD_NUMBER: _ClassVar[int]
    STARTTIMEUNIXNANO_FIELD_NUMBER: _ClassVar[int]
    DURATIONMS_FIELD_NUMBER: _ClassVar[int]
    SPANSET_FIELD_NUMBER: _ClassVar[int]
    SPANSETS_FIELD_NUMBER: _ClassVar[int]
    SERVICESTATS_FIELD_NUMBER: _ClassVar[int]
    traceID: str
    rootServiceName: str
    rootTraceName: str
    startTimeUnixNano: int
    durationMs: int
    spanSet: SpanSet
    spanSets: _containers.RepeatedCompositeFieldContainer[SpanSet]
    serviceStats: _containers.MessageMap[str, ServiceStats]
    def __init__(self, traceID: _Optional[str] = ..., rootServiceName: _Optional[str] = ..., rootTraceName: _Optional[str] = ..., startTimeUnixNano: _Optional[int] = ..., durationMs: _Optional[int] = ..., spanSet: _Optional[_Union[SpanSet, _Mapping]] = ..., spanSets: _Optional[_Iterable[_Union[SpanSet, _Mapping]]] = ..., serviceStats: _Optional[_Mapping[str, ServiceStats]] = ...) -> None: ...

class ServiceStats(_message.Message):
    __slots__ = ("spanCount", "errorCount")
    SPANCOUNT_FIELD_NUMBER: _ClassVar[int]
    ERRORCOUNT_FIELD_NUMBER: _ClassVar[int]
    spanCount: int
    errorCount: int
    def __init__(self, spanCount: _Optional[int] = ..., errorCount: _Optional[int] = ...) -> None: ...

class SpanSet(_message.Message):
    __slots__ = ("spans", "matched", "attributes")
    SPANS_FIELD_NUMBER: _ClassVar[int]
    MATCHED_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    spans: _containers.RepeatedCompositeFieldContainer[Span]
    matched: int
    attributes: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, spans: _Optional[_Iterable[_Union[Span, _Mapping]]] = ..., matched: _Optional[int] = ..., attributes: _Optional[_Iterable[bytes]] = ...) -> None: ...

class Span(_message.Message):
    __slots__ = ("spanID", "name", "startTimeUnixNano", "durationNanos", "attributes")
    SPANID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    STARTTIMEUNIXNANO_FIELD_NUMBER: _ClassVar[int]
    DURATIONNANOS_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    spanID: str
    name: str
    startTimeUnixNano: int
    durationNanos: int
    attributes: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, spanID: _Optional[str] = ..., name: _Optional[str] = ..., startTimeUnixNano: _Optional[int] = ..., durationNanos: _Optional[int] = ..., attributes: _Optional[_Iterable[bytes]] = ...) -> None: ...

class SearchMetrics(_message.Message):
    __slots__ = ("inspectedTraces", "inspectedBytes", "totalBlocks", "completedJobs", "totalJobs", "totalBlockBytes", "inspectedSpans", "backendReads", "backendBytes", "additionalMetrics")
    class AdditionalMetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    INSPECTEDTRACES_FIELD_NUMBER: _ClassVar[int]
    INSPECTEDBYTES_FIELD_NUMBER: _ClassVar[int]
    TOTALBLOCKS_FIELD_NUMBER: _ClassVar[int]
    COMPLETEDJOBS_FIELD_NUMBER: _ClassVar[int]
    TOTALJOBS_FIELD_NUMBER: _ClassVar[int]
    TOTALBLOCKBYTES_FIELD_NUMBER: _ClassVar[int]
    INSPECTEDSPANS_FIELD_NUMBER: _ClassVar[int]
    BACKENDREADS_FIELD_NUMBER: _ClassVar[int]
    BACKENDBYTES_FIELD_NUMBER: _ClassVar[int]
    ADDITIONALMETRICS_FIELD_NUMBER: _ClassVar[int]
    inspectedTraces: int
    inspectedBytes: int
    totalBlocks: int
    completedJobs: int
    totalJobs: int
    totalBlockBytes: int
    inspectedSpans: int
    backendReads: int
    backendBytes: int
    additionalMetrics: _containers.ScalarMap[str, int]
    def __init__(self, inspectedTraces: _Optional[int] = ..., inspectedBytes: _Optional[int] = ..., totalBlocks: _Optional[int] = ..., completedJobs: _Optional[int] = ..., totalJobs: _Optional[int] = ..., totalBlockBytes: _Optional[int] = ..., inspectedSpans: _Optional[int] = ..., backendReads: _Optional[int] = ..., backendBytes: _Optional[int] = ..., additionalMetrics: _Optional[_Mapping[str, int]] = ...) -> None: ...

class QueryInstantResponse(_message.Message):
    __slots__ = ("series", "metrics", "status", "message")
    SERIES_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    series: _containers.RepeatedCompositeFieldContainer[InstantSeries]
    metrics: SearchMetrics
    status: PartialStatus
    message: str
    def __init__(self, series: _Optional[_Iterable[_Union[InstantSeries, _Mapping]]] = ..., metrics: _Optional[_Union[SearchMetrics, _Mapping]] = ..., status: _Optional[_Union[PartialStatus, str]] = ..., message: _Optional[str] = ...) -> None: ...

class InstantSeries(_message.Message):
    __slots__ = ("labels", "value")
    LABELS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.RepeatedScalarFieldContainer[bytes]
    value: float
    def __init__(self, labels: _Optional[_Iterable[bytes]] = ..., value: _Optional[float] = ...) -> None: ...

class QueryRangeResponse(_message.Message):
    __slots__ = ("series", "metrics", "status", "message")
    SERIES_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    series: _containers.RepeatedCompositeFieldContainer[TimeSeries]
    metrics: SearchMetrics
    status: PartialStatus
    message: str
    def __init__(self, series: _Optional[_Iterable[_Union[TimeSeries, _Mapping]]] = ..., metrics: _Optional[_Union[SearchMetrics, _Mapping]] = ..., status: _Optional[_Union[PartialStatus, str]] = ..., message: _Optional[str] = ...) -> None: ...

class Exemplar(_message.Message):
    __slots__ = ("labels", "value", "timestamp_ms")
    LABELS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.RepeatedScalarFieldContainer[bytes]
    value: float
    timestamp_ms: int
    def __init__(self, labels: _Optional[_Iterable[bytes]] = ..., value: _Optional[float] = ..., timestamp_ms: _Optional[int] = ...) -> None: ...

class Sample(_message.Message):
    __slots__ = ("timestamp_ms", "value")
    TIMESTAMP_MS_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    timestamp_ms: int
    value: float
    def __init__(self, timestamp_ms: _Optional[int] = ..., value: _Optional[float] = ...) -> None: ...

class TimeSeries(_message.Message):
    __slots__ = ("labels", "samples", "exemplars")
    LABELS_FIELD_NUMBER: _ClassVar[int]
    SAMPLES_FIELD_NUMBER: _ClassVar[int]
    EXEMPLARS_FIELD_NUMBER: _ClassVar[int]
    labels: _containers.RepeatedScalarFieldContainer[bytes]
    samples: _containers.RepeatedCompositeFieldContainer[Sample]
    exemplars: _containers.RepeatedCompositeFieldContainer[Exemplar]
    def __init__(self, labels: _Optional[_Iterable[bytes]] = ..., samples: _Optional[_Iterable[_Union[Sample, _Mapping]]] = ..., exemplars: _Optional[_Iterable[_Union[Exemplar, _Mapping]]] = ...) -> None: ...
