"""The bench's own Redis client (pipelined commands, RESP2 replies) and a free loopback port:
what every part of the bench that talks to a server shares, depending on nothing of it."""

from __future__ import annotations

import socket


class Resp:
    """A minimal Redis client: pipelined commands, RESP2 replies."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.buffer = b""

    def call(self, *args):
        return self.pipeline([args])[0]

    def pipeline(self, commands) -> list:
        self.send(commands)
        return [self.read() for _ in commands]

    def send(self, commands) -> None:
        """Sends `commands` at once; `read` takes their replies, one at a time."""
        out = bytearray()
        for args in commands:
            out += b"*%d\r\n" % len(args)
            for arg in args:
                arg = arg if isinstance(arg, bytes) else str(arg).encode()
                out += b"$%d\r\n%s\r\n" % (len(arg), arg)
        self.sock.sendall(out)

    def read(self):
        """The next reply (an error reply as a RuntimeError, returned, not raised)."""
        return self._reply()

    def _line(self) -> bytes:
        while b"\r\n" not in self.buffer:
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the server closed the connection")
            self.buffer += chunk
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    def _reply(self):
        line = self._line()
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode()
        if kind == b"-":
            return RuntimeError(rest.decode())
        if kind == b":":
            return int(rest)
        if kind == b"$":
            length = int(rest)
            if length < 0:
                return None
            while len(self.buffer) < length + 2:
                self.buffer += self.sock.recv(1 << 16)
            data, self.buffer = self.buffer[:length], self.buffer[length + 2:]
            return data
        if kind == b"*":
            return [self._reply() for _ in range(int(rest))]
        raise ValueError(f"unexpected reply {line!r}")

    def info(self, section: str) -> dict[str, str]:
        text = self.call("INFO", section).decode()
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
