#!/usr/bin/env python3
"""spec_ref.py - a second reader of relibra's trace (.rrt) and plan (.rlp) files.

Written from trace_format/SPEC.md (and docs/schedule.md for the packing
rules that the per-source split needs) alone, not from lib/, so that the
specification and the program can be checked against each other.  Section
numbers below are SPEC.md's.

usage: spec_ref.py --relibra BIN trace T.rrt
       spec_ref.py --relibra BIN plan P.rlp [--trace T.rrt]
       spec_ref.py --relibra BIN recode T.rrt OUT.rrt --coding raw|rank|delta
                   [--chunk N] [--frame-records N] [--lists all|empty]

trace: decodes every frame (header, layer pattern, data frames in every id
and gate coding, step index, seek table), verifies every CRC-32C and every
rule of the format, and compares the result with `relibra inspect --dump`
(byte for byte) and `relibra inspect --json --dump` (every header field and
count, every id, every gate weight bit for bit).  It also checks the
choices that the spec ascribes to relibra's writer: the id coding, RANK
chunks of 128 tokens and their lists, where frames are cut.

recode: writes the trace's sequences again with a coding, chunk size, RANK
lists or frame cuts that relibra's writer does not choose but every reader
must read (RAW of u8 ids, RANK of sorted ids, short chunks, empty lists, a
step over several frames), then checks the result as `trace` does, without
the writer's choices.

plan: decodes the plan (header, homes, replicas, quotas, copies, carried
schedule, step index, seek table); given the trace it was made from, checks
the recorded trace identity against the trace's header, rebuilds each
step's schedule (the carried one, or the header's packing rule over the
trace's sequences), counts the loads, recomputes the per-source split of
every cell by the rule of section P7, checks the quotas against it and
migrated_experts against the homes, and compares with `relibra inspect
--json --dump` and `relibra inspect --dump` (the text dump of section P15).

Exit status 0 when everything agrees, 1 on a violation of the format or a
difference (each printed), 2 on bad usage.  zstd frames are decompressed by
the zstd command-line tool.  Python 3 standard library only.
"""

import argparse
import json
import math
import struct
import subprocess
import sys

sys.dont_write_bytecode = True  # nothing written into the source tree


class Bad(Exception):
    """A violation of the format: the structure, its file offset, what."""

    def __init__(self, where, off, what):
        super().__init__("%s at offset %d: %s" % (where, off, what))


DIFFS = []
WRITER = {"rules": True}  # check the choices of relibra's writer too


def diff(what, mine, theirs):
    DIFFS.append("DIFF %s: spec reader %r, relibra %r" % (what, mine, theirs))


# ---------------------------------------------------------------------------
# Section 1: conventions


def _crc_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


CRC_TABLE = _crc_table()


def crc32c(b):
    c = 0xFFFFFFFF
    t = CRC_TABLE
    for x in b:
        c = t[(c ^ x) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


assert crc32c(b"123456789") == 0xE3069283


def u8(b, o):
    return b[o]


def u16(b, o):
    return struct.unpack_from("<H", b, o)[0]


def u32(b, o):
    return struct.unpack_from("<I", b, o)[0]


def u64(b, o):
    return struct.unpack_from("<Q", b, o)[0]


def f64(b, o):
    return struct.unpack_from("<d", b, o)[0]


def need(cond, where, off, what):
    if not cond:
        raise Bad(where, off, what)


def name_field(b, o, size, where, what):
    """A NUL-terminated, zero-padded UTF-8 name of SIZE bytes at O."""
    f = b[o:o + size]
    n = f.find(0)
    need(n >= 0, where, o, what + " is not NUL-terminated")
    need(not any(f[n:]), where, o, what + " is not zero-padded")
    try:
        return f[:n].decode("utf-8")
    except UnicodeDecodeError:
        raise Bad(where, o, what + " is not UTF-8")


# ---------------------------------------------------------------------------
# Container: skippable frames, zstd frames, the seek table (sections 2, 4, 6)

SKIP_HEADER = 0x184D2A52
SKIP_INDEX = 0x184D2A53
SKIP_SEEK = 0x184D2A5E
SEEK_FOOTER = 0x8F92EAB1
ZSTD_MAGIC = 0xFD2FB528
BLOCK_MAX = 128 * 1024


def zstd_frame_check(data, off, size, content_size):
    """The Frame_Header and block headers of the zstd frame of SIZE bytes at
    OFF (section 4 and 8): content checksum, content size present and equal
    to CONTENT_SIZE, no dictionary, reserved bit clear, blocks ending at
    the checksum."""
    w = "zstd frame"
    end = off + size
    need(size >= 9 and u32(data, off) == ZSTD_MAGIC, w, off, "bad zstd magic")
    fhd = data[off + 4]
    fcs_flag, single = fhd >> 6, (fhd >> 5) & 1
    need(not fhd & 0x08, w, off, "reserved bit set")
    need(fhd & 0x04, w, off, "no content checksum")
    need(not fhd & 0x03, w, off, "dictionary id present")
    p = off + 5 + (0 if single else 1)
    fcs_size = {0: 1 if single else 0, 1: 2, 2: 4, 3: 8}[fcs_flag]
    need(fcs_size > 0, w, off, "no Frame_Content_Size")
    fcs = int.from_bytes(data[p:p + fcs_size], "little")
    if fcs_size == 2:
        fcs += 256
    need(fcs == content_size, w, off,
         "Frame_Content_Size %d, the seek table says %d" % (fcs, content_size))
    p += fcs_size
    while True:
        need(p + 3 <= end, w, off, "cut block header")
        h = int.from_bytes(data[p:p + 3], "little")
        last, btype, bsize = h & 1, (h >> 1) & 3, h >> 3
        need(btype != 3, w, off, "reserved block type at offset %d" % p)
        need(bsize <= BLOCK_MAX, w, off, "block larger than 128 KiB at offset %d" % p)
        p += 3 + (1 if btype == 1 else bsize)
        if last:
            break
    need(p + 4 == end, w, off, "blocks end at %d, not at the checksum %d" % (p, end - 4))
    return fcs


def zstd_decode(frame):
    """The content of one zstd frame, by the zstd tool (which checks its
    Content_Checksum)."""
    r = subprocess.run(["zstd", "-dcq"], input=frame, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, check=False)
    if r.returncode != 0:
        raise ValueError("zstd: " + r.stderr.decode(errors="replace").strip())
    return r.stdout


def seek_table(data, kind):
    """Section 6 / P6: the frames as (offset, compressed, decompressed)."""
    w = "seek table"
    n = len(data)
    need(n >= 17 and u32(data, n - 4) == SEEK_FOOTER, w, n,
         "no seekable footer at the end of the file (truncated)")
    desc = data[n - 5]
    need(not desc & 0xFC, w, n - 5, "descriptor 0x%02x" % desc)
    if kind == "plan":
        need(desc == 0, w, n - 5, "descriptor 0x%02x: plans need 0" % desc)
    frames = u32(data, n - 9)
    size = 8 * frames + 9
    off = n - 8 - size
    need(off >= 0, w, n - 9, "%d entries do not fit in the file" % frames)
    need(u32(data, off) == SKIP_SEEK, w, off, "bad magic")
    need(u32(data, off + 4) == size, w, off + 4, "Frame_Size is not 8N + 9")
    out = []
    pos = 0
    for i in range(frames):
        cs, ds = u32(data, off + 8 + 8 * i), u32(data, off + 12 + 8 * i)
        out.append((pos, cs, ds))
        pos += cs
    need(pos == off, w, off, "sizes add up to %d, not to the table's offset" % pos)
    return out, off


def skippable(data, off, cs, magic, where):
    need(cs >= 8 and u32(data, off) == magic, where, off, "bad skippable magic")
    size = u32(data, off + 4)
    need(size + 8 == cs, where, off + 4,
         "Frame_Size %d, the seek table says %d" % (size, cs - 8))
    return data[off + 8:off + 8 + size]


# ---------------------------------------------------------------------------
# Part I: the trace

CODINGS = {0: "raw", 1: "rank", 2: "delta"}
LETTERS = "E-*M"


class TraceHeader:
    pass


def trace_header(content, base):
    """Section 3: the header content, at file offset BASE."""
    w = "header"
    n = len(content)
    need(n >= 156, w, base, "content of %d bytes" % n)
    need(content[:8] == b"RLBTRACE", w, base, "bad magic")
    h = TraceHeader()
    h.major, h.minor = u16(content, 8), u16(content, 10)
    need(h.major == 1, w, base + 8, "version %d.%d" % (h.major, h.minor))
    need(crc32c(content[:n - 4]) == u32(content, n - 4), w, base + n - 4,
         "checksum mismatch")
    h.flags = u32(content, 12)
    need(not h.flags & 0xFFFC, w, base + 12, "reserved flags 0x%x" % h.flags)
    h.gates, h.sorted = bool(h.flags & 1), bool(h.flags & 2)
    h.experts, h.topk = u32(content, 16), u32(content, 20)
    h.moe_layers, h.first_dense = u32(content, 24), u32(content, 28)
    need(1 <= h.experts <= 65535, w, base + 16, "experts %d" % h.experts)
    need(1 <= h.topk <= 64 and h.topk <= h.experts, w, base + 20, "topk %d" % h.topk)
    need(1 <= h.moe_layers <= 1024, w, base + 24, "moe_layers %d" % h.moe_layers)
    h.seed = u64(content, 32)
    h.id_bytes, h.id_coding, h.gate_coding = content[40], content[41], content[42]
    need(h.id_bytes == (1 if h.experts <= 256 else 2), w, base + 40,
         "id_bytes %d for %d experts" % (h.id_bytes, h.experts))
    need(h.id_coding in CODINGS, w, base + 41, "id_coding %d" % h.id_coding)
    need(h.id_coding != 1 or h.id_bytes == 1, w, base + 41, "RANK with u16 ids")
    need(h.id_coding != 2 or h.sorted, w, base + 41, "DELTA without SORTED")
    need(h.gate_coding == (1 if h.gates else 0), w, base + 42,
         "gate_coding %d, flags 0x%x" % (h.gate_coding, h.flags))
    need(content[43] == 0, w, base + 43, "reserved byte")
    h.chunk_tokens = u32(content, 44)
    if h.id_coding == 1:
        need(1 <= h.chunk_tokens <= 1 << 24, w, base + 44, "chunk_tokens %d" % h.chunk_tokens)
    else:
        need(h.chunk_tokens == 0, w, base + 44, "chunk_tokens %d" % h.chunk_tokens)
    h.frame_bytes = u32(content, 48)
    need(1 <= h.frame_bytes <= 1 << 30, w, base + 48, "frame_bytes %d" % h.frame_bytes)
    if WRITER["rules"] and h.id_coding == 1 and h.chunk_tokens != 128:
        diff("header chunk_tokens (the writer uses 128)", 128, h.chunk_tokens)
    want = 2 if h.sorted else 1 if h.id_bytes == 1 else 0
    if WRITER["rules"] and h.id_coding != want:
        diff("header id_coding of the writer's rule (section 4.2)", want, h.id_coding)
    need(u32(content, 52) == 0, w, base + 52, "reserved field")
    h.model = name_field(content, 56, 64, w, "model")
    h.source = name_field(content, 120, 32, w, "source")
    h.period, h.offset, h.pattern = 1, 0, ""
    if h.minor == 0:
        need(n == 156, w, base, "1.0 header of %d bytes" % n)
    if h.minor >= 1:
        need(n >= 160, w, base, "1.%d header of %d bytes" % (h.minor, n))
        h.period, h.offset = u16(content, 152), u16(content, 154)
        need(1 <= h.period <= 64, w, base + 152, "moe_layer_period %d" % h.period)
        need(h.offset < h.period, w, base + 154, "moe_layer_offset %d" % h.offset)
        if h.minor == 1:
            need(n == 160, w, base, "1.1 header of %d bytes" % n)
    if h.minor >= 2:
        need(n >= 164, w, base, "1.2 header of %d bytes" % n)
        plen = u16(content, 156)
        need(plen <= 1024, w, base + 156, "pattern_len %d" % plen)
        need(u16(content, 158) == 0, w, base + 158, "reserved field")
        padded = (plen + 3) // 4 * 4
        need(n >= 164 + padded, w, base, "pattern beyond the content")
        if h.minor == 2:
            need(n == 164 + padded, w, base, "1.2 header of %d bytes, pattern of %d"
                 % (n, plen))
        pat = bytes(content[160:160 + plen])
        need(not any(content[160 + plen:160 + padded]), w, base + 160 + plen,
             "padding is not zero")
        try:
            h.pattern = pat.decode("ascii")
        except UnicodeDecodeError:
            raise Bad(w, base + 160, "pattern is not ASCII")
        need(all(c in LETTERS for c in h.pattern), w, base + 160,
             "pattern %r has letters other than %s" % (h.pattern, LETTERS))
        if plen:
            need(h.pattern.count("E") == h.moe_layers, w, base + 160,
                 "pattern has %d E, moe_layers %d" % (h.pattern.count("E"), h.moe_layers))
            need(h.period == 1 and h.offset == 0 and h.first_dense == 0, w, base + 28,
                 "a pattern with period %d, offset %d, first_dense_layers %d"
                 % (h.period, h.offset, h.first_dense))
    return h


def trace_hash(h):
    """Section P9: FNV-1a of the trace header's identity bytes."""
    b = struct.pack("<IIIIIQ", h.flags & 0xFFFF, h.experts, h.topk, h.moe_layers,
                    h.first_dense, h.seed)
    b += h.model.encode().ljust(64, b"\0") + h.source.encode().ljust(32, b"\0")
    if h.pattern:
        b += h.pattern.encode()
    elif h.period > 1:
        b += struct.pack("<HH", h.period, h.offset)
    x = 0xCBF29CE484222325
    for c in b:
        x = ((x ^ c) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return x


def gate_ok(bits):
    return bits <= 0x7F7FFFFF or bits == 0x80000000


def decode_ids(h, raw, p, end, T, where, base):
    """Section 4.2: one layer's T x topk ids from RAW at P; returns (ids, p)."""
    K, E = h.topk, h.experts
    n = T * K
    if h.id_coding == 0 or h.id_coding == 2:
        size = n * h.id_bytes
        need(p + size <= end, where, base, "ids beyond the frame")
        if h.id_bytes == 1:
            v = list(raw[p:p + size])
        else:
            v = list(struct.unpack_from("<%dH" % n, raw, p))
        p += size
        if h.id_coding == 2:
            for t in range(T):
                for k in range(1, K):
                    v[t * K + k] += v[t * K + k - 1]
        for x in v:
            need(x < E, where, base, "id %d >= experts %d" % (x, E))
        return v, p
    v = []
    t0 = 0
    while t0 < T:
        c = min(h.chunk_tokens, T - t0)
        need(p + 1 <= end, where, base, "RANK chunk beyond the frame")
        ln = raw[p]
        need(ln <= min(E, 255), where, base, "RANK list of %d" % ln)
        need(p + 1 + ln + c * K <= end, where, base, "RANK chunk beyond the frame")
        lst = list(raw[p + 1:p + 1 + ln])
        need(all(x < E for x in lst) and len(set(lst)) == ln, where, base,
             "RANK list %r" % lst)
        inl = set(lst)
        ranking = lst + [e for e in range(E) if e not in inl]
        p += 1 + ln
        for r in raw[p:p + c * K]:
            need(r < E, where, base, "rank %d >= experts" % r)
            v.append(ranking[r])
        p += c * K
        # The writer's list (section 4.2): the ids counted more often than
        # under a uniform spread and at least twice, most frequent first,
        # ties by smaller id, at most 32.
        cnt = {}
        for x in v[t0 * K:]:
            cnt[x] = cnt.get(x, 0) + 1
        want = sorted((x for x in cnt if cnt[x] * E > c * K and cnt[x] >= 2),
                      key=lambda x: (-cnt[x], x))[:32]
        if WRITER["rules"] and lst != want:
            diff("%s at offset %d: RANK list of the writer's rule" % (where, base), want, lst)
        t0 += c
    return v, p


def decode_gates(h, raw, p, end, T, where, base):
    """Section 4.3: F32 byte planes; returns (bit patterns, p)."""
    n = T * h.topk
    need(p + 4 * n <= end, where, base, "gates beyond the frame")
    planes = [raw[p + b * n:p + (b + 1) * n] for b in range(4)]
    bits = [planes[0][i] | planes[1][i] << 8 | planes[2][i] << 16 | planes[3][i] << 24
            for i in range(n)]
    for x in bits:
        need(gate_ok(x), where, base, "gate weight 0x%08x is not finite and >= 0" % x)
    return bits, p + 4 * n


class Seq:
    pass


def read_trace(path):
    """Sections 2-9 on a complete trace: (header, sequences, facts)."""
    with open(path, "rb") as f:
        data = f.read()
    need(len(data) >= 8 and u32(data, 0) == SKIP_HEADER, "header", 0, "bad magic")
    frames, seek_off = seek_table(data, "trace")
    need(len(frames) >= 2, "seek table", seek_off, "fewer than 2 entries")
    o, cs, ds = frames[0]
    content = skippable(data, 0, cs, SKIP_HEADER, "header")
    need(ds == 0, "seek table", seek_off + 12, "header entry with raw size %d" % ds)
    h = trace_header(content, 8)
    F = len(frames) - 2
    seqs = []
    fsteps = []
    raw_bytes = 0
    last_step = -1
    last_raw = None
    for i in range(1, F + 1):
        off, cs, ds = frames[i]
        w = "data frame"
        need(16 <= ds <= 1 << 30, w, off, "content size %d" % ds)
        zstd_frame_check(data, off, cs, ds)
        try:
            raw = zstd_decode(data[off:off + cs])
        except ValueError as e:
            raise Bad(w, off, str(e))
        need(len(raw) == ds, w, off, "decodes to %d bytes, not %d" % (len(raw), ds))
        raw_bytes += ds
        p, count, fstep = 0, 0, None
        while p < ds:
            need(p + 16 <= ds, w, off, "record header beyond the frame")
            s = Seq()
            s.step, s.group, s.sample, s.tokens = struct.unpack_from("<IIII", raw, p)
            need(1 <= s.tokens <= 1 << 24, w, off, "tokens %d" % s.tokens)
            if fstep is None:
                fstep = s.step
                need(s.step >= last_step, w, off, "step %d after %d" % (s.step, last_step))
            need(s.step == fstep, w, off, "two steps in one frame")
            last_rec = p
            p += 16
            s.ids, s.gates = [], []
            for _ in range(h.moe_layers):
                v, p = decode_ids(h, raw, p, ds, s.tokens, w, off)
                if h.sorted:
                    for t in range(s.tokens):
                        row = v[t * h.topk:(t + 1) * h.topk]
                        need(row == sorted(row), w, off, "ids of a token not ascending")
                s.ids.append(v)
                if h.gates:
                    g, p = decode_gates(h, raw, p, ds, s.tokens, w, off)
                    s.gates.append(g)
            seqs.append(s)
            count += 1
        need(count >= 1, w, off, "no record")
        # The writer's cut (section 4): a frame closes before a record of
        # another step, or after the record that took it to frame_bytes.
        if (WRITER["rules"] and last_raw is not None and last_raw[1] == fstep
                and last_raw[0] < h.frame_bytes):
            diff("data frame before offset %d: closed below frame_bytes within its step"
                 % off, h.frame_bytes, last_raw[0])
        if WRITER["rules"] and last_rec >= h.frame_bytes:
            diff("data frame at offset %d: records after reaching frame_bytes" % off,
                 h.frame_bytes, last_rec)
        last_raw = (ds, fstep)
        fsteps.append((fstep, count))
        last_step = fstep
    # Section 5: the step index.
    off, cs, ds = frames[F + 1]
    w = "step index"
    c = skippable(data, off, cs, SKIP_INDEX, w)
    base = off + 8
    need(ds == 0, "seek table", seek_off, "step index entry with raw size %d" % ds)
    need(len(c) >= 28 and c[:8] == b"RLBINDEX", w, base, "bad magic")
    nf, s_count = u32(c, 8), u64(c, 16)
    need(u32(c, 12) == 0, w, base + 12, "reserved field")
    need(nf == F, w, base + 8, "%d frames, the seek table has %d" % (nf, F))
    need(len(c) == 28 + 8 * nf + 12 * s_count, w, off + 4, "Frame_Size is not 28 + 8F + 12S")
    need(crc32c(c[:-4]) == u32(c, len(c) - 4), w, base + len(c) - 4, "checksum mismatch")
    need(s_count == len(seqs), w, base + 16, "%d sequences, the frames hold %d"
         % (s_count, len(seqs)))
    for i, (st, cnt) in enumerate(fsteps):
        e = base + 24 + 8 * i
        need((u32(c, 24 + 8 * i), u32(c, 28 + 8 * i)) == (st, cnt), w, e,
             "frame entry %d" % i)
    for i, s in enumerate(seqs):
        q = 24 + 8 * nf + 12 * i
        need(struct.unpack_from("<III", c, q) == (s.group, s.sample, s.tokens), w,
             base + q, "sequence entry %d" % i)
    facts = {"frames": F, "raw_bytes": raw_bytes, "file_bytes": len(data)}
    return h, seqs, facts


def trace_dump(h, seqs):
    """Section 13.3: the text of `relibra inspect --dump`."""
    out = []
    K = h.topk
    for i, s in enumerate(seqs):
        out.append("sequence %d: step %d, group %d, sample %d, %d tokens"
                   % (i, s.step, s.group, s.sample, s.tokens))
        for l in range(h.moe_layers):
            toks = []
            for t in range(s.tokens):
                ks = []
                for k in range(K):
                    x = str(s.ids[l][t * K + k])
                    if h.gates:
                        g = struct.unpack("<f", struct.pack("<I", s.gates[l][t * K + k]))[0]
                        x += ":" + gate_text(g)
                    ks.append(x)
                toks.append(",".join(ks))
            out.append("  layer %d: %s" % (l, " ".join(toks)))
    return "\n".join(out) + "\n" if out else ""


def gate_text(g):
    """The dump's text of a gate weight: C's %g."""
    return "%g" % g


def relibra(bin_, *args):
    r = subprocess.run([bin_] + list(args), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, check=False)
    if r.returncode != 0:
        sys.stderr.write(r.stderr.decode(errors="replace"))
        raise SystemExit("spec_ref: relibra %s failed (status %d)"
                         % (" ".join(args), r.returncode))
    return r.stdout.decode()


def f32_bits(x):
    return struct.unpack("<I", struct.pack("<f", x))[0]


def compare_dump_json(h, seqs, dump):
    """`relibra inspect --json --dump`: ids[l][t][k] and, with gates, the
    weights as numbers, compared bit for bit."""
    if not isinstance(dump, list) or len(dump) != len(seqs):
        diff("JSON dump sequences", len(seqs), len(dump) if isinstance(dump, list) else dump)
        return
    K = h.topk
    for i, (s, x) in enumerate(zip(seqs, dump)):
        ids = [[s.ids[l][t * K:(t + 1) * K] for t in range(s.tokens)]
               for l in range(h.moe_layers)]
        want = {"step": s.step, "group": s.group, "sample": s.sample,
                "tokens": s.tokens, "ids": ids}
        for k, v in want.items():
            if x.get(k) != v:
                diff("JSON dump sequence %d %s" % (i, k), v, x.get(k))
        if h.gates:
            g = x.get("gates")
            try:
                bits = [[[f32_bits(v) for v in tok] for tok in lay] for lay in g]
            except (TypeError, OverflowError):
                bits = g
            mine = [[s.gates[l][t * K:(t + 1) * K] for t in range(s.tokens)]
                    for l in range(h.moe_layers)]
            if bits != mine:
                diff("JSON dump sequence %d gates (bits)" % i, mine, bits)
        elif "gates" in x:
            diff("JSON dump sequence %d gates" % i, None, x["gates"])


def check_trace(bin_, path):
    h, seqs, facts = read_trace(path)
    theirs = relibra(bin_, "inspect", "--dump", path)
    mine = trace_dump(h, seqs)
    if mine != theirs:
        a, b = mine.splitlines(), theirs.splitlines()
        for i in range(max(len(a), len(b))):
            x = a[i] if i < len(a) else None
            y = b[i] if i < len(b) else None
            if x != y:
                diff("inspect --dump line %d" % (i + 1), x, y)
                break
    j = json.loads(relibra(bin_, "inspect", "--json", "--dump", path))
    compare_dump_json(h, seqs, j.get("dump"))
    hd = j["header"]
    want = {
        "version": "%d.%d" % (h.major, h.minor), "flags": h.flags,
        "sorted": h.sorted, "gates": h.gates, "model": h.model,
        "experts": h.experts, "topk": h.topk, "moe_layers": h.moe_layers,
        "first_dense_layers": h.first_dense, "moe_layer_period": h.period,
        "moe_layer_offset": h.offset, "layer_pattern": h.pattern,
        "id_bytes": h.id_bytes, "id_coding": CODINGS[h.id_coding],
        "source": h.source,
        "seed": h.seed if h.seed < 1 << 63 else str(h.seed),
    }
    for k, v in want.items():
        if hd.get(k) != v:
            diff("header." + k, v, hd.get(k))
    for k in hd:
        if k not in want:
            diff("header." + k, "(not in the spec reader)", hd[k])
    steps = sorted({s.step for s in seqs})
    top = {
        "steps": len(steps), "first_step": steps[0] if steps else 0,
        "last_step": steps[-1] if steps else 0, "sequences": len(seqs),
        "tokens": sum(s.tokens for s in seqs), "frames": facts["frames"],
        "file_bytes": facts["file_bytes"], "raw_bytes": facts["raw_bytes"],
        "raw_id_bytes": sum(s.tokens for s in seqs) * h.moe_layers * h.topk * h.id_bytes,
    }
    for k, v in top.items():
        if j.get(k) != v:
            diff(k, v, j.get(k))
    integ = j["integrity"]
    for k, v in (("ok", True), ("seek_table", True), ("step_index", True),
                 ("truncated", False), ("valid_bytes", facts["file_bytes"])):
        if integ.get(k) != v:
            diff("integrity." + k, v, integ.get(k))
    return h, seqs


# ---------------------------------------------------------------------------
# A second writer: the codings and layouts that relibra's writer does not
# choose but every 1.x reader must read (sections 4 and 4.2)


def zstd_encode(raw):
    r = subprocess.run(["zstd", "-q", "-c", "--check", "--stream-size=%d" % len(raw)],
                       input=raw, stdout=subprocess.PIPE, check=True)
    return r.stdout


def encode_ids(h, v, T, lists):
    K = h.topk
    if h.id_coding == 0 or h.id_coding == 2:
        if h.id_coding == 2:
            v = [x - (v[i - 1] if i % K else 0) for i, x in enumerate(v)]
        return bytes(v) if h.id_bytes == 1 else struct.pack("<%dH" % len(v), *v)
    out = bytearray()
    for t0 in range(0, T, h.chunk_tokens):
        c = min(h.chunk_tokens, T - t0)
        ids = v[t0 * K:(t0 + c) * K]
        if lists == "empty":
            lst = []
        else:  # every id of the chunk, largest first
            lst = sorted(set(ids), reverse=True)[:255]
        ranking = lst + [e for e in range(h.experts) if e not in set(lst)]
        pos = {e: r for r, e in enumerate(ranking)}
        out += bytes([len(lst)]) + bytes(lst) + bytes(pos[x] for x in ids)
    return bytes(out)


def write_trace(path, h, seqs, frame_records, lists):
    """Sections 2-6 for H (its coding fields set) and SEQS."""
    c = bytearray(156)
    c[0:8] = b"RLBTRACE"
    struct.pack_into("<HHIIIII", c, 8, 1, h.minor, h.flags, h.experts, h.topk,
                     h.moe_layers, h.first_dense)
    struct.pack_into("<QBBBBIII", c, 32, h.seed, h.id_bytes, h.id_coding,
                     h.gate_coding, 0, h.chunk_tokens, h.frame_bytes, 0)
    c[56:56 + len(h.model.encode())] = h.model.encode()
    c[120:120 + len(h.source.encode())] = h.source.encode()
    c = c[:152]
    if h.minor >= 1:
        c += struct.pack("<HH", h.period, h.offset)
    if h.minor >= 2:
        pat = h.pattern.encode()
        c += struct.pack("<HH", len(pat), 0) + pat + bytes(-len(pat) % 4)
    c += struct.pack("<I", crc32c(c))
    out = bytearray(struct.pack("<II", SKIP_HEADER, len(c)) + c)
    entries = [(len(out), 0)]
    frames = []
    for s in seqs:
        if not frames or frames[-1][0] != s.step or len(frames[-1][1]) == frame_records:
            frames.append((s.step, []))
        frames[-1][1].append(s)
    for step, fs in frames:
        raw = bytearray()
        for s in fs:
            raw += struct.pack("<IIII", s.step, s.group, s.sample, s.tokens)
            for l in range(h.moe_layers):
                raw += encode_ids(h, s.ids[l], s.tokens, lists)
                if h.gates:
                    g = s.gates[l]
                    for b in range(4):
                        raw += bytes(x >> 8 * b & 0xFF for x in g)
        z = zstd_encode(bytes(raw))
        out += z
        entries.append((len(z), len(raw)))
    ix = bytearray(b"RLBINDEX" + struct.pack("<IIQ", len(frames), 0, len(seqs)))
    for step, fs in frames:
        ix += struct.pack("<II", step, len(fs))
    for s in seqs:
        ix += struct.pack("<III", s.group, s.sample, s.tokens)
    ix += struct.pack("<I", crc32c(ix))
    out += struct.pack("<II", SKIP_INDEX, len(ix)) + ix
    entries.append((8 + len(ix), 0))
    st = b"".join(struct.pack("<II", a, b) for a, b in entries)
    st += struct.pack("<IBI", len(entries), 0, SEEK_FOOTER)
    out += struct.pack("<II", SKIP_SEEK, len(st)) + st
    with open(path, "wb") as f:
        f.write(out)


def recode(src, dst, coding, chunk, frame_records, lists):
    """SRC's sequences written again in CODING (raw, rank, delta), RANK
    chunks of CHUNK tokens and lists of LISTS, FRAME_RECORDS records per
    frame at most; DELTA sorts each token's ids (and its gates along)."""
    h, seqs, _ = read_trace(src)
    h.id_coding = {"raw": 0, "rank": 1, "delta": 2}[coding]
    if coding == "delta" and not h.sorted:
        h.sorted, h.flags = True, h.flags | 2
        K = h.topk
        for s in seqs:
            for l in range(h.moe_layers):
                for t in range(s.tokens):
                    a = slice(t * K, (t + 1) * K)
                    order = sorted(range(K), key=lambda k: s.ids[l][a][k])
                    s.ids[l][a] = [s.ids[l][a][k] for k in order]
                    if h.gates:
                        s.gates[l][a] = [s.gates[l][a][k] for k in order]
    h.chunk_tokens = chunk if coding == "rank" else 0
    write_trace(dst, h, seqs, frame_records, lists)
    return seqs


# ---------------------------------------------------------------------------
# Part II: the plan

POLICIES = ["static", "eplb", "eplb-oracle", "replicate", "relibra", "ideal"]
SPLITS = ["locality", "even"]
PACKS = ["in-order", "ffd", "data-control", "file", "dynamic"]
F_REORDER, F_REPLICATE, F_COLOCATE, F_SCHEDULE, F_COPIES = 1, 2, 4, 8, 16
F_RELAY = 1 << 16  # optional


class PlanHeader:
    pass


def plan_header(c, base):
    """Section P3."""
    w = "header"
    n = len(c)
    need(n >= 156 and c[:8] == b"RLBPLAN\0", w, base, "bad magic")
    p = PlanHeader()
    p.major, p.minor = u16(c, 8), u16(c, 10)
    need(p.major == 1, w, base + 8, "version %d.%d" % (p.major, p.minor))
    need(p.minor > 3 or n == 156, w, base, "1.%d header of %d bytes" % (p.minor, n))
    need(crc32c(c[:n - 4]) == u32(c, n - 4), w, base + n - 4, "checksum mismatch")
    p.flags = u32(c, 12)
    need(not p.flags & 0xFFE0, w, base + 12, "unknown flags 0x%x" % p.flags)
    p.policy, p.split, p.pack = c[16], c[17], c[18]
    need(p.policy < len(POLICIES), w, base + 16, "policy %d" % p.policy)
    need(p.split < 2, w, base + 17, "split %d" % p.split)
    need(p.pack < len(PACKS), w, base + 18, "pack %d" % p.pack)
    need(c[19] == 0, w, base + 19, "reserved byte")
    (p.layers, p.experts, p.topk, p.ranks, p.gpn, p.slots, p.min_tokens,
     p.eplb_window, p.mbt) = struct.unpack_from("<9I", c, 20)
    p.migration_weight = f64(c, 56)
    p.trace_hash = u64(c, 64)
    p.first, p.last, p.steps = struct.unpack_from("<III", c, 72)
    need(u32(c, 84) == 0, w, base + 84, "reserved field")
    p.model = name_field(c, 88, 64, w, "model")
    need(1 <= p.layers <= 65536, w, base + 20, "layers %d" % p.layers)
    need(1 <= p.experts <= 1 << 20, w, base + 24, "experts %d" % p.experts)
    need(1 <= p.topk <= p.experts, w, base + 28, "topk %d" % p.topk)
    need(1 <= p.ranks <= 1 << 20 and p.experts % p.ranks == 0, w, base + 32,
         "ranks %d" % p.ranks)
    need(p.gpn >= 1 and p.ranks % p.gpn == 0, w, base + 36, "gpus_per_node %d" % p.gpn)
    need(p.slots <= 65536, w, base + 40, "replica_slots %d" % p.slots)
    need(math.isfinite(p.migration_weight), w, base + 56, "migration_weight")
    need(p.steps <= max(p.last - p.first + 1, 0) or p.steps == 0, w, base + 80,
         "trace_steps %d" % p.steps)
    sched = bool(p.flags & F_SCHEDULE)
    need(sched == (p.pack in (2, 3)), w, base + 12, "SCHEDULE with pack %d" % p.pack)
    need(not p.flags & F_COPIES or p.split == 1, w, base + 12, "COPIES without EVEN")
    # Writer rules (section P3): the lowest minor that has what the file
    # uses; replica_slots 0 where the plan uses none; the split of the
    # policy (section P7).
    lowest = max(1 if sched else 0, 2 if p.flags & F_COPIES else 0,
                 3 if p.pack == 4 else 0)
    need(p.minor == lowest, w, base + 10, "minor %d, the file uses 1.%d" % (p.minor, lowest))
    if POLICIES[p.policy] in ("static", "ideal") or (
            POLICIES[p.policy] == "relibra" and not p.flags & F_REPLICATE):
        need(p.slots == 0, w, base + 40, "replica_slots %d for %s"
             % (p.slots, POLICIES[p.policy]))
    need(p.split == (1 if POLICIES[p.policy] in ("eplb", "eplb-oracle") else 0), w,
         base + 17, "split %s for %s" % (SPLITS[p.split], POLICIES[p.policy]))
    if p.flags & F_COLOCATE and POLICIES[p.policy] == "relibra":
        need(p.flags & F_REORDER, w, base + 12, "COLOCATE without REORDER")
    return p


class StepPlan:
    pass


def plan_step(p, raw, where, entry):
    """Sections P4.1-P4.4: one step's content."""
    L, E, G = p.layers, p.experts, p.ranks
    wg = 2 if G <= 65536 else 4
    we = 2 if E <= 65536 else 4
    need(len(raw) >= 32, where, 0, "content of %d bytes" % len(raw))
    s = StepPlan()
    s.step, s.mbs, s.migrated, fixed = struct.unpack_from("<IIII", raw, 0)
    s.planner_ns, s.replicas = u64(raw, 16), u64(raw, 24)
    need(fixed == 32, where, 0, "fixed_bytes %d" % fixed)
    need((s.step, s.mbs, s.replicas) == entry[:3], where, 0,
         "fixed part %r, the step index says %r" % ((s.step, s.mbs, s.replicas), entry[:3]))
    need(s.mbs <= 1 << 20, where, 0, "micro_batches %d" % s.mbs)
    M, N = s.mbs, s.replicas
    size = 32 + L * E * wg + 4 * M * L + N * (we + wg) + 4 * (M * L * E + N)
    if p.flags & F_COPIES:
        size += 4 * (M * L * E + N)
    if p.flags & F_SCHEDULE:
        size += 8 + entry[3] * (16 + wg)
    need(len(raw) == size, where, 0, "content of %d bytes, the formula gives %d"
         % (len(raw), size))
    pos = 32

    def arr(count, width):
        nonlocal pos
        fmt = "<%d%s" % (count, "H" if width == 2 else "I")
        v = list(struct.unpack_from(fmt, raw, pos))
        pos += count * width
        return v

    s.home = arr(L * E, wg)
    rep_count = arr(M * L, 4)
    need(sum(rep_count) == N, where, 0, "rep_count adds up to %d, not %d"
         % (sum(rep_count), N))
    rep_expert = arr(N, we)
    rep_gpu = arr(N, wg)
    ninst = M * L * E + N
    quota = arr(ninst, 4)
    copies = arr(ninst, 4) if p.flags & F_COPIES else [1] * ninst
    for l in range(L):
        for e in range(E):
            need(s.home[l * E + e] < G, where, 0, "layer %d, expert %d: home gpu %d"
                 % (l, e, s.home[l * E + e]))
    # P4.3: instances of every cell.
    s.inst = []  # [m][l][e] -> [(gpu, quota, copies)]
    ii = ri = 0
    slots = E // G + p.slots
    for m in range(M):
        row = []
        for l in range(L):
            cells = []
            rend = ri + rep_count[m * L + l]
            per_gpu = [0] * G
            for e in range(E):
                inst = [(s.home[l * E + e], quota[ii], copies[ii])]
                ii += 1
                while ri < rend and rep_expert[ri] == e:
                    inst.append((rep_gpu[ri], quota[ii], copies[ii]))
                    ri += 1
                    ii += 1
                what = "mb %d, layer %d, expert %d" % (m, l, e)
                gpus = [g for g, _, _ in inst]
                for g in gpus:
                    need(g < G, where, 0, what + ": gpu %d beyond %d" % (g, G))
                need(len(set(gpus)) == len(gpus), where, 0, what + ": two instances on a gpu")
                need(gpus[1:] == sorted(gpus[1:]), where, 0, what + ": replicas out of order")
                for g, _, cp in inst:
                    need(1 <= cp <= slots and (cp == 1 or p.split == 1), where, 0,
                         what + ": %d copies" % cp)
                    per_gpu[g] += cp
                cells.append(inst)
            need(ri == rend, where, 0, "mb %d, layer %d: replica left over" % (m, l))
            for g in range(G):
                need(per_gpu[g] <= slots, where, 0, "mb %d, layer %d: gpu %d holds %d copies"
                     % (m, l, g, per_gpu[g]))
            row.append(cells)
        s.inst.append(row)
    s.schedule = None
    if p.flags & F_SCHEDULE:
        Q, C = u32(raw, pos), u32(raw, pos + 4)
        pos += 8
        need((C, Q) == entry[3:5], where, 0, "schedule of %d chunks, %d sequences; "
             "the index says %r" % (C, Q, entry[3:5]))
        need(Q <= C, where, 0, "%d sequences in %d chunks" % (Q, C))
        seq, start, toks, mb = arr(C, 4), arr(C, 4), arr(C, 4), arr(C, 4)
        rank = arr(C, wg)
        ch = list(zip(seq, start, toks, mb, rank))
        nxt = {}
        for q, a, t, m, r in ch:
            need(q < Q and t >= 1 and m < M and r < G, where, 0, "chunk %r" % ((q, a, t, m, r),))
            need(a == nxt.get(q, 0) and (q == 0 or q in nxt or q - 1 in nxt), where, 0,
                 "chunks do not tile sequence %d from 0 in order" % q)
            nxt[q] = a + t
        need(len(nxt) == Q and [q for q, *_ in ch] == sorted(seq), where, 0,
             "chunks out of (seq, start) order or a sequence without chunks")
        s.schedule = (Q, ch)
    need(pos == len(raw), where, 0, "bytes left after the step")
    return s


def read_plan(path):
    with open(path, "rb") as f:
        data = f.read()
    need(len(data) >= 8 and u32(data, 0) == SKIP_HEADER, "header", 0, "bad magic")
    frames, seek_off = seek_table(data, "plan")
    need(len(frames) >= 2, "seek table", seek_off, "fewer than 2 entries")
    o, cs, ds = frames[0]
    need(ds == 0, "seek table", seek_off + 12, "header entry with raw size %d" % ds)
    p = plan_header(skippable(data, 0, cs, SKIP_HEADER, "header"), 8)
    S = len(frames) - 2
    off, cs, ds = frames[S + 1]
    w = "step index"
    c = skippable(data, off, cs, SKIP_INDEX, w)
    base = off + 8
    need(ds == 0, "seek table", seek_off, "step index entry with raw size %d" % ds)
    need(len(c) >= 20 and c[:8] == b"RLBPINDX", w, base, "bad magic")
    need(crc32c(c[:-4]) == u32(c, len(c) - 4), w, base + len(c) - 4, "checksum mismatch")
    ns, eb = u32(c, 8), u32(c, 12)
    need(ns == S, w, base + 8, "%d steps, the seek table has %d" % (ns, S))
    need(eb == (24 if p.flags & F_SCHEDULE else 16), w, base + 12, "entry_bytes %d" % eb)
    need(len(c) == 20 + ns * eb, w, off + 4, "Frame_Size is not 20 + S x entry_bytes")
    steps = []
    prev = -1
    for i in range(S):
        q = 16 + i * eb
        e = (u32(c, q), u32(c, q + 4), u64(c, q + 8))
        if eb == 24:
            e += (u32(c, q + 16), u32(c, q + 20))
        need(e[0] > prev, w, base + q, "steps do not increase")
        prev = e[0]
        o, cs, ds = frames[1 + i]
        zstd_frame_check(data, o, cs, ds)
        try:
            raw = zstd_decode(data[o:o + cs])
        except ValueError as err:
            raise Bad("step frame", o, str(err))
        need(len(raw) == ds, "step frame", o, "decodes to %d bytes" % len(raw))
        steps.append(plan_step(p, raw, "step %d (frame at offset %d)" % (e[0], o), e))
    return p, steps


# ---------------------------------------------------------------------------
# docs/schedule.md: the packing rules, for the loads behind the split


def chunks_of(lengths, B):
    out = []
    for q, n in enumerate(lengths):
        for a in range(0, n, B):
            out.append((q, a, min(B, n - a)))
    return out


def pack_in_order(chs, R, B):
    out, mb, room = [], 0, [B] * R
    for i, (q, a, t) in enumerate(chs):
        fit = [r for r in range(R) if room[r] >= t]
        if i > 0 and not fit:
            mb, room = mb + 1, [B] * R
            fit = [0] if room[0] >= t else []
        best = min(fit, key=lambda r: (room[r], r)) if fit else 0
        room[best] -= t
        out.append((q, a, t, mb, best))
    return out, (mb + 1 if chs else 0)


def by_length(chs):
    return sorted(chs, key=lambda c: -c[2])  # stable: (seq, start) on ties


def pack_ffd(chs, R, B):
    bins, out = [], []
    for q, a, t in by_length(chs):
        for i, room in enumerate(bins):
            if room >= t:
                break
        else:
            bins += [B] * R
            i = len(bins) - R
        bins[i] -= t
        out.append((q, a, t, i // R, i % R))
    return sorted(out), len(bins) // R


def ffd_bins(lens, B):
    bins = []
    for t in lens:
        for i, room in enumerate(bins):
            if room >= t:
                bins[i] -= t
                break
        else:
            bins.append(B - t)
    return len(bins)


def pack_dynamic(chs, R, B):
    if not chs:
        return [], 0
    share = [[] for _ in range(R)]
    tok = [0] * R
    for c in by_length(chs):
        r = min(range(R), key=lambda x: (tok[x], x))
        share[r].append(c)
        tok[r] += c[2]
    M = max(ffd_bins([c[2] for c in sh], B) for sh in share)
    while True:
        mbs = []
        ok = True
        for r in range(R):
            bins = [[] for _ in range(M)]
            used = [0] * M
            for c in share[r]:
                m = min(range(M), key=lambda x: (used[x], x))
                if used[m] + c[2] > B:
                    ok = False
                    break
                bins[m].append(c)
                used[m] += c[2]
            if not ok:
                break
            mbs.append((bins, used))
        if ok:
            break
        M += 1
    out = []
    for r, (bins, used) in enumerate(mbs):
        order = sorted(range(M), key=lambda x: (-used[x], x))
        for m, b in enumerate(order):
            for q, a, t in bins[b]:
                out.append((q, a, t, m, r))
    return sorted(out), M


def pack_data_control(chs, R, B):
    total = sum(c[2] for c in chs)
    if not chs:
        return [], 0
    M = -(-total // (R * B))
    while True:
        used = [0] * (M * R)
        out = []
        for q, a, t in by_length(chs):
            i = min(range(M * R), key=lambda x: (used[x], x))
            if used[i] + t > B:
                break
            used[i] += t
            out.append((q, a, t, i // R, i % R))
        else:
            return sorted(out), M
        M += 1


def schedule_of(p, lengths):
    chs = chunks_of(lengths, p.mbt)
    rule = PACKS[p.pack]
    fn = {"in-order": pack_in_order, "ffd": pack_ffd, "dynamic": pack_dynamic,
          "data-control": pack_data_control}[rule]
    return fn(chs, p.ranks, p.mbt)


# ---------------------------------------------------------------------------
# Section P7: the per-source split


def split_locality(inst, load, G, g):
    left = [q for _, q, _ in inst]
    rem = list(load)
    rows = [[0] * len(inst) for _ in range(G)]
    for i, (gpu, _, _) in enumerate(inst):
        t = min(rem[gpu], left[i])
        rows[gpu][i] += t
        rem[gpu] -= t
        left[i] -= t
    hn = inst[0][0] // g
    order = [s for s in range(G) if s // g == hn] + [s for s in range(G) if s // g != hn]
    for s in order:
        for i in range(len(inst)):
            t = min(rem[s], left[i])
            rows[s][i] += t
            rem[s] -= t
            left[i] -= t
    return rows, any(rem) or any(left)


def split_even(inst, load, G):
    C = sum(cp for _, _, cp in inst)
    owner = [i for i, (_, _, cp) in enumerate(inst) for _ in range(cp)]
    rows = [[0] * len(inst) for _ in range(G)]
    for s in range(G):
        base, r = divmod(load[s], C)
        for j in range(C):
            rows[s][owner[j]] += base
        for j in range(r):
            rows[s][owner[(s + j) % C]] += 1
    got = [sum(rows[s][i] for s in range(G)) for i in range(len(inst))]
    return rows, got != [q for _, q, _ in inst]


def check_split(p, st, h, seqs):
    """The step's loads under its schedule, and every cell's split."""
    L, E, G = p.layers, p.experts, p.ranks
    mine = [s for s in seqs if s.step == st.step]
    lengths = [s.tokens for s in mine]
    if st.schedule is not None:
        Q, ch = st.schedule
        if Q != len(mine):
            diff("step %d: schedule sequences" % st.step, len(mine), Q)
            return
        M = st.mbs
        if PACKS[p.pack] == "data-control":
            sch, m2 = schedule_of(p, lengths)
            if (sch, m2) != (ch, M):
                diff("step %d: carried schedule against the data-control rule"
                     % st.step, (m2, sch[:4]), (M, ch[:4]))
    else:
        ch, M = schedule_of(p, lengths)
    if M != st.mbs:
        diff("step %d: micro-batches under pack %s" % (st.step, PACKS[p.pack]), M, st.mbs)
        return
    K = h.topk
    load = [[[[0] * E for _ in range(G)] for _ in range(L)] for _ in range(M)]
    for q, a, t, m, r in ch:
        s = mine[q]
        need(a + t <= s.tokens, "step %d" % st.step, 0, "chunk beyond sequence %d" % q)
        for l in range(L):
            ld = load[m][l][r]
            for x in s.ids[l][a * K:(a + t) * K]:
                ld[x] += 1
    for m in range(M):
        for l in range(L):
            for e in range(E):
                inst = st.inst[m][l][e]
                col = [load[m][l][s][e] for s in range(G)]
                if sum(q for _, q, _ in inst) != sum(col):
                    diff("step %d, mb %d, layer %d, expert %d: quotas sum"
                         % (st.step, m, l, e), sum(col), sum(q for _, q, _ in inst))
                    continue
                if p.split == 0:
                    _, bad = split_locality(inst, col, G, p.gpn)
                else:
                    _, bad = split_even(inst, col, G)
                if bad:
                    diff("step %d, mb %d, layer %d, expert %d: %s split"
                         % (st.step, m, l, e, SPLITS[p.split]), "quotas of the rule",
                         [q for _, q, _ in inst])


def plan_text(p, steps):
    """Section P15: the text dump."""
    out = ["plan %d.%d: policy %s, split %s, pack %s" % (
        p.major, p.minor, POLICIES[p.policy], SPLITS[p.split], PACKS[p.pack]),
        "options: replica_slots %d, min_tokens_per_replica %d, eplb_window %d, "
        "micro_batch_tokens %d, migration_weight %s, reorder %d, replicate %d, colocate %d, "
        "relay %d"
        % (p.slots, p.min_tokens, p.eplb_window, p.mbt, "%g" % p.migration_weight,
           p.flags & 1, p.flags >> 1 & 1, p.flags >> 2 & 1, p.flags >> 16 & 1),
        "shape: layers %d, experts %d, topk %d, ranks %d, gpus_per_node %d"
        % (p.layers, p.experts, p.topk, p.ranks, p.gpn),
        "trace: model '%s', hash 0x%016x, steps %d..%d (%d)"
        % (p.model, p.trace_hash, p.first, p.last, p.steps)]
    for s in steps:
        out.append("step %d: %d micro-batches, %d replicas, %d migrated experts, "
                   "planner %d ns" % (s.step, s.mbs, s.replicas, s.migrated, s.planner_ns))
        for l in range(p.layers):
            out.append("  homes layer %d: %s" % (l, " ".join(
                str(s.home[l * p.experts + e]) for e in range(p.experts))))
        for m in range(s.mbs):
            for l in range(p.layers):
                cells = []
                for e, inst in enumerate(s.inst[m][l]):
                    cells.append("%d[%s]" % (e, " ".join(
                        ("%dx%d:%d" % (g, cp, q)) if cp > 1 else "%d:%d" % (g, q)
                        for g, q, cp in inst)))
                out.append("  mb %d, layer %d: %s" % (m, l, " ".join(cells)))
        if s.schedule is not None:
            Q, ch = s.schedule
            out.append("  schedule: %d sequences in %d chunks" % (Q, len(ch)))
            for m in range(s.mbs):
                for r in range(p.ranks):
                    out.append("  mb %d, rank %d:%s" % (m, r, "".join(
                        " %d:%d+%d" % (q, a, t) for q, a, t, mm, rr in ch
                        if (mm, rr) == (m, r))))
    return out


def check_plan(bin_, path, trace):
    p, steps = read_plan(path)
    if trace:
        check_plan_trace(p, steps, trace)
    compare_plan(bin_, path, p, steps)


def check_plan_trace(p, steps, trace):
    """The plan against the trace it was made from: identity, loads, split."""
    WRITER["rules"] = False  # the trace's own check is `trace`'s
    h, seqs, _ = read_trace(trace)
    WRITER["rules"] = True
    th = trace_hash(h)
    tsteps = sorted({s.step for s in seqs})
    for what, mine, theirs in (
            ("trace_hash", th, p.trace_hash),
            ("trace_first_step", tsteps[0] if tsteps else 0, p.first),
            ("trace_last_step", tsteps[-1] if tsteps else 0, p.last),
            ("trace_steps", len(tsteps), p.steps), ("model", h.model, p.model),
            ("experts", h.experts, p.experts), ("topk", h.topk, p.topk),
            ("layers", h.moe_layers, p.layers)):
        if mine != theirs:
            diff("plan header %s against the trace" % what, mine, theirs)
    if DIFFS:
        return
    for st in steps:
        check_split(p, st, h, seqs)
    # migrated_experts (section P4.1): homes on another node than in the
    # plan's previous step, or for its first step than in the static
    # layout (expert e on gpu e / (E / G)).
    E = p.experts
    prev = [e // (E // p.ranks) for _ in range(p.layers) for e in range(E)]
    for st in steps:
        moved = sum(1 for a, b in zip(st.home, prev) if a // p.gpn != b // p.gpn)
        if moved != st.migrated:
            diff("step %d migrated_experts" % st.step, moved, st.migrated)
        prev = st.home


def compare_plan(bin_, path, p, steps):
    # relibra inspect --json --dump
    j = json.loads(relibra(bin_, "inspect", "--json", "--dump", path))
    hd = j["header"]
    want = {
        "version": "%d.%d" % (p.major, p.minor), "policy": POLICIES[p.policy],
        "split": SPLITS[p.split], "pack": PACKS[p.pack],
        "options": {"replica_slots": p.slots, "min_tokens_per_replica": p.min_tokens,
                    "eplb_window": p.eplb_window, "micro_batch_tokens": p.mbt,
                    "migration_weight": p.migration_weight,
                    "reorder": bool(p.flags & 1), "replicate": bool(p.flags & 2),
                    "colocate": bool(p.flags & 4), "relay": bool(p.flags & F_RELAY)},
        "shape": {"layers": p.layers, "experts": p.experts, "topk": p.topk,
                  "ranks": p.ranks, "gpus_per_node": p.gpn},
        "trace": {"model": p.model, "hash": "%016x" % p.trace_hash,
                  "first_step": p.first, "last_step": p.last, "steps": p.steps},
    }
    if hd != want:
        diff("plan header JSON", want, hd)
    js = j["steps"]
    if len(js) != len(steps):
        diff("plan steps", len(steps), len(js))
    for s, x in zip(steps, js):
        w = {"step": s.step, "micro_batches": s.mbs, "replicas": s.replicas,
             "migrated_experts": s.migrated, "planner_ns": s.planner_ns,
             "homes": [s.home[l * p.experts:(l + 1) * p.experts] for l in range(p.layers)],
             "instances": [[[[list(i) for i in cell] for cell in row] for row in mb]
                           for mb in s.inst]}
        got = {k: x.get(k) for k in w}
        if got != w:
            for k in w:
                if got[k] != w[k]:
                    diff("step %d %s (JSON)" % (s.step, k), w[k], got[k])
        if s.schedule is not None:
            sj = x.get("schedule")
            Q, ch = s.schedule
            mine = [[[[q, a, a + t] for q, a, t, mm, rr in ch if (mm, rr) == (m, r)]
                     for r in range(p.ranks)] for m in range(s.mbs)]
            theirs = sj.get("micro_batches") if isinstance(sj, dict) else sj
            if theirs != mine:
                diff("step %d schedule (JSON)" % s.step, mine, theirs)
        elif "schedule" in x and x["schedule"] is not None:
            diff("step %d schedule (JSON)" % s.step, None, x["schedule"])
    # relibra inspect --dump: the text of section P15 between the file name
    # and the integrity line.
    text = relibra(bin_, "inspect", "--dump", path).splitlines()
    text = [t for t in text if not t.startswith(("plan:  ", "integrity:"))]
    mine = plan_text(p, steps)
    for i in range(max(len(mine), len(text))):
        a = mine[i] if i < len(mine) else None
        b = text[i] if i < len(text) else None
        if a != b:
            diff("inspect --dump line %d" % (i + 1), a, b)
            break


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--relibra", required=True)
    ap.add_argument("kind", choices=["trace", "plan", "recode"])
    ap.add_argument("file")
    ap.add_argument("out", nargs="?")
    ap.add_argument("--trace")
    ap.add_argument("--coding", choices=["raw", "rank", "delta"], default="raw")
    ap.add_argument("--chunk", type=int, default=128)
    ap.add_argument("--frame-records", type=int, default=1 << 30)
    ap.add_argument("--lists", choices=["all", "empty"], default="all")
    a = ap.parse_args()
    try:
        if a.kind == "trace":
            check_trace(a.relibra, a.file)
        elif a.kind == "recode":
            if not a.out:
                ap.error("recode needs IN and OUT")
            want = recode(a.file, a.out, a.coding, a.chunk, a.frame_records, a.lists)
            WRITER["rules"] = False
            _, got = check_trace(a.relibra, a.out)
            for i, (x, y) in enumerate(zip(want, got)):
                if (x.ids, x.gates) != (y.ids, y.gates):
                    diff("recoded sequence %d" % i, "as written", "read back otherwise")
            if len(want) != len(got):
                diff("recoded sequences", len(want), len(got))
        else:
            check_plan(a.relibra, a.file, a.trace)
    except Bad as e:
        print("spec_ref: '%s': %s" % (a.file, e))
        return 1
    for d in DIFFS:
        print(d)
    if DIFFS:
        print("%d differences" % len(DIFFS))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
