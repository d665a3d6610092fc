"""Hostile and careless uses of the data-in surfaces: edge lists with headers and byte-order
marks, keyed feature and label files, labels that are names or skip a class, generator specs
that repeat or cannot be met, features that the default normalisation would spoil, weighted
edge lists symmetrised, and empty side files."""
from __future__ import annotations

import csv

import numpy as np

from tests.helpers.hostile import TRAIN_QUICK, Case, both, data, tool, user_file

CASES: list[Case] = []
add = CASES.append

# A ring of 12 vertices: ids 0..11, so that ids read as names would sort "10" before "2".
RING = "".join(f"{i} {(i + 1) % 12}\n{(i + 1) % 12} {i}\n" for i in range(12))
LABELS = "".join(f"{i % 3}\n" for i in range(12))
FEATURES = "".join(f"{i % 5} {1 + i % 2} 1\n" for i in range(12))
NAMES = "".join(f"{a} {b}\n{b} {a}\n" for a, b in [("alice", "bob"), ("bob", "carol"),
                                                   ("carol", "dave"), ("dave", "alice")])


def train_on(*files: str, flags: tuple = ()):
    """``distgnn-train`` on the edge list ``e.txt`` and the side files ``files`` (flag,
    name) of the case directory."""
    return tool("train", "--dataset", "{tmp}/e.txt",
                *[part for flag, name in zip(files[::2], files[1::2])
                  for part in (flag, f"{{tmp}}/{name}")], *flags, *TRAIN_QUICK)


def summary_says(*fragments: str, vertices: int | None = None, names: bool = False):
    """A check that the run's summary holds every fragment, counts ``vertices`` and maps
    the ids to names only when ``names``."""
    def check(tmp, outcome):
        for fragment in fragments:
            assert fragment in outcome.stdout, f"no {fragment!r} in {outcome.stdout[:300]!r}"
        if vertices is not None:
            assert f": {vertices:,} vertices," in outcome.stdout, outcome.stdout[:200]
        assert ("vertex ids:" in outcome.stdout) == names, outcome.stdout[:300]
    return check


def header(rel: str, line: str = "line 1") -> str:
    return f"{rel}: {line} ("


# 20. data read with a silent trap: headers and byte-order marks
for name, text, said in [
        ("an edge list headed 'src dst'", "src dst\n" + RING, "'src dst') is a header, skipped"),
        ("an edge list headed 'source target'", "source target\n" + RING,
         "'source target') is a header"),
        ("a CSV edge list headed 'from,to'", "from,to\n" + RING.replace(" ", ","),
         "'from,to') is a header"),
        ("a header of commas above tab-separated edges", "src,dst\n" + RING.replace(" ", "\t"),
         "'src,dst') is a header"),
        ("a header and CRLF line ends", "Source Target\r\n" + RING.replace("\n", "\r\n"),
         "'Source Target') is a header")]:
    add(Case(20, name, train_on("--labels", "y.txt"),
             both(user_file("e.txt", text), user_file("y.txt", LABELS)), status=0,
             check=summary_says(header("e.txt") + said, vertices=12)))
add(Case(20, "a UTF-8 byte-order mark before the first edge", train_on("--labels", "y.txt"),
         both(user_file("e.txt", "\ufeff" + RING), user_file("y.txt", LABELS)), status=0,
         check=summary_says(vertices=12)))
add(Case(20, "a byte-order mark and a header on a labels file",
         train_on("--labels", "y.txt"),
         both(user_file("e.txt", RING), user_file("y.txt", "\ufefflabel\n" + LABELS)),
         status=0, check=summary_says(header("y.txt") + "'label') is a header", "3 classes",
                                      vertices=12)))
add(Case(20, "a header on a keyed features file",
         train_on("--features", "x.txt", "--labels", "y.txt"),
         both(user_file("e.txt", NAMES),
              user_file("x.txt", "node,f1,f2\nalice,1,0\nbob,0,1\ncarol,1,1\ndave,2,0\n"),
              user_file("y.txt", "alice 0\nbob 1\ncarol 0\ndave 1\n")),
         status=0, check=summary_says(header("x.txt") + "'node,f1,f2') is a header",
                                      "2 features", vertices=4, names=True)))
add(Case(20, "a byte-order mark on a keyed labels file",
         train_on("--labels", "y.txt"),
         both(user_file("e.txt", NAMES), user_file("y.txt", "\ufeffalice 0\nbob 1\ncarol 0\n")),
         status=0, check=summary_says("2 classes (1 vertices unlabelled)", vertices=4,
                                      names=True)))
add(Case(20, "a header of names that could be an edge", train_on(),
         user_file("e.txt", "source target\n" + NAMES), says="line 1: 'source target' looks "
         "like a header"))
add(Case(20, "a header on a split file",
         train_on("--labels", "y.txt", "--split-file", "s.txt"),
         both(user_file("e.txt", RING), user_file("y.txt", LABELS),
              user_file("s.txt", "vertex,split\n" + "".join(
                  f"{i},{['train', 'val', 'test'][i % 3]}\n" for i in range(12)))),
         status=0, check=summary_says("split 4/4/4", header("s.txt") + "'vertex,split')")))
add(Case(20, "one id that is not a number among integers", train_on("--labels", "y.txt"),
         both(user_file("e.txt", RING + "11 NA\n"),
              user_file("y.txt", "".join(f"{i} {i % 2}\n" for i in range(12)) + "NA 1\n")),
         status=0,
         check=summary_says("sorted as text ('10' before '9'), because 'NA' is not an integer",
                            vertices=13, names=True)))

# 20. the file that is wrong is the one named
add(Case(20, "a features file with one extra row",
         train_on("--features", "x.txt", "--labels", "y.txt"),
         both(user_file("e.txt", RING), user_file("x.txt", FEATURES + "1 1 1\n"),
              user_file("y.txt", LABELS)),
         says="x.txt: 13 feature rows, but y.txt has 12 labels and e.txt's largest vertex id "
              "is 11"))
add(Case(20, "a labels file with one extra line",
         train_on("--features", "x.txt", "--labels", "y.txt"),
         both(user_file("e.txt", RING), user_file("x.txt", FEATURES),
              user_file("y.txt", LABELS + "0\n")),
         says="y.txt: 13 labels, but x.txt has 12 feature rows and e.txt's largest vertex id "
              "is 11"))
add(Case(20, "a labels file shorter than the edge list's ids", train_on("--labels", "y.txt"),
         both(user_file("e.txt", RING), user_file("y.txt", "0\n1\n2\n")),
         says="y.txt: 3 labels, but e.txt's largest vertex id is 11"))
add(Case(20, "nan in a features file", train_on("--features", "x.txt"),
         both(user_file("e.txt", RING), user_file("x.txt", FEATURES.replace("2 1\n", "nan 1\n"))),
         says="x.txt: features contain NaN or inf (first at vertex 1)"))


# 20. vertices without edges, given by keyed files
def isolated_vertex_predicted(tmp, outcome):
    summary_says(vertices=6, names=True)(tmp, outcome)
    with open(tmp / "p.csv") as f:
        vertices = [row["vertex"] for row in csv.DictReader(f)]
    assert vertices == ["alice", "bob", "carol", "dave", "erin", "zoe"], vertices


add(Case(20, "keyed files adding vertices without edges",
         train_on("--features", "x.txt", "--labels", "y.txt",
                  flags=("--predictions-out", "{tmp}/p.csv")),
         both(user_file("e.txt", NAMES),
              user_file("x.txt", "zoe 1 0\nalice 1 0\nbob 0 1\ncarol 1 1\ndave 2 0\nerin 0 2\n"),
              user_file("y.txt", "erin 1\nalice 0\nbob 1\ncarol 0\ndave 1\n")),
         status=0, check=isolated_vertex_predicted))


def partition_keeps(*ids):
    def check(tmp, outcome):
        saved = np.load(tmp / "p" / "vertex_ids.npy").tolist()
        assert saved == list(ids), saved
    return check


add(Case(20, "a labels file adding a vertex, partitioned",
         tool("partition", "{tmp}/e.txt", "--labels", "{tmp}/y.txt", "--parts", 2,
              "--out", "{tmp}/p", "--no-progress"),
         both(user_file("e.txt", NAMES),
              user_file("y.txt", "alice 0\nbob 1\ncarol 0\ndave 1\nzoe 0\n")),
         status=0, check=partition_keeps("alice", "bob", "carol", "dave", "zoe")))

add(Case(20, "a keyed labels file whose ids are quoted", train_on("--labels", "y.txt"),
         both(user_file("e.txt", NAMES),
              user_file("y.txt", '"alice" 0\n"bob" 1\n"carol" 0\n"dave" 1\n')),
         says="y.txt: none of its 4 ids is an id of e.txt"))

# 20. labels that are not the classes 0..C-1
add(Case(20, "class names as labels", train_on("--labels", "y.txt"),
         both(user_file("e.txt", RING),
              user_file("y.txt", "".join(f"{['gold', 'silver'][i % 2]}\n" for i in range(12)))),
         says="y.txt: line 1: label 'gold' is a name: classes are numbered 0..C-1, so replace "
              "each class name by its number (gold = 0, silver = 1)"))
add(Case(20, "labels 1..4", train_on("--labels", "y.txt"),
         both(user_file("e.txt", RING),
              user_file("y.txt", "".join(f"{1 + i % 4}\n" for i in range(12)))),
         says="y.txt: labels are 1..4: classes must be numbered 0..C-1 (subtract 1); class 0 "
              "has no vertex"))
add(Case(20, "labels with a gap", train_on("--labels", "y.txt"),
         both(user_file("e.txt", RING),
              user_file("y.txt", "".join(f"{[0, 1, 3][i % 3]}\n" for i in range(12)))),
         says="labels are 0..3, but class 2 has no vertex: classes must be numbered "
              "0..C-1 without gaps (renumber the 3 labels in use as 0..2)"))
add(Case(20, "fractional labels", train_on("--labels", "y.txt"),
         both(user_file("e.txt", RING), user_file("y.txt", LABELS.replace("2\n", "1.5\n"))),
         says="y.txt: line 3: label '1.5' is not an integer"))
add(Case(20, "a label of -2", train_on("--labels", "y.txt"),
         both(user_file("e.txt", RING), user_file("y.txt", "-2\n" + LABELS[2:])),
         says="y.txt: label -2 of vertex 0"))
add(Case(20, "an .npz whose labels are 1..3", tool("train", "--dataset", "{tmp}/d.npz",
                                                     *TRAIN_QUICK),
         data(y=np.arange(60) % 3 + 1), says="d.npz: labels are 1..3"))
add(Case(20, "unlabelled vertices, by -1 and by a missing key", train_on("--labels", "y.txt"),
         both(user_file("e.txt", NAMES), user_file("y.txt", "alice 0\nbob -1\ncarol 1\n")),
         status=0, check=summary_says("2 classes (2 vertices unlabelled)", vertices=4,
                                      names=True)))


# 20. features that row normalisation spoils
def warned(times: int):
    def check(tmp, outcome):
        said = (outcome.stdout + outcome.stderr).count("--feature-norm row (the default")
        assert said == times, f"warned {said} times"
    return check


signed = np.random.default_rng(3).standard_normal((60, 8)).astype(np.float32)
add(Case(20, "negative features with --feature-norm row",
         tool("train", "--dataset", "{tmp}/d.npz", *TRAIN_QUICK), data(x=signed), status=0,
         check=warned(1)))
add(Case(20, "negative features with --feature-norm none",
         tool("train", "--dataset", "{tmp}/d.npz", "--feature-norm", "none", *TRAIN_QUICK),
         data(x=signed), status=0, check=warned(0)))
add(Case(20, "non-negative features", tool("train", "--dataset", "{tmp}/d.npz", *TRAIN_QUICK),
         data(), status=0, check=warned(0)))

# 19. generator specs: a key twice, a value that cannot be met, a key that does nothing
for name, spec, says in [
        ("a generator key given twice", "rmat:scale=12,scale=13", "key 'scale' is given twice"),
        ("an average degree above the vertex count", "sbm:nodes=500,avg_degree=1000",
         "avg_degree must lie in (0, 499] for 500 nodes"),
        ("more blocks than vertices", "sbm:nodes=50,blocks=80,features=80",
         "blocks must lie in 1..50 (nodes)"),
        ("more R-MAT classes than vertices", "rmat:scale=3,edge_factor=2,classes=16",
         "classes must lie in 1..8 for scale 3"),
        ("more R-MAT edges than the vertices hold", "rmat:scale=4",
         "edge_factor must lie in 1..7 for scale 4"),
        ("p_in with one block", "sbm:blocks=1,p_in=0.5", "key 'p_in' does nothing with blocks=1"),
        ("an infinite sbm noise", "sbm:nodes=300,noise=inf", "noise must be >= 0 and finite"),
        ("an sbm of one vertex", "sbm:nodes=1", "sbm:nodes=1: nodes must be >= 2")]:
    add(Case(19, name, tool("train", "--dataset", spec, *TRAIN_QUICK), says=says))
add(Case(19, "a dense sbm whose repeated draws merge",
         tool("train", "--dataset", "sbm:nodes=500,avg_degree=400,features=8", *TRAIN_QUICK),
         status=0, check=summary_says("under half the nodes * avg_degree / 2 = 100,000 "
                                      "drawn", vertices=500)))


# 25. --symmetrize on a weighted edge list: the weights go along, one per edge
# A directed ring of 12 whose edge i -> i+1 weighs i+1: symmetrised, 24 edges of total
# weight 2 * (1 + ... + 12) = 156.
WEIGHTED_RING = "".join(f"{i} {(i + 1) % 12} {i + 1}\n" for i in range(12))


def weights_kept(total: float, edges: int):
    """A check that the partitions of ``{tmp}/p`` hold ``edges`` weighted edges of weight
    ``total`` in all."""
    def check(tmp, outcome):
        parts = sorted((tmp / "p").glob("part-*"))
        files = [part / "edge_weight.npy" for part in parts]
        assert parts and all(f.is_file() for f in files), "the partitions hold no weights"
        weights = np.concatenate([np.load(f) for f in files])
        assert len(weights) == edges and weights.sum() == total, (len(weights), weights.sum())
    return check


add(Case(25, "--symmetrize on a weighted edge list drops its weights",
         tool("partition", "{tmp}/e.txt", "--labels", "{tmp}/y.txt", "--symmetrize",
              "--parts", 2, "--out", "{tmp}/p", "--no-progress"),
         both(user_file("e.txt", WEIGHTED_RING), user_file("y.txt", LABELS)), status=0,
         check=weights_kept(156.0, 24)))
add(Case(25, "--symmetrize on an edge given twice with two weights keeps one unsaid",
         train_on("--labels", "y.txt", flags=("--symmetrize",)),
         both(user_file("e.txt", WEIGHTED_RING + "4 5 7\n"), user_file("y.txt", LABELS)),
         says="e.txt: edge 4 -> 5 is given more than once, with the weights 5 and 7, and "
              "--symmetrize keeps each edge once"))
add(Case(25, "the note recommending --symmetrize on a weighted edge list",
         train_on("--labels", "y.txt"),
         both(user_file("e.txt", WEIGHTED_RING), user_file("y.txt", LABELS)), status=0,
         check=summary_says("12 of the 12 edges have no reverse edge", "--symmetrize "
                            "(symmetrize=True) adds the reverse of every edge that has none, "
                            "each with the weight of the edge it reverses", vertices=12)))


# 26. a generator's error names the spec's key, not the function's keyword
for spec, says in [("sbm:nodes=2000,blocks=0", "sbm:nodes=2000,blocks=0: blocks must be >= 1"),
                   ("rmat:scale=12,features=0",
                    "rmat:scale=12,features=0: features must be >= 1"),
                   ("sbm:nodes=300,blocks=8,features=4",
                    "sbm:nodes=300,blocks=8,features=4: features must be >= blocks")]:
    add(Case(26, f"the generator spec {spec}", tool("train", "--dataset", spec, *TRAIN_QUICK),
             says=says))


# 26. an empty side file: one line naming the file after its flag
def names_flag(flag: str, rel: str, problem: str):
    """A check that the error line names ``{tmp}/rel`` after ``flag``, then ``problem``."""
    def check(tmp, outcome):
        said = outcome.error_lines()
        assert len(said) == 1 and f"error: {flag} {tmp / rel}: {problem}" in said[0], said
    return check


for name, files, edges, flag, problem in [
        ("an empty --split-file", ("--labels", "y.txt", "--split-file", "s.txt"), RING,
         "--split-file", "puts no vertex in train, val or test"),
        ("an empty --labels file", ("--labels", "s.txt"), RING, "--labels", "0 labels, but "
         "e.txt's largest vertex id is 11"),
        ("an empty --features file", ("--features", "s.txt"), RING, "--features",
         "0 feature rows"),
        ("an empty keyed --labels file", ("--labels", "s.txt"), NAMES, "--labels",
         "holds no 'vertex label' line"),
        ("an empty keyed --features file", ("--features", "s.txt"), NAMES, "--features",
         "holds no 'vertex feature...' line")]:
    add(Case(26, name, train_on(*files),
             both(user_file("e.txt", edges), user_file("y.txt", LABELS), user_file("s.txt", "")),
             check=names_flag(flag, "s.txt", problem)))
