"""The wire reader's frame cutter (`binloop.nats.wire.cut_frames`): whatever bytes the
socket hands over at a time — a stream cut at every byte boundary, or at many random
ones — the same messages reach the same subscriptions, in order, and the same
protocol lines reach the connection, as when the whole stream arrives at once."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import given, settings
from hypothesis import strategies as st

from binloop.nats.wire import Subscription, WireMsg, cut_frames

KNOWN_SIDS = (1, 2, 7)


@dataclass(frozen=True)
class Frame:
    wire: bytes
    # What the frame delivers: (sid, message) for a known sid, or a control line.
    delivers: tuple[int, WireMsg] | None = None
    control: bytes | None = None


tokens = st.text("abcXYZ019_-*>$", min_size=1, max_size=12)
subjects = st.lists(tokens, min_size=1, max_size=4).map(".".join)
# Payloads and header values hold the protocol's own delimiters.
payloads = st.binary(max_size=64) | st.sampled_from(
    [b"", b"\r\n", b"MSG x 1 3\r\nabc\r\n", b"PING\r\n", b"\r", b"\n"])
sids = st.sampled_from((*KNOWN_SIDS, 99))  # 99: unsubscribed meanwhile
replies = st.none() | subjects.map(lambda s: f"_INBOX.{s}")


@st.composite
def msg_frames(draw: st.DrawFn) -> Frame:
    subject, sid, reply, data = draw(subjects), draw(sids), draw(replies), draw(payloads)
    reply_part = f" {reply}" if reply else ""
    wire = f"MSG {subject} {sid}{reply_part} {len(data)}\r\n".encode() + data + b"\r\n"
    delivered = (sid, ((reply or "").encode(), b"", data)) if sid in KNOWN_SIDS else None
    return Frame(wire, delivered)


@st.composite
def hmsg_frames(draw: st.DrawFn) -> Frame:
    subject, sid, reply, data = draw(subjects), draw(sids), draw(replies), draw(payloads)
    status = draw(st.sampled_from(["", " 100 Idle Heartbeat", " 408 Request Timeout",
                                   " 503"]))
    fields = draw(st.lists(st.tuples(st.sampled_from(["Nats-Msg-Id", "Binloop-Batch", "X"]),
                                     st.text("ab c:1\t", max_size=10)), max_size=3))
    block = (f"NATS/1.0{status}\r\n" + "".join(f"{k}: {v}\r\n" for k, v in fields)
             + "\r\n").encode()
    reply_part = f" {reply}" if reply else ""
    wire = (f"HMSG {subject} {sid}{reply_part} {len(block)} {len(block) + len(data)}\r\n"
            .encode() + block + data + b"\r\n")
    delivered = (sid, ((reply or "").encode(), block, data)) if sid in KNOWN_SIDS else None
    return Frame(wire, delivered)


control_lines = st.sampled_from([b"PING", b"PONG", b"+OK", b"-ERR 'Slow Consumer'",
                                 b'INFO {"server_id":"x","max_payload":1048576}'])
frames = st.one_of(msg_frames(), hmsg_frames(),
                   control_lines.map(lambda line: Frame(line + b"\r\n", control=line)))


def read_in_pieces(data: bytes, cuts: list[int]) -> tuple[dict[int, list[WireMsg]],
                                                           list[bytes], bytes]:
    """Feed `data` as the socket would, cut at `cuts`: each read is appended to what
    the previous cut left. Returns the deliveries per sid, the control lines, and
    the bytes left unread."""
    subs = {sid: Subscription(sid, f"_INBOX.{sid}") for sid in KNOWN_SIDS}
    controls: list[bytes] = []
    buf = b""
    start = 0
    for cut in [*sorted(cuts), len(data)]:
        buf += data[start:cut]
        start = cut
        buf = buf[cut_frames(buf, subs, controls.append):]
    return {sid: sub.pending for sid, sub in subs.items()}, controls, buf


def expected(stream: list[Frame]) -> tuple[dict[int, list[WireMsg]], list[bytes]]:
    deliveries: dict[int, list[WireMsg]] = {sid: [] for sid in KNOWN_SIDS}
    for frame in stream:
        if frame.delivers is not None:
            deliveries[frame.delivers[0]].append(frame.delivers[1])
    return deliveries, [f.control for f in stream if f.control is not None]


@settings(max_examples=40, deadline=None)
@given(st.lists(frames, min_size=1, max_size=6))
def test_a_stream_cut_at_every_byte_boundary_reads_the_same(stream: list[Frame]) -> None:
    data = b"".join(f.wire for f in stream)
    want = expected(stream)
    for cut in range(len(data) + 1):
        deliveries, controls, left = read_in_pieces(data, [cut])
        assert (deliveries, controls) == want, f"cut at byte {cut}"
        assert left == b""


@settings(max_examples=120, deadline=None)
@given(st.lists(frames, min_size=1, max_size=12), st.data())
def test_a_stream_cut_anywhere_many_times_reads_the_same(stream: list[Frame],
                                                         data: st.DataObject) -> None:
    wire = b"".join(f.wire for f in stream)
    cuts = data.draw(st.lists(st.integers(0, len(wire)), max_size=len(wire)))
    deliveries, controls, left = read_in_pieces(wire, cuts)
    assert (deliveries, controls) == expected(stream)
    assert left == b""


@given(st.lists(frames, min_size=1, max_size=4), st.data())
def test_an_incomplete_frame_waits_for_the_rest(stream: list[Frame],
                                                data: st.DataObject) -> None:
    """Nothing of a frame is handed out before its last byte is there."""
    wire = b"".join(f.wire for f in stream)
    last = stream[-1].wire
    cut = len(wire) - data.draw(st.integers(1, len(last)))
    deliveries, controls, left = read_in_pieces(wire[:cut], [])
    head = expected(stream[:-1])
    assert (deliveries, controls) == head
    assert left == wire[len(wire) - len(last):cut]
