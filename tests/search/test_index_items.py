"""`IndexItems`: ids held only where they are not the rows, and items in lists put in list
order (each list's in the order added) by one sort however they were added."""

import numpy as np
import pytest

from sgh.search.index_items import IndexItems


def _inserted_one_batch_at_a_time(batches):
    """What the items must be: each batch inserted after the last item of each of its lists."""
    codes, ids, lists = np.zeros((0, 2), np.uint8), np.zeros(0, np.int64), np.zeros(0, np.int64)
    for batch_codes, batch_ids, batch_lists in batches:
        order = np.argsort(batch_lists, kind="stable")
        at = np.searchsorted(lists, batch_lists[order], side="right")
        codes = np.insert(codes, at, batch_codes[order], axis=0)
        ids, lists = np.insert(ids, at, batch_ids[order]), np.insert(lists, at, batch_lists[order])
    return codes, ids, lists


def test_batches_in_lists_end_in_the_order_inserting_each_would_give():
    rng = np.random.default_rng(0)
    items, batches, next_id = IndexItems(2, listed=True), [], 0
    for size in (0, 7, 1, 30, 12):
        batch = (rng.integers(0, 256, (size, 2), dtype=np.uint8),
                 np.arange(next_id, next_id + size, dtype=np.int64), rng.integers(0, 5, size))
        assert items.new_ids(size, None).tolist() == batch[1].tolist()
        items.append(*batch)
        batches.append(batch)
        next_id += size
        if size == 1:  # a search between adds sorts what is held; later batches join it
            assert (np.diff(items.lists) >= 0).all()
    codes, ids, lists = _inserted_one_batch_at_a_time(batches)
    assert len(items) == 50 and items.lists.dtype == np.int32
    np.testing.assert_array_equal(items.codes, codes)
    np.testing.assert_array_equal(items.ids, ids)
    np.testing.assert_array_equal(items.lists, lists)
    assert items.bytes_per_item() == {"code": 2, "id": 8, "list": 4}
    assert items.remove([3, 3, 49, 1000]) == 2 and 3 not in items.ids and len(items) == 48
    assert items.new_ids(2, None).tolist() == [50, 51]  # removed ids are not handed out again


def test_a_flat_index_holds_no_ids_while_they_are_its_rows():
    items = IndexItems(1, listed=False)
    first = np.arange(5, dtype=np.uint8)[:, None]
    items.append(first, items.new_ids(5, None), None)
    assert items.codes is first  # the caller's (SGHIndex's own) array, not a copy
    items.append(first, items.new_ids(5, None), None)
    assert items.bytes_per_item() == {"code": 1} and "ids" not in items.saved_arrays()
    np.testing.assert_array_equal(items.ids_of(np.array([[9, -1, 0]])), [[9, -1, 0]])
    items.append(first[:2], items.new_ids(2, [70, 71]), None)
    assert items.bytes_per_item() == {"code": 1, "id": 8}
    assert items.ids.tolist() == [*range(10), 70, 71]
    assert items.ids_of(np.array([11, -1])).tolist() == [71, -1]
    with pytest.raises(ValueError, match="ids must not be -1"):
        items.new_ids(1, [-1])
