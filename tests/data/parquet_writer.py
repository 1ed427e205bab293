"""A small Parquet writer (stdlib only) for tests: string columns, REQUIRED or OPTIONAL, data
pages v1, PLAIN or a dictionary, UNCOMPRESSED or GZIP, with knobs that break one thing each
(a field of a wrong type, a page size past its chunk, a dictionary index past its dictionary,
an empty RLE run, a codec the reader refuses...). Thrift compact protocol written by hand.

    write(path, columns, rows_per_group=..., rows_per_page=..., dictionary=..., codec=...,
          **breaks)
columns: [(name, values, kind)] with kind "string" (values: str or None) or "int64"."""
import gzip
import struct

I32, I64, BINARY, LIST, STRUCT = 5, 6, 8, 9, 12


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def zigzag(n):
    return (n << 1) ^ (n >> 63)


class Struct:
    def __init__(self):
        self.b = bytearray()
        self.last = 0

    def field(self, fid, ftype):
        delta = fid - self.last
        if 0 < delta <= 15:
            self.b.append(delta << 4 | ftype)
        else:
            self.b.append(ftype)
            self.b += varint(zigzag(fid))
        self.last = fid
        return self

    def i32(self, fid, v):
        self.field(fid, I32).b += varint(zigzag(v))
        return self

    def i64(self, fid, v):
        self.field(fid, I64).b += varint(zigzag(v))
        return self

    def binary(self, fid, v):
        v = v.encode() if isinstance(v, str) else v
        self.field(fid, BINARY).b += varint(len(v)) + v
        return self

    def struct(self, fid, s):
        self.field(fid, STRUCT).b += s.end()
        return self

    def list(self, fid, etype, items):
        self.field(fid, LIST)
        n = len(items)
        self.b += bytes([(n << 4 | etype) if n < 15 else (0xF0 | etype)]) + (varint(n) if n >= 15 else b"")
        for it in items:
            self.b += it.end() if isinstance(it, Struct) else varint(zigzag(it)) if etype in (I32, I64) else varint(len(it)) + it
        return self

    def end(self):
        return bytes(self.b) + b"\x00"


def rle_bits(levels, width):
    """The RLE / bit-packing hybrid as one bit-packed run."""
    groups = (len(levels) + 7) // 8
    vals = list(levels) + [0] * (groups * 8 - len(levels))
    bits = 0
    for i, v in enumerate(vals):
        bits |= v << (i * width)
    return varint(groups << 1 | 1) + bits.to_bytes(groups * width, "little") if width else varint(groups << 1 | 1)


def plain(values):
    return b"".join(struct.pack("<I", len(v)) + v for v in values)


def page_header(ptype, uncompressed, compressed, sub_id, sub):
    return Struct().i32(1, ptype).i32(2, uncompressed).i32(3, compressed).struct(sub_id, sub).end()


def write(path, columns, rows_per_group=4, rows_per_page=3, dictionary=False, codec=0, **brk):
    n_rows = len(columns[0][1])
    out = bytearray(b"PAR1")
    groups = []
    for g0 in range(0, n_rows, rows_per_group):
        g1 = min(n_rows, g0 + rows_per_group)
        chunks = []
        for name, values, kind in columns:
            start = len(out)
            optional = kind == "string" and brk.get("optional", True)
            if kind == "int64":
                body = b"".join(struct.pack("<q", v) for v in values[g0:g1])
                out += page_header(0, len(body), len(body), 5, Struct().i32(1, g1 - g0).i32(2, 0).i32(3, 3).i32(4, 3)) + body
                chunks.append((name, 2, start, len(out) - start, g1 - g0, None))
                continue
            vals = [None if v is None else v.encode() for v in values[g0:g1]]
            dict_vals, dict_at = [], None
            if dictionary:
                dict_vals = sorted({v for v in vals if v is not None})
                body = plain(dict_vals)
                data = gzip.compress(body) if codec == 2 else body
                dict_at = len(out)
                out += page_header(2, len(body), len(data), 7, Struct().i32(1, len(dict_vals)).i32(2, 0)) + data
            for p0 in range(0, len(vals), rows_per_page):
                page = vals[p0:p0 + rows_per_page]
                levels = [0 if v is None else 1 for v in page]
                body = b""
                if optional:
                    lv = rle_bits(levels, 1) if not brk.get("empty_rle_run") else b"\x00\x01"
                    body += struct.pack("<I", len(lv)) + lv
                present = [v for v in page if v is not None]
                if dictionary:
                    idx = [dict_vals.index(v) for v in present]
                    if brk.get("index_past_dictionary") and idx:
                        idx[-1] = len(dict_vals)
                    width = max(1, max(idx + [1]).bit_length())
                    body += bytes([width]) + (rle_bits(idx, width) if idx else b"")
                else:
                    body += plain(present)
                enc = brk.get("encoding", 8 if dictionary else 0)
                data = gzip.compress(body) if codec == 2 else body
                unc = len(body) + brk.get("uncompressed_delta", 0)
                comp = len(data) + brk.get("page_size_delta", 0)
                out += page_header(0, unc, comp, 5, Struct().i32(1, len(page)).i32(2, enc).i32(3, 3).i32(4, 3)) + data
            chunks.append((name, 6, dict_at if dict_at is not None else start, len(out) - start, g1 - g0, dict_at))
        groups.append((g1 - g0, chunks))
    schema = [Struct().binary(4, "schema").i32(5, len(columns))]
    for name, _, kind in columns:
        if brk.get("list_column") == name:  # a LIST group of a repeated string
            schema += [Struct().i32(3, 1).binary(4, name).i32(5, 1).i32(6, 3),
                       Struct().i32(3, 2).binary(4, "list").i32(5, 1),
                       Struct().i32(1, 6).i32(3, 1).binary(4, "element").i32(6, 0)]
            continue
        e = Struct().i32(1, 2 if kind == "int64" else 6).i32(3, 1 if kind == "string" and brk.get("optional", True) else 0).binary(4, name)
        schema.append(e.i32(6, 0) if kind == "string" else e)
    row_groups = []
    for rows, chunks in groups:
        cols = []
        for name, ptype, at, size, nv, dict_at in chunks:
            m = Struct().i32(1, ptype).list(2, I32, [0, 3]).list(3, BINARY, [name.encode()])
            m.i32(4, brk.get("codec_id", codec)).i64(5, nv).i64(6, size).i64(7, size)
            m.i64(9, brk.get("data_page_offset", at))
            if dict_at is not None:
                m.i64(11, dict_at)
            cols.append(Struct().i64(2, at).struct(3, m))
        row_groups.append(Struct().list(1, STRUCT, cols).i64(2, 0).i64(3, rows))
    meta = Struct().i32(1, 1).list(2, STRUCT, schema)
    if brk.get("num_rows_as_string"):
        meta.binary(3, str(n_rows))
    else:
        meta.i64(3, n_rows + brk.get("num_rows_delta", 0))
    meta = meta.list(4, STRUCT, row_groups).end()
    out += meta + struct.pack("<I", len(meta) + brk.get("footer_len_delta", 0)) + b"PAR1"
    with open(path, "wb") as f:
        f.write(out)
