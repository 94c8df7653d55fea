"""From a feature matrix to binary codes, Hamming search and retrieval scores, in about 20 lines.

    python examples/features_to_search.py [--steps N]

The data: scikit-learn's 8x8 digits (1,797 items, 64 features), 100 of them as queries and the
rest as the database, which is also the training set. Replace `x` and `y` with your own.
"""

import argparse

import numpy as np
from sklearn.datasets import load_digits

from sgh import SGHHasher, SGHIndex, euclidean_neighbours, mean_average_precision, recall_at_n

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--steps", type=int, default=5000, help="training steps (default 5000)")
steps = parser.parse_args().steps

x, y = load_digits(return_X_y=True)
x = x.astype(np.float32) / 16  # features in [0, 1]
order = np.random.default_rng(0).permutation(len(x))
query, base = order[:100], order[100:]

hasher = SGHHasher(n_bits=32, random_state=0, steps=steps).fit(x[base])  # 32-bit codes
base_codes, query_codes = hasher.encode(x[base]), hasher.encode(x[query])  # (n, 4) uint8

index = SGHIndex(hasher, mode="hamming")  # the model's codes and their search, as faiss's are
index.add(x[base])  # ids 0 .. n - 1, the rows of x[base]
distances, ids = index.search(x[query], k=10)  # 10 nearest codes per query, ties by id
print(f"query 0: database items {ids[0].tolist()} at Hamming distances "
      f"{distances[0].astype(int).tolist()}")

truth = euclidean_neighbours(x[query], x[base], k=10)  # exact Euclidean 10-NN, ties by index
label_map = mean_average_precision(query_codes, base_codes, 32, y[query], y[base])["map"]
recall = recall_at_n(query_codes, base_codes, 32, truth, [100])[100]
print(f"mAP@all (relevant = same digit, tie-aware): {label_map:.3f}")
print(f"Recall10@100 (exact Euclidean 10-NN among the first 100, tie-aware): {recall:.3f}")
