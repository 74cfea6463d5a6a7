"""Test protos, and their generated classes made at run time by grpcio-tools' bundled protoc.

The generated ``_pb2`` modules are the independent encoder the protobuf tests hold kqlab's
decoder to: written by the protobuf package's own code generator, imported from a temporary
folder, never committed.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path
from types import ModuleType

#: file name -> text; every import is another file of this set (or a well-known type)
PROTOS = {
    "kqt/common/money.proto": """
syntax = "proto3";
package kqt.common;
message Money { string currency = 1; int64 units = 2; int32 nanos = 3; }
""",
    "kqt/orders.proto": """
syntax = "proto3";
package kqt;
import "kqt/common/money.proto";
import "google/protobuf/timestamp.proto";
import "google/protobuf/duration.proto";
import "google/protobuf/wrappers.proto";
import "google/protobuf/struct.proto";
import "google/protobuf/any.proto";
import "google/protobuf/empty.proto";
import "google/protobuf/field_mask.proto";

enum Status { STATUS_UNSPECIFIED = 0; PLACED = 1; SHIPPED = 2; }

message Order {
  string id = 1;
  int64 qty = 2;
  Status status = 3;
  kqt.common.Money total = 4;
  repeated string tags = 5;
  map<string, int32> counts = 6;
  oneof contact { string email = 7; string phone = 8; }
  google.protobuf.Timestamp placed_at = 9;
  google.protobuf.Duration wait = 10;
  optional double score = 11;
  message Line { string sku = 1; int32 n = 2; }
  repeated Line lines = 12;
  map<int64, kqt.common.Money> by_shop = 13;
}

message Scalars {
  double d = 1; float f = 2; int32 i32 = 3; int64 i64 = 4; uint32 u32 = 5; uint64 u64 = 6;
  sint32 s32 = 7; sint64 s64 = 8; fixed32 fx32 = 9; fixed64 fx64 = 10; sfixed32 sf32 = 11;
  sfixed64 sf64 = 12; bool b = 13; string s = 14; bytes raw = 15;
  repeated int32 packed = 16; repeated Status statuses = 17;
}

message Known {
  google.protobuf.Timestamp ts = 1;
  google.protobuf.Duration dur = 2;
  google.protobuf.DoubleValue dv = 3;
  google.protobuf.FloatValue fv = 4;
  google.protobuf.Int64Value i64v = 5;
  google.protobuf.UInt64Value u64v = 6;
  google.protobuf.Int32Value i32v = 7;
  google.protobuf.UInt32Value u32v = 8;
  google.protobuf.BoolValue bv = 9;
  google.protobuf.StringValue sv = 10;
  google.protobuf.BytesValue bytv = 11;
  google.protobuf.Struct st = 12;
  google.protobuf.Value val = 13;
  google.protobuf.ListValue lv = 14;
  google.protobuf.Any any = 15;
  google.protobuf.Empty empty = 16;
  google.protobuf.FieldMask mask = 17;
  repeated google.protobuf.Timestamp stamps = 18;
}

message Tree { string name = 1; repeated Tree children = 2; }
""",
    "kqt/orders_v2.proto": """
syntax = "proto3";
package kqt.v2;
message Order { string id = 1; int64 qty = 2; string added = 40; int32 also_new = 41; }
""",
}


def write_protos(root: Path, protos: dict[str, str] = PROTOS) -> Path:
    """The ``.proto`` files under ``root``; returns ``root``."""
    for name, text in protos.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def generated(root: Path, out: Path, names: list[str]) -> dict[str, ModuleType]:
    """protoc's ``--python_out`` of ``names`` (under ``root``), imported; by file name."""
    out.mkdir(parents=True, exist_ok=True)
    run = subprocess.run([sys.executable, "-m", "grpc_tools.protoc", f"-I{root}",
                          f"--python_out={out}", *names], capture_output=True, text=True,
                         check=False)
    assert run.returncode == 0, run.stderr
    sys.path.insert(0, str(out))
    try:
        return {n: importlib.import_module(n[:-len(".proto")].replace("/", ".") + "_pb2")
                for n in names}
    finally:
        sys.path.remove(str(out))
