from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetFeatureFlagsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetFeatureFlagsResponse(_message.Message):
    __slots__ = ("feature_flags",)
    FEATURE_FLAGS_FIELD_NUMBER: _ClassVar[int]
    feature_flags: _containers.RepeatedCompositeFieldContainer[FeatureFlag]
    def __init__(self, feature_flags: _Optional[_Iterable[_Union[FeatureFlag, _Mapping]]] = ...) -> None: ...

class FeatureFlag(_message.Message):
    __slots__ = ("name", "enabled", "description", "documentation_url")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ENABLED_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    DOCUMENTATION_URL_FIELD_NUMBER: _ClassVar[int]
    name: str
    enabled: bool
    description: str
    documentation_url: str
    def __init__(self, name: _Optional[str] = ..., enabled: _Optional[bool] = ..., description: _Optional[str] = ..., documentation_url: _Optional[str] = ...) -> None: ...
