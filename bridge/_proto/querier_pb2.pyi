from bridge._proto import types_pb2 as _types_pb2
from bridge._proto import profile_pb2 as _profile_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ProfileFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROFILE_FORMAT_UNSPECIFIED: _ClassVar[ProfileFormat]
    PROFILE_FORMAT_FLAMEGRAPH: _ClassVar[ProfileFormat]
    PROFILE_FORMAT_TREE: _ClassVar[ProfileFormat]
    PROFILE_FORMAT_DOT: _ClassVar[ProfileFormat]
    PROFILE_FORMAT_PPROF: _ClassVar[ProfileFormat]
PROFILE_FORMAT_UNSPECIFIED: ProfileFormat
PROFILE_FORMAT_FLAMEGRAPH: ProfileFormat
PROFILE_FORMAT_TREE: ProfileFormat
PROFILE_FORMAT_DOT: ProfileFormat
PROFILE_FORMAT_PPROF: ProfileFormat

class ProfileTypesRequest(_message.Message):
    __slots__ = ("start", "end")
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    start: int
    end: int
    def __init__(self, start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class ProfileTypesResponse(_message.Message):
    __slots__ = ("profile_types",)
    PROFILE_TYPES_FIELD_NUMBER: _ClassVar[int]
    profile_types: _containers.RepeatedCompositeFieldContainer[_types_pb2.ProfileType]
    def __init__(self, profile_types: _Optional[_Iterable[_Union[_types_pb2.ProfileType, _Mapping]]] = ...) -> None: ...

class SelectMergeStacktracesRequest(_message.Message):
    __slots__ = ("profile_typeID", "label_selector", "start", "end", "max_nodes", "format", "stack_trace_selector", "profile_id_selector", "trace_id_selector", "span_selector")
    PROFILE_TYPEID_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    MAX_NODES_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    STACK_TRACE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    PROFILE_ID_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    SPAN_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    profile_typeID: str
    label_selector: str
    start: int
    end: int
    max_nodes: int
    format: ProfileFormat
    stack_trace_selector: _types_pb2.StackTraceSelector
    profile_id_selector: _containers.RepeatedScalarFieldContainer[str]
    trace_id_selector: _containers.RepeatedScalarFieldContainer[str]
    span_selector: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, profile_typeID: _Optional[str] = ..., label_selector: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., max_nodes: _Optional[int] = ..., format: _Optional[_Union[ProfileFormat, str]] = ..., stack_trace_selector: _Optional[_Union[_types_pb2.StackTraceSelector, _Mapping]] = ..., profile_id_selector: _Optional[_Iterable[str]] = ..., trace_id_selector: _Optional[_Iterable[str]] = ..., span_selector: _Optional[_Iterable[str]] = ...) -> None: ...

class SelectMergeStacktracesResponse(_message.Message):
    __slots__ = ("flamegraph", "tree", "dot")
    FLAMEGRAPH_FIELD_NUMBER: _ClassVar[int]
    TREE_FIELD_NUMBER: _ClassVar[int]
    DOT_FIELD_NUMBER: _ClassVar[int]
    flamegraph: FlameGraph
    tree: bytes
    dot: str
    def __init__(self, flamegraph: _Optional[_Union[FlameGraph, _Mapping]] = ..., tree: _Optional[bytes] = ..., dot: _Optional[str] = ...) -> None: ...

class SelectMergeSpanProfileRequest(_message.Message):
    __slots__ = ("profile_typeID", "label_selector", "span_selector", "start", "end", "max_nodes", "format")
    PROFILE_TYPEID_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    SPAN_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    MAX_NODES_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    profile_typeID: str
    label_selector: str
    span_selector: _containers.RepeatedScalarFieldContainer[str]
    start: int
    end: int
    max_nodes: int
    format: ProfileFormat
    def __init__(self, profile_typeID: _Optional[str] = ..., label_selector: _Optional[str] = ..., span_selector: _Optional[_Iterable[str]] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., max_nodes: _Optional[int] = ..., format: _Optional[_Union[ProfileFormat, str]] = ...) -> None: ...

class SelectMergeSpanProfileResponse(_message.Message):
    __slots__ = ("flamegraph", "tree")
    FLAMEGRAPH_FIELD_NUMBER: _ClassVar[int]
    TREE_FIELD_NUMBER: _ClassVar[int]
    flamegraph: FlameGraph
    tree: bytes
    def __init__(self, flamegraph: _Optional[_Union[FlameGraph, _Mapping]] = ..., tree: _Optional[bytes] = ...) -> None: ...

class FlameGraph(_message.Message):
    __slots__ = ("names", "levels", "total", "max_self")
    NAMES_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MAX_SELF_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    levels: _containers.RepeatedCompositeFieldContainer[Level]
    total: int
    max_self: int
    def __init__(self, names: _Optional[_Iterable[str]] = ..., levels: _Optional[_Iterable[_Union[Level, _Mapping]]] = ..., total: _Optional[int] = ..., max_self: _Optional[int] = ...) -> None: ...

class Level(_message.Message):
    __slots__ = ("values",)
    VALUES_FIELD_NUMBER: _ClassVar[int]
    values: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, values: _Optional[_Iterable[int]] = ...) -> None: ...

class FlameGraphDiff(_message.Message):
    __slots__ = ("names", "levels", "total", "max_self", "leftTicks", "rightTicks")
    NAMES_FIELD_NUMBER: _ClassVar[int]
    LEVELS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MAX_SELF_FIELD_NUMBER: _ClassVar[int]
    LEFTTICKS_FIELD_NUMBER: _ClassVar[int]
    RIGHTTICKS_FIELD_NUMBER: _ClassVar[int]
    names: _containers.RepeatedScalarFieldContainer[str]
    levels: _containers.RepeatedCompositeFieldContainer[Level]
    total: int
    max_self: int
    leftTicks: int
    rightTicks: int
    def __init__(self, names: _Optional[_Iterable[str]] = ..., levels: _Optional[_Iterable[_Union[Level, _Mapping]]] = ..., total: _Optional[int] = ..., max_self: _Optional[int] = ..., leftTicks: _Optional[int] = ..., rightTicks: _Optional[int] = ...) -> None: ...

class DiffRequest(_message.Message):
    __slots__ = ("left", "right")
    LEFT_FIELD_NUMBER: _ClassVar[int]
    RIGHT_FIELD_NUMBER: _ClassVar[int]
    left: SelectMergeStacktracesRequest
    right: SelectMergeStacktracesRequest
    def __init__(self, left: _Optional[_Union[SelectMergeStacktracesRequest, _Mapping]] = ..., right: _Optional[_Union[SelectMergeStacktracesRequest, _Mapping]] = ...) -> None: ...

class DiffResponse(_message.Message):
    __slots__ = ("flamegraph",)
    FLAMEGRAPH_FIELD_NUMBER: _ClassVar[int]
    flamegraph: FlameGraphDiff
    def __init__(self, flamegraph: _Optional[_Union[FlameGraphDiff, _Mapping]] = ...) -> None: ...

class SelectSeriesRequest(_message.Message):
    __slots__ = ("profile_typeID", "label_selector", "start", "end", "group_by", "step", "aggregation", "stack_trace_selector", "limit", "exemplar_type")
    PROFILE_TYPEID_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    GROUP_BY_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    AGGREGATION_FIELD_NUMBER: _ClassVar[int]
    STACK_TRACE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    EXEMPLAR_TYPE_FIELD_NUMBER: _ClassVar[int]
    profile_typeID: str
    label_selector: str
    start: int
    end: int
    group_by: _containers.RepeatedScalarFieldContainer[str]
    step: float
    aggregation: _types_pb2.TimeSeriesAggregationType
    stack_trace_selector: _types_pb2.StackTraceSelector
    limit: int
    exemplar_type: _types_pb2.ExemplarType
    def __init__(self, profile_typeID: _Optional[str] = ..., label_selector: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., group_by: _Optional[_Iterable[str]] = ..., step: _Optional[float] = ..., aggregation: _Optional[_Union[_types_pb2.TimeSeriesAggregationType, str]] = ..., stack_trace_selector: _Optional[_Union[_types_pb2.StackTraceSelector, _Mapping]] = ..., limit: _Optional[int] = ..., exemplar_type: _Optional[_Union[_types_pb2.ExemplarType, str]] = ...) -> None: ...

class SelectSeriesResponse(_message.Message):
    __slots__ = ("series",)
    SERIES_FIELD_NUMBER: _ClassVar[int]
    series: _containers.RepeatedCompositeFieldContainer[_types_pb2.Series]
    def __init__(self, series: _Optional[_Iterable[_Union[_types_pb2.Series, _Mapping]]] = ...) -> None: ...

class SeriesRequest(_message.Message):
    __slots__ = ("matchers", "label_names", "start", "end")
    MATCHERS_FIELD_NUMBER: _ClassVar[int]
    LABEL_NAMES_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    matchers: _containers.RepeatedScalarFieldContainer[str]
    label_names: _containers.RepeatedScalarFieldContainer[str]
    start: int
    end: int
    def __init__(self, matchers: _Optional[_Iterable[str]] = ..., label_names: _Optional[_Iterable[str]] = ..., start: _Optional[int] = ..., end: _Optional[int] = ...) -> None: ...

class SeriesResponse(_message.Message):
    __slots__ = ("labels_set",)
    LABELS_SET_FIELD_NUMBER: _ClassVar[int]
    labels_set: _containers.RepeatedCompositeFieldContainer[_types_pb2.Labels]
    def __init__(self, labels_set: _Optional[_Iterable[_Union[_types_pb2.Labels, _Mapping]]] = ...) -> None: ...

class SelectMergeProfileRequest(_message.Message):
    __slots__ = ("profile_typeID", "label_selector", "start", "end", "max_nodes", "stack_trace_selector", "profile_id_selector", "trace_id_selector")
    PROFILE_TYPEID_FIELD_NUMBER: _ClassVar[int]
    LABEL_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    START_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    MAX_NODES_FIELD_NUMBER: _ClassVar[int]
    STACK_TRACE_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    PROFILE_ID_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    TRACE_ID_SELECTOR_FIELD_NUMBER: _ClassVar[int]
    profile_typeID: str
    label_selector: str
    start: int
    end: int
    max_nodes: int
    stack_trace_selector: _types_pb2.StackTraceSelector
    profile_id_selector: _containers.RepeatedScalarFieldContainer[str]
    trace_id_selector: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, profile_typeID: _Optional[str] = ..., label_selector: _Optional[str] = ..., start: _Optional[int] = ..., end: _Optional[int] = ..., max_nodes: _Optional[int] = ..., stack_trace_selector: _Optional[_Union[_types_pb2.StackTraceSelector, _Mapping]] = ..., profile_id_selector: _Optional[_Iterable[str]] = ..., trace_id_selector: _Optional[_Iterable[str]] = ...) -> None: ...
