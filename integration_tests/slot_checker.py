"""A Redis Cluster hash-slot checker over the commands the client actually sends.

A standalone Redis never rejects a command whose keys live in different cluster
slots (a script's declared keys, a multi-stream ``XREAD``, ``MGET``, a MULTI/EXEC
block); a Redis Cluster rejects it with CROSSSLOT. Checking key *builders* is not
enough: what matters is the keys a command carries on the wire. So the checker
hooks ``send_packed_command`` of redis-py's connection classes (sync and asyncio:
every command, pipeline and connection handshake goes through it), decodes the
RESP bytes it is given, and records every command with the connection it went
out on and the project frames that sent it. Afterwards the keys of each command
are taken from the server itself (``COMMAND GETKEYS``: the same key extraction a
cluster uses for its slot check, so EVAL/EVALSHA/FCALL numkeys, XREAD/XREADGROUP
``STREAMS``, MGET/DEL/MSET, SUNIONSTORE, ... need no hand-written table) and
their slots computed with CRC16 of the hash tag (``redis.crc.key_slot``). A
MULTI ... EXEC block counts as one command: a cluster serves it from one slot.
"""

from __future__ import annotations

import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path

import redis
import redis.asyncio.connection as aconn
import redis.connection as sconn
from redis.crc import key_slot

import pulsar_txn
import pulsar_txn.metastore

_HERE = Path(__file__).resolve().parent
_OWN = tuple(str(Path(m.__file__).resolve().parent) for m in (pulsar_txn, pulsar_txn.metastore)
             ) + (str(_HERE),)
_KEYLESS = {b"PING", b"HELLO", b"AUTH", b"SELECT", b"CLIENT", b"MULTI", b"EXEC", b"DISCARD",
            b"TIME", b"INFO", b"SCRIPT", b"READONLY", b"COMMAND", b"ECHO", b"QUIT", b"RESET"}


@dataclass
class Sent:
    """One command (or one MULTI/EXEC block) as it went out on one connection."""

    commands: list[tuple[bytes, ...]]
    where: str
    keys: list[bytes] = field(default_factory=list)

    @property
    def slots(self) -> set[int]:
        return {key_slot(k) for k in self.keys}

    def describe(self, limit: int = 200) -> str:
        text = " ; ".join(b" ".join(c).decode("utf-8", "replace") for c in self.commands)
        text = text if len(text) <= limit else text[:limit] + " ..."
        by_slot = sorted({(key_slot(k), k.decode("utf-8", "replace")) for k in self.keys})
        return f"{text}\n      slots {by_slot}\n      sent from {self.where}"


def parse_resp_commands(data: bytes) -> list[tuple[bytes, ...]]:
    """Split packed RESP multibulk requests into their argument tuples."""
    out, i, n = [], 0, len(data)
    while i < n:
        if data[i:i + 1] != b"*":
            raise ValueError(f"not a RESP array at byte {i}: {data[i:i + 20]!r}")
        eol = data.index(b"\r\n", i)
        count = int(data[i + 1:eol])
        i = eol + 2
        args = []
        for _ in range(count):
            if data[i:i + 1] != b"$":
                raise ValueError(f"not a RESP bulk string at byte {i}")
            eol = data.index(b"\r\n", i)
            size = int(data[i + 1:eol])
            args.append(bytes(data[eol + 2:eol + 2 + size]))
            i = eol + 2 + size + 2
        out.append(tuple(args))
    return out


def _flatten(command) -> bytes:
    if isinstance(command, (bytes, bytearray, memoryview)):
        return bytes(command)
    if isinstance(command, str):
        return command.encode()
    return b"".join(_flatten(c) for c in command)


def _short(path: str) -> str:
    parts = Path(path).parts
    return "/".join(parts[-2:])


def _where() -> str:
    """The innermost project frames that led to the send (skips redis-py itself)."""
    frames, f = [], sys._getframe(2)
    while f is not None and len(frames) < 4:
        name = f.f_code.co_filename
        if name.startswith(_OWN) and not name.endswith("slot_checker.py"):
            frames.append(f"{_short(name)}:{f.f_lineno} {f.f_code.co_name}")
        f = f.f_back
    return " <- ".join(frames) or "(outside the project)"


class SlotChecker:
    """Records every command redis-py sends while installed; reports cross-slot ones."""

    def __init__(self) -> None:
        self.sent: list[Sent] = []
        self._lock = threading.Lock()
        self._multi: dict[int, Sent] = {}  # connection id -> open MULTI block
        self._saved: list[tuple[type, object]] = []

    # ---- recording ----
    def _record(self, conn, command) -> None:
        try:
            cmds = parse_resp_commands(_flatten(command))
        except (ValueError, IndexError) as e:  # never break the client under test
            cmds = [(b"<unparsed>", repr(e).encode())]
        where = _where()
        with self._lock:
            for args in cmds:
                name = args[0].upper() if args else b""
                block = self._multi.get(id(conn))
                if name == b"MULTI":
                    self._multi[id(conn)] = Sent([args], where)
                elif block is not None:
                    block.commands.append(args)
                    if name in (b"EXEC", b"DISCARD"):
                        del self._multi[id(conn)]
                        self.sent.append(block)
                else:
                    self.sent.append(Sent([args], where))

    def install(self) -> SlotChecker:
        checker = self

        def hook_sync(orig):
            def send_packed_command(self, command, check_health=True):
                checker._record(self, command)
                return orig(self, command, check_health)
            return send_packed_command

        def hook_async(orig):
            async def send_packed_command(self, command, check_health=True):
                checker._record(self, command)
                return await orig(self, command, check_health)
            return send_packed_command

        for cls, hook in ((sconn.AbstractConnection, hook_sync),
                          (aconn.AbstractConnection, hook_async)):
            orig = cls.__dict__["send_packed_command"]
            self._saved.append((cls, orig))
            cls.send_packed_command = hook(orig)
        return self

    def uninstall(self) -> None:
        for cls, orig in self._saved:
            cls.send_packed_command = orig
        self._saved.clear()

    def __enter__(self) -> SlotChecker:
        return self.install()

    def __exit__(self, *exc) -> None:
        self.uninstall()

    # ---- checking ----
    def resolve_keys(self, url: str) -> None:
        """Fill ``keys`` of every recorded command from the server's COMMAND GETKEYS."""
        todo = sorted({args for s in self.sent for args in s.commands
                       if args and args[0].upper() not in _KEYLESS and len(args) > 1})
        found: dict[tuple[bytes, ...], list[bytes]] = {}
        r = redis.Redis.from_url(url, decode_responses=False)
        try:
            for i in range(0, len(todo), 1000):
                pipe = r.pipeline(transaction=False)
                chunk = todo[i:i + 1000]
                for args in chunk:
                    pipe.execute_command("COMMAND GETKEYS", *args)
                for args, res in zip(chunk, pipe.execute(raise_on_error=False)):
                    # an error means the command has no key arguments (or is unknown)
                    found[args] = [] if isinstance(res, Exception) else [
                        k.encode() if isinstance(k, str) else k for k in res]
        finally:
            r.close()
        for s in self.sent:
            s.keys = [k for args in s.commands for k in found.get(args, [])]

    def cross_slot(self, url: str) -> list[Sent]:
        self.resolve_keys(url)
        return [s for s in self.sent if len(s.slots) > 1]

    def names(self) -> set[str]:
        return {args[0].decode().upper() for s in self.sent for args in s.commands if args}


def report(bad: list[Sent], limit: int = 8) -> str:
    """One line per distinct (command, call site), most frequent first."""
    groups: dict[tuple[str, str], list[Sent]] = {}
    for s in bad:
        name = " ; ".join(c[0].decode().upper() for c in s.commands)
        groups.setdefault((name, s.where), []).append(s)
    lines = [f"{len(bad)} command(s) span several hash slots (CROSSSLOT on a Redis Cluster):"]
    for (_name, _where), items in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:limit]:
        lines.append(f"  x{len(items)}: {items[0].describe()}")
    return "\n".join(lines)
