"""Publishes events over herald's PublishStream RPC with grpcio, the stock
gRPC client for Python, and checks every answer (grpc_stream_test.go).

Usage: grpc_stream_publish.py STUBS ADDRESS TOPIC N PAYLOAD_LIMIT

STUBS holds the modules grpc_tools.protoc generated from
proto/herald/v1/herald.proto. N calls of one event each go on one stream,
then a call to a topic that does not exist and one whose payload is over
PAYLOAD_LIMIT: each of those two must fail on its own, and the call after
them must succeed. Prints a JSON object: "ids", each published payload's
event id, and "out_of_order", how many answers came after a later call's.
Exits non-zero, saying why, on any other outcome.
"""

import json
import sys

stubs, address, topic, count, payload_limit = sys.argv[1:]
count, payload_limit = int(count), int(payload_limit)
sys.path.insert(0, stubs)

import grpc  # noqa: E402
from herald.v1 import herald_pb2, herald_pb2_grpc  # noqa: E402

UNKNOWN, OVERSIZED, AFTER = count, count + 1, count + 2


def call(seq, topic, payload):
    return herald_pb2.PublishStreamRequest(
        sequence=seq,
        request=herald_pb2.PublishRequest(
            topic=topic,
            events=[herald_pb2.PublishEvent(key="key-%d" % (seq % 8), payload=payload)],
        ),
    )


def payload(seq):
    return b"event-%d" % seq


def calls():
    for seq in range(count):
        yield call(seq, topic, payload(seq))
    yield call(UNKNOWN, "no-such-topic", b"x")
    yield call(OVERSIZED, topic, b"x" * (payload_limit + 1))
    yield call(AFTER, topic, payload(AFTER))


def fail(msg):
    sys.exit("grpc_stream_publish.py: " + msg)


with grpc.insecure_channel(address) as channel:
    stub = herald_pb2_grpc.HeraldServiceStub(channel)
    answers = {}
    out_of_order = 0
    last = -1
    try:
        for answer in stub.PublishStream(calls()):
            if answer.sequence in answers:
                fail("call %d answered twice" % answer.sequence)
            answers[answer.sequence] = answer
            if answer.sequence < last:
                out_of_order += 1
            last = answer.sequence
    except grpc.RpcError as e:
        fail("the stream failed after %d answers: %s: %s" % (len(answers), e.code(), e.details()))

want_codes = {
    UNKNOWN: grpc.StatusCode.NOT_FOUND.value[0],
    OVERSIZED: grpc.StatusCode.INVALID_ARGUMENT.value[0],
}
ids = {}
for seq in list(range(count)) + [UNKNOWN, OVERSIZED, AFTER]:
    answer = answers.get(seq)
    if answer is None:
        fail("call %d was not answered" % seq)
    if seq in want_codes:
        if answer.WhichOneof("result") != "error" or answer.error.code != want_codes[seq]:
            fail("call %d: %s; want error code %d" % (seq, answer, want_codes[seq]))
        continue
    if answer.WhichOneof("result") != "response" or len(answer.response.ids) != 1:
        fail("call %d: %s; want one id" % (seq, answer))
    ids[payload(seq).decode()] = answer.response.ids[0]
if len(answers) != count + 3:
    fail("%d answers, want %d" % (len(answers), count + 3))
print(json.dumps({"ids": ids, "out_of_order": out_of_order}))
