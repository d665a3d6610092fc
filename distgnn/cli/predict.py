"""``distgnn-predict``: a saved model applied to a graph."""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..program import (
    DefaultsHelpFormatter,
    OneLineParser,
    check_outputs_spare_inputs,
    dataset_file_flags,
    interruptible,
    load_dataset,
    peak_memory_line,
    refuse_dataset_flags,
    run_guarded,
    say,
    use_huge_pages,
)


def predict_parser() -> argparse.ArgumentParser:
    """``distgnn-predict``'s flags."""
    from ..options import add_options
    from ..placement import ExecutionConfig
    from ..run.config import OutputConfig

    p = OneLineParser(
        prog="distgnn-predict",
        description="Apply a model saved by distgnn-train --save-model to a dataset (one "
                    "process) or to a partition directory (distgnn-launch -n P -- "
                    "distgnn-predict MODEL --partitions DIR: exact exchange, whatever the "
                    "training run's "
                    "algorithm). The graph may be another than the one trained on, with the "
                    "same features (new vertices and edges). Prints the accuracy on each "
                    "labelled split; writes predictions and embeddings as asked.",
        formatter_class=DefaultsHelpFormatter)
    p.add_argument("model", metavar="MODEL", help="a model file written by --save-model")
    g = p.add_argument_group("data (as distgnn-train reads it)")
    g.add_argument("--dataset", help="bundled name, .npz, edge list, OGB directory or "
                                     "generator spec (default: cora)")
    g.add_argument("--partitions", metavar="DIR",
                   help="a directory written by distgnn-partition, one rank per partition")
    dataset_file_flags(g)
    p.add_argument("--model-factory", metavar="MODULE:FUNCTION",
                   help="for a model file of your own model (distgnn.train's make_model): "
                        "the function that builds it, make_model(in_channels, "
                        "num_classes), from a module on the Python path or the current "
                        "directory, or from a .py file (path/to/models.py:make)")
    g = p.add_argument_group("results (each vertex once, in the dataset's own ids)")
    add_options(g, OutputConfig, only=("predictions_out", "embeddings_out",
                                       "embeddings_layer"))
    add_options(g, ExecutionConfig, only=("threads", "memory_limit", "spill_dir"))
    return p


def model_factory(spec: str):
    """The function ``MODULE:FUNCTION`` names (``--model-factory``), checked where it is called.

    ``MODULE`` is imported as Python imports it, from the current directory too, or a
    ``.py`` file by its path, imported as ``python path/to/models.py`` would run it (its
    folder first on ``sys.path``, so that it imports the modules beside it).  Whatever goes
    wrong in the user's code (the import fails, the function raises, returns no model or
    ends the program with ``sys.exit``) is one line naming ``--model-factory`` and the
    cause (:class:`~distgnn.errors.DistGNNError`), never a traceback, nor a prediction
    that silently does not happen."""
    import importlib
    import importlib.util
    import inspect
    import sys

    from ..errors import DistGNNError, one_line

    flag = f"--model-factory {spec}"
    module, sep, name = spec.rpartition(":")
    if not sep or not module or not name.isidentifier():
        raise DistGNNError(f"{flag}: give MODULE:FUNCTION, e.g. my_models:make_model or "
                           "path/to/models.py:make_model")
    try:
        if module.endswith(".py"):
            path = Path(module)
            found = importlib.util.spec_from_file_location(path.stem, path)
            if found is None or not path.is_file():
                raise DistGNNError(f"{flag}: no file {module}")
            folder = str(path.resolve().parent)
            if folder not in sys.path:
                sys.path.insert(0, folder)  # as `python models.py` has it
            loaded = importlib.util.module_from_spec(found)
            # registered under its name (what dataclasses and pickle look it up by), unless
            # that names another module already (a models.py beside one's json.py)
            named = found.name not in sys.modules
            if named:
                sys.modules[found.name] = loaded
            try:
                found.loader.exec_module(loaded)
            except BaseException:
                if named:
                    sys.modules.pop(found.name, None)
                raise
        else:
            if "" not in sys.path and os.getcwd() not in sys.path:
                sys.path.insert(0, os.getcwd())  # as `python -m` would find it
            loaded = importlib.import_module(module)
    except DistGNNError:
        raise
    except ImportError as e:
        raise DistGNNError(f"{flag}: cannot import {module} ({e})") from None
    except SystemExit as e:
        raise DistGNNError(f"{flag}: importing {module} called sys.exit({e.code!r}); a module "
                           "that builds models must not end the program") from None
    except Exception as e:  # noqa: BLE001 -- any error in the user's module is theirs to fix
        where = f" at line {e.lineno}" if isinstance(e, SyntaxError) and e.lineno else ""
        raise DistGNNError(f"{flag}: cannot import {module}: {type(e).__name__}{where}: "
                           f"{one_line(e)}") from None
    factory = getattr(loaded, name, None)
    if not callable(factory):
        raise DistGNNError(f"{flag}: {module} has no function {name}")
    try:
        inspect.signature(factory).bind(0, 0)
    except TypeError:
        raise DistGNNError(f"{flag}: {name}{inspect.signature(factory)} cannot be called as "
                           f"{name}(in_channels, num_classes)") from None
    except ValueError:  # a builtin without a signature: its call will tell
        pass

    def make_model(in_channels: int, num_classes: int):
        from ..run.training import checked_model

        try:
            model = factory(in_channels, num_classes)
        except SystemExit as e:
            raise DistGNNError(f"{flag}: {name}({in_channels}, {num_classes}) called "
                               f"sys.exit({e.code!r}) instead of returning a model; nothing "
                               "was predicted") from None
        except Exception as e:  # noqa: BLE001 -- the user's function: its error, one line
            raise DistGNNError(f"{flag}: {name}({in_channels}, {num_classes}) raised "
                               f"{type(e).__name__}: {one_line(e)}") from None
        return checked_model(model, flag)

    return make_model


@interruptible("distgnn-predict")
def predict_main(argv: list[str] | None = None) -> int:
    use_huge_pages()
    args = predict_parser().parse_args(argv)
    from ..run.distributed import run_rank
    from ..run.prediction import predict

    def show(result, rank: int) -> None:
        if rank != 0:
            return
        for name in ("train", "val", "test"):
            acc = result.scores.get(f"{name}_acc")
            if acc is not None:
                print(f"{name} accuracy {acc * 100:.2f} %")
        print(f"inference {result.seconds * 1e3:.1f} ms (slowest rank)")
        print(peak_memory_line(result.peak_rss_mib_max, result.peak_rss_mib_mean))
        for what, path in result.written.items():
            print(f"{what} written to {path}")

    def checked():
        check_outputs_spare_inputs(args, {"--predictions-out": args.predictions_out,
                                          "--embeddings-out": args.embeddings_out},
                                   MODEL=args.model)
        return dict(predictions_out=args.predictions_out, embeddings_out=args.embeddings_out,
                    embeddings_layer=args.embeddings_layer, threads=args.threads,
                    memory_limit=args.memory_limit, spill_dir=args.spill_dir, log=say,
                    make_model=args.model_factory and model_factory(args.model_factory))

    options = run_guarded("distgnn-predict", checked)
    if isinstance(options, int):
        return options
    if args.partitions:
        from ..comm.mpi import MPICommunicator

        world = MPICommunicator()

        def one_rank():
            refuse_dataset_flags(args)
            show(predict(args.model, args.partitions, **options), world.rank)
            return 0

        return run_guarded("distgnn-predict",
                           lambda: run_rank("distgnn-predict", one_rank, world))

    def loaded():  # once the model file is read and its model built
        data = load_dataset(args)
        print(data.summary(), flush=True)
        return data

    def run():
        show(predict(args.model, loaded, **options), 0)
        return 0

    return run_guarded("distgnn-predict", run)
