#!/usr/bin/env python3
"""Reads a TensorBoard event file independently of Tessera, to hold its writer to the format.

TFRecord framing is checked with a bitwise CRC-32C written here; each Event is decoded by the
protobuf runtime (Debian's python3-protobuf) from message types declared at run time with the field
numbers of tensorboard/compat/proto/event.proto and summary.proto.
Usage: read_tfevents.py EVENTS_FILE OUT_JSON
Writes {"file_version": ..., "scalars": [[step, tag, value], ...], "wall_times": [...],
"session_starts": [the step of each SessionLog START]}.
"""
import json
import struct
import sys

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory


def crc32c(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def event_class():
    f = descriptor_pb2.FileDescriptorProto(name="tb_event.proto", package="tb", syntax="proto3")
    T = descriptor_pb2.FieldDescriptorProto

    def add(message, name, number, type_, type_name=None, repeated=False):
        field = message.field.add(name=name, number=number, type=type_,
                                  label=T.LABEL_REPEATED if repeated else T.LABEL_OPTIONAL)
        if type_name:
            field.type_name = type_name

    value = f.message_type.add(name="Value")
    add(value, "tag", 1, T.TYPE_STRING)
    add(value, "simple_value", 2, T.TYPE_FLOAT)
    summary = f.message_type.add(name="Summary")
    add(summary, "value", 1, T.TYPE_MESSAGE, ".tb.Value", repeated=True)
    session_log = f.message_type.add(name="SessionLog")
    add(session_log, "status", 1, T.TYPE_INT32)  # an enum on the wire: START = 1
    event = f.message_type.add(name="Event")
    add(event, "wall_time", 1, T.TYPE_DOUBLE)
    add(event, "step", 2, T.TYPE_INT64)
    add(event, "file_version", 3, T.TYPE_STRING)
    add(event, "summary", 5, T.TYPE_MESSAGE, ".tb.Summary")
    add(event, "session_log", 7, T.TYPE_MESSAGE, ".tb.SessionLog")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(f)
    descriptor = pool.FindMessageTypeByName("tb.Event")
    if hasattr(message_factory, "GetMessageClass"):
        return message_factory.GetMessageClass(descriptor)
    return message_factory.MessageFactory(pool).GetPrototype(descriptor)


def main(path, out):
    Event = event_class()
    data = open(path, "rb").read()
    result = {"file_version": None, "scalars": [], "wall_times": [], "session_starts": []}
    at = 0
    while at < len(data):
        header = data[at:at + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[at + 8:at + 12])
        assert length_crc == masked(crc32c(header)), "bad length CRC at byte %d" % at
        body = data[at + 12:at + 12 + length]
        (body_crc,) = struct.unpack("<I", data[at + 12 + length:at + 16 + length])
        assert body_crc == masked(crc32c(body)), "bad data CRC at byte %d" % at
        at += 16 + length
        event = Event()
        event.ParseFromString(body)
        result["wall_times"].append(event.wall_time)
        if event.file_version:
            result["file_version"] = event.file_version
        if event.HasField("session_log") and event.session_log.status == 1:
            result["session_starts"].append(event.step)
        for value in event.summary.value:
            result["scalars"].append([event.step, value.tag, value.simple_value])
    json.dump(result, open(out, "w"))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
