"""The bundle's files and columns, derived from the types that produce them.

`requests.parquet` has one column per `RequestRecord` field, typed from the field's
annotation; `server.parquet` has the exporter's fixed sample fields, every canonical
quantity (and, written alongside, each latency histogram's count and sum). Nothing here lists a column by
hand that a type already names, so a field added to the record or a quantity added to the
exporter reaches the bundle, its writer and its reader at once.
"""

from __future__ import annotations

import types
import typing
from dataclasses import fields

import pyarrow as pa

from exporter.quantities import QUANTITIES
from harness.workload.record import RequestRecord

RUN_JSON = "run.json"
REQUESTS = "requests.parquet"
SERVER = "server.parquet"
SUMMARY = "summary.json"
SWEEP_JSON = "sweep.json"  # a sweep's folder: its points are bundles
REQUIRED_FILES = (RUN_JSON, REQUESTS, SERVER)

# The request columns no analysis can do without: when a request left, what it asked
# for and what it got. A requests.parquet lacking one is not a bundle's.
REQUIRED_REQUEST_COLUMNS = ("send_time_unix", "prompt_tokens", "output_tokens")


def _arrow_type(hint: object) -> pa.DataType:
    """The parquet type of a record field: `X | None` is X (nullable), a Literal of strings
    is a string, `list[X]` a list of X."""
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        return _arrow_type(args[0])
    if typing.get_origin(hint) is typing.Literal:
        return _arrow_type(type(args[0]))
    if typing.get_origin(hint) is list:
        return pa.list_(_arrow_type(args[0]))
    return {str: pa.string(), float: pa.float64(), int: pa.int64(), bool: pa.bool_()}[hint]


def arrow_schema(cls: type) -> pa.Schema:
    """One column per field of the dataclass `cls`, typed from its annotations."""
    hints = typing.get_type_hints(cls)
    return pa.schema([(f.name, _arrow_type(hints[f.name])) for f in fields(cls)])


REQUEST_SCHEMA = arrow_schema(RequestRecord)
REQUEST_COLUMNS: tuple[str, ...] = tuple(REQUEST_SCHEMA.names)

SERVER_FIXED = pa.schema(
    [
        ("time_unix", pa.float64()),
        ("target", pa.string()),
        ("up", pa.bool_()),
        ("dialect", pa.string()),
        ("model", pa.string()),
        ("instance", pa.string()),
        ("reason", pa.string()),
    ]
)
SERVER_COLUMNS: tuple[str, ...] = (*SERVER_FIXED.names, *QUANTITIES)

# Columns read as text (a missing one is filled with None, not NaN).
TEXT_COLUMNS = frozenset(
    name
    for schema in (REQUEST_SCHEMA, SERVER_FIXED)
    for name, kind in zip(schema.names, schema.types)
    if kind == pa.string() or pa.types.is_list(kind)
)
