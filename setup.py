"""Build settings that pyproject.toml cannot express: the optional C accelerators.

``bridge.otlp._fastlink`` links OTLP profile samples on the wire bytes (see bridge/otlp/fastlink.py);
``bridge.jfr._fastjfr`` reads the JFR reader's runs of varints (bridge/jfr/cursor.py). Both are optional: without a
C compiler (python slim images) the build skips them and the pure Python paths run instead.
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "bridge.otlp._fastlink",
            sources=["bridge/otlp/_fastlink.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
            optional=True,
        ),
        Extension(
            "bridge.jfr._fastjfr",
            sources=["bridge/jfr/_fastjfr.c"],
            extra_compile_args=["-O2", "-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers"],
            optional=True,
        ),
    ],
)
