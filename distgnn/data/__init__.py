"""Graphs and datasets, and the files they come in.

The CSR container and the node-classification dataset (``graph``), the loaders
(``datasets``: ``.npz``, text edge lists with their keyed side files, OGB layout;
``binary_edges``: the ``.npy`` edge file the streaming partitioner reads), generated graphs
(``generators``), locality orders of the vertices (``ordering``), PyTorch Geometric data in
(``pyg``), and the on-disk partition format (``partitions``: written by the partitioner,
read by every rank).

It imports the kernels (an order's timed trial) and the base modules (``errors``,
``storage``), nothing above them.
"""
