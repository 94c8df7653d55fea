"""The items an `SGHIndex` holds, in the order its engines read them: packed codes, ids (only
where they are not the rows 0 .. n - 1: 8 bytes an item for nothing), and with inverted lists
list numbers. Items in lists are in list order, each list's in the order added (a list is one
run of the codes, which the byte decoder's scan reads in place); batches added (a streamed
build) wait, and are put in that order on first use by one stable sort, not inserted one by one
into the sorted arrays (which copies all of them once per batch)."""

from __future__ import annotations

import numpy as np

LIST_NUMBER = np.int32  # an item's list (faiss's IVF indexes hold fewer than 2**31 lists)
MISSING_ID = -1  # faiss's I where a query has fewer than k results


def check_ids(ids, n: int) -> np.ndarray:
    """``ids`` as a fresh ``(n,)`` int64 array; ValueError quoting what is wrong."""
    ids = np.asarray(ids)
    if ids.ndim != 1 or len(ids) != n or (ids.dtype.kind not in "iu" and ids.size):
        raise ValueError(f"ids must be a 1-D integer array, one id per code ({n}), got dtype "
                         f"{ids.dtype} and shape {ids.shape}")
    if ids.dtype.kind == "u" and ids.size and ids.max() > np.iinfo(np.int64).max:
        raise ValueError(f"ids must fit in int64, got {ids.max()}")
    ids = ids.astype(np.int64)
    if (ids == MISSING_ID).any():
        raise ValueError(f"ids must not be {MISSING_ID} (the id of a missing neighbour), got "
                         f"it at position {int(np.argmax(ids == MISSING_ID))}")
    return ids


class IndexItems:
    """Codes of ``code_size`` bytes, ids, list numbers (``listed``); module doc."""

    def __init__(self, code_size: int, listed: bool) -> None:
        self.listed = listed
        self._codes = np.zeros((0, code_size), np.uint8)
        # None while the ids are the rows (never with lists: items there are in list order).
        self._ids: np.ndarray | None = np.zeros(0, np.int64) if listed else None
        self._lists = np.zeros(0, LIST_NUMBER)
        self._batches: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self.next_id = 0  # default ids go on from every id ever held: none is handed out twice

    def __len__(self) -> int:
        return len(self._codes) + sum(len(batch[0]) for batch in self._batches)

    @property
    def codes(self) -> np.ndarray:
        return self._in_order()._codes

    @property
    def lists(self) -> np.ndarray:
        return self._in_order()._lists

    @property
    def ids(self) -> np.ndarray:
        """Every item's id, in row order (made, and kept, where the ids were the rows)."""
        if self._in_order()._ids is None:
            self._ids = np.arange(len(self), dtype=np.int64)
        return self._ids

    def bytes_per_item(self) -> dict[str, int]:
        """What is held of each item, in bytes: its code, its id, its list number."""
        held = {"code": self._codes.shape[1], "id": 0 if self._ids is None else 8,
                "list": LIST_NUMBER(0).nbytes if self.listed else 0}
        return {field: size for field, size in held.items() if size}

    def saved_arrays(self) -> dict[str, np.ndarray]:
        """What `SGHIndex.save` stores of the items (no ids where they are the rows)."""
        self._in_order()
        held = {"codes": self._codes, "lists": self._lists, "next_id": np.int64(self.next_id)}
        return held if self._ids is None else {**held, "ids": self._ids}

    def ids_of(self, rows: np.ndarray) -> np.ndarray:
        """The ids of ``rows`` (-1: padding, as faiss), int64."""
        if self._ids is None:  # the ids are the rows, which every engine pads with -1
            return rows.astype(np.int64, copy=False)
        if not len(self.ids):  # an empty index: all padding
            return np.full(rows.shape, MISSING_ID, np.int64)
        ids = self.ids.take(rows)  # the padding's -1 takes the last id, then is put back
        ids[rows < 0] = MISSING_ID
        return ids

    def new_ids(self, n: int, ids) -> np.ndarray | None:
        """``ids`` checked (int64, not -1: faiss's padding), or the next ``n`` never held: None
        where those are the rows they will have (a flat index whose ids are its rows)."""
        if ids is not None:
            return check_ids(ids, n)
        if self._ids is None and self.next_id == len(self):
            return None
        return np.arange(self.next_id, self.next_id + n, dtype=np.int64)

    def append(self, codes: np.ndarray, ids: np.ndarray | None,
               lists: np.ndarray | None) -> None:
        """Add items at the end (``ids`` None: the next rows, `new_ids`); with lists each
        after the last item of its list."""
        if ids is None:
            self._codes = joined(self._codes, codes)
            self.next_id = len(self)
            return
        if len(ids):
            self.next_id = max(self.next_id, int(ids.max()) + 1)
        if self.listed:
            self._batches.append((codes, ids, np.asarray(lists, LIST_NUMBER)))
            return
        self._ids = joined(self.ids, ids)
        self._codes = joined(self._codes, codes)

    def remove(self, ids) -> int:
        """Remove every item with one of ``ids``; the number removed."""
        ids = np.asarray(ids).reshape(-1)
        kept = ~np.isin(self.ids, check_ids(ids, len(ids)))
        removed = int((~kept).sum())
        if removed:
            self._codes, self._ids = self._codes[kept], self._ids[kept]
            if self.listed:
                self._lists = self._lists[kept]
        return removed

    def _in_order(self) -> IndexItems:
        """Batches waiting put in list order (module doc); ``self``."""
        if self._batches:
            held = [(self._codes, self._ids, self._lists), *self._batches]
            codes, ids, lists = (np.concatenate(field) for field in zip(*held, strict=True))
            order = np.argsort(lists, kind="stable")
            self._codes, self._ids, self._lists = codes[order], ids[order], lists[order]
            self._batches = []
        return self


def joined(held: np.ndarray, new: np.ndarray) -> np.ndarray:
    """``new`` after ``held``; ``new`` itself, not a copy, after nothing (an index built in one
    call, and its engines, hold one array per field, not two or three)."""
    return new if not len(held) else np.concatenate([held, new])
