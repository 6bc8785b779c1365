#!/usr/bin/env python3
"""Writes the seed corpus of the `answer` fuzz target: well-formed queries for every name
form and type, and malformed packets of every kind the parser refuses. Run it from this
folder; the files are committed, and `cargo test -p muster-dns` replays them."""
import os
import struct

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus", "answer")

def name(text):
    out = b""
    for label in text.strip(".").split("."):
        if label:
            out += bytes([len(label)]) + label.encode()
    return out + b"\x00"

def opt(size=1232, version=0, do=False):
    return b"\x00" + struct.pack(">HHBBHH", 41, size, 0, version, 0x8000 if do else 0, 0)

def query(qname, qtype, qclass=1, edns=None, flags=0x0100, qd=1, an=0, ns=0, ar=None, ident=0x1234):
    if ar is None:
        ar = 1 if edns is not None else 0
    header = struct.pack(">HHHHHH", ident, flags, qd, an, ns, ar)
    body = name(qname) + struct.pack(">HH", qtype, qclass)
    return header + body + (edns if edns is not None else b"")

A, NS, SOA, PTR, TXT, AAAA, SRV, OPT, AXFR, ANY = 1, 2, 6, 12, 16, 28, 33, 41, 252, 255
seeds = {
    "a-service": query("api.prod.muster.", A),
    "aaaa-service": query("api.prod.muster.", AAAA),
    "a-instance": query("api-0.api.prod.muster.", A),
    "srv-port": query("_http._tcp.api.prod.muster.", SRV),
    "srv-port-edns": query("_http._tcp.api.prod.muster.", SRV, edns=opt(4096)),
    "srv-big-no-edns": query("_http._tcp.big.prod.muster.", SRV),
    "a-big-no-edns": query("big.prod.muster.", A),
    "a-big-edns-600": query("big.prod.muster.", A, edns=opt(600)),
    "ptr-browse": query("_services._dns-sd._udp.prod.muster.", PTR),
    "ptr-type": query("_api._tcp.prod.muster.", PTR),
    "srv-instance": query("api-0._api._tcp.prod.muster.", SRV),
    "txt-instance": query("api-0._api._tcp.prod.muster.", TXT),
    "soa-apex": query("muster.", SOA),
    "ns-apex": query("muster.", NS),
    "any-service": query("api.prod.muster.", ANY),
    "nxdomain": query("nope.prod.muster.", A),
    "nodata": query("api.prod.muster.", TXT),
    "ent": query("prod.muster.", A),
    "mixed-case": query("ApI.PrOd.MuStEr.", A, edns=opt()),
    "refused-outside": query("example.com.", A),
    "refused-chaos": query("version.bind.", TXT, qclass=3),
    "refused-axfr": query("muster.", AXFR),
    "qtype-opt": query("api.prod.muster.", OPT),
    "badvers": query("api.prod.muster.", A, edns=opt(version=1)),
    "edns-tiny-buffer": query("big.prod.muster.", A, edns=opt(1)),
    "edns-do": query("api.prod.muster.", A, edns=opt(do=True)),
    "two-opt": query("api.prod.muster.", A, edns=opt() + opt(), ar=2),
    "opt-not-root": query("api.prod.muster.", A, edns=b"\x01a" + opt()[1:]),
    "root-name": query(".", A),
    "long-name": query(".".join(["a" * 63] * 3 + ["b" * 61]) + ".", A),
    "too-long-name": query(".".join(["a" * 63] * 3 + ["b" * 62]) + ".", A),
    "empty": b"",
    "short-header": b"\x12\x34\x01\x00\x00",
    "header-only": struct.pack(">HHHHHH", 1, 0x0100, 1, 0, 0, 0),
    "response-bit": query("api.prod.muster.", A, flags=0x8100),
    "notify-opcode": query("muster.", SOA, flags=0x2000),
    "no-question": query("api.prod.muster.", A, qd=0),
    "two-questions": query("api.prod.muster.", A, qd=2),
    "pointer-in-question": struct.pack(">HHHHHH", 1, 0x0100, 1, 0, 0, 0) + b"\xc0\x0c\x00\x01\x00\x01",
    "reserved-label-bits": struct.pack(">HHHHHH", 1, 0x0100, 1, 0, 0, 0) + b"\x40abc\x00\x00\x01\x00\x01",
    "label-past-end": struct.pack(">HHHHHH", 1, 0x0100, 1, 0, 0, 0) + b"\x3fabc",
    "missing-class": query("api.prod.muster.", A)[:-2],
    "answer-count-lies": query("api.prod.muster.", A, an=65535),
    "additional-count-lies": struct.pack(">HHHHHH", 1, 0x0100, 1, 0, 0, 9) + name("api.prod.muster.") + b"\x00\x01\x00\x01",
    "rdlength-past-end": query("api.prod.muster.", A, edns=opt()[:-2] + b"\xff\xff"),
    "pointer-loop-in-additional": struct.pack(">HHHHHH", 1, 0x0100, 1, 0, 0, 1) + name("a.muster.") + b"\x00\x01\x00\x01" + b"\xc0\x1d\x00\x29\x02\x00\x00\x00\x00\x00\x00\x00",
    "trailing-garbage": query("api.prod.muster.", A) + b"\xde\xad\xbe\xef" * 8,
}

os.makedirs(OUT, exist_ok=True)
for seed, packet in seeds.items():
    with open(os.path.join(OUT, seed), "wb") as f:
        f.write(packet)
print(f"{len(seeds)} seeds in {OUT}")
