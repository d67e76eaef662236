"""Build settings that pyproject.toml cannot express: the optional C accelerator of the link gateway.

``bridge.otlp._fastlink`` links OTLP profile samples on the wire bytes (see bridge/otlp/fastlink.py). It is
optional: without a C compiler (python slim images) the build skips it and the pure Python path runs instead.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "bridge.otlp._fastlink",
            sources=["bridge/otlp/_fastlink.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
            optional=True,
        )
    ],
)
