from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ResourceSpansIdView(_message.Message):
    __slots__ = ("resource", "scope_spans")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_SPANS_FIELD_NUMBER: _ClassVar[int]
    resource: bytes
    scope_spans: _containers.RepeatedCompositeFieldContainer[ScopeSpansIdView]
    def __init__(self, resource: _Optional[bytes] = ..., scope_spans: _Optional[_Iterable[_Union[ScopeSpansIdView, _Mapping]]] = ...) -> None: ...

class ScopeSpansIdView(_message.Message):
    __slots__ = ("spans",)
    SPANS_FIELD_NUMBER: _ClassVar[int]
    spans: _containers.RepeatedCompositeFieldContainer[SpanIdView]
    def __init__(self, spans: _Optional[_Iterable[_Union[SpanIdView, _Mapping]]] = ...) -> None: ...

class ResourceSpansView(_message.Message):
    __slots__ = ("resource", "scope_spans")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_SPANS_FIELD_NUMBER: _ClassVar[int]
    resource: bytes
    scope_spans: _containers.RepeatedCompositeFieldContainer[ScopeSpansView]
    def __init__(self, resource: _Optional[bytes] = ..., scope_spans: _Optional[_Iterable[_Union[ScopeSpansView, _Mapping]]] = ...) -> None: ...

class ScopeSpansView(_message.Message):
    __slots__ = ("spans",)
    SPANS_FIELD_NUMBER: _ClassVar[int]
    spans: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, spans: _Optional[_Iterable[bytes]] = ...) -> None: ...

class SpanIdView(_message.Message):
    __slots__ = ("span_id",)
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    span_id: bytes
    def __init__(self, span_id: _Optional[bytes] = ...) -> None: ...

class AttributeKeyView(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    value: AnyValueView
    def __init__(self, key: _Optional[bytes] = ..., value: _Optional[_Union[AnyValueView, _Mapping]] = ...) -> None: ...

class AnyValueView(_message.Message):
    __slots__ = ("string_value",)
    STRING_VALUE_FIELD_NUMBER: _ClassVar[int]
    string_value: bytes
    def __init__(self, string_value: _Optional[bytes] = ...) -> None: ...

class SpanAttributesView(_message.Message):
    __slots__ = ("span_id", "attributes")
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_FIELD_NUMBER: _ClassVar[int]
    span_id: bytes
    attributes: _containers.RepeatedCompositeFieldContainer[AttributeKeyView]
    def __init__(self, span_id: _Optional[bytes] = ..., attributes: _Optional[_Iterable[_Union[AttributeKeyView, _Mapping]]] = ...) -> None: ...

class SpanFieldsView(_message.Message):
    __slots__ = ("trace_id", "span_id", "parent_span_id", "name", "kind", "start_time_unix_nano", "end_time_unix_nano", "flags")
    TRACE_ID_FIELD_NUMBER: _ClassVar[int]
    SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_SPAN_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    START_TIME_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    END_TIME_UNIX_NANO_FIELD_NUMBER: _ClassVar[int]
    FLAGS_FIELD_NUMBER: _ClassVar[int]
    trace_id: bytes
    span_id: bytes
    parent_span_id: bytes
    name: bytes
    kind: int
    start_time_unix_nano: int
    end_time_unix_nano: int
    flags: int
    def __init__(self, trace_id: _Optional[bytes] = ..., span_id: _Optional[bytes] = ..., parent_span_id: _Optional[bytes] = ..., name: _Optional[bytes] = ..., kind: _Optional[int] = ..., start_time_unix_nano: _Optional[int] = ..., end_time_unix_nano: _Optional[int] = ..., flags: _Optional[int] = ...) -> None: ...

class ScopeSpansFieldsView(_message.Message):
    __slots__ = ("spans",)
    SPANS_FIELD_NUMBER: _ClassVar[int]
    spans: _containers.RepeatedCompositeFieldContainer[SpanFieldsView]
    def __init__(self, spans: _Optional[_Iterable[_Union[SpanFieldsView, _Mapping]]] = ...) -> None: ...

class ResourceSpansFieldsView(_message.Message):
    __slots__ = ("resource", "scope_spans")
    RESOURCE_FIELD_NUMBER: _ClassVar[int]
    SCOPE_SPANS_FIELD_NUMBER: _ClassVar[int]
    resource: bytes
    scope_spans: _containers.RepeatedCompositeFieldContainer[ScopeSpansFieldsView]
    def __init__(self, resource: _Optional[bytes] = ..., scope_spans: _Optional[_Iterable[_Union[ScopeSpansFieldsView, _Mapping]]] = ...) -> None: ...
