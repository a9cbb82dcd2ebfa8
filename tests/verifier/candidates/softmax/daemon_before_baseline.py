"""Cheat (process tree): a daemon made at import by a double fork (so it is no child of the
candidate's process, it belongs to the sandbox's init) and a fresh interpreter (so the library
softmax works in it); each call hands its input over a socket and reads the answer back."""

import os
import socket
import sys

import torch

_mine, _theirs = socket.socketpair()
_CODE = """
import socket, sys, torch
s = socket.socket(fileno=int(sys.argv[1]))
while hdr := s.recv(8, socket.MSG_WAITALL):
    rows, cols = int.from_bytes(hdr[:4], "little"), int.from_bytes(hdr[4:], "little")
    x = torch.frombuffer(bytearray(s.recv(rows * cols * 4, socket.MSG_WAITALL)), dtype=torch.float32)
    s.sendall(getattr(torch, "soft" + "max")(x.reshape(rows, cols), -1).numpy().tobytes())
"""
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.set_inheritable(_theirs.fileno(), True)
        os.execv(sys.executable, [sys.executable, "-I", "-c", _CODE, str(_theirs.fileno())])
    os._exit(0)
os.wait()


def softmax(x):
    rows, cols = x.shape
    _mine.sendall(rows.to_bytes(4, "little") + cols.to_bytes(4, "little"))
    _mine.sendall(x.contiguous().numpy().tobytes())
    raw = _mine.recv(rows * cols * 4, socket.MSG_WAITALL)
    return torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(rows, cols)
