"""What can still be read of a damaged SQLite file, page by page — for ``profile-bridge store repair``, when SQLite
itself stops at the first damaged page of a table.

Written from the file format's specification (https://www.sqlite.org/fileformat2.html: §1.3 the header, §1.5 b-tree
pages, §1.6 cell payload and overflow, §1.7 pointer-map pages, §2.1 records); nothing here writes.

- A table's rows are read from its b-tree: from the root page down through every interior page that parses, each
  leaf's cells decoded into records (for a WITHOUT ROWID table, an index b-tree, the interior cells hold rows too). A
  page that does not parse is counted as lost and skipped, with what hangs below it — unless the pointer map says
  where those pages belong.
- **Pointer map.** A store is created with ``auto_vacuum = INCREMENTAL`` (``bridge.store.database``), so the file has
  pointer-map pages naming each page's role and parent page. A b-tree page the walk did not reach (its parent was
  damaged) is traced up through its parents to a root page; when that root is the table's, its rows are read too.
  The walk also checks each child it follows against the map, so a damaged interior page that still parses cannot
  lead it into another table's pages.
- Every row is checked against the table's declared columns (count, type, NOT NULL) before it is kept: garbage that
  happens to parse as a record does not become a row.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, Final

MAGIC: Final = b"SQLite format 3\x00"
HEADER_BYTES: Final = 100
PENDING_BYTE: Final = 0x40000000  # the page holding this offset is never used (fileformat2 §1.3.2, "lock-byte page")

TABLE_INTERIOR: Final = 0x05
TABLE_LEAF: Final = 0x0D
INDEX_INTERIOR: Final = 0x02
INDEX_LEAF: Final = 0x0A
PAGE_TYPES: Final = (TABLE_INTERIOR, TABLE_LEAF, INDEX_INTERIOR, INDEX_LEAF)

PTRMAP_ROOT: Final = 1
PTRMAP_OVERFLOW1: Final = 3  # the first page of an overflow chain (parent: the b-tree page holding the cell)
PTRMAP_OVERFLOW2: Final = 4  # a later page of a chain (parent: the page before it)
PTRMAP_BTREE: Final = 5
PTRMAP_TYPES: Final = range(1, 6)

Value = int | float | str | bytes | None


class SalvageError(ValueError):
    """The file cannot be read at all (not an SQLite file, or a header that does not hold together)."""


class PageError(ValueError):
    """One page does not parse."""


@dataclass(frozen=True, slots=True)
class Header:
    page_size: int
    usable: int  # page size minus the reserved bytes at the end of each page
    page_count: int  # pages in the file (from its size)
    has_ptrmap: bool  # auto_vacuum or incremental_vacuum: pointer-map pages exist
    encoding: str


def parse_header(data: bytes, file_size: int) -> Header:
    """The 100-byte database header (§1.3); ``SalvageError`` when it is not one."""
    if len(data) < HEADER_BYTES or data[:16] != MAGIC:
        raise SalvageError("not an SQLite database (its first 16 bytes are not the SQLite header)")
    (raw_size,) = struct.unpack(">H", data[16:18])
    page_size = 65536 if raw_size == 1 else raw_size
    if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
        raise SalvageError(f"the header's page size {raw_size} is not a power of two from 512 to 65536")
    reserved = data[20]
    usable = page_size - reserved
    if usable < 480:
        raise SalvageError(f"the header reserves {reserved} bytes of each {page_size}-byte page")
    (largest_root,) = struct.unpack(">I", data[52:56])
    (encoding_id,) = struct.unpack(">I", data[56:60])
    encoding = {1: "utf-8", 2: "utf-16-le", 3: "utf-16-be"}.get(encoding_id, "utf-8")
    return Header(page_size, usable, file_size // page_size, largest_root != 0, encoding)


class Pages:
    """Pages of an open file, read on demand (numbered from 1; page 1 holds the header in its first 100 bytes)."""

    def __init__(self, fh: BinaryIO, header: Header) -> None:
        self.fh = fh
        self.header = header
        self.pending_page = PENDING_BYTE // header.page_size + 1

    def read(self, number: int) -> bytes:
        if not 1 <= number <= self.header.page_count:
            raise PageError(f"page {number} is outside the file ({self.header.page_count} pages)")
        self.fh.seek((number - 1) * self.header.page_size)
        data = self.fh.read(self.header.page_size)
        if len(data) != self.header.page_size:
            raise PageError(f"page {number} is cut short")
        return data


# --------------------------------------------------------------------------------------------- pure decoding


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A big-endian variable-length integer of 1–9 bytes (§1.5); (value, position after it)."""
    value = 0
    for i in range(8):
        if pos + i >= len(buf):
            raise PageError("a varint runs past the end of its page")
        byte = buf[pos + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, pos + i + 1
    if pos + 8 >= len(buf):
        raise PageError("a varint runs past the end of its page")
    value = (value << 8) | buf[pos + 8]
    return value, pos + 9


@dataclass(frozen=True, slots=True)
class BtreePage:
    kind: int
    cells: tuple[int, ...]  # offsets of the cells in the page
    right_child: int  # interior pages: the right-most child (0 on leaves)


def parse_btree_page(page: bytes, number: int, usable: int) -> BtreePage:
    """A b-tree page's header and cell pointer array (§1.5), checked the way SQLite checks a page it loads: a known
    type, a cell content area and cell pointers inside the usable part of the page."""
    base = HEADER_BYTES if number == 1 else 0
    kind = page[base]
    if kind not in PAGE_TYPES:
        raise PageError(f"page {number} has type byte {kind:#04x}, not a b-tree page's")
    interior = kind in (TABLE_INTERIOR, INDEX_INTERIOR)
    head = 12 if interior else 8
    cell_count, content_start = struct.unpack(">HH", page[base + 3 : base + 7])
    content_start = content_start or 65536
    pointers_end = base + head + 2 * cell_count
    if pointers_end > content_start or content_start > usable:
        raise PageError(f"page {number}: {cell_count} cells do not fit between its header and its content area")
    cells = struct.unpack(f">{cell_count}H", page[base + head : pointers_end])
    if any(not content_start <= c < usable for c in cells):
        raise PageError(f"page {number}: a cell pointer points outside its content area")
    right = struct.unpack(">I", page[base + 8 : base + 12])[0] if interior else 0
    return BtreePage(kind, cells, right)


def local_payload(total: int, usable: int, kind: int) -> int:
    """How much of a cell's payload is on its page; the rest is on overflow pages (§1.6)."""
    most = usable - 35 if kind == TABLE_LEAF else (usable - 12) * 64 // 255 - 23
    if total <= most:
        return total
    least = (usable - 12) * 32 // 255 - 23
    k = least + (total - least) % (usable - 4)
    return k if k <= most else least


def decode_record(payload: bytes, encoding: str = "utf-8") -> list[Value]:
    """A record (§2.1): a header of serial types, then the values."""
    header_len, pos = varint(payload, 0)
    if header_len > len(payload) or header_len < pos:
        raise PageError("a record's header is longer than the record")
    types: list[int] = []
    while pos < header_len:
        serial, pos = varint(payload, pos)
        types.append(serial)
    if pos != header_len:
        raise PageError("a record's header does not end where it says")
    values: list[Value] = []
    body = header_len
    for serial in types:
        size = _serial_size(serial)
        if body + size > len(payload):
            raise PageError("a record's values run past its end")
        chunk = payload[body : body + size]
        body += size
        values.append(_serial_value(serial, chunk, encoding))
    if body != len(payload):
        raise PageError("a record is longer than its values")
    return values


_INT_SIZES: Final = {1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8}


def _serial_size(serial: int) -> int:
    if serial in _INT_SIZES:
        return _INT_SIZES[serial]
    if serial == 7:
        return 8
    if serial in (0, 8, 9):
        return 0
    if serial in (10, 11):
        raise PageError(f"serial type {serial} is reserved")
    return (serial - 12) // 2 if serial % 2 == 0 else (serial - 13) // 2


def _serial_value(serial: int, chunk: bytes, encoding: str) -> Value:
    if serial == 0:
        return None
    if serial in _INT_SIZES:
        return int.from_bytes(chunk, "big", signed=True)
    if serial == 7:
        return float(struct.unpack(">d", chunk)[0])
    if serial in (8, 9):
        return serial - 8
    if serial % 2 == 0:
        return bytes(chunk)
    try:
        return chunk.decode(encoding)
    except UnicodeDecodeError as exc:
        raise PageError("a text value is not valid text") from exc


# --------------------------------------------------------------------------------------------- the walk


@dataclass(slots=True)
class TableSalvage:
    """What one table gave: its rows (rowid tables: (rowid, values); WITHOUT ROWID: (None, values)) and what was
    lost on the way."""

    rows: list[tuple[int | None, list[Value]]] = field(default_factory=list)
    lost_pages: int = 0  # pages of the table that do not parse
    bad_cells: int = 0  # cells that do not decode, or whose record does not fit the table
    orphans: int = 0  # pages found through the pointer map, not the walk


class Salvager:
    """Reads tables out of one file. ``salvage(root, index, check)`` per table; pages are read as needed."""

    def __init__(self, pages: Pages) -> None:
        self.pages = pages
        self.header = pages.header
        self._owner: dict[int, int] = {}  # page -> root page it belongs to (pointer map), filled on first use
        self._seen: set[int] = set()  # pages walked (by any table: a page belongs to one b-tree)
        self._maps: dict[int, bytes | None] = {}  # pointer-map pages read (1 in 800 pages of a 4 KiB-page file)

    def salvage(self, root: int, *, index: bool, check: Callable[[list[Value]], bool]) -> TableSalvage:
        out = TableSalvage()
        self._walk(root, index, check, out)
        if self.header.has_ptrmap:
            for number in self._orphans_of(root):
                out.orphans += 1
                self._walk(number, index, check, out)
        return out

    def _walk(self, start: int, index: bool, check: Callable[[list[Value]], bool], out: TableSalvage) -> None:
        leaf_kind, interior_kind = (INDEX_LEAF, INDEX_INTERIOR) if index else (TABLE_LEAF, TABLE_INTERIOR)
        stack = [(start, 0)]
        while stack:
            number, parent = stack.pop()
            if number in self._seen:
                continue
            if parent and not self._child_of(number, parent):
                out.lost_pages += 1  # a pointer on a page written over: the page it names is someone else's
                continue
            self._seen.add(number)
            try:
                data = self.pages.read(number)
                page = parse_btree_page(data, number, self.header.usable)
                if page.kind not in (leaf_kind, interior_kind):
                    raise PageError(f"page {number} is not a page of this kind of b-tree")
            except PageError:
                out.lost_pages += 1
                continue
            for offset in page.cells:
                try:
                    child, record = self._cell(data, number, offset, page.kind)
                except PageError:
                    out.bad_cells += 1
                    continue
                if child:
                    stack.append((child, number))
                if record is not None:
                    rowid, values = record
                    if check(values):
                        out.rows.append((rowid, values))
                    else:
                        out.bad_cells += 1
            if page.right_child:
                stack.append((page.right_child, number))

    def _cell(
        self, data: bytes, number: int, offset: int, kind: int
    ) -> tuple[int, tuple[int | None, list[Value]] | None]:
        """(left child or 0, (rowid, values) or None) of one cell (§1.5, "B-tree cell format")."""
        pos = offset
        child = 0
        if kind in (TABLE_INTERIOR, INDEX_INTERIOR):
            child = struct.unpack(">I", data[pos : pos + 4])[0]
            pos += 4
            if kind == TABLE_INTERIOR:
                return child, None  # only a key: the rows are on the leaves
        total, pos = varint(data, pos)
        rowid: int | None = None
        if kind == TABLE_LEAF:
            rowid, pos = varint(data, pos)
            if rowid >= 1 << 63:
                rowid -= 1 << 64
        payload = self._payload(data, number, pos, total, kind)
        return child, (rowid, decode_record(payload, self.header.encoding))

    def _payload(self, data: bytes, number: int, pos: int, total: int, kind: int) -> bytes:
        """A cell's payload: its local part, then its overflow chain (§1.6). Each overflow page must be where the
        pointer map says the chain goes (first page: parent ``number``; the next ones: the page before), and the
        last one must end the chain (a next-page number of 0) — an overflow page written over is not read as
        data."""
        usable = self.header.usable
        local = local_payload(total, usable, kind)
        if pos + local > usable:
            raise PageError("a cell runs past the end of its page")
        parts = [data[pos : pos + local]]
        got = local
        if got < total:
            (overflow,) = struct.unpack(">I", data[pos + local : pos + local + 4])
            seen: set[int] = set()
            parent, role = number, PTRMAP_OVERFLOW1
            while got < total:
                if overflow in seen or not overflow:
                    raise PageError("an overflow chain ends early or loops")
                if self.header.has_ptrmap and self._ptrmap_entry(overflow) not in (None, (role, parent)):
                    raise PageError(f"overflow page {overflow} is not where the pointer map says the chain goes")
                seen.add(overflow)
                page = self.pages.read(overflow)
                take = min(usable - 4, total - got)
                parts.append(page[4 : 4 + take])
                got += take
                parent, role = overflow, PTRMAP_OVERFLOW2
                (overflow,) = struct.unpack(">I", page[:4])
            if overflow:
                raise PageError("an overflow chain goes on past its payload (its last page was written over)")
        return b"".join(parts)

    # ----------------------------------------------------------------------------------------- pointer map

    def _ptrmap_entry(self, number: int) -> tuple[int, int] | None:
        """(type, parent) of a page from its pointer-map page (§1.7), or None when unreadable."""
        per_map = self.header.usable // 5 + 1
        map_page = (number - 2) // per_map * per_map + 2
        if map_page == self.pages.pending_page:
            map_page += 1
        if number <= map_page:
            return None
        offset = 5 * (number - map_page - 1)
        if map_page not in self._maps:
            try:
                self._maps[map_page] = self.pages.read(map_page)
            except PageError:
                self._maps[map_page] = None
        data = self._maps[map_page]
        if data is None:
            return None
        kind = data[offset]
        if kind not in PTRMAP_TYPES:
            return None
        return kind, struct.unpack(">I", data[offset + 1 : offset + 5])[0]

    def _child_of(self, number: int, parent: int) -> bool:
        if not self.header.has_ptrmap:
            return True
        entry = self._ptrmap_entry(number)
        return entry is None or (entry[0] == PTRMAP_BTREE and entry[1] == parent)

    def _orphans_of(self, root: int) -> Iterator[int]:
        """B-tree pages the pointer map places under ``root`` that no walk has reached yet."""
        if not self._owner:
            self._owner = self._owners()
        for number, owner in self._owner.items():
            if owner == root and number not in self._seen:
                yield number

    def _owners(self) -> dict[int, int]:
        """Every b-tree page of the file → the root page its pointer-map parents lead to (pages whose chain is broken
        are left out)."""
        parent_of: dict[int, int] = {}
        roots: set[int] = {1}  # sqlite_schema's root: page 1 has no pointer-map entry
        for number in range(3, self.header.page_count + 1):
            entry = self._ptrmap_entry(number)
            if entry is None:
                continue
            kind, parent = entry
            if kind == PTRMAP_ROOT:
                roots.add(number)
            elif kind == PTRMAP_BTREE:
                parent_of[number] = parent
        owner: dict[int, int] = {}
        for number in parent_of:
            chain = [number]
            node = number
            while node in parent_of and len(chain) < 64:
                node = parent_of[node]
                if node in owner:
                    node = owner[node]
                    break
                chain.append(node)
            if node in roots:
                for page in chain:
                    owner[page] = node
        return owner
