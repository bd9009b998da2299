"""Decodes TensorBoard event files with Debian's python3-protobuf, from message definitions
written here from the wire format's field numbers (Event: wall_time 1 double, step 2 int64,
file_version 3 string, summary 5; Summary: value 1 repeated; Summary.Value: tag 1 string,
simple_value 2 float), checking every TFRecord CRC. Prints the events as JSON; exits 1 with a
message on the first framing, CRC or decoding problem.

Usage: python3 tfevents_decode.py FILE..."""
import json
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (0x82F63B78 ^ (c >> 1)) if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    F = descriptor_pb2.FieldDescriptorProto
    fdp = descriptor_pb2.FileDescriptorProto(name="tune_test_event.proto", package="tunetest",
                                             syntax="proto2")  # presence kept: a 0.0 is re-encoded
    value = fdp.message_type.add(name="Value")
    value.field.add(name="tag", number=1, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    value.field.add(name="simple_value", number=2, type=F.TYPE_FLOAT, label=F.LABEL_OPTIONAL)
    summary = fdp.message_type.add(name="Summary")
    summary.field.add(name="value", number=1, type=F.TYPE_MESSAGE, label=F.LABEL_REPEATED,
                      type_name=".tunetest.Value")
    event = fdp.message_type.add(name="Event")
    event.field.add(name="wall_time", number=1, type=F.TYPE_DOUBLE, label=F.LABEL_OPTIONAL)
    event.field.add(name="step", number=2, type=F.TYPE_INT64, label=F.LABEL_OPTIONAL)
    event.field.add(name="file_version", number=3, type=F.TYPE_STRING, label=F.LABEL_OPTIONAL)
    event.field.add(name="summary", number=5, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                    type_name=".tunetest.Summary")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    desc = pool.FindMessageTypeByName("tunetest.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(desc)
    return message_factory.MessageFactory(pool).GetPrototype(desc)


def decode(path, Event):
    with open(path, "rb") as f:
        data = f.read()
    out, pos, n = [], 0, 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise ValueError("%s: record %d: torn header" % (path, n))
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if hcrc != masked(crc32c(header)):
            raise ValueError("%s: record %d: bad length CRC" % (path, n))
        body = data[pos + 12:pos + 12 + length]
        if len(body) != length or pos + 16 + length > len(data):
            raise ValueError("%s: record %d: torn data" % (path, n))
        (dcrc,) = struct.unpack("<I", data[pos + 12 + length:pos + 16 + length])
        if dcrc != masked(crc32c(body)):
            raise ValueError("%s: record %d: bad data CRC" % (path, n))
        ev = Event()
        ev.ParseFromString(body)
        if ev.SerializeToString() != body:
            raise ValueError("%s: record %d: not canonical (unknown or misencoded fields)" % (path, n))
        out.append({"wall_time": ev.wall_time, "step": ev.step, "file_version": ev.file_version,
                    "values": [[v.tag, v.simple_value] for v in ev.summary.value]})
        pos += 16 + length
        n += 1
    return out


def main():
    Event = event_class()
    try:
        print(json.dumps({p: decode(p, Event) for p in sys.argv[1:]}))
    except ValueError as e:
        print(str(e), file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
