"""Training on a busy host: slowness must not end the job, death still must, in seconds.

    python experiments/busy_host.py [--work DIR] [--json FILE]

On this host, beside ``--busy`` processes that keep a core busy each (``python -c "while
True: pass"``), ``--ranks`` ranks (one thread each, oversubscribed when they outnumber the
cores) train an sbm graph of ``--nodes`` vertices and ``--features`` features (wide rows),
partitioned with distgnn-partition, with every option of distgnn-train at its default
(cd-0, ``--comm-timeout 20``) but ``--epochs``:

1. to the end: every epoch trained, status 0;
2. the same, rank 1 holding its GIL for ``--stall`` seconds (30: longer than
   ``--comm-timeout``) after ``--after`` epochs, as a long kernel that holds it would: the
   other ranks wait that long in a collective while rank 1 is alive; the job must still
   train every epoch and exit 0;
3. the same, rank 1 killed with SIGKILL after ``--after`` epochs: the seconds from the kill
   to the end of the whole job must stay under ``--death-limit`` (30), and no rank or
   heartbeat process of the job may be left.

Prints the figures and the watchdog's lines, and exits 1 when a goal is missed.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import launch
from bench import resume  # the failure drills' way to find a rank's PID

# distgnn-train, but rank 1 first starts a thread that, once the file argv[1] exists, holds
# the GIL for argv[2] seconds: no other thread of the rank runs meanwhile
STALLED_TRAIN = textwrap.dedent("""
    import os, sys, threading, time
    trigger, seconds = sys.argv[1], float(sys.argv[2])
    del sys.argv[1:3]

    def stall():
        while not os.path.exists(trigger):
            time.sleep(0.1)
        switch = sys.getswitchinterval()
        sys.setswitchinterval(1e6)
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
        sys.setswitchinterval(switch)

    if os.environ.get("OMPI_COMM_WORLD_RANK") == "1":
        threading.Thread(target=stall, daemon=True).start()
    from distgnn.cli.train import train_main
    sys.exit(train_main(sys.argv[1:]))
""")


def children(pids: set[int]) -> set[int]:
    """The running processes whose parent is one of ``pids``."""
    found = set()
    for entry in Path("/proc").iterdir():
        try:
            fields = (entry / "stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) in pids and fields[0] != b"Z":
            found.add(int(entry.name))
    return found


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return stat.rsplit(b")", 1)[1].split()[0] != b"Z"


def train(command: list[str], ranks: int, after: int | None = None, act=None) -> dict:
    """The job ``command`` (a distgnn-train command line) on ``ranks`` ranks as
    ``distgnn-launch`` composes it: its status, epochs, wall time and watchdog lines; with
    ``after``, ``act(pids)`` (the ranks' PIDs) runs once that many epochs are done, and the
    seconds from it to the job's end are timed, and which of its processes outlived it."""
    marker = f"{os.getpid()}-{time.monotonic_ns()}"
    plan = launch.plan(ranks, [*command, "--no-progress"], threads_per_rank=1)
    began = time.monotonic()
    proc = subprocess.Popen(plan.argv,
                            env={**os.environ, **plan.env, resume.JOB_MARKER: marker},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    row: dict = {}
    epochs = 0
    if after is not None:
        while epochs < after:
            line = proc.stdout.readline()
            if not line:
                break
            epochs += line.startswith("epoch ")
        if epochs < after:
            raise RuntimeError(f"the job ended ({proc.wait()}) before epoch {after}:\n"
                               f"{proc.stderr.read()[-2000:]}")
        pids = {rank: resume.rank_pid(marker, rank) for rank in range(ranks)}
        beaters = children({p for p in pids.values() if p})
        act(pids)
        acted = time.monotonic()
        out, err = proc.communicate(timeout=3600)
        row.update(after_epochs=after, act_to_end_s=time.monotonic() - acted,
                   heartbeat_processes=len(beaters))
        time.sleep(2)  # what the job's processes do after mpirun returned
        row["left_running"] = sorted(p for p in [*pids.values(), *beaters] if p and alive(p))
    else:
        out, err = proc.communicate(timeout=3600)
    plan.remove_session()
    row.update(status=proc.returncode, wall_s=time.monotonic() - began,
               epochs=epochs + sum(line.startswith("epoch ") for line in out.splitlines()),
               watchdog=[line for line in err.replace("\0", "").splitlines()
                         if "waited" in line or "heartbeat" in line],
               load_1min=os.getloadavg()[0], stderr_tail=err[-1500:])
    return row


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", help="directory for the partitions and metrics (default: a "
                   "temporary one; partitions already there are used)")
    p.add_argument("--nodes", type=int, default=5200)
    p.add_argument("--features", type=int, default=8192)
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--busy", type=int, default=2, help="CPU-bound processes beside the job")
    p.add_argument("--epochs", type=int, default=30)
    p.add_argument("--after", type=int, default=5, help="epochs before the stall, the kill")
    p.add_argument("--stall", type=float, default=30.0,
                   help="seconds rank 1 holds its GIL in the second job")
    p.add_argument("--death-limit", type=float, default=30.0)
    p.add_argument("--json", metavar="FILE", help="write the figures here")
    a = p.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(a.work or scratch)
        parts = work / "parts"
        if not (parts / "meta.json").exists():
            subprocess.run([str(resume.BIN / "distgnn-partition"),
                            f"sbm:nodes={a.nodes},features={a.features}", "--parts",
                            str(a.ranks), "--out", str(parts)], check=True)
        trigger = work / "stall-now"
        trigger.unlink(missing_ok=True)
        busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(a.busy)]
        try:
            flags = ["--partitions", str(parts), "--epochs", str(a.epochs)]
            jobs = {
                "full": train([str(resume.BIN / "distgnn-train"), *flags, "--metrics-out",
                               str(work / "full.jsonl")], a.ranks),
                "stalled": train([sys.executable, "-c", STALLED_TRAIN, str(trigger),
                                  str(a.stall), *flags], a.ranks, a.after,
                                 lambda pids: trigger.touch()),
                "killed": train([str(resume.BIN / "distgnn-train"), "--partitions",
                                 str(parts), "--epochs", str(100 * a.epochs)],
                                a.ranks, a.after,
                                lambda pids: os.kill(pids[1], signal.SIGKILL))}
        finally:
            for proc in busy:
                proc.kill()
                proc.wait()
        if jobs["full"]["status"] == 0:
            times = [r["epoch_s"] for r in map(json.loads, open(work / "full.jsonl"))
                     if "epoch_s" in r]
            jobs["full"].update(epoch_s_max=max(times),
                                epoch_s_median=sorted(times)[len(times) // 2])
    full, stalled, killed = jobs["full"], jobs["stalled"], jobs["killed"]
    print(f"{a.ranks} ranks on {os.cpu_count()} cores beside {a.busy} busy processes, "
          f"sbm {a.nodes} vertices x {a.features} features, {a.epochs} epochs:")
    print(f"  1. to the end: status {full['status']}, {full['epochs']} epochs in "
          f"{full['wall_s']:.0f} s" + (f" (epochs: median {full['epoch_s_median']:.2f} s, "
                                       f"max {full['epoch_s_max']:.1f} s)"
                                       if "epoch_s_max" in full else "")
          + f", load {full['load_1min']:.1f}")
    print(f"  2. rank 1 holding its GIL {a.stall:g} s after epoch {a.after}: status "
          f"{stalled['status']}, {stalled['epochs']} epochs in {stalled['wall_s']:.0f} s, "
          f"load {stalled['load_1min']:.1f}")
    print(f"  3. rank 1 killed after epoch {a.after}: the job ended "
          f"{killed['act_to_end_s']:.1f} s later, status {killed['status']}; of its "
          f"{a.ranks} ranks and {killed['heartbeat_processes']} heartbeat processes, "
          f"{len(killed['left_running'])} left running")
    for name, job in jobs.items():
        for line in job["watchdog"]:
            print(f"  ({name}) {line}")
    if a.json:
        Path(a.json).write_text(json.dumps(jobs, indent=1) + "\n")
    missed = [name for name, ok in (
        ("full", full["status"] == 0 and full["epochs"] == a.epochs),
        ("stalled", stalled["status"] == 0 and stalled["epochs"] == a.epochs),
        ("killed", killed["status"] != 0 and killed["act_to_end_s"] < a.death_limit
         and not killed["left_running"])) if not ok]
    for name in missed:
        print(f"  goal missed: {name}\n{jobs[name]['stderr_tail']}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
