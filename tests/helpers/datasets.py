"""Small datasets the tests build: the shared .npz arrays, OGB directories, a pickle payload."""
import gzip

import numpy as np


def tiny_arrays():
    """A valid 4-node dataset in the shared .npz format."""
    return dict(indptr=np.array([0, 1, 2, 3, 4]), indices=np.array([1, 0, 3, 2]),
                x=np.arange(8, dtype=np.float32).reshape(4, 2), y=np.array([0, 1, 0, 1]),
                train_mask=np.array([1, 1, 0, 0], bool), val_mask=np.array([0, 0, 1, 0], bool),
                test_mask=np.array([0, 0, 0, 1], bool))


class Payload:
    """Unpickling this creates ``marker``: proof that code ran."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return open, (self.marker, "w")


def write_gz(path, rows):
    path.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(path, "wt") as f:
        f.write("".join(f"{row}\n" for row in rows))


def make_ogb(root, labels, train=(0, 1, 2), num_nodes_file=False):
    """An OGB-layout directory: a directed 6-cycle, 3 features, two split folders."""
    n = len(labels)
    write_gz(root / "raw" / "edge.csv.gz", [f"{i},{(i + 1) % n}" for i in range(n)])
    write_gz(root / "raw" / "node-feat.csv.gz", [f"{i},{i}.5,-1" for i in range(n)])
    write_gz(root / "raw" / "node-label.csv.gz", labels)
    if num_nodes_file:
        write_gz(root / "raw" / "num-node-list.csv.gz", [n])
    for folder, parts in (("a_time", (train, [3], [4])), ("b_other", ([4], [0], [1]))):
        for name, ids in zip(("train", "valid", "test"), parts):
            write_gz(root / "split" / folder / f"{name}.csv.gz", ids)
    return root
